"""Where a Thunder step's time goes: its GPU kernels' time and count, beside its wall time.

tools/thunder_check.py --breakdown calls kernel_time for each engine it times: the step run
`reps` times under torch.profiler (CUDA activity only), every kernel, memset and memcpy the
step queued summed and counted per step. A step whose wall time (CUDA events) is well above
its kernels' time waits on the host (launch and Python cost, or a synchronization); one near
it is as fast as its kernels.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def kernel_time(once: Callable[[], None], reps: int = 5) -> dict[str, Any]:
    """{"kernel_ms": GPU time per step, "kernels": GPU activities per step, "by_name": {name:
    [count, us] per step}} over `reps` steps (after one unprofiled step, so that nothing
    compiles inside the profile)."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    once()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            once()
        torch.cuda.synchronize()
    on_gpu = [e for e in prof.events() if e.device_type == DeviceType.CUDA]
    total_us = sum(e.time_range.elapsed_us() for e in on_gpu)
    by_name: dict[str, list[float]] = {}
    for e in on_gpu:
        entry = by_name.setdefault(e.name[:120], [0.0, 0.0])
        entry[0] += 1 / reps
        entry[1] += e.time_range.elapsed_us() / reps
    return {"kernel_ms": total_us / 1e3 / reps, "kernels": len(on_gpu) / reps, "by_name": by_name}

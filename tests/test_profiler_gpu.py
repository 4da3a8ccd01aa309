"""PythonProfiler on a GPU: every kernel of an auto-scheduled fusion, a manual_execute, a
KernelExecutor run and a linear + add fusion (cuBLAS kernels included), kernel times that
agree with CUDA events, profilers in a row, the model suite's --kernels rows, and a clean
refusal under torch.profiler; nvFuser's two profiler tests of auto-scheduled fusions, ported."""

from __future__ import annotations

import pytest

import kfuse
import kfuse.nvfuser_direct as nvfuser_direct
from gpu_support import requires_gpu
from kfuse import schedule
from kfuse.dtypes import DataType
from kfuse.frontend import FusionDefinition
from kfuse.schedule import SchedulerType

pytestmark = [pytest.mark.gpu, requires_gpu]
torch = pytest.importorskip("torch")


def randn(*shape: int, dtype: object = None, seed: int = 0) -> object:
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(*shape, generator=g, device="cuda", dtype=dtype or torch.float32)


def scale_add() -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1])
        fd.add_output(x * 2.0 + 1.0)
    return fd


def test_auto_scheduled_fusion_reports_its_kernel() -> None:
    fd = scale_add()
    x = randn(1 << 20)
    with kfuse.PythonProfiler() as prof:
        fd.execute([x])
    p = prof.profile
    assert len(prof.profiles) == 1 and p.segments == 1
    (k,) = p.kernel_profiles
    assert k.scheduler == "pointwise" and k.segment_id == 0 and k.device == x.device.index
    assert k.name and k.time_ms > 0 and k.block[0] > 0 and k.grid[0] > 0 and k.registers > 0
    assert k.input_bytes == k.output_bytes == 4 << 20
    assert p.kernel_time_ms == pytest.approx(k.time_ms)
    assert p.compile_time_ms > 0 and p.host_time_ms > 0  # first run: it compiled
    assert 0 < p.percentage_peak_bandwidth < 110
    assert "pointwise" in repr(p)


def test_manual_execute_is_profiled() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        fd.add_output(fd.ops.sum(x, [1]))
    t = randn(512, 4096)
    params = schedule.compute_heuristics(fd, SchedulerType.reduction, [t])
    with kfuse.PythonProfiler() as prof:
        fd.manual_execute([t], params)
    p = prof.profile
    assert p.segments == 1 and p.kernel_profiles
    assert {k.scheduler for k in p.kernel_profiles} == {"reduction"}
    assert all(k.time_ms > 0 for k in p.kernel_profiles)


def test_kernel_executor_run_is_a_user_kernel() -> None:
    source = r"""
    extern "C" __global__ void scale(float* out, const float* x, float a, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) out[i] = a * x[i];
    }"""
    x = randn(1 << 16)
    out = torch.empty_like(x)
    ex = kfuse.KernelExecutor()
    with kfuse.PythonProfiler() as prof:
        ex.compile(source, "scale", kfuse.LaunchParams(block_x=128))
        ex.run([out, x, 2.0, x.numel()], kfuse.LaunchParams(grid_x=(x.numel() + 127) // 128))
        ex.run([out, x, 3.0, x.numel()], kfuse.LaunchParams(grid_x=(x.numel() + 127) // 128))
    first, second = prof.profiles
    for p in (first, second):
        (k,) = p.kernel_profiles
        assert (k.name, k.scheduler, k.segment_id) == ("scale", "user", 0)
        assert k.grid == (512, 1, 1) and k.block == (128, 1, 1) and k.time_ms > 0
    assert first.compile_time_ms > 0 and second.compile_time_ms == 0
    torch.testing.assert_close(out, 3.0 * x)


def test_linear_add_reports_library_kernels_under_the_expr_eval_segment() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.BFloat16)
        w = fd.define_tensor(shape=[-1, -1], dtype=DataType.BFloat16)
        b = fd.define_tensor(shape=[-1], dtype=DataType.BFloat16)
        fd.add_output(fd.ops.linear(x, w) + b)
    inputs = [
        randn(1024, 1024, dtype=torch.bfloat16),
        randn(512, 1024, dtype=torch.bfloat16, seed=1),
        randn(512, dtype=torch.bfloat16, seed=2),
    ]
    fd.execute(inputs)  # compile and load cuBLAS outside the block
    with kfuse.PythonProfiler() as prof:
        out = fd.execute(inputs)
    torch.testing.assert_close(out[0], torch.nn.functional.linear(*inputs[:2]) + inputs[2])
    p = prof.profile
    assert p.segments == 2
    segs = [(k.segment_id, k.scheduler) for k in p.kernel_profiles]
    library = [k for k in p.kernel_profiles if k.scheduler == "expr_eval"]
    assert library and all(k.segment_id == 0 for k in library)
    assert all(not k.name.startswith("_Z") and k.time_ms > 0 for k in library)
    assert segs[-1] == (1, "pointwise")
    assert p.kernel_time_ms == pytest.approx(sum(k.time_ms for k in p.kernel_profiles))


def test_kernel_time_agrees_with_cuda_events() -> None:
    fd = scale_add()
    x = randn(64 << 20)  # 256 MB in, 256 MB out
    runs = 10
    fd.execute([x])
    torch.cuda.synchronize()
    # Keep the GPU busy while the host queues every run, so the events time only kernels.
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(200_000_000)
    start.record()
    for _ in range(runs):
        fd.execute([x])
    end.record()
    torch.cuda.synchronize()
    event_ms = start.elapsed_time(end)
    with kfuse.PythonProfiler() as prof:
        for _ in range(runs):
            fd.execute([x])
    assert len(prof.profiles) == runs
    kernel_ms = sum(p.kernel_time_ms for p in prof.profiles)
    assert kernel_ms == pytest.approx(event_ms, rel=0.10)
    assert all(0 < p.percentage_peak_bandwidth < 110 for p in prof.profiles)


def test_two_profilers_in_a_row() -> None:
    fd = scale_add()
    x = randn(4096)
    for _ in range(2):
        with kfuse.PythonProfiler() as prof:
            fd.execute([x])
            fd.execute([x])
        assert [len(p.kernel_profiles) for p in prof.profiles] == [1, 1]
        assert all(p.kernel_time_ms > 0 for p in prof.profiles)


def test_profilers_do_not_nest() -> None:
    with kfuse.PythonProfiler():
        with pytest.raises(kfuse.ProfilerError, match="already recording"):
            with kfuse.PythonProfiler():
                pass


def test_kernel_profile_on_the_gpu() -> None:
    """--kernels: every kernel of a segmented case, with its GPU time and launch."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from models import measure, registry
    from models.run import load_suite

    case = next(c for c in registry.CASES if c.name == "batchnorm_fwd_nchw")
    row = measure.measure(
        torch,
        case,
        case.gpu_test_size,
        "bfloat16",
        reps=3,
        copy_gbs=1.0,
        flush=lambda: None,
        suite=load_suite(),
        peers=("kfuse",),
        kernels=True,
    )
    assert row["status"] == "ok", row
    assert "kernel_profile" in row, row.get("kernel_profile_error", row)
    kernels = row["kernel_profile"]
    assert len(kernels) >= row["kernels"] >= 1, kernels
    assert {k["segment"] for k in kernels} <= set(range(row["segments"]))
    assert all(k["us"] > 0 and k["registers"] > 0 and k["grid"][0] >= 1 for k in kernels)
    # A segment's input bytes count for its first kernel, its output bytes for its last.
    assert sum(k["gbs"] for k in kernels) > 0


# ---- nvFuser's profiler tests with generated and library kernels (test_python_direct.py) ----


def test_fusion_profiler_auto_scheduled() -> None:
    inputs = [torch.randn((2, 5), device="cuda:0") for _ in range(2)]
    with nvfuser_direct.FusionDefinition() as fd:
        t2 = fd.ops.add(fd.from_pytorch(inputs[0]), fd.from_pytorch(inputs[1]))
        fd.add_output(fd.ops.sum(fd.ops.sum(t2, dim=-1), dim=-1))
    with nvfuser_direct.PythonProfiler() as prof:
        (out,) = fd.execute(inputs)
    assert prof.profile.segments == 2
    assert len(prof.profile.kernel_profiles) == 2
    torch.testing.assert_close(out, (inputs[0] + inputs[1]).sum())


def test_fusion_profiler_with_noncodegen_kernels() -> None:
    shapes = ((2, 4, 16), (2, 4, 16), (16, 16))
    inputs = [torch.randn(shape, dtype=torch.bfloat16, device="cuda:0") for shape in shapes]
    with nvfuser_direct.FusionDefinition() as fd:
        t0, t1, t2 = (fd.from_pytorch(t) for t in inputs)
        fd.add_output(fd.ops.add(fd.ops.linear(t0, t2), t1))
    with nvfuser_direct.PythonProfiler() as prof:
        (out,) = fd.execute(inputs)
    kernels = prof.profile.kernel_profiles
    assert len(kernels) == 2
    assert all(len(k.name) > 0 for k in kernels)
    torch.testing.assert_close(out, torch.nn.functional.linear(inputs[0], inputs[2]) + inputs[1])


# Last in this file: once torch.profiler has run, torch holds CUPTI for the rest of the process,
# and every kfuse profiler after it can only refuse (a --kernels row after it had only its
# kernel_profile_error, seen on the H200 on 2026-12-03).
def test_under_torch_profiler_fails_cleanly() -> None:
    fd = scale_add()
    x = randn(4096)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]):
        with pytest.raises(kfuse.ProfilerError, match="torch.profiler|another profiler"):
            with kfuse.PythonProfiler():
                pass
        fd.execute([x])  # kfuse still runs under torch's profiler
    # Once torch.profiler has run, torch keeps its CUPTI subscription for the rest of the
    # process (seen with torch 2.11 on an H200), so kfuse can only refuse, clearly, and kfuse
    # itself keeps working.
    with pytest.raises(kfuse.ProfilerError, match="already in use by another profiler"):
        with kfuse.PythonProfiler():
            pass
    (out,) = fd.execute([x])
    torch.testing.assert_close(out, x * 2.0 + 1.0)

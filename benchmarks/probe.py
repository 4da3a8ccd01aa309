"""Diagnostic probes on the GPU, for tuning (not part of the suite):

* softmax (bf16, 2^27 elements): the heuristics' choice for rows of 1024 to 1048576, and long
  rows held in shared memory, whole or in part, or split over thread-block clusters;
* W1f's loads as emitted, as ld.global.nc, and with an L2 prefetch hint, next to torch.compile;
* W4 to W6 (rows of 4096) over persistent layouts (norms);
* normalizations over the leading axes (dim 0, channels-last batch norms) and few-column
  sums over dim 0, next to torch.compile and torch.sum (outer_norm);
* W1 and W1f with the pointwise grid capped to a few waves of resident blocks (grid);
* W1 and W1f with their registers limited (CompileParams.maxrregcount), next to torch.compile
  (regs);
* outer reductions (norm statistics over dim 0, a sum) with the reduced axis split over more
  blocks and fewer rows a load batch than the heuristics choose (outer_split);
* the host cost of the pieces of a cached call (allocation, stream query, attribute reads,
  the launch) next to kfuse's whole H1 call and CuPy's ElementwiseKernel.

    python benchmarks/probe.py [--json out.json]
        [--only softmax,loads,outer,outer_norm,outer_split,norms,grid,regs,host]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from run import copy_bandwidth, time_ms  # noqa: E402
from workloads import _softmax_definition  # noqa: E402


def _kernel_of(fd: Any) -> Any:
    return fd._executor_cache.last_compiled.launches[0].kernel


def softmax_probe(torch: Any, copy_gbs: float, log: Any) -> list[dict[str, Any]]:
    """bf16 softmax, 2^27 elements: the heuristics' choice over row lengths 1024 to 1048576
    (what fd.execute runs, segmented where no scheduler holds the row), and for long rows
    hand-set shared-memory layouts: threads per row, vectors per thread, vectors reloaded,
    blocks of a cluster sharing the row."""
    import kfuse.schedule.persistent as persistent
    from kfuse import SchedulerType, schedule

    rows: list[dict[str, Any]] = []

    def record(n: int, label: str, run: Any, out: Any, ref: Any, extra: dict[str, Any]) -> None:
        err = float((out.double() - ref).abs().max())
        ms = time_ms(torch, run, 30)
        frac = 2 * 2 * out.numel() / (ms * 1e-3) / 1e9 / copy_gbs
        rows.append(
            {
                "row": n,
                "config": label,
                "ms": ms,
                "fraction_of_copy": frac,
                "max_abs_err": err,
                **extra,
            }
        )
        log(
            f"  n={n:6d} {label:28s} {ms * 1e3:7.1f} us {100 * frac:5.1f}% err={err:.1e} "
            + " ".join(f"{k}={v}" for k, v in extra.items())
        )

    def measure(
        n: int, configs: list[tuple[int, int, int, int]], without_clusters: bool = False
    ) -> None:
        x = torch.randn(2**27 // n, n, device="cuda").to(torch.bfloat16)
        ref = torch.softmax(x.double(), -1)
        fd = _softmax_definition()
        (out,) = fd.execute([x])
        segments = len(fd.segments([x]))
        hp = fd._executor_cache.last_compiled.params if segments == 1 else None
        label = (
            "execute"
            if hp is None
            else (
                f"execute bx={hp.block_x} B={hp.persistent_batch_size} R={hp.reload_batch_size} "
                f"C={hp.cluster_size}"
            )
        )
        record(
            n,
            label,
            lambda: fd.execute([x]),
            out,
            ref,
            {"scheduler": str(fd.last_scheduler()), "segments": segments},
        )
        if without_clusters:  # what the heuristics pick where there are no clusters
            plain = persistent.clusters_supported
            persistent.clusters_supported = lambda info: False
            try:
                flat = _softmax_definition()
                (out,) = flat.execute([x])
                parts = len(flat.segments([x]))
            finally:
                persistent.clusters_supported = plain
            record(
                n,
                "execute without clusters",
                lambda: flat.execute([x]),
                out,
                ref,
                {"scheduler": str(flat.last_scheduler()), "segments": parts},
            )
        for bx, batch, reload, cluster in configs:
            fd = _softmax_definition()
            try:
                hp = schedule.compute_heuristics(fd.fusion, SchedulerType.inner_persistent, [x])
                hp.block_x, hp.block_y, hp.smem_persistent = bx, 1, True
                hp.persistent_batch_size, hp.reload_batch_size = batch, reload
                hp.cluster_size, hp.grid_x = cluster, x.shape[0] * cluster
                (out,) = fd.manual_execute([x], heuristic_params=hp)
            except Exception as exc:  # a layout the scheduler refuses
                log(f"  n={n} ({bx}, {batch}, {reload}, {cluster}): {exc}")
                continue
            k = _kernel_of(fd)
            record(
                n,
                f"bx={bx} B={batch} R={reload} C={cluster}",
                lambda fd=fd, hp=hp, x=x: fd.manual_execute([x], heuristic_params=hp),
                out,
                ref,
                {"regs": k.num_regs, "local_mem": k.local_mem},
            )

    for n in (1024, 2048, 4096, 8192, 16384, 32768):
        measure(n, [])
    # (threads per row, vectors per thread, vectors reloaded, cluster size): the rows the
    # heuristics split over clusters next to what they pick without clusters (held in part by
    # one block an SM, or segmented), and other layouts
    measure(65536, [(128, 8, 0, 8)])
    measure(65533, [], without_clusters=True)
    measure(131072, [(128, 16, 0, 8), (512, 8, 0, 4)], without_clusters=True)
    measure(262144, [(128, 32, 0, 8), (512, 8, 0, 8)], without_clusters=True)
    measure(524288, [(512, 16, 0, 8), (256, 32, 0, 8)], without_clusters=True)
    measure(1048576, [], without_clusters=True)
    return rows


def pointwise_load_probe(torch: Any, copy_gbs: float, log: Any) -> list[dict[str, Any]]:
    """W1f with its 16-byte loads as the runtime emits them, as ld.global.nc with no L1
    allocation, and with an L2 256-byte prefetch hint, alternated with torch.compile."""
    from workloads import WORKLOADS

    import kfuse.codegen.pointwise as pointwise

    w1f = next(w for w in WORKLOADS if w.id == "W1f")
    inputs = w1f.make_inputs(torch, False)
    ref = w1f.reference(*inputs)
    plain = pointwise.runtime_header
    header = plain()
    generic = (
        "__device__ __forceinline__ Vec<T, V> load_vec(const T* p) {\n"
        "  return *reinterpret_cast<const Vec<T, V>*>(p);\n}"
    )
    assert generic in header, "the runtime's load_vec changed; update the probe"

    def with_load(ptx: str) -> str:
        return header.replace(
            generic,
            (
                "__device__ __forceinline__ Vec<T, V> load_vec(const T* p) {\n"
                "  if constexpr (sizeof(Vec<T, V>) == 16) {\n"
                "    Vec<T, V> v; unsigned* w = reinterpret_cast<unsigned*>(&v);\n"
                f'    asm volatile("{ptx}.v4.u32 {{%0, %1, %2, %3}}, [%4];"\n'
                '                 : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3]) : "l"(p));\n'
                "    return v;\n"
                "  }\n"
                "  return *reinterpret_cast<const Vec<T, V>*>(p);\n}"
            ),
        )

    runs: dict[str, Any] = {}
    variants = [
        ("kfuse", None),
        ("kfuse nc.L1::no_allocate", "ld.global.nc.L1::no_allocate"),
        ("kfuse nc.L2::256B", "ld.global.nc.L1::no_allocate.L2::256B"),
    ]
    for label, ptx in variants:
        source = plain() if ptx is None else with_load(ptx)
        pointwise.runtime_header = lambda source=source: source
        fd = w1f.definition()
        (out,) = fd.execute(inputs)  # compiled now, with this header
        pointwise.runtime_header = plain
        err = float((out.double() - ref).abs().max())
        log(f"  {label}: max abs err {err:.1e}")
        runs[label] = lambda fd=fd: fd.execute(inputs)
    return _alternated_with_compile(torch, w1f, inputs, runs, copy_gbs, log)


def _alternated_with_compile(
    torch: Any,
    workload: Any,
    inputs: list[Any],
    runs: dict[str, Any],
    copy_gbs: float,
    log: Any,
    tag: str = "",
) -> list[dict[str, Any]]:
    """Add the workload's torch.compile to `runs`, then time every run in three alternated
    rounds: one row per run and round (with "workload": tag when a tag is given)."""
    compiled = torch.compile(workload.eager)
    compiled(*inputs)
    runs["torch.compile"] = lambda: compiled(*inputs)
    nbytes = workload.bytes_moved(inputs)
    rows = []
    for round_ in range(3):
        for label, run in runs.items():
            ms = time_ms(torch, run, 50)
            frac = nbytes / (ms * 1e-3) / 1e9 / copy_gbs
            row = {"round": round_, "config": label, "ms": ms, "fraction_of_copy": frac}
            rows.append({"workload": tag, **row} if tag else row)
            log(f"  {tag} round {round_} {label:32s} {ms * 1e3:7.1f} us {100 * frac:5.1f}%")
    return rows


def pointwise_grid_probe(torch: Any, copy_gbs: float, log: Any) -> list[dict[str, Any]]:
    """W1 and W1f with the heuristics' grid (a block per slice of a row: 131072 blocks for
    W1f) and with the row grid capped, so that fewer, resident blocks loop over the rows,
    alternated with torch.compile."""
    from workloads import WORKLOADS

    from kfuse import SchedulerType, schedule

    rows = []
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for wid in ("W1f", "W1"):
        w = next(w for w in WORKLOADS if w.id == wid)
        inputs = w.make_inputs(torch, False)
        ref = w.reference(*inputs)
        fd = w.definition()
        base = schedule.compute_heuristics(fd.fusion, SchedulerType.pointwise, inputs)
        runs: dict[str, Any] = {}
        # blocks resident per SM at 128 threads: 16; caps of 1, 2 and 4 resident waves
        for waves in (0, 1, 2, 4):
            hp = schedule.compute_heuristics(fd.fusion, SchedulerType.pointwise, inputs)
            if waves:
                hp.grid_y = max(1, min(base.grid_y, waves * sms * 16 // max(1, base.grid_x)))
                hp.lparams.grid_y = hp.grid_y
            label = f"kfuse grid {hp.grid_x}x{hp.grid_y}"
            (out,) = fd.manual_execute(inputs, heuristic_params=hp)
            err = float((out.double() - ref).abs().max())
            log(f"  {wid} {label}: max abs err {err:.1e}")
            runs[label] = lambda fd=fd, hp=hp, i=inputs: fd.manual_execute(i, heuristic_params=hp)
        rows += _alternated_with_compile(torch, w, inputs, runs, copy_gbs, log, wid)
    return rows


def pointwise_register_probe(torch: Any, copy_gbs: float, log: Any) -> list[dict[str, Any]]:
    """W1 and W1f compiled with CompileParams.maxrregcount None, 40 and 32 (more resident
    blocks per SM: 48 registers allow 10 blocks of 128 threads, 32 allow 16), alternated with
    torch.compile, whose Triton kernel takes 26 registers."""
    from workloads import WORKLOADS

    from kfuse import SchedulerType, schedule

    rows = []
    for wid in ("W1f", "W1"):
        w = next(w for w in WORKLOADS if w.id == wid)
        inputs = w.make_inputs(torch, False)
        ref = w.reference(*inputs)
        fd = w.definition()
        runs: dict[str, Any] = {}
        for limit in (None, 40, 32):
            hp = schedule.compute_heuristics(fd.fusion, SchedulerType.pointwise, inputs)
            cp = hp.cparams
            cp.maxrregcount = limit
            hp.cparams = cp
            (out,) = fd.manual_execute(inputs, heuristic_params=hp)
            kernel = fd._executor_cache.last_compiled.launches[0].kernel
            err = float((out.double() - ref).abs().max())
            label = f"kfuse maxrregcount={limit}"
            log(
                f"  {wid} {label}: {kernel.num_regs} registers, {kernel.local_mem} B local, "
                f"max abs err {err:.1e}"
            )
            runs[label] = lambda fd=fd, hp=hp, i=inputs: fd.manual_execute(i, heuristic_params=hp)
        rows += _alternated_with_compile(torch, w, inputs, runs, copy_gbs, log, wid)
    return rows


def norm_layout_probe(torch: Any, copy_gbs: float, log: Any) -> list[dict[str, Any]]:
    """W4, W5 and W6 (rows of 4096 bf16) with the heuristics' layout and hand-set ones:
    threads per row, vectors per thread, rows per block, row held in registers or in shared
    memory; alternated with torch.compile over three rounds."""
    from workloads import WORKLOADS

    from kfuse import SchedulerType, schedule

    # (threads per row, vectors per thread, rows per block, in shared memory)
    layouts = [
        (64, 8, 2, False),
        (256, 2, 1, False),
        (512, 1, 1, False),
        (128, 4, 2, False),
        (128, 4, 1, True),
        (256, 2, 1, True),
    ]
    rows = []
    for wid in ("W4", "W5", "W6"):
        w = next(w for w in WORKLOADS if w.id == wid)
        inputs = w.make_inputs(torch, False)
        ref = w.reference(*inputs)
        fd = w.definition()
        runs: dict[str, Any] = {}
        for layout in [None, *layouts]:
            hp = schedule.compute_heuristics(fd.fusion, SchedulerType.inner_persistent, inputs)
            if layout is not None:
                hp.block_x, hp.persistent_batch_size, hp.block_y, hp.smem_persistent = layout
                hp.reload_batch_size = 0
                hp.grid_x = -(-inputs[0].shape[0] // hp.block_y)
            label = (
                f"{'heuristics ' if layout is None else ''}bx={hp.block_x} "
                f"B={hp.persistent_batch_size} by={hp.block_y}"
                f"{' smem' if hp.smem_persistent else ''}"
            )
            try:
                (out,) = fd.manual_execute(inputs, heuristic_params=hp)
            except Exception as exc:  # a layout the scheduler refuses
                log(f"  {wid} {label}: {exc}")
                continue
            err = float((out.double() - ref).abs().max())
            log(f"  {wid} {label}: max abs err {err:.1e}")
            runs[label] = lambda fd=fd, hp=hp, i=inputs: fd.manual_execute(i, heuristic_params=hp)
        rows += _alternated_with_compile(torch, w, inputs, runs, copy_gbs, log, wid)
    return rows


def _norm_over_leading_axes(dtype: Any, rank: int, weighted: bool) -> Any:
    """(x - mean) * rsqrt(var + 1e-5) over every axis but the last, in float, cast back;
    times a weight and plus a bias over the last axis when `weighted` (a channels-last
    batch norm). Outputs the normalized tensor and the variance."""
    from kfuse import FusionDefinition
    from kfuse.dtypes import DataType

    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1] * rank, dtype=dtype)
        xf = fd.ops.cast(x, DataType.Float)
        var, mean = fd.ops.var_mean(xf, list(range(rank - 1)), correction=0, keepdim=True)
        y = fd.ops.mul(fd.ops.sub(xf, mean), fd.ops.rsqrt(fd.ops.add(var, 1e-5)))
        if weighted:
            shape = fd.ops.shape(x)
            w = fd.define_tensor(shape=[-1], dtype=dtype)
            b = fd.define_tensor(shape=[-1], dtype=dtype)
            wf = fd.ops.broadcast_in_dim(
                fd.ops.cast(w, DataType.Float), shape=shape, broadcast_dims=[rank - 1]
            )
            bf = fd.ops.broadcast_in_dim(
                fd.ops.cast(b, DataType.Float), shape=shape, broadcast_dims=[rank - 1]
            )
            y = fd.ops.add(fd.ops.mul(y, wf), bf)
        fd.add_output(fd.ops.cast(y, dtype))
        if not weighted:
            fd.add_output(var)
    return fd


def outer_norm_probe(torch: Any, copy_gbs: float, log: Any) -> list[dict[str, Any]]:
    """Normalizations over the leading axes next to torch.compile: norms over dim 0 of
    row-major matrices (64 to 8000 reduced rows) and channels-last batch norms, with the
    kernels each runs from the profiler; then sums over dim 0 with few columns (bias
    gradients) against torch.sum. Each moves its input once each way (a sum: once)."""
    import kfuse
    from kfuse import FusionDefinition
    from kfuse.dtypes import DataType

    def norm_eager(x: Any, *wb: Any) -> Any:
        xf = x.float()
        dims = tuple(range(x.dim() - 1))
        var, mean = torch.var_mean(xf, dims, correction=0, keepdim=True)
        y = (xf - mean) * torch.rsqrt(var + 1e-5)
        if wb:
            return (y * wb[0].float() + wb[1].float()).to(x.dtype)
        return y.to(x.dtype), var

    bf16 = torch.bfloat16
    cases = []
    for shape, dt in [
        ((64, 65536), bf16),
        ((256, 16384), bf16),
        ((1024, 16384), bf16),
        ((4096, 16384), bf16),
        ((1024, 16384), torch.float32),
        ((8000, 64), bf16),
        ((64, 28, 28, 512), bf16),
        ((32, 56, 56, 256), bf16),
    ]:
        kdt = DataType.BFloat16 if dt == bf16 else DataType.Float
        x = torch.randn(*shape, device="cuda").to(dt)
        weighted = len(shape) == 4
        inputs = [x] + ([torch.randn(shape[-1], device="cuda").to(dt)] * 2 if weighted else [])
        label = f"{'batch norm' if weighted else 'norm0'} {str(dt)[6:]} {list(shape)}"
        cases.append((label, _norm_over_leading_axes(kdt, len(shape), weighted), inputs))
    rows = []
    for label, fd, inputs in cases:
        out = fd.execute(inputs)[0]
        expected = norm_eager(*[i.double() for i in inputs])
        expected = expected[0] if isinstance(expected, tuple) else expected
        err = float((out.double() - expected).abs().max())
        log(
            f"  {label}: {fd.last_scheduler()}, {len(fd.segments(inputs))} segment(s), "
            f"max abs err {err:.1e}"
        )
        with kfuse.PythonProfiler() as prof:
            fd.execute(inputs)
        for k in prof.profile.kernel_profiles:
            log(
                f"    {k.scheduler:16s} {k.time_ms * 1e3:7.1f} us grid {k.grid} "
                f"block {k.block} regs {k.registers}"
            )
        compiled = torch.compile(norm_eager, dynamic=False)
        compiled(*inputs)
        nbytes = 2 * inputs[0].numel() * inputs[0].element_size()
        for peer, run in [
            ("kfuse", lambda fd=fd, i=inputs: fd.execute(i)),
            ("torch.compile", lambda c=compiled, i=inputs: c(*i)),
        ]:
            ms = time_ms(torch, run, 30)
            frac = nbytes / (ms * 1e-3) / 1e9 / copy_gbs
            rows.append({"case": label, "peer": peer, "ms": ms, "fraction_of_copy": frac})
            log(f"  {label} {peer:14s} {ms * 1e3:7.1f} us {100 * frac:5.1f}%")
        torch._dynamo.reset()  # each case compiles on its own
    # Welford statistics against a plain sum over the same bf16 input: how much of the
    # statistics kernel's time is its arithmetic (a division per element).
    for shape in [(4096, 16384), (50176, 512)]:
        x = torch.randn(*shape, device="cuda").to(bf16)
        for stat in ("sum", "var_mean"):
            with FusionDefinition() as fd:
                t = fd.ops.cast(
                    fd.define_tensor(shape=[-1, -1], dtype=DataType.BFloat16), DataType.Float
                )
                if stat == "sum":
                    fd.add_output(fd.ops.sum(t, [0]))
                else:
                    for v in fd.ops.var_mean(t, [0], correction=0):
                        fd.add_output(v)
            fd.execute([x])
            ms = time_ms(torch, lambda fd=fd, x=x: fd.execute([x]), 30)
            frac = x.numel() * 2 / (ms * 1e-3) / 1e9 / copy_gbs
            rows.append(
                {
                    "case": f"{stat}0 bf16 {list(shape)}",
                    "peer": "kfuse",
                    "ms": ms,
                    "fraction_of_copy": frac,
                }
            )
            log(f"  {stat}0 bf16 {list(shape)} kfuse {ms * 1e3:7.1f} us {100 * frac:5.1f}%")
    for shape in [(50176, 512), (1 << 20, 256), (200704, 64)]:
        x = torch.randn(*shape, device="cuda")
        with FusionDefinition() as fd:
            t = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
            fd.add_output(fd.ops.sum(t, [0]))
        (out,) = fd.execute([x])
        err = float((out.double() - x.double().sum(0)).abs().max())
        for peer, run in [
            ("kfuse", lambda fd=fd, x=x: fd.execute([x])),
            ("torch.sum", lambda x=x: x.sum(0)),
        ]:
            ms = time_ms(torch, run, 30)
            frac = x.numel() * 4 / (ms * 1e-3) / 1e9 / copy_gbs
            rows.append(
                {"case": f"sum0 {list(shape)}", "peer": peer, "ms": ms, "fraction_of_copy": frac}
            )
            log(
                f"  sum0 {list(shape)} {peer:10s} {ms * 1e3:7.1f} us {100 * frac:5.1f}% "
                f"err={err:.1e}"
            )
    return rows


def outer_split_probe(torch: Any, copy_gbs: float, log: Any) -> list[dict[str, Any]]:
    """Outer reductions (the statistics of norms over dim 0, and W3's sum) with the reduced
    axis split over more blocks (grid_y) and fewer rows a load batch (unroll) than the
    heuristics choose: both kernels (partials and finalize) timed together, kfuse only."""
    from kfuse import FusionDefinition, SchedulerType, schedule
    from kfuse.dtypes import DataType

    def statistics(dtype: Any, welford: bool) -> Any:
        with FusionDefinition() as fd:
            t = fd.ops.cast(fd.define_tensor(shape=[-1, -1], dtype=dtype), DataType.Float)
            if welford:
                for v in fd.ops.var_mean(t, [0], correction=0):
                    fd.add_output(v)
            else:
                fd.add_output(fd.ops.sum(t, [0]))
        return fd

    rows: list[dict[str, Any]] = []
    cases = [
        ((1024, 16384), True),
        ((256, 16384), True),
        ((4096, 16384), True),
        ((8000, 64), True),
        ((50176, 512), True),
        ((4096, 16384), False),
        ((200704, 64), False),
    ]
    for shape, welford in cases:
        x = torch.randn(*shape, device="cuda").to(torch.bfloat16)
        fd = statistics(DataType.BFloat16, welford)
        base = schedule.compute_heuristics(fd.fusion, SchedulerType.reduction, [x])
        p0, u0 = int(base.grid_y), int(base.unroll_reduction)
        ref = x.double().var(0, unbiased=False) if welford else x.double().sum(0)
        case = f"{'var_mean0' if welford else 'sum0'} bf16 {list(shape)}"
        # (grid_y over the heuristics', rows a load batch, register limit)
        for scale, unroll, regs in [
            (1, u0, None),
            (2, u0, None),
            (4, u0, None),
            (8, u0, None),
            (2, max(1, u0 // 2), None),
            (4, max(1, u0 // 2), None),
            (1, u0, 64),
            (2, u0, 64),
            (1, u0, 56),
            (2, u0, 48),
        ]:
            hp = schedule.compute_heuristics(fd.fusion, SchedulerType.reduction, [x])
            hp.grid_y, hp.unroll_reduction = min(65535, p0 * scale), unroll
            if regs:
                cp = hp.cparams
                cp.maxrregcount = regs
                hp.cparams = cp
            label = (
                f"grid=({hp.grid_x}, {hp.grid_y}) block=({hp.block_x}, {hp.block_y}) "
                f"U={unroll}{f' regs<={regs}' if regs else ''}"
            )
            try:
                out = fd.manual_execute([x], heuristic_params=hp)[0]
            except Exception as exc:  # a configuration the scheduler refuses
                log(f"  {case} {label}: {exc}")
                continue
            err = float((out.double() - ref).abs().max())
            k = _kernel_of(fd)

            def run(fd: Any = fd, hp: Any = hp, x: Any = x) -> Any:
                return fd.manual_execute([x], heuristic_params=hp)

            ms = time_ms(torch, run, 30)
            rows.append(
                {
                    "case": case,
                    "config": label,
                    "heuristics": scale == 1 and unroll == u0 and not regs,
                    "registers": k.num_regs,
                    "local_mem": k.local_mem,
                    "ms": ms,
                    "max_abs_err": err,
                }
            )
            log(
                f"  {case:26s} {label:52s} {ms * 1e3:7.1f} us err={err:.1e} "
                f"({k.num_regs} regs, {k.local_mem} B local)"
            )
    return rows


def outer_reduction_probe(torch: Any, copy_gbs: float, log: Any) -> list[dict[str, Any]]:
    """W3 (sum over dim 0, fp32 [16384, 16384]) over blocks splitting the reduced axis
    (grid_y), threads along it (block_y) and rows per load batch (unroll), next to
    torch.compile."""
    from workloads import WORKLOADS

    from kfuse import SchedulerType, schedule

    w3 = next(w for w in WORKLOADS if w.id == "W3")
    (x,) = w3.make_inputs(torch, False)
    ref = w3.reference(x)
    nbytes = w3.bytes_moved([x])
    rows: list[dict[str, Any]] = []

    def record(label: str, run: Any) -> None:
        out = run()
        out = out[0] if isinstance(out, list) else out  # kfuse returns a list of outputs
        err = float((out.double() - ref).abs().max())
        ms = time_ms(torch, run, 50)
        frac = nbytes / (ms * 1e-3) / 1e9 / copy_gbs
        rows.append({"config": label, "ms": ms, "fraction_of_copy": frac, "max_abs_err": err})
        log(f"  W3 {label:34s} {ms * 1e3:7.1f} us {100 * frac:5.1f}% err={err:.1e}")

    compiled = torch.compile(w3.eager)
    record("torch.compile", lambda: compiled(x))
    columns = x.shape[1] // 4  # vectors of 4 floats along a row
    # the heuristics', the earlier heuristics' (512 threads, 4 rows a load batch, one wave),
    # and neighbours of the chosen layout
    for block_x, block_y, unroll, grid_y in [
        (0, 0, 0, 0),
        (32, 16, 4, 4),
        (32, 8, 16, 16),
        (32, 8, 8, 32),
        (64, 4, 8, 16),
        (32, 16, 8, 8),
    ]:
        fd = w3.definition()
        hp = schedule.compute_heuristics(fd.fusion, SchedulerType.reduction, [x])
        if block_y:
            hp.block_x, hp.grid_x = block_x, -(-columns // block_x)
            hp.block_y, hp.unroll_reduction, hp.grid_y = block_y, unroll, grid_y
        label = (
            f"{'heur ' if not block_y else ''}block=({hp.block_x}, {hp.block_y}) "
            f"U={hp.unroll_reduction} grid_y={hp.grid_y}"
        )
        try:
            fd.manual_execute([x], heuristic_params=hp)
            record(label, lambda fd=fd, hp=hp: fd.manual_execute([x], heuristic_params=hp))
        except Exception as exc:  # a configuration the scheduler refuses
            log(f"  W3 {label}: {exc}")
    return rows


def _per_call_us(fn: Any, n: int = 20000) -> float:
    for _ in range(200):
        fn()
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n * 1e6


def host_probe(torch: Any, log: Any) -> dict[str, float]:
    import cupy
    import numpy

    out: dict[str, float] = {}
    a = torch.randn(1024, device="cuda")
    dev = a.device
    raw = torch._C._cuda_getCurrentRawStream
    ca = cupy.random.standard_normal(1024, dtype=cupy.float32)
    probes = {
        "torch.empty(shape, dtype, device)": lambda: torch.empty(
            (1024,), dtype=torch.float32, device=dev
        ),
        "torch.empty_like": lambda: torch.empty_like(a),
        "tensor.new_empty": lambda: a.new_empty((1024,)),
        "torch.empty_strided": lambda: torch.empty_strided(
            (1024,), (1,), dtype=torch.float32, device=dev
        ),
        "raw current stream": lambda: raw(0),
        "torch.cuda.current_stream().cuda_stream": lambda: torch.cuda.current_stream().cuda_stream,
        "t.data_ptr()": a.data_ptr,
        "t.shape": lambda: a.shape,
        "t.stride()": a.stride,
        "t.dtype": lambda: a.dtype,
        "t.device": lambda: a.device,
        "t.get_device()": a.get_device,
        "cupy.empty": lambda: cupy.empty((1024,), dtype=cupy.float32),
        "cupy.empty (positional)": lambda: cupy.empty((1024,), numpy.float32),
        "cupy.ndarray(shape, dtype)": lambda: cupy.ndarray((1024,), numpy.float32),
        "cupy current stream ptr": lambda: cupy.cuda.get_current_stream().ptr,
        "cupy x.data.ptr": lambda: ca.data.ptr,
        "cupy x.strides": lambda: ca.strides,
        "cupy getDevice": cupy.cuda.runtime.getDevice,
    }
    from kfuse import DataType, FusionDefinition

    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], dtype=DataType.Float)
        y = fd.define_tensor(shape=[-1], dtype=DataType.Float)
        fd.add_output(fd.ops.mul(fd.ops.add(x, y), 2.0))
    b = torch.randn(1024, device="cuda")
    cb = cupy.random.standard_normal(1024, dtype=cupy.float32)
    for _ in range(2):  # a layout's FastCall is built on its second checked call
        fd.execute([a, b])
        fd.execute([ca, cb])
    launch = fd._executor_cache.last_compiled.launches[0]
    stream = raw(0)
    c = torch.empty_like(a)
    args = launch.arguments([a.data_ptr(), b.data_ptr()], [c.data_ptr()], {}, [])
    probes["kfuse Kernel.launch (args prebuilt)"] = lambda: launch.kernel.launch(
        launch.grid, launch.block, 0, stream, args
    )
    from kfuse._C import FastCall
    from kfuse.engine.fast_path import packed_launch
    from kfuse.engine.signature import input_layouts

    packed = packed_launch(launch, {}, 2, 1, 0)
    pa, pb, pc = a.data_ptr(), b.data_ptr(), c.data_ptr()
    probes["PackedLaunch.launch"] = lambda: packed.launch(stream, [pa, pb], [pc], [])
    match_only = FastCall("torch", 0, input_layouts([a, b]), [], [], [], raw, (0,), None, None)
    match_alloc = FastCall(
        "torch",
        0,
        input_layouts([a, b]),
        [(torch.empty_like, (), None, 0)],
        [],
        [],
        raw,
        (0,),
        None,
        None,
    )
    probes["FastCall: match only"] = lambda: match_only([a, b], None)
    for label, alloc in [("cupy.empty", cupy.empty), ("cupy.ndarray", cupy.ndarray)]:
        cupy_call = FastCall(
            "cupy",
            0,
            input_layouts([ca, cb]),
            [(alloc, ((1024,), numpy.float32), None, -1)],
            [],
            [],
            cupy.cuda.get_current_stream,
            (),
            cupy.cuda.runtime.getDevice,
            None,
        )
        probes[f"FastCall cupy: match + {label}"] = lambda c=cupy_call: c([ca, cb], None)
    probes["FastCall: match + allocate"] = lambda: match_alloc([a, b], None)
    cache = fd._executor_cache.fast_calls
    probes["FastCallCache call (torch, no Python frame)"] = lambda: cache([a, b], None)
    probes["kfuse execute (torch)"] = lambda: fd.execute([a, b])
    probes["kfuse execute (cupy)"] = lambda: fd.execute([ca, cb])
    # The suite's H1 hands kfuse CuPy views of torch tensors (cupy.from_dlpack)
    da, db = cupy.from_dlpack(a), cupy.from_dlpack(b)
    fd.execute([da, db])
    fd.execute([da, db])  # a layout's FastCall is built on its second checked call
    for label, arrays in [("cupy", [ca, cb]), ("cupy from_dlpack", [da, db]), ("torch", [a, b])]:
        out[f"fast path hit ({label})"] = float(cache(arrays, None) is not None)
        log(f"  fast path hit ({label}): {cache(arrays, None) is not None}")
    probes["kfuse execute (cupy from_dlpack)"] = lambda: fd.execute([da, db])
    # A scalar input: the fast path computes its parameter's value on every call
    with FusionDefinition() as scaled:
        x = scaled.define_tensor(shape=[-1], dtype=DataType.Float)
        y = scaled.define_tensor(shape=[-1], dtype=DataType.Float)
        s = scaled.define_scalar(dtype=DataType.Double)
        scaled.add_output(scaled.ops.mul(scaled.ops.add(x, y), s))
    for _ in range(2):  # a layout's FastCall is built on its second checked call
        scaled.execute([a, b, 2.0])
    probes["kfuse execute (torch, scalar input)"] = lambda: scaled.execute([a, b, 2.5])
    probes["kfuse checked path (torch, scalar input)"] = lambda: scaled._executor_cache.execute(
        [a, b, 2.5], try_fast=False
    )
    # What a miss costs: the checked path (this layout's FastCall exists, so none is built),
    # and building a layout's FastCall, which a layout's second checked call adds to that
    from kfuse.engine.fast_path import fast_call_for
    from kfuse.engine.signature import layout_key
    from kfuse.runtime.info import build_runtime_info

    checked = fd._executor_cache
    probes["kfuse checked path (torch)"] = lambda: checked.execute([a, b], try_fast=False)
    info = build_runtime_info(fd.fusion, [a, b])
    layout = layout_key([a, b], info)
    probes["FastCall build (fast_call_for)"] = lambda: fast_call_for(
        [a, b], checked.last_compiled, info, layout
    )
    kernel = cupy.ElementwiseKernel(
        "float32 a, float32 b", "float32 c", "c = (a + b) * 2", "probe_h1"
    )
    probes["cupy ElementwiseKernel (allocating)"] = lambda: kernel(ca, cb)
    for name, fn in probes.items():
        out[name] = _per_call_us(fn)
        log(f"  {name:45s} {out[name]:7.2f} us")
    torch.cuda.synchronize()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", default="")
    parser.add_argument("--only", default="softmax,loads,host")
    args = parser.parse_args()
    import torch

    def log(line: str) -> None:
        print(line, flush=True)

    only = set(args.only.split(","))
    result: dict[str, Any] = {}
    if "host" in only:
        log("host cost per call:")
        result["host"] = host_probe(torch, log)
    # The probes measured against the copy bandwidth: --only name -> (JSON key, probe).
    against_copy = {
        "softmax": ("softmax", softmax_probe),
        "outer": ("w3_outer", outer_reduction_probe),
        "loads": ("w1f_loads", pointwise_load_probe),
        "outer_norm": ("outer_norm", outer_norm_probe),
        "norms": ("norm_layouts", norm_layout_probe),
        "grid": ("pointwise_grid", pointwise_grid_probe),
        "regs": ("pointwise_registers", pointwise_register_probe),
        "outer_split": ("outer_split", outer_split_probe),
    }
    chosen = [name for name in against_copy if name in only]
    if chosen:
        copy_gbs = copy_bandwidth(torch, 20)
        result["copy_gbs"] = copy_gbs
        log(f"device-to-device copy: {copy_gbs:.0f} GB/s")
    for name in chosen:
        key, probe = against_copy[name]
        result[key] = probe(torch, copy_gbs, log)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The profiler without a GPU: the join of synthetic CUPTI records with kfuse's segment tags
(unknown ids, out-of-order and reused correlation ids, graph launches), the executor hooks on
the host emulator, repr/to_dict, and a clear ProfilerError where no GPU is present."""

from __future__ import annotations

import random

import numpy as np
import pytest

import kfuse
from kfuse import _C
from kfuse.frontend import FusionDefinition
from kfuse.profiler import _Recorder, footprint_bytes
from kfuse.runtime import profiling_hooks

KIND = _C.PROFILER_EXTERNAL_KIND
TORCH_KIND = 3  # CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, what PyTorch's profiler pushes
GEMM = "_ZN7cutlass7Kernel2I17cutlass_80_tensorEEvNT_6ParamsE"


def kernel(
    name: str,
    correlation: int,
    start_us: float,
    time_us: float,
    *,
    device: int = 0,
    grid: tuple = (4, 1, 1),
    block: tuple = (128, 1, 1),
) -> _C.KernelActivity:
    k = _C.KernelActivity()
    k.name, k.correlation_id, k.device, k.stream = name, correlation, device, 7
    k.start_ns = int(start_us * 1000)
    k.end_ns = int((start_us + time_us) * 1000)
    k.grid, k.block, k.cluster = grid, block, (1, 1, 1)
    k.registers, k.static_shared_mem, k.dynamic_shared_mem = 32, 16, 1024
    return k


def link(correlation: int, external_id: int, kind: int = KIND) -> _C.ExternalCorrelation:
    c = _C.ExternalCorrelation()
    c.correlation_id, c.external_id, c.external_kind = correlation, external_id, kind
    return c


def fusion(fusion_id: int, host_ms: float = 1.0, compile_ms: float = 0.0) -> _C.FusionRecord:
    f = _C.FusionRecord()
    f.fusion_id, f.device, f.host_time_ms, f.compile_time_ms = fusion_id, 0, host_ms, compile_ms
    return f


def tag(
    external_id: int,
    fusion_id: int,
    segment_id: int,
    scheduler: str,
    in_bytes: int,
    out_bytes: int,
    compiles: list | None = None,
) -> _C.SegmentTag:
    t = _C.SegmentTag()
    t.external_id, t.fusion_id, t.segment_id, t.scheduler = (
        external_id,
        fusion_id,
        segment_id,
        scheduler,
    )
    t.input_bytes, t.output_bytes, t.device = in_bytes, out_bytes, 0
    t.kernel_compile_ms = compiles or []
    return t


def activities(kernels: list, correlations: list) -> _C.Activities:
    a = _C.Activities()
    a.kernels, a.correlations = kernels, correlations
    return a


PEAK = {0: 4000.0}


def linear_add_records() -> tuple[list, list, list, list]:
    """Fusion 0: expr_eval (a cuBLAS gemm + a split-k reduce) then pointwise; fusion 1: one
    pointwise kernel; plus noise kfuse did not tag."""
    fusions = [fusion(0, 2.0, 150.0), fusion(1, 0.5)]
    tags = [
        tag(101, 0, 0, "expr_eval", 3_000_000, 1_000_000),
        tag(102, 0, 1, "pointwise", 1_000_000, 1_000_000, [("kf_pointwise_0", 120.0)]),
        tag(103, 1, 0, "pointwise", 2_000_000, 2_000_000),
    ]
    kernels = [
        kernel(GEMM, 11, 10, 100),
        kernel("splitk_reduce", 12, 111, 10),
        kernel("kf_pointwise_0", 13, 130, 5),
        kernel("kf_pointwise_0", 21, 300, 2),
        kernel("torch_randn_kernel", 5, 0, 50),  # launched outside kfuse's segments
        kernel("profiled_by_torch", 30, 400, 9),
    ]  # only another tool's id
    links = [
        link(11, 101),
        link(12, 101),
        link(13, 102),
        link(21, 103),
        link(30, 103, TORCH_KIND),  # torch's kind with one of kfuse's numbers
        link(31, 999),
    ]  # an id kfuse never tagged
    return fusions, tags, kernels, links


def join(fusions: list, tags: list, kernels: list, links: list) -> list:
    return _C.join_profiles(fusions, tags, activities(kernels, links), PEAK)


def test_kernels_map_to_their_fusion_and_segment() -> None:
    profiles = join(*linear_add_records())
    assert [p.fusion_id for p in profiles] == [0, 1]
    first, second = profiles
    assert first.segments == 2 and second.segments == 1
    assert [(k.segment_id, k.scheduler) for k in first.kernel_profiles] == [
        (0, "expr_eval"),
        (0, "expr_eval"),
        (1, "pointwise"),
    ]
    assert (
        first.kernel_profiles[0].name == "void cutlass::Kernel2<cutlass_80_tensor>("
        "cutlass_80_tensor::Params)"
    )
    assert [k.name for k in second.kernel_profiles] == ["kf_pointwise_0"]
    assert first.kernel_time_ms == pytest.approx(0.115)
    assert first.host_time_ms == 2.0 and first.compile_time_ms == 150.0
    k = first.kernel_profiles[2]
    assert (k.grid, k.block, k.cluster) == ((4, 1, 1), (128, 1, 1), (1, 1, 1))
    assert (k.registers, k.static_shared_mem, k.dynamic_shared_mem) == (32, 16, 1024)
    assert (k.device, k.stream, k.correlation_id) == (0, 7, 13)
    assert k.compile_time_ms == 120.0 and second.kernel_profiles[0].compile_time_ms == 0.0


def test_bytes_and_bandwidth() -> None:
    first, second = join(*linear_add_records())
    gemm, reduce, add = first.kernel_profiles
    # A segment's inputs are charged to its first kernel, its outputs to its last.
    assert (gemm.input_bytes, gemm.output_bytes) == (3_000_000, 0)
    assert (reduce.input_bytes, reduce.output_bytes) == (0, 1_000_000)
    assert (add.input_bytes, add.output_bytes) == (1_000_000, 1_000_000)
    assert add.effective_bandwidth_gbs == pytest.approx(2e6 / 5e-6 / 1e9)
    assert add.percentage_peak_bandwidth == pytest.approx(100 * 400 / 4000)
    assert (first.input_bytes, first.output_bytes) == (4_000_000, 2_000_000)
    assert first.effective_bandwidth_gbs == pytest.approx(6e6 / 115e-6 / 1e9)
    assert second.percentage_peak_bandwidth == pytest.approx(100 * (4e6 / 2e-6 / 1e9) / 4000)


def test_record_order_does_not_matter() -> None:
    fusions, tags, kernels, links = linear_add_records()
    want = [p.to_dict() for p in join(fusions, tags, kernels, links)]
    rng = random.Random(0)
    for _ in range(20):
        rng.shuffle(kernels)
        rng.shuffle(links)
        rng.shuffle(tags)
        assert [p.to_dict() for p in join(fusions, tags, kernels, links)] == want


def test_untagged_kernels_and_unknown_ids_are_ignored() -> None:
    fusions, tags, kernels, links = linear_add_records()
    names = {k.name for p in join(fusions, tags, kernels, links) for k in p.kernel_profiles}
    assert "torch_randn_kernel" not in names and "profiled_by_torch" not in names
    # Only noise: every fusion is reported with no kernels.
    only_noise = join(fusions, tags, kernels[4:], links[4:])
    assert [len(p.kernel_profiles) for p in only_noise] == [0, 0]
    assert only_noise[0].kernel_time_ms == 0 and only_noise[0].effective_bandwidth_gbs == 0


def test_repeated_links_graph_launches_and_reused_correlation_ids() -> None:
    fusions = [fusion(0), fusion(1)]
    tags = [tag(1, 0, 0, "reduction", 100, 10), tag(2, 1, 0, "pointwise", 100, 100)]
    kernels = [
        kernel("graph_a", 40, 0, 1),
        kernel("graph_b", 40, 2, 1),  # one graph launch
        kernel("late", 50, 100, 1),
        kernel("early", 50, 10, 1),
    ]  # corr 50 reused
    links = [
        link(40, 1),
        link(40, 1),  # a repeated record counts once
        link(50, 2),
        link(50, 1),
    ]
    first, second = join(fusions, tags, kernels, links)
    assert [k.name for k in first.kernel_profiles] == ["graph_a", "graph_b", "early"]
    assert [k.name for k in second.kernel_profiles] == ["late"]


def test_demangle_leaves_c_names_alone() -> None:
    assert _C.demangle("kf_pointwise_0") == "kf_pointwise_0"
    assert _C.demangle("_Z3addPfS_i") == "add(float*, float*, int)"
    assert _C.demangle("_Znot_a_name") == "_Znot_a_name"


def test_repr_is_a_table_and_to_dict_has_every_field() -> None:
    first, _ = join(*linear_add_records())
    text = repr(first)
    lines = text.splitlines()
    assert lines[0].startswith("FusionProfile(fusion 0, device 0, 2 segments, 3 kernels")
    assert "seg" in lines[1] and "scheduler" in lines[1] and "GB/s" in lines[1]
    assert len(lines) == 5 and "expr_eval" in lines[2] and "kf_pointwise_0" in lines[4]
    assert repr(first.kernel_profiles[2]).startswith(
        "KernelProfile(name='kf_pointwise_0', scheduler='pointwise', segment_id=1"
    )
    d = first.to_dict()
    fields = {
        "fusion_id",
        "device",
        "segments",
        "kernel_time_ms",
        "host_time_ms",
        "compile_time_ms",
        "input_bytes",
        "output_bytes",
        "effective_bandwidth_gbs",
        "percentage_peak_bandwidth",
        "kernel_profiles",
    }
    assert set(d) == fields
    kd = d["kernel_profiles"][2]
    assert kd == first.kernel_profiles[2].to_dict()
    for name, value in kd.items():
        assert getattr(first.kernel_profiles[2], name) == value
    assert kd["grid"] == (4, 1, 1)


def test_footprint_counts_broadcast_axes_once() -> None:
    assert footprint_bytes((4, 8), (8, 1), 4) == 128
    assert footprint_bytes((4, 8), (0, 1), 4) == 32  # expanded rows
    assert footprint_bytes((0, 8), (8, 1), 4) == 0


def no_gpu() -> bool:
    try:
        return _C.device_count() == 0
    except kfuse.CudaError:
        return True


@pytest.mark.skipif(not no_gpu(), reason="a GPU is present")
def test_entering_without_a_gpu_raises_profiler_error() -> None:
    prof = kfuse.PythonProfiler()
    with pytest.raises(kfuse.ProfilerError, match="needs an NVIDIA GPU"):
        with prof:
            pass
    assert profiling_hooks.active is None
    assert issubclass(kfuse.ProfilerError, kfuse.KfuseError)
    with pytest.raises(kfuse.ProfilerError, match="no fusion or kernel ran"):
        _ = prof.profile


# ---- the executor hooks, on the host emulator (CUPTI's push/pop replaced) ----


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch):
    pushed: list = []
    monkeypatch.setattr(_C, "profiler_push_external_id", lambda i: pushed.append(("push", i)))
    monkeypatch.setattr(_C, "profiler_pop_external_id", lambda: pushed.append(("pop",)))
    rec = _Recorder()
    rec.pushed = pushed
    monkeypatch.setattr(profiling_hooks, "active", rec)
    return rec


def test_executes_are_recorded_with_segments_schedulers_and_bytes(recorder) -> None:
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1])
        b = fd.define_tensor(shape=[-1, -1])
        fd.add_output(fd.ops.sum(fd.ops.sum(a + b, -1), -1))  # two reduction segments
    with FusionDefinition() as pw:
        x = pw.define_tensor(shape=[-1])
        pw.add_output(x * 2.0 + x)
    rng = np.random.default_rng(0)
    fd.execute([rng.standard_normal((3, 5), dtype=np.float32)] * 2)
    pw.execute([rng.standard_normal(10, dtype=np.float32)])
    pw.execute([rng.standard_normal(10, dtype=np.float32)])
    assert [f.fusion_id for f in recorder.fusions] == [0, 1, 2]
    assert [(t.fusion_id, t.segment_id, t.scheduler) for t in recorder.tags] == [
        (0, 0, "reduction"),
        (0, 1, "reduction"),
        (1, 0, "pointwise"),
        (2, 0, "pointwise"),
    ]
    assert [(t.input_bytes, t.output_bytes) for t in recorder.tags] == [
        (120, 12),
        (12, 4),
        (40, 40),
        (40, 40),
    ]
    first_pw, cached_pw = recorder.fusions[1], recorder.fusions[2]
    assert first_pw.compile_time_ms > 0 and cached_pw.compile_time_ms == 0
    assert recorder.tags[2].kernel_compile_ms and not recorder.tags[3].kernel_compile_ms
    assert all(f.host_time_ms > 0 for f in recorder.fusions)
    ids = [t.external_id for t in recorder.tags]
    assert len(set(ids)) == 4
    assert recorder.pushed == [e for i in ids for e in (("push", i), ("pop",))]


def test_a_failed_execute_is_not_recorded_and_leaves_no_open_frame(recorder) -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1])
        fd.add_output(fd.ops.exp(x))
    with pytest.raises(kfuse.InputError):
        fd.execute([np.zeros((2, 2), dtype=np.float32)])
    fd.execute([np.zeros(4, dtype=np.float32)])
    assert [(t.fusion_id, t.segment_id) for t in recorder.tags] == [(0, 0)]
    assert len(recorder.fusions) == 1


def test_hooks_do_nothing_without_a_profiler() -> None:
    assert profiling_hooks.active is None
    with profiling_hooks.execution(), profiling_hooks.segment(None, None):
        profiling_hooks.compiled(1.0)
        profiling_hooks.kernel_compiled("k", 1.0)

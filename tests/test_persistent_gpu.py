"""The inner_persistent scheduler on a GPU: normalizations with torch CUDA tensors and CuPy
arrays, row lengths up to the longest the heuristics hold, W4/W5/W6 at full size."""

from __future__ import annotations

import pytest

from gpu_support import requires_gpu
from kfuse import schedule
from kfuse.dtypes import DataType
from kfuse.errors import SchedulerError
from kfuse.frontend import FusionDefinition
from kfuse.reference import evaluate
from kfuse.schedule import SchedulerType
from kfuse.testing import assert_outputs_close
from norm_fusions import var_mean_normalization

pytestmark = [pytest.mark.gpu, requires_gpu]
IP = SchedulerType.inner_persistent
BF = DataType.BFloat16


def _torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA")
    return torch


def softmax_fd(dtype: DataType, log: bool = False) -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=dtype)
        fd.add_output((fd.ops.log_softmax if log else fd.ops.softmax)(x, 1))
    return fd


def layer_norm_fd(dtype: DataType, stats: bool = False) -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=dtype)
        w = fd.define_tensor(shape=[-1], dtype=dtype)
        b = fd.define_tensor(shape=[-1], dtype=dtype)
        fd.add_output(fd.ops.layer_norm(x, w, b, eps=1e-5))
        if stats:
            var, mean = fd.ops.var_mean(fd.ops.cast(x, DataType.Float), [1], correction=0)
            fd.add_output(mean)
            fd.add_output(fd.ops.rsqrt(var + 1e-5))
    return fd


def rms_norm_fd(dtype: DataType) -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=dtype)
        w = fd.define_tensor(shape=[-1], dtype=dtype)
        fd.add_output(fd.ops.rms_norm(x, w, eps=1e-6))
    return fd


def run_and_check(fd: FusionDefinition, inputs: list) -> list:
    out = fd.execute(inputs)
    assert fd.last_scheduler() is IP
    assert_outputs_close(fd, out, evaluate(fd.fusion, inputs), inputs)
    return out


def _inputs(torch, kind: str, rows: int, n: int, tdt):  # noqa: ANN001, ANN202
    x = torch.randn(rows, n, device="cuda").to(tdt)
    if kind == "softmax":
        return [x]
    w = torch.randn(n, device="cuda").to(tdt)
    if kind == "rms_norm":
        return [x, w]
    return [x, w, torch.randn(n, device="cuda").to(tdt)]


def _fd(kind: str, dtype: DataType) -> FusionDefinition:
    return {"softmax": softmax_fd, "layer_norm": layer_norm_fd, "rms_norm": rms_norm_fd}[kind](
        dtype
    )


@pytest.mark.parametrize("kind", ["softmax", "layer_norm", "rms_norm"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("n", [1, 3, 31, 32, 33, 1000, 1024, 4097])
def test_torch_normalizations(kind: str, dtype: str, n: int) -> None:
    torch = _torch()
    dt = {"float32": DataType.Float, "bfloat16": BF, "float16": DataType.Half}[dtype]
    run_and_check(_fd(kind, dt), _inputs(torch, kind, 257, n, getattr(torch, dtype)))


def _longest_held(kind: str, dtype: DataType, torch, tdt) -> int:  # noqa: ANN001
    n = 1024
    while True:
        ok, _ = schedule.can_schedule(_fd(kind, dtype), IP, _inputs(torch, kind, 2, 2 * n, tdt))
        if not ok:
            return n
        n *= 2


@pytest.mark.parametrize("kind", ["softmax", "layer_norm", "rms_norm"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_longest_rows_the_heuristics_accept(kind: str, dtype: str) -> None:
    torch = _torch()
    dt = {"float32": DataType.Float, "bfloat16": BF}[dtype]
    tdt = getattr(torch, dtype)
    n = _longest_held(kind, dt, torch, tdt)
    run_and_check(_fd(kind, dt), _inputs(torch, kind, 64, n, tdt))
    # One element less: odd rows take scalar loads and may no longer be held; whatever
    # scheduler (or segmentation) runs them, the result must match.
    fd = _fd(kind, dt)
    inputs = _inputs(torch, kind, 64, n - 1, tdt)
    assert_outputs_close(fd, fd.execute(inputs), evaluate(fd.fusion, inputs), inputs)


@pytest.mark.parametrize("kind", ["softmax", "layer_norm", "rms_norm"])
@pytest.mark.parametrize("n", [65536, 65533])
def test_long_rows_held_in_part(kind: str, n: int) -> None:
    """Rows of 65536 bf16 held in part in shared memory (two blocks an SM, the layout the
    heuristics pick where there are no clusters), their tails reloaded on every pass. A ragged
    length takes scalar accesses, twice the vectors per thread: one block an SM holds it whole
    (what the heuristics pick for it)."""
    torch = _torch()
    fd = _fd(kind, BF)
    inputs = _inputs(torch, kind, 300, n, torch.bfloat16)
    hp = schedule.compute_heuristics(fd.fusion, IP, inputs)
    if n == 65536:
        hp.cluster_size, hp.block_x, hp.grid_x = 1, 512, 300
        hp.persistent_batch_size, hp.reload_batch_size = 16, 3
    assert hp.smem_persistent and (hp.reload_batch_size > 0) == (n == 65536)
    out = fd.manual_execute(inputs, heuristic_params=hp)
    assert_outputs_close(fd, out, evaluate(fd.fusion, inputs), inputs)


@pytest.mark.parametrize("kind", ["softmax", "layer_norm", "rms_norm"])
@pytest.mark.parametrize("n", [131072, 262144, 262143, 524288, 1048576])
def test_long_rows_split_over_clusters(kind: str, n: int) -> None:
    """On an sm_90 GPU the heuristics split rows that one block cannot hold whole over a
    thread-block cluster (each block holds its part, from 524288 bf16 on in part; the
    reductions combine through distributed shared memory). A ragged length takes scalar
    accesses."""
    torch = _torch()
    fd = _fd(kind, BF)
    inputs = _inputs(torch, kind, 200, n, torch.bfloat16)
    if kind == "layer_norm" and n >= 524288:
        # A Welford over a cluster's reloaded parts is refused (kfuse.schedule.
        # persistent_heuristics._smem_layout): the layer norm runs segmented, as its
        # statistics and a pointwise pass.
        with pytest.raises(SchedulerError, match="too long to hold"):
            schedule.compute_heuristics(fd.fusion, IP, inputs)
        assert_outputs_close(fd, fd.execute(inputs), evaluate(fd.fusion, inputs), inputs)
        schedulers = [s.scheduler.value for s in fd.segments(inputs)]
        assert len(schedulers) > 1 and not {"inner_persistent", "expr_eval"} & set(schedulers)
        return
    hp = schedule.compute_heuristics(fd.fusion, IP, inputs)
    assert hp.cluster_size > 1 and (hp.reload_batch_size > 0) == (n >= 524288)
    assert hp.grid_x % hp.cluster_size == 0
    run_and_check(fd, inputs)
    # The cluster's combine is a fixed tree: the same bits every run.
    again = fd.execute(inputs)
    assert torch.equal(again[0], run_and_check(fd, inputs)[0])


@pytest.mark.parametrize("cluster", [2, 4])
@pytest.mark.parametrize("in_smem", [False, True])
def test_pinned_cluster_layouts(cluster: int, in_smem: bool) -> None:
    """Any row may be split over a cluster by hand, held in registers or in shared memory:
    a layer norm with its statistics (row outputs, written once per cluster), and the
    tutorial's var_mean layer norm (a Welford state combined across the cluster)."""
    torch = _torch()
    x = torch.randn(300, 4097, device="cuda")
    w, b = torch.randn(4097, device="cuda"), torch.randn(4097, device="cuda")
    tutorial = var_mean_normalization()
    for fd, inputs in [(layer_norm_fd(DataType.Float, stats=True), [x, w, b]), (tutorial, [x])]:
        hp = schedule.compute_heuristics(fd.fusion, IP, inputs)
        hp.cluster_size, hp.smem_persistent, hp.block_y = cluster, in_smem, 1
        hp.block_x, hp.grid_x = 128, 300 * cluster
        hp.persistent_batch_size = -(-4097 // (128 * cluster))  # one element per vector
        hp.vectorize_reduction, hp.reload_batch_size = 1, 0
        out = fd.manual_execute(inputs, heuristic_params=hp)
        assert_outputs_close(fd, out, evaluate(fd.fusion, inputs), inputs)


def test_dynamic_shared_memory_of_exactly_48_kb() -> None:
    """48 KB of held rows next to the static shared memory of the block reduction exceed the
    default dynamic limit (48 KB less the static part): the launch must raise the limit."""
    torch = _torch()
    fd = softmax_fd(BF)
    x = torch.randn(64, 32768, device="cuda").to(torch.bfloat16)
    hp = schedule.compute_heuristics(fd.fusion, IP, [x])
    hp.block_x, hp.block_y, hp.smem_persistent = 256, 1, True
    hp.persistent_batch_size, hp.reload_batch_size = 16, 4  # 12 * 256 * 16 B = 48 KB held
    out = fd.manual_execute([x], heuristic_params=hp)
    assert fd._executor_cache.last_compiled.launches[0].shared_mem == 48 * 1024
    torch.testing.assert_close(out[0].float(), torch.softmax(x.float(), -1), atol=1e-2, rtol=1e-2)


def test_layer_norm_statistics_and_log_softmax() -> None:
    torch = _torch()
    x = torch.randn(512, 768, device="cuda", dtype=torch.bfloat16)
    w, b = torch.randn(768, device="cuda"), torch.randn(768, device="cuda")
    run_and_check(layer_norm_fd(DataType.Float, stats=True), [x.float(), w, b])
    run_and_check(softmax_fd(BF, log=True), [x])


def test_cupy_inputs() -> None:
    cupy = pytest.importorskip("cupy")
    x = cupy.random.standard_normal((300, 1000)).astype(cupy.float32)
    run_and_check(softmax_fd(DataType.Float), [x])


def test_tutorial_layer_norm_with_manual_params_matches_torch() -> None:
    torch = _torch()
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        var, mean = fd.ops.var_mean(x, [1], correction=0, keepdim=True)
        fd.add_output(fd.ops.mul(fd.ops.sub(x, mean), fd.ops.rsqrt(fd.ops.add(var, 1e-5))))
    t = torch.randn(300, 1000, device="cuda")
    expected = torch.nn.functional.layer_norm(t, (1000,), eps=1e-5)
    hp = schedule.compute_heuristics(fd.fusion, IP, [t])
    for edit in (
        {},
        {"block_x": 32, "persistent_batch_size": 8},
        {"vectorize_reduction": 1, "persistent_batch_size": 4 * hp.persistent_batch_size},
        {"block_y": 2},
    ):
        p = hp.copy()
        for k, v in edit.items():
            setattr(p, k, v)
        out = fd.manual_execute([t], heuristic_params=p)
        torch.testing.assert_close(out[0], expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("workload", ["W4", "W5", "W6"])
def test_full_size_workloads(workload: str) -> None:
    torch = _torch()
    kind = {"W4": "softmax", "W5": "rms_norm", "W6": "layer_norm"}[workload]
    inputs = _inputs(torch, kind, 32768, 4096, torch.bfloat16)
    out = fd_out = _fd(kind, BF)
    out = fd_out.execute(inputs)
    x = inputs[0].float()
    if kind == "softmax":
        expected = torch.softmax(x, 1)
    elif kind == "rms_norm":
        expected = x * torch.rsqrt((x * x).mean(1, keepdim=True) + 1e-6) * inputs[1].float()
    else:
        expected = torch.nn.functional.layer_norm(
            x, (4096,), inputs[1].float(), inputs[2].float(), eps=1e-5
        )
    torch.testing.assert_close(out[0].float(), expected, rtol=2e-2, atol=2e-2)

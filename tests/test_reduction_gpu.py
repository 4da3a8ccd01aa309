"""The reduction scheduler on a GPU: torch CUDA tensors and CuPy arrays against the reference,
skewed and full-size (W2/W3) shapes, grid reductions, determinism."""

from __future__ import annotations

import pytest

from gpu_support import requires_gpu
from kfuse import schedule
from kfuse.dtypes import DataType
from kfuse.frontend import FusionDefinition
from kfuse.reference import evaluate
from kfuse.schedule import SchedulerType
from kfuse.testing import assert_outputs_close

pytestmark = [pytest.mark.gpu, requires_gpu]
RED = SchedulerType.reduction


def _torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA")
    return torch


def reduce_fd(
    op: str, dims: list[int], rank: int = 2, dtype: DataType = DataType.Float, keepdim: bool = False
) -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1] * rank, dtype=dtype)
        fd.add_output(getattr(fd.ops, op)(x, dims, keepdim=keepdim))
    return fd


def run_and_check(fd: FusionDefinition, inputs: list, scheduler: SchedulerType = RED) -> list:
    out = fd.execute(inputs)
    assert fd.last_scheduler() is scheduler
    assert_outputs_close(fd, out, evaluate(fd.fusion, inputs), inputs)
    return out


@pytest.mark.parametrize("op", ["sum", "prod", "max", "min", "mean", "var"])
@pytest.mark.parametrize(
    "shape,dims",
    [((33, 1000), [1]), ((1000, 33), [0]), ((4, 64, 129), [1, 2]), ((16, 8, 64), [0, 1])],
)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16", "float64"])
def test_torch_ops_shapes_dtypes(op: str, shape: tuple, dims: list, dtype: str) -> None:
    torch = _torch()
    tdt = getattr(torch, dtype)
    dt = {
        "float32": DataType.Float,
        "bfloat16": DataType.BFloat16,
        "float16": DataType.Half,
        "float64": DataType.Double,
    }[dtype]
    x = torch.randn(shape, device="cuda", dtype=torch.float32)
    if op == "prod":
        x = 1.0 + 0.01 * x
    run_and_check(reduce_fd(op, dims, len(shape), dt), [x.to(tdt)])


@pytest.mark.parametrize("dtype", ["int32", "int64", "bool"])
def test_torch_integer_sums_are_exact(dtype: str) -> None:
    torch = _torch()
    x = torch.randint(-100, 100, (300, 777), device="cuda").to(getattr(torch, dtype))
    dt = {"int32": DataType.Int32, "int64": DataType.Int, "bool": DataType.Bool}[dtype]
    for dims in ([0], [1]):
        out = run_and_check(reduce_fd("sum", dims, dtype=dt), [x])
        assert torch.equal(out[0], x.sum(dims[0]))


def test_cupy_inputs() -> None:
    cupy = pytest.importorskip("cupy")
    x = cupy.random.standard_normal((257, 1031)).astype(cupy.float32)
    for dims in ([0], [1], [0, 1]):
        out = run_and_check(reduce_fd("sum", dims), [x])
        assert isinstance(out[0], cupy.ndarray)


def test_tutorial_exp_sum_with_manual_params_matches_torch() -> None:
    torch = _torch()
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        fd.add_output(fd.ops.exp(fd.ops.sum(x, dims=[1])))
    t = torch.randn(128, 512, device="cuda") * 0.05
    hp = schedule.compute_heuristics(fd.fusion, RED, [t])
    for edit in (
        {},
        {"block_x": 64, "block_y": 4},
        {"vectorize_reduction": 1},
        {"grid_y": 4},
        {"unroll_reduction": 1},
    ):
        p = hp.copy() if hasattr(hp, "copy") else hp
        for k, v in edit.items():
            setattr(p, k, v)
        out = fd.manual_execute([t], heuristic_params=p)
        torch.testing.assert_close(out[0], torch.exp(t.sum(1)), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "shape,dim",
    [
        ((1, 1 << 26), 1),
        ((1 << 26, 1), 0),
        ((7, 100003), 1),
        ((100003, 7), 0),
        ((7, 100003), 0),
        ((100003, 7), 1),
    ],
)
def test_skewed_shapes(shape: tuple, dim: int) -> None:
    torch = _torch()
    x = torch.randn(shape, device="cuda")
    out = run_and_check(reduce_fd("sum", [dim]), [x])
    torch.testing.assert_close(out[0], x.sum(dim), rtol=1e-4, atol=1e-3)
    out = run_and_check(reduce_fd("max", [dim]), [x])
    assert torch.equal(out[0], x.amax(dim))


@pytest.mark.parametrize("dim", [1, 0])
def test_w2_w3_full_size_and_deterministic(dim: int) -> None:
    torch = _torch()
    x = torch.randn(16384, 16384, device="cuda")
    fd = reduce_fd("sum", [dim])
    hp = schedule.compute_heuristics(fd.fusion, RED, [x])
    assert hp.fastest_dim_reduction == (dim == 1)
    first = fd.execute([x])[0]
    expected = x.double().sum(dim)
    torch.testing.assert_close(first.double(), expected, rtol=1e-4, atol=1e-3)
    again = fd.execute([x])[0]
    assert torch.equal(first, again), "grid and block combines have a fixed order"


def test_nan_and_empty_on_gpu() -> None:
    torch = _torch()
    x = torch.randn(64, 300, device="cuda")
    x[5, 7] = float("nan")
    out = run_and_check(reduce_fd("max", [1]), [x])
    assert torch.isnan(out[0][5]) and not torch.isnan(out[0][4])
    empty = torch.empty(5, 0, device="cuda")
    assert (run_and_check(reduce_fd("sum", [1]), [empty])[0] == 0).all()

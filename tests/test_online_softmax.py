"""A softmax's max and sum of exponentials folded into one online accumulator
(kfuse.codegen.softmax_fold): one pass of the reduction scheduler instead of two segments.
Checked on the emulator against the float64 reference over both axes, a grid split, the
special values whose handling the two reductions define (rows of -inf, +inf, NaN), what does
not fold, and that the CUDA source compiles for sm_90."""

from __future__ import annotations

import numpy as np
import pytest

from kfuse import DataType, FusionDefinition, schedule
from kfuse.campaign.property import check_outputs
from kfuse.codegen.reduction_plan import plan_reductions
from kfuse.codegen.softmax_fold import SoftmaxStatsOp
from kfuse.runtime.backends.cuda import compile_to_cubin, nvrtc_options
from kfuse.schedule import SchedulerType

RED = SchedulerType.reduction


def statistics(
    dim: int, dtype: DataType = DataType.Float, expand: bool = False, other: bool = False
) -> FusionDefinition:
    """max(x) and sum(exp(x - max)) over `dim` of a matrix (expand: the broadcast max is
    expanded before the subtraction; other: the exponent reads a second input, y - max(x),
    which is no softmax)."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=dtype)
        xf = fd.ops.cast(x, DataType.Float)
        top = fd.ops.max(xf, [dim])
        spread = fd.ops.broadcast(top, [d == dim for d in range(2)])
        if expand:
            spread = fd.ops.expand(spread, [fd.ops.size(x, 0), fd.ops.size(x, 1)])
        body = xf
        if other:
            body = fd.define_tensor(shape=[-1, -1])
        fd.add_output(top)
        fd.add_output(fd.ops.sum(fd.ops.exp(fd.ops.sub(body, spread)), [dim]))
    return fd


def folded(fd: FusionDefinition) -> bool:
    plan = plan_reductions(fd.fusion, fold_softmax=True)
    return any(isinstance(r, SoftmaxStatsOp) for r in plan.reductions)


def special_rows(shape: tuple[int, int], dim: int, seed: int) -> np.ndarray:
    """Values with whole lines (along the reduced axis) of -inf, lines with a +inf, a NaN, and
    -inf under a finite max."""
    x = (np.random.default_rng(seed).standard_normal(shape) * 4).astype(np.float32)
    line = (lambda k: (slice(None), k)) if dim == 0 else (lambda k: (k, slice(None)))
    x[line(0)] = -np.inf  # max -inf: the sum is NaN (-inf - -inf)
    x[line(1)][3] = np.inf  # max +inf: NaN
    x[line(2)][1] = np.nan
    x[line(3)][::2] = -np.inf  # -inf terms add 0 under a finite max
    return x


@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize("shape", [(64, 48), (300, 7), (7, 1000)])
def test_statistics_in_one_reduction_match_the_reference(dim: int, shape: tuple) -> None:
    fd = statistics(dim)
    x = special_rows(shape, dim, seed=sum(shape) + dim)
    check_outputs(fd, [x])
    assert folded(fd)
    assert fd.last_program().scheduler is RED  # type: ignore[attr-defined]


@pytest.mark.parametrize(("dim", "shape"), [(0, (65536, 8)), (1, (4, 65536))])
def test_a_grid_split_combines_the_partial_statistics(dim: int, shape: tuple) -> None:
    fd = statistics(dim)
    x = special_rows(shape, dim, seed=dim)
    check_outputs(fd, [x])
    (params,) = [str(fd.last_program())]
    assert "grid_y=1," not in params  # the partials of several blocks were combined


def test_bf16_input_and_an_expanded_max() -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    fd = statistics(0, DataType.BFloat16, expand=True)
    x = (np.random.default_rng(3).standard_normal((90, 33)) * 5).astype(ml_dtypes.bfloat16)
    check_outputs(fd, [x])
    assert folded(fd)


def test_what_is_no_softmax_does_not_fold() -> None:
    assert not folded(statistics(1, other=True))
    with FusionDefinition() as fd:  # the exponentials are an output too: no fold
        x = fd.define_tensor(shape=[-1, -1])
        top = fd.ops.max(x, [1])
        e = fd.ops.exp(fd.ops.sub(x, fd.ops.broadcast(top, [False, True])))
        fd.add_output(fd.ops.sum(e, [1]))
        fd.add_output(e)
    assert not folded(fd)
    ok, why = schedule.can_schedule(fd.fusion, RED, [np.ones((4, 8), np.float32)])
    assert not ok and "needs an earlier reduction result" in why


def test_the_folded_kernel_compiles_for_sm90() -> None:
    from kfuse.runtime.info import build_runtime_info
    from kfuse.schedule.reduction_launch import reduction_kernels

    fd = statistics(0)
    x = np.ones((4096, 64), np.float32)
    params = schedule.compute_heuristics(fd.fusion, RED, [x])
    for kernel in reduction_kernels(fd.fusion, build_runtime_info(fd.fusion, [x]), params):
        assert "kf::softmax_update" in kernel.source or "_fin" in kernel.name
        assert (
            compile_to_cubin(kernel.source, kernel.name, "sm_90", nvrtc_options())[:4] == b"\x7fELF"
        )


@pytest.mark.parametrize("dim", [0, 1])
def test_a_log_sum_exp_reads_both_results_in_the_epilogue(dim: int) -> None:
    """max + log(sum(exp(x - max))) as one row output: the epilogue reads the folded
    accumulator's max and sum."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        top = fd.ops.max(x, [dim])
        spread = fd.ops.broadcast(top, [d == dim for d in range(2)])
        total = fd.ops.sum(fd.ops.exp(fd.ops.sub(x, spread)), [dim])
        fd.add_output(fd.ops.add(top, fd.ops.log(total)))
    x = special_rows((120, 90), dim, seed=21 + dim)
    check_outputs(fd, [x])
    assert folded(fd)

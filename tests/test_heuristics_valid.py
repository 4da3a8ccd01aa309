"""The automatic heuristics never produce params their own scheduler rejects: normalization
fusions (forward and backward, as nvFuser writes them) over the model sizes, for emulated
H100, H200 and A100 targets, each segment's params turned into kernels (which validates them
against the layout and the device; nothing is compiled). Small shapes also run on the
emulator against the reference."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np
import pytest

from kfuse.dtypes import DataType
from kfuse.frontend import FusionDefinition
from kfuse.reference import evaluate
from kfuse.testing import assert_outputs_close
from norm_fusions import layer_norm_backward, rms_norm_backward
from outer_norm_fusions import FUSIONS as OUTER_FUSIONS
from planning import gpu_info, kernels_for

# The grids are walked whole for the H100 in the README's command; the H200's and A100's
# walks (seconds each) in CI's extended step.
PROFILES = [
    "h100",
    pytest.param("h200", marks=pytest.mark.extended),
    pytest.param("a100", marks=pytest.mark.extended),
]

HIDDEN = [1, 7, 64, 1000, 1024, 4096, 8192, 16384, 32768, 65536, 262144, 1048576]
ROWS = [1, 3, 16384]


def _forward(kind: str) -> Callable[[DataType], FusionDefinition]:
    def build(dtype: DataType) -> FusionDefinition:
        with FusionDefinition() as fd:
            x = fd.define_tensor(shape=[-1, -1], dtype=dtype)
            if kind in ("softmax", "log_softmax"):
                fd.add_output(getattr(fd.ops, kind)(x, 1))
            else:
                w = fd.define_tensor(shape=[-1], dtype=dtype)
                if kind == "rms_norm":
                    fd.add_output(fd.ops.rms_norm(x, w))
                else:
                    b = fd.define_tensor(shape=[-1], dtype=dtype)
                    fd.add_output(fd.ops.layer_norm(x, w, b))
        return fd

    return build


Shapes = Callable[[int, int], list[tuple[int, ...]]]
FUSIONS: dict[str, tuple[Callable[[DataType], FusionDefinition], Shapes]] = {
    "softmax": (_forward("softmax"), lambda n, h: [(n, h)]),
    "log_softmax": (_forward("log_softmax"), lambda n, h: [(n, h)]),
    "rms_norm": (_forward("rms_norm"), lambda n, h: [(n, h), (h,)]),
    "layer_norm": (_forward("layer_norm"), lambda n, h: [(n, h), (h,), (h,)]),
    # x, rms, grad, weight
    "rms_norm_backward": (rms_norm_backward, lambda n, h: [(n, h), (n, 1), (n, h), (h,)]),
    # x, grad, mean, invstd, weight
    "layer_norm_backward": (
        layer_norm_backward,
        lambda n, h: [(n, h), (n, h), (n,), (n, 1), (h,)],
    ),
}


@pytest.mark.slow  # walks a grid of sizes on three device profiles
@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("name", sorted(FUSIONS))
def test_heuristics_give_params_their_scheduler_accepts(name: str, profile: str) -> None:
    """Every size of the sweep, both dtypes: a sample missed both rejections this found (a
    cluster's block_y, an A100's shared memory), so the grid is walked whole."""
    build, shapes = FUSIONS[name]
    for dtype in (DataType.BFloat16, DataType.Float):
        fd = build(dtype)
        for rows, hidden in itertools.product(ROWS, HIDDEN):
            kernels_for(fd.fusion, gpu_info(fd, shapes(rows, hidden), profile))


@pytest.mark.parametrize("name", sorted(FUSIONS))
@pytest.mark.parametrize(("rows", "hidden"), [(3, 1000), (5, 7)])
def test_small_shapes_run_on_the_emulator(name: str, rows: int, hidden: int) -> None:
    build, shapes = FUSIONS[name]
    fd = build(DataType.Float)
    inputs = [
        np.random.default_rng(k).standard_normal(shape).astype(np.float32) + 2
        for k, shape in enumerate(shapes(rows, hidden))
    ]
    out = fd.execute(inputs)
    assert_outputs_close(fd, out, evaluate(fd.fusion, inputs), inputs)


OUTER_REDUCED = [2, 7, 1000, 4096, 16384, 65536, 1048576]
OUTER_CHANNELS = [1, 3, 64, 1000, 4096, 65536]


@pytest.mark.slow  # walks a grid of sizes on three device profiles
@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("name", sorted(OUTER_FUSIONS))
def test_outer_norm_heuristics_give_params_their_scheduler_accepts(name: str, profile: str) -> None:
    """Outer normalizations (tests/outer_norm_fusions.py) over a grid of column lengths and
    column counts: outer_persistent's params where it holds the columns, each segment's
    where it does not."""
    build, shapes = OUTER_FUSIONS[name]
    for dtype in (DataType.BFloat16, DataType.Float):
        fd = build(dtype)
        for reduced, channels in itertools.product(OUTER_REDUCED, OUTER_CHANNELS):
            if reduced * channels <= 1 << 30:
                kernels_for(fd.fusion, gpu_info(fd, shapes(reduced, channels), profile))


def _outer_reduction(op: str, accumulate: DataType) -> FusionDefinition:
    """A reduction over axis 0 of a bf16 input (vectors of 8 lanes) accumulated in
    `accumulate`, welford's state three values of it."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.BFloat16)
        wide = fd.ops.cast(x, dtype=accumulate)
        if op == "welford":
            _, var_sum, _ = fd.ops.welford(wide, dims=[0])
            fd.add_output(var_sum)
        else:
            fd.add_output(getattr(fd.ops, op)(wide, dims=[0], keepdim=False, dtype=accumulate))
    return fd


@pytest.mark.parametrize("profile", ["h200", "a100"])
@pytest.mark.parametrize(
    ("op", "accumulate"),
    [
        *itertools.product(["sum", "max"], [DataType.Float, DataType.Double, DataType.Int]),
        ("welford", DataType.Float),
        ("welford", DataType.Double),
    ],
)
def test_outer_reduction_heuristics_fit_the_block_combine(
    op: str, accumulate: DataType, profile: str
) -> None:
    """The block combine of an outer reduction holds an accumulator per vector lane of each
    thread: a Welford of doubles read through bf16 vectors of 8 once asked 64 KiB of the
    48 KiB static limit (a GPU campaign's SchedulerError from the automatic heuristics)."""
    fd = _outer_reduction(op, accumulate)
    for reduced, columns in itertools.product([2, 7, 129, 4096, 65536], [8, 64, 1000, 8192]):
        kernels_for(fd.fusion, gpu_info(fd, [(reduced, columns)], profile))

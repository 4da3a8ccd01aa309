"""Short rows lengthened by SPLIT inputs (kfuse.schedule.short_rows.split_short_rows): a batch
norm's normalization of NCHW images of 7 x 7 walks rows of C x H x W, its per-channel
statistics through sub-axes of their own, instead of rows of 49 elements. Checked on the
emulator against the float64 reference (whole vectors, a ragged row end, lanes that read one
element), the layouts the scheduler makes at the model sizes, and that the CUDA source
compiles for sm_90."""

from __future__ import annotations

import numpy as np
import pytest

from kfuse import DataType, FusionDefinition, schedule, switches
from kfuse.campaign.property import check_outputs
from kfuse.codegen.layout import SPLIT, VEC
from kfuse.codegen.pointwise import emit_pointwise, plan_pointwise
from kfuse.runtime.backends.cuda import compile_to_cubin, nvrtc_options
from kfuse.schedule import SchedulerType
from kfuse.schedule.pointwise import PointwiseScheduler, pointwise_layout
from planning import gpu_info


def normalize(dtype: DataType = DataType.Float) -> FusionDefinition:
    """y = x * w[c] + b[c] over NCHW (a batch norm's normalization, statistics folded in)."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1, -1, -1], dtype=dtype)
        w = fd.define_tensor(shape=[-1], dtype=DataType.Float)
        b = fd.define_tensor(shape=[-1], dtype=DataType.Float)
        shape = [1, fd.ops.size(x, 1), 1, 1]
        y = fd.ops.add(
            fd.ops.mul(fd.ops.cast(x, DataType.Float), fd.ops.broadcast_in_dim(w, shape, [1])),
            fd.ops.broadcast_in_dim(b, shape, [1]),
        )
        fd.add_output(fd.ops.cast(y, dtype))
    return fd


def bias_rows() -> FusionDefinition:
    """y = x + bias along the rows: the bias walks the short rows, so nothing is split."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        bias = fd.define_tensor(shape=[-1])
        fd.add_output(
            fd.ops.add(
                x, fd.ops.broadcast_in_dim(bias, [fd.ops.size(x, 0), fd.ops.size(x, 1)], [1])
            )
        )
    return fd


def gpu_layout(fd: FusionDefinition, shapes: list[tuple[int, ...]]) -> tuple:
    """The pointwise plan, layout and heuristics of an emulated H200 call on contiguous
    inputs."""
    info = gpu_info(fd, shapes, "h200")
    plan = plan_pointwise(fd.fusion)
    params = PointwiseScheduler().heuristics(fd.fusion, info)
    return plan, pointwise_layout(plan, info, None, split=True), params


@pytest.mark.parametrize(
    ("shape", "lanes"),
    [
        # whole vectors of 4 floats, each reading at most two statistics ("t": row_split's two)
        ((40, 16, 3, 3), "t"),
        ((5, 3, 7, 7), "t"),  # 735 elements: a ragged end read element by element
        ((5, 6, 2, 2), "u"),  # H x W = 4 = the vector: each vector reads one (uniform)
        ((40, 16, 1, 2), "e"),  # H x W = 2: a vector reads up to three, lane by lane
        ((3, 300, 1, 5), "t"),  # a size-1 axis
    ],
)
def test_normalization_with_split_statistics_matches_the_reference(
    shape: tuple, lanes: str
) -> None:
    fd = normalize()
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal(shape).astype(np.float32)
    w, b = (rng.standard_normal(shape[1]).astype(np.float32) for _ in range(2))
    check_outputs(fd, [x, w, b])
    (launch,) = fd.last_program().launches
    # x read whole, w and b split; b divides by w's sizes (the same sub-axes)
    assert launch.name.endswith(f"_x{lanes}{lanes}_szabb")


def test_bf16_images_of_7_by_7_take_long_vectorized_rows() -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    fd = normalize(DataType.BFloat16)
    rng = np.random.default_rng(9)
    x = rng.standard_normal((34, 24, 7, 7)).astype(ml_dtypes.bfloat16)
    w, b = (rng.standard_normal(24).astype(np.float32) for _ in range(2))
    check_outputs(fd, [x, w, b])


def test_the_model_size_layout_splits_the_statistics_and_vectorizes_x() -> None:
    plan, layout, params = gpu_layout(
        normalize(DataType.BFloat16), [(256, 2048, 7, 7), (2048,), (2048,)]
    )
    assert layout.sizes == (256, 2048 * 49)
    x, w, b = layout.inputs
    assert x.inner_split == () and w.inner_split == b.inner_split == ((2048, 1), (49, 0))
    assert params.vectorization_factor == 8 and params.break_point == 1
    spec = PointwiseScheduler().kernel_spec(plan, layout, params)
    assert spec.input_kinds == (VEC, SPLIT, SPLIT) and spec.output_kinds == (VEC,)
    source, name = emit_pointwise(plan, spec)
    assert compile_to_cubin(source, name, "sm_90", nvrtc_options())[:4] == b"\x7fELF"


def test_long_rows_and_a_bias_along_short_rows_are_not_split() -> None:
    _, long_rows, _ = gpu_layout(normalize(), [(64, 256, 56, 56), (256,), (256,)])
    assert long_rows.sizes == (64, 256, 3136) and not any(op.inner_split for op in long_rows.inputs)
    _, bias, params = gpu_layout(bias_rows(), [(4096, 64), (64,)])
    assert bias.sizes == (4096, 64) and params.break_point == 1
    assert schedule.can_schedule(
        bias_rows().fusion,
        SchedulerType.pointwise,
        [np.ones((4, 64), np.float32), np.ones(64, np.float32)],
    )[0]


@pytest.mark.parametrize(
    ("spatial", "split"), [((56, 56), True), ((28, 28), True), ((32, 32), False), ((32, 64), False)]
)
def test_rows_a_block_leaves_ragged_are_split(
    monkeypatch: pytest.MonkeyPatch, spatial: tuple[int, int], split: bool
) -> None:
    """SPLIT_RAGGED_ROWS (off until measured; switched on here): an NCHW norm's rows of
    56 x 56 = 3136 bf16 elements (392 vectors: two blocks of 128 threads of two vectors leave
    23% of the second idle) merge with C, the statistics walking it through sub-axes, into
    rows no block leaves idle; rows of a power of two are left as they are."""

    monkeypatch.setattr(switches, "SPLIT_RAGGED_ROWS", True)
    hw = spatial[0] * spatial[1]
    plan, layout, params = gpu_layout(
        normalize(DataType.BFloat16), [(64, 256, *spatial), (256,), (256,)]
    )
    if not split:
        assert layout.sizes == (64, 256, hw)
        return
    assert layout.sizes == (64, 256 * hw)
    x, w, b = layout.inputs
    assert x.inner_split == () and w.inner_split == b.inner_split == ((256, 1), (hw, 0))
    assert params.vectorization_factor == 8
    spec = PointwiseScheduler().kernel_spec(plan, layout, params)
    assert spec.input_kinds == (VEC, SPLIT, SPLIT)
    x_small = np.random.default_rng(3).standard_normal((2, 3, *spatial), np.float32)
    w_small = np.random.default_rng(4).standard_normal(3, np.float32)
    b_small = np.random.default_rng(5).standard_normal(3, np.float32)
    fd = normalize()
    check_outputs(fd, [x_small, w_small, b_small])
    assert "_split" in fd.last_program().launches[0].name


def test_two_element_lanes_carry_across_walked_sub_axes() -> None:
    """Statistics per (group, channel) over [N, 3, 4, 6]: the split input walks two sub-axes
    ([3, 4] strides [4, 1]) over an unwalked 6, and vectors of 4 cross from one channel into
    the next, and from the last channel of a group into the next group (the odometer's carry),
    inside the vector."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1, -1, -1])
        w = fd.define_tensor(shape=[-1, -1])
        shape = [1, fd.ops.size(x, 1), fd.ops.size(x, 2), 1]
        fd.add_output(fd.ops.mul(x, fd.ops.broadcast_in_dim(w, shape, [1, 2])))
    rng = np.random.default_rng(11)
    x = rng.standard_normal((50, 3, 4, 6)).astype(np.float32)
    w = rng.standard_normal((3, 4)).astype(np.float32)
    check_outputs(fd, [x, w])
    (launch,) = fd.last_program().launches
    assert launch.name.endswith("_xt")


def test_a_strided_per_channel_input_is_split_too() -> None:
    """The statistics as every other element of a buffer (stride 2): their sub-axis stride is
    2, read through the same odometer."""
    fd = normalize()
    rng = np.random.default_rng(12)
    x = rng.standard_normal((40, 16, 3, 3)).astype(np.float32)
    w = rng.standard_normal(32).astype(np.float32)[::2]
    b = rng.standard_normal(16).astype(np.float32)
    check_outputs(fd, [x, w, b])
    (launch,) = fd.last_program().launches
    assert "_split" in launch.name


def test_split_inputs_share_the_sizes_of_equal_sub_axes_only() -> None:
    """Inputs split over the same sub-axes divide the row index by one input's sizes (one
    decomposition for all); an input over other sub-axes keeps its own; the results are the
    reference's."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1, -1, -1])
        w = fd.define_tensor(shape=[-1])
        b = fd.define_tensor(shape=[-1])
        v = fd.define_tensor(shape=[-1, -1])
        per_channel = [1, fd.ops.size(x, 1), 1, 1]
        per_row = [1, fd.ops.size(x, 1), fd.ops.size(x, 2), 1]
        y = fd.ops.mul(x, fd.ops.broadcast_in_dim(w, per_channel, [1]))
        y = fd.ops.add(y, fd.ops.broadcast_in_dim(b, per_channel, [1]))
        fd.add_output(fd.ops.mul(y, fd.ops.broadcast_in_dim(v, per_row, [1, 2])))
    rng = np.random.default_rng(5)
    x = rng.standard_normal((20, 6, 3, 5)).astype(np.float32)
    w, b = (rng.standard_normal(6).astype(np.float32) for _ in range(2))
    v = rng.standard_normal((6, 3)).astype(np.float32)
    check_outputs(fd, [x, w, b, v])
    (launch,) = fd.last_program().launches
    assert launch.name.endswith("_szabbd")
    source = fd.last_cuda_source()
    assert "in2.size[" not in source and "in3.size[" in source

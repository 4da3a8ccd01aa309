"""kfuse.testing: fusions() respects its parameters, inputs_for() fits the definition,
assert_close applies its documented tolerances."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import strategies as st

from kfuse import schedule
from kfuse.campaign import property as campaign_property
from kfuse.campaign.property import (
    Example,
    ExampleSpace,
    check,
    examples,
    long_rows_elements,
)
from kfuse.dtypes import DataType
from kfuse.errors import KfuseError
from kfuse.frontend import FusionDefinition
from kfuse.ir import ReductionOp, ReshapeOp, TensorView, WelfordOp
from kfuse.schedule import SchedulerType
from kfuse.testing import assert_close, fusions, inputs_for, tolerance
from kfuse.testing.strategies import KINDS

# find() over campaign examples or inputs: what it looks for is a few in a hundred of them;
# the first found will do (shrinking it would compile dozens of kernels more, or draw inputs
# for seconds to make one smaller that shows nothing more).
_SEARCH = settings(
    max_examples=1000,
    database=None,
    phases=[Phase.generate],
    suppress_health_check=list(HealthCheck),
)


def _reductions(fd: FusionDefinition) -> int:
    return sum(isinstance(e, (ReductionOp, WelfordOp)) for e in fd.fusion.exprs)


@given(fusions(kinds={"pointwise"}, max_rank=2, max_inputs=2))
def test_pointwise_fusions_have_no_reductions(fd: FusionDefinition) -> None:
    assert _reductions(fd) == 0
    assert fd.fusion.outputs
    assert len(fd.fusion.tensor_inputs) <= 2
    assert all(v.ndim <= 2 for v in fd.fusion.tensor_inputs)


@given(fusions(kinds={"reduction", "multi_reduction", "normalization"}))
def test_reduction_kinds_reduce(fd: FusionDefinition) -> None:
    assert _reductions(fd) >= 1


@given(fusions(dtypes=(DataType.BFloat16,), ops=("add", "mul", "exp")))
def test_dtype_and_op_restrictions(fd: FusionDefinition) -> None:
    assert all(v.dtype is DataType.BFloat16 for v in fd.fusion.tensor_inputs)
    ops = {getattr(e, "op", None) for e in fd.fusion.exprs} - {None}
    assert ops <= {"add", "mul", "exp", "abs", "tanh"}  # abs/tanh: domain guards


def test_fusions_rejects_bad_parameters() -> None:
    with pytest.raises(ValueError, match="kinds"):
        fusions(kinds={"convolution"})
    with pytest.raises(ValueError, match="unknown ops"):
        fusions(ops=("frobnicate",))


@given(st.data())
def test_inputs_fit_the_definition(data: st.DataObject) -> None:
    fd = data.draw(fusions(kinds={"pointwise", "reduction", "normalization"}))
    framework = data.draw(st.sampled_from(["numpy", "torch"]))
    ins = data.draw(inputs_for(fd, framework=framework))
    shapes = fd.fusion.infer_shapes(ins)  # raises on a mismatch
    for v, a in zip(fd.fusion.inputs, ins, strict=False):
        if isinstance(v, TensorView):
            assert shapes[v] == tuple(a.shape)
            assert math.prod(a.shape) <= 4096
            if framework == "torch":
                assert isinstance(a, torch.Tensor)


@pytest.mark.parametrize("layout", ["misaligned", "stride0", "noncontiguous", "empty", "prime"])
def test_inputs_cover_edge_layouts_and_sizes(layout: str) -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        fd.add_output(x * 2.0)
    checks = {
        "misaligned": lambda a: a.size > 0 and a.__array_interface__["data"][0] % 16 != 0,
        "stride0": lambda a: 0 in a.strides and max(a.shape) > 1,
        "noncontiguous": lambda a: not a.flags.c_contiguous,
        "empty": lambda a: a.size == 0,
        "prime": lambda a: any(n in (7, 13, 31, 127, 257) for n in a.shape),
    }
    # raises if never produced
    find(inputs_for(fd), lambda ins: checks[layout](ins[0]), settings=_SEARCH)


def test_a_long_axis_is_long_and_the_others_shrink_first() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1, -1])
        fd.add_output(fd.ops.sum(x * 2.0, [2]))
    limit = 1 << 15

    @given(inputs_for(fd, max_elements=limit, long_axis=True))
    def fits(ins: list) -> None:
        (a,) = ins
        assert math.prod(max(1, n) for n in a.shape) <= limit
        # The long axis keeps at least 1024 unless the others are all 1 already.
        assert max(a.shape) >= 1024 or math.prod(a.shape) == 0

    fits()
    # Mostly the innermost axis, sometimes another; sizes past the plain draws' 1025.
    long_inputs = inputs_for(fd, max_elements=limit, long_axis=True)
    find(long_inputs, lambda i: i[0].shape[2] > 8192, settings=_SEARCH)
    find(long_inputs, lambda i: i[0].shape[0] > 8192, settings=_SEARCH)


@settings(database=None)
@given(st.data())
def test_normalizations_of_every_floating_dtype_are_well_formed(data: st.DataObject) -> None:
    """Every pattern the normalization kind draws builds for each floating input dtype (a
    float8 promotes with no other type: the patterns cast first), float8 included. The
    profile's examples (30 in the README's command); CI's extended step draws 300."""
    _check_normalization_draw(data)


@pytest.mark.extended
@settings(max_examples=300, database=None)
@given(st.data())
def test_normalizations_of_every_floating_dtype_are_well_formed_at_length(
    data: st.DataObject,
) -> None:
    _check_normalization_draw(data)


@pytest.mark.extended
@settings(max_examples=1500, database=None, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_every_kind_draws_well_formed_definitions_at_the_campaigns_sizes(
    data: st.DataObject,
) -> None:
    """Every kind at the campaign's rank and op count builds: a strategy that draws an
    invalid definition (the view step once sliced a broadcast axis by a symbolic bound) is
    a bug of the campaign itself, which stops it whole."""
    fd = data.draw(fusions(kinds=KINDS, max_rank=4, max_ops=10, aliases=True))
    assert fd.fusion.outputs


def _check_normalization_draw(data: st.DataObject) -> None:
    floating = tuple(d for d in DataType if d.is_floating)
    dtypes = data.draw(st.lists(st.sampled_from(floating), min_size=1, max_size=3, unique=True))
    fd = data.draw(fusions(kinds={"normalization"}, max_rank=4, dtypes=tuple(dtypes)))
    assert fd.fusion.outputs


def test_long_examples_reach_cluster_sized_rows_on_the_emulator_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Long axes go up to 8 times the space's elements, and to 2^18 at least: with the
    emulator's 2^12 alone, no row would be long enough for its H100 heuristics to split it
    over a cluster. One that is runs right. (Every example drawn long here: the search is
    for a long one, and one in LONG_ROWS_ONE_IN left it to chance.)"""
    assert long_rows_elements(1 << 18) == 1 << 21 and long_rows_elements(1 << 12) == 1 << 18
    monkeypatch.setattr(campaign_property, "LONG_ROWS_ONE_IN", 1)
    space = ExampleSpace(
        kinds=("normalization",), framework="numpy", device="cpu", max_elements=4096
    )

    def clustered(ex: Example) -> bool:
        # can_schedule first: segments() of a fusion that takes several compiles them.
        ip = SchedulerType.inner_persistent
        try:
            if not schedule.can_schedule(ex.fd.fusion, ip, ex.inputs)[0]:
                return False
        except KfuseError:
            return False
        if [s.scheduler for s in ex.fd.segments(ex.inputs)] != [ip]:
            return False
        return int(schedule.compute_heuristics(ex.fd.fusion, ip, ex.inputs).cluster_size) > 1

    example = find(examples(space), clustered, settings=_SEARCH)
    check(example)


def _reaches(example: Example, scheduler: str) -> bool:
    try:
        return scheduler in {s.scheduler.value for s in example.fd.segments(example.inputs)}
    except KfuseError:
        return False


def test_the_campaign_draws_transposes() -> None:
    """Outputs in another axis order than their values (or inputs laid out so) make fusions the
    transpose scheduler takes; one found is right on the emulator."""
    space = ExampleSpace(kinds=("pointwise",), framework="numpy", device="cpu", max_elements=4096)
    example = find(examples(space), lambda ex: _reaches(ex, "transpose"), settings=_SEARCH)
    reached: set[str] = set()
    check(example, schedulers=reached)
    assert "transpose" in reached


def test_the_campaign_draws_group_norms_with_per_channel_operands() -> None:
    """Group norms: an input split by a reshape into groups, normalized per group and scaled
    per channel, which one inner persistent kernel takes with row-split loads (kf_rem);
    right on the emulator."""
    space = ExampleSpace(
        kinds=("normalization",), framework="numpy", device="cpu", max_elements=4096
    )

    def row_split_group_norm(ex: Example) -> bool:
        fusion = ex.fd.fusion
        grouped = [  # [N, C, spatial...] split into [N, G, C / G, spatial...]
            array
            for v, array in zip(fusion.inputs, ex.inputs, strict=True)
            if isinstance(v, TensorView) and v.ndim > 2 and v.axes[1].extent is not None
        ]
        per_channel = [v for v in fusion.inputs if isinstance(v, TensorView) and v.ndim == 1]
        if not (grouped and per_channel and any(isinstance(e, ReshapeOp) for e in fusion.exprs)):
            return False
        # Groups of more than one channel, channels of more than one element: the weight
        # varies along part of a group's row.
        shape = grouped[0].shape
        groups = next(e.outputs[0].axes[1].extent for e in fusion.exprs if isinstance(e, ReshapeOp))
        if shape[1] == groups or math.prod(shape[2:]) < 2 or shape[0] == 0:
            return False
        if not _reaches(ex, "inner_persistent"):
            return False
        ex.fd.execute(ex.inputs)
        return "kf_rem" in (ex.fd.last_program().cuda_source() or "")

    example = find(examples(space), row_split_group_norm, settings=_SEARCH)
    reached: set[str] = set()
    check(example, schedulers=reached)
    assert "inner_persistent" in reached


def test_contiguous_declaration_gives_contiguous_inputs() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True)
        fd.add_output(x)

    @given(inputs_for(fd))
    def check(ins: list) -> None:
        (a,) = ins
        assert a.flags.c_contiguous or a.size <= 1 or 1 in a.shape

    check()


def test_assert_close_tolerances_and_special_values() -> None:
    e = np.array([1.0, np.nan, np.inf, -2.0])
    assert_close(e * (1 + 1e-6), e, DataType.Float)
    with pytest.raises(AssertionError, match="not close"):
        assert_close(e * (1 + 1e-3), e, DataType.Float)
    assert_close(e * (1 + 1e-3), e, DataType.BFloat16)
    with pytest.raises(AssertionError):
        assert_close(np.array([1.0, 0.0, np.inf, -2.0]), e, DataType.BFloat16)  # NaN moved
    with pytest.raises(AssertionError):
        assert_close(np.array([1.0, np.nan, -np.inf, -2.0]), e, DataType.BFloat16)
    with pytest.raises(AssertionError, match="differ"):
        assert_close(np.array([1, 2]), np.array([1, 3]), DataType.Int)
    assert tolerance(DataType.Float, 100)[0] == pytest.approx(10 * tolerance(DataType.Float)[0])
    assert_close(torch.ones(3, dtype=torch.bfloat16), np.ones(3), DataType.BFloat16)


@pytest.mark.parametrize(
    "actual, expected, dtype, message",
    [
        (
            np.array(5, np.int32),
            np.array(3, np.int32),
            DataType.Int32,
            r"1 of 1 Int32 .* at \(\): actual 5, expected 3",
        ),
        (np.array(2, np.uint8).view(np.bool_), np.array(True), DataType.Bool, r"at \(\): 2"),
        (np.array(1.5), np.array(2.5), DataType.Float, r"worst at \(\): actual 1.5"),
        (np.array([[1, 2], [3, 4]]), np.array([[1, 2], [3, 5]]), DataType.Int, r"at \(1, 1\)"),
    ],
)
def test_a_mismatch_is_reported_for_outputs_of_any_rank(
    actual: np.ndarray, expected: np.ndarray, dtype: DataType, message: str
) -> None:
    # A 0-d output's mismatch was numpy's ValueError (np.nonzero refuses 0-d arrays), which a
    # campaign counted as a raw error of kfuse's instead of the wrong result it was.
    with pytest.raises(AssertionError, match=message):
        assert_close(actual, expected, dtype)


def test_special_values_may_follow_the_kernels_precision() -> None:
    """Whether a value overflows, underflows or cancels to exactly zero, and so whether inf
    times it is NaN, depends on the precision: where a NaN or infinity is involved, matching
    the reference computed in the kernel's precision passes; nothing else does."""
    golden = np.array([-np.inf, 1.7e40, np.nan, 3.0, 0.0])
    same = np.array([np.nan, np.inf, np.nan, 3.0, 0.0])
    kernel = np.array([np.nan, np.inf, np.nan, 3.0, 0.0])
    with pytest.raises(AssertionError):
        assert_close(kernel, golden, DataType.Float)
    assert_close(kernel, golden, DataType.Float, alternative=same)
    for wrong in (
        [np.nan, np.inf, 1.0, 3.0, 0.0],  # a NaN both references have, lost
        [np.nan, np.inf, np.nan, 3.5, 0.0],  # finite and wrong
        [np.nan, -np.inf, np.nan, 3.0, 0.0],  # an infinity of the wrong sign
        [-np.inf, 1.7e40, np.nan, 3.0, np.nan],
    ):  # a NaN neither has
        with pytest.raises(AssertionError, match="in the kernel's precision"):
            assert_close(np.array(wrong), golden, DataType.Float, alternative=same)
    # Integers: an element where the references disagree may match either.
    assert_close(np.array([0, 5]), np.array([7, 5]), DataType.Int, alternative=np.array([0, 5]))
    with pytest.raises(AssertionError):
        assert_close(np.array([0, 4]), np.array([7, 5]), DataType.Int, alternative=np.array([0, 5]))


def test_inputs_with_an_empty_axis_still_bound_what_is_left() -> None:
    """A [0, 1025, 1023, 1023] input has no elements, but its sum over axis 0 has 1e9: an
    emulator campaign ran out of memory on it. Empty axes count as one."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1, -1, -1])
        fd.add_output(fd.ops.sum(x, [0]))

    @given(inputs_for(fd, framework="torch", max_elements=4096))
    def bounded(ins: list) -> None:
        assert math.prod(max(1, n) for n in ins[0].shape) <= 4096

    bounded()
    empty = find(
        inputs_for(fd, framework="torch", max_elements=4096),
        lambda ins: ins[0].shape[0] == 0 and min(ins[0].shape[1:]) > 8,
        settings=_SEARCH,
    )
    assert math.prod(empty[0].shape[1:]) <= 4096


def test_an_ill_conditioned_result_is_judged_against_the_kernels_precision() -> None:
    """A normalization of nearly equal values: float32's own result is 6e-5 off float64's."""
    golden, same = np.array([-0.23454965]), np.array([-0.23449214])
    with pytest.raises(AssertionError):
        assert_close(np.array([-0.23442695]), golden, DataType.Float)
    assert_close(np.array([-0.23442695]), golden, DataType.Float, alternative=same)
    with pytest.raises(AssertionError):  # more than three times float32's own error
        assert_close(np.array([-0.2343]), golden, DataType.Float, alternative=same)


def _op_names(fd: FusionDefinition) -> set[str]:
    return {type(e).__name__ for e in fd.fusion.exprs}


@given(fusions(kinds={"resize"}, max_rank=3))
def test_resize_fusions_always_resize(fd: FusionDefinition) -> None:
    """Every "resize" fusion holds a cat (with its first part computed in the fusion), a pad
    or a slice: a campaign over every kind draws them as often as any kind."""
    assert _op_names(fd) & {"CatOp", "PadOp", "SliceOp"}


@given(st.data())
def test_indexing_fusions_index_inside_their_axes(data: st.DataObject) -> None:
    """Every "indexing" fusion holds an index op reading its positions from an input (or a
    view of one: embedding_fwd flattens its ids), and the inputs drawn for it (and refilled
    for a later call) hold positions inside the axis they index, so that a campaign meets no
    InputError of its own making."""
    from kfuse.ir.exprs import GatherOp, IndexSelectOp
    from kfuse.testing.inputs import position_source, refill

    fd = data.draw(fusions(kinds={"indexing"}, max_rank=3))
    index_ops = [e for e in fd.fusion.exprs if isinstance(e, (IndexSelectOp, GatherOp))]
    assert index_ops and all(position_source(e.inputs[1]).is_input for e in index_ops)
    inputs = data.draw(inputs_for(fd, framework="numpy"))
    for call in (inputs, refill(fd, inputs, seed=data.draw(st.integers(0, 99)))):
        shapes = fd.fusion.infer_shapes(call)
        for e in index_ops:
            source = position_source(e.inputs[1])
            positions = np.asarray(call[fd.fusion.inputs.index(source)])
            assert positions.size == 0 or (
                positions.min() >= 0 and positions.max() < shapes[e.inputs[0]][e.dim]
            )


@given(st.data())
def test_library_fusions_sort_or_scatter_with_valid_sizes_and_positions(
    data: st.DataObject,
) -> None:
    """Every "library" fusion holds a topk, argsort or scatter; the inputs drawn for it (and
    refilled for a later call) give each topk an axis of at least k and each scatter
    positions inside its axis, so that a campaign meets no InputError of its own making."""
    from kfuse.ir.exprs import ArgsortOp, ScatterOp, TopKOp
    from kfuse.testing.inputs import refill

    fd = data.draw(fusions(kinds={"library"}, max_rank=3))
    library = [e for e in fd.fusion.exprs if isinstance(e, (TopKOp, ArgsortOp, ScatterOp))]
    assert library
    framework = data.draw(st.sampled_from(["numpy", "torch"]))
    inputs = data.draw(inputs_for(fd, framework=framework))
    for call in (inputs, refill(fd, inputs, seed=data.draw(st.integers(0, 99)))):
        shapes = fd.fusion.infer_shapes(call)  # an InputError here fails the test
        for e in library:
            if isinstance(e, ScatterOp):
                positions = np.asarray(call[fd.fusion.inputs.index(e.inputs[1])])
                assert positions.size == 0 or (
                    positions.min() >= 0 and positions.max() < shapes[e.inputs[0]][e.dim]
                )


@given(fusions(kinds={"library"}, max_rank=3))
def test_library_fusions_check_positions_only_where_ties_cannot_show(
    fd: FusionDefinition,
) -> None:
    """Equal values sort in either order and duplicate scatter positions keep either write:
    a topk's or argsort's positions never leave the fusion as they are (only the values they
    select or their sum do), and a scatter of a tensor writes one element a row."""
    from kfuse.ir.exprs import ArgsortOp, GatherOp, ReductionOp, ScatterOp, TopKOp

    outputs = {id(v) for v in fd.fusion.outputs}
    for e in fd.fusion.exprs:
        if isinstance(e, (TopKOp, ArgsortOp)):
            positions = e.outputs[-1]
            assert id(positions) not in outputs
            users = [u for u in fd.fusion.exprs if any(i is positions for i in u.inputs)]
            assert users and all(isinstance(u, (GatherOp, ReductionOp)) for u in users)
        if isinstance(e, ScatterOp) and isinstance(e.inputs[2], TensorView):
            assert e.inputs[1].axes[e.dim].extent == 1


# Runs about 170 examples before one qualifies (a kernel each): CI's extended step. The
# behaviour itself is checked directly by test_pad_cat.py's cat-part tests.
@pytest.mark.extended
def test_the_campaign_finds_a_cat_part_that_another_kernel_reads() -> None:
    """A "resize" example whose cat is written part by part by one kernel and a part of it
    read back by another (the H100 campaign's failure class): the campaign draws it, and
    it is right on the emulator."""
    space = ExampleSpace(kinds=("resize",), framework="numpy", device="cpu", max_elements=4096)

    def part_read_back(ex: Example) -> bool:
        try:
            ex.fd.execute(ex.inputs)
        except KfuseError:
            return False
        program = ex.fd.last_program()
        if type(program).__name__ != "SegmentKernelsProgram" or not program.folded:
            return False
        cats = {e.outputs[0].name for e in ex.fd.fusion.exprs if type(e).__name__ == "CatOp"}
        folded = program.segmented.fusion  # outputs: the parts of the folded cats among them
        read_back = {id(v) for plan in program.segmented.plans for v in plan.inputs}
        return bool(cats & set(program.folded)) and any(id(v) in read_back for v in folded.outputs)

    example = find(examples(space), part_read_back, settings=_SEARCH)
    check(example)

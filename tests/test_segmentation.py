"""Segmentation on the host emulator: which fusions split and how, fd.segments, segmented
execution against kfuse.reference, caching, manual_execute, and library (expr_eval) ops."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from example_budget import examples
from kfuse import schedule
from kfuse.dtypes import DataType
from kfuse.engine.segmenter import Segment
from kfuse.errors import DefinitionError, InputError, SchedulerError
from kfuse.frontend import FusionDefinition
from kfuse.reference import evaluate
from kfuse.schedule import SchedulerType
from kfuse.testing import assert_outputs_close, fusions, inputs_for
from small_fusions import embedding_sum

PW, RED, EE = SchedulerType.pointwise, SchedulerType.reduction, SchedulerType.expr_eval


def rand(*shape: int, seed: int = 0, dtype: type = np.float32) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def run_and_check(fd: FusionDefinition, inputs: list) -> list:
    out = fd.execute(inputs)
    assert_outputs_close(fd, out, evaluate(fd.fusion, inputs), inputs)
    return out


def schedulers(segments: list[Segment]) -> list[SchedulerType]:
    return [s.scheduler for s in segments]


# ---- the catalogue ----
def two_axis_sum() -> FusionDefinition:
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1])
        b = fd.define_tensor(shape=[-1, -1])
        fd.add_output(fd.ops.sum(fd.ops.sum(a + b, -1), -1))
    return fd


def test_sum_of_sum_over_different_axes_gives_two_reduction_segments() -> None:
    fd = two_axis_sum()
    inputs = [rand(2, 5), rand(2, 5, seed=1)]
    assert schedule.find_compatible_schedulers(fd, inputs) == []
    segs = fd.segments(inputs)
    assert schedulers(segs) == [RED, RED]
    assert segs[0].inputs == ("T0", "T1") and segs[0].outputs == ("T3",)
    assert segs[1].inputs == ("T3",) and segs[1].outputs == ("T4",)
    assert "reductions over different axes" in segs[0].reason
    assert "Segment(0, reduction: T0, T1 -> T3, 2 exprs)" == repr(segs[0])
    run_and_check(fd, inputs)
    assert fd.last_scheduler() is SchedulerType.none  # segmented
    assert "__global__" in fd.last_cuda_source()


def test_independent_outputs_of_unrelated_shapes() -> None:
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1])
        b = fd.define_tensor(shape=[-1])
        fd.add_output(fd.ops.relu(a) * 2.0)
        fd.add_output(fd.ops.exp(b))
    inputs = [rand(7), rand(11, seed=1)]
    segs = fd.segments(inputs)
    assert schedulers(segs) == [PW, PW]
    assert [s.outputs for s in segs] == [("T3",), ("T4",)]
    run_and_check(fd, inputs)
    # Same sizes: one pointwise kernel takes both.
    assert schedulers(fd.segments([rand(7), rand(7)])) == [PW]


def test_outputs_that_are_inputs_are_copied() -> None:
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1])
        b = fd.define_tensor(shape=[-1, -1])
        fd.add_output(a)
        fd.add_output(b + 1.0)
        fd.add_output(a)
    inputs = [rand(3), rand(4, 5, seed=1)]
    segs = fd.segments(inputs)
    assert schedulers(segs) == [PW, EE]
    assert "copied" in segs[1].reason
    out = run_and_check(fd, inputs)
    assert out[0] is not inputs[0] and out[2] is not inputs[0] and out[0] is not out[2]
    out[0][0] = 42.0
    assert inputs[0][0] != 42.0


def test_reduction_and_pointwise_over_different_shapes() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        y = fd.define_tensor(shape=[-1, -1, -1])
        fd.add_output(fd.ops.sum(x, [0]))
        fd.add_output(fd.ops.sigmoid(y))
    inputs = [rand(6, 9), rand(2, 3, 4, seed=1)]
    assert sorted(s.value for s in schedulers(fd.segments(inputs))) == ["pointwise", "reduction"]
    run_and_check(fd, inputs)


def test_long_reduction_then_broadcast_use_splits() -> None:
    """x / sum(x) over rows too long for the persistent scheduler."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        fd.add_output(x / fd.ops.sum(x, [1], keepdim=True))
    inputs = [np.abs(rand(2, 2**20)) + 0.5]
    segs = fd.segments(inputs)
    assert schedulers(segs) == [RED, PW]
    assert "inner_persistent rejected" in segs[0].reason
    run_and_check(fd, inputs)
    # Short rows fit one persistent kernel.
    assert schedulers(fd.segments([rand(2, 64)])) == [SchedulerType.inner_persistent]


def test_softmax_over_rows_too_long_to_hold() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        fd.add_output(fd.ops.softmax(x, -1))
    inputs = [rand(2, 2**20)]
    segs = fd.segments(inputs)
    assert len(segs) >= 2 and segs[0].scheduler is RED
    assert set(schedulers(segs)) == {RED, PW}
    run_and_check(fd, inputs)


def test_softmax_over_columns_too_long_to_hold_recomputes_its_exponentials() -> None:
    """Softmax over axis 0 of long columns: the max and the sum of exp(x - max) in one
    reduction (online softmax statistics, kfuse.codegen.softmax_fold), then the normalization;
    each reads x and computes exp(x - max) itself. Before, a pointwise segment wrote
    exp(x - max) at full size in float (4 bytes where x has 2) for the sum and the
    normalization to read back (four segments), and then the max and the sum read x apart
    (three)."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Half)
        fd.add_output(fd.ops.cast(fd.ops.softmax(fd.ops.cast(x, DataType.Float), 0), DataType.Half))
    inputs = [rand(2**17, 3, dtype=np.float16)]
    segs = fd.segments(inputs)
    assert schedulers(segs) == [RED, PW], segs
    assert all("T0" in s.inputs for s in segs)
    # Only the output is written at full size: the other segments write a row of statistics.
    assert segs[-1].outputs == (fd.fusion.outputs[0].name,)
    assert all(o.ndim == 1 for s in segs[:-1] for o in s.fusion.outputs)
    run_and_check(fd, inputs)


@pytest.mark.parametrize("count", [3, 4])
def test_a_value_of_many_inputs_is_computed_again_only_where_that_reads_less(count: int) -> None:
    """v = the sum of `count` float inputs over rows too long to hold, then v / sum(v). Read
    by the reduction and the normalization, v costs 4 + 3 * 4 bytes an element when written
    (its inputs read once, v written and read twice) and 2 * 4 * count when computed again:
    three inputs are read again by both segments, four are not (a segment writes v)."""
    with FusionDefinition() as fd:
        inputs_tv = [fd.define_tensor(shape=[-1, -1]) for _ in range(count)]
        v = inputs_tv[0]
        for t in inputs_tv[1:]:
            v = fd.ops.add(v, t)
        fd.add_output(fd.ops.div(v, fd.ops.sum(v, [1], keepdim=True)))
    inputs = [np.abs(rand(2, 2**20, seed=k)) + 0.5 for k in range(count)]
    names = {t.name for t in fd.fusion.inputs}
    segs = fd.segments(inputs)
    if count == 3:
        assert schedulers(segs) == [RED, PW], segs
        assert all(names <= set(s.inputs) for s in segs)
    else:
        assert schedulers(segs) == [PW, RED, PW], segs
        assert not names & set(segs[-1].inputs)
    run_and_check(fd, inputs)


def channels_last_batch_norm(dtype: DataType) -> FusionDefinition:
    """Statistics over N, H, W of a channels-last input, in float, with weight and bias."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1, -1, -1], dtype=dtype)
        w = fd.define_tensor(shape=[-1], dtype=dtype)
        xf = fd.ops.cast(x, DataType.Float)
        var, mean = fd.ops.var_mean(xf, [0, 1, 2], correction=0, keepdim=True)
        wf = fd.ops.broadcast_in_dim(
            fd.ops.cast(w, DataType.Float), shape=fd.ops.shape(x), broadcast_dims=[3]
        )
        y = fd.ops.mul(fd.ops.mul(fd.ops.sub(xf, mean), fd.ops.rsqrt(var + 1e-5)), wf)
        fd.add_output(fd.ops.cast(y, dtype))
    return fd


def test_casts_of_inputs_are_computed_in_each_segment_not_written_out() -> None:
    """A half batch norm whose columns are too long for outer_persistent to hold (10000
    rows) splits into its statistics and the normalization; both read the half input and
    widen it themselves, so no float copy of it is written between them."""
    fd = channels_last_batch_norm(DataType.Half)
    inputs = [rand(4, 50, 50, 8, dtype=np.float16), rand(8, seed=1, dtype=np.float16)]
    segs = fd.segments(inputs)
    assert schedulers(segs) == [RED, PW]
    assert segs[0].inputs[0] == "T0" and segs[1].inputs[0] == "T0"
    assert any("= cast<Float>(T0)" in e for e in segs[0].exprs)
    assert any("= cast<Float>(T0)" in e for e in segs[1].exprs)
    assert len(segs[0].outputs) == 2  # the statistics only
    run_and_check(fd, inputs)


def test_a_refused_forwarded_cast_falls_back_to_segments_without_forwarding(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Were a scheduler to refuse an expr together with the casts forwarded into it, the
    segmenter segments again without forwarding (the cast then gets a segment of its own)."""
    from kfuse.ir.exprs import CastOp
    from kfuse.schedule.pointwise import PointwiseScheduler
    from kfuse.schedule.types import Rejection

    real_check = PointwiseScheduler.check

    def refuses_casts_with_company(self: PointwiseScheduler, fusion, info) -> None:
        if len(fusion.exprs) > 1 and any(isinstance(e, CastOp) for e in fusion.exprs):
            raise Rejection("refused by the test")
        real_check(self, fusion, info)

    monkeypatch.setattr(PointwiseScheduler, "check", refuses_casts_with_company)
    fd = channels_last_batch_norm(DataType.Half)
    inputs = [rand(4, 50, 50, 8, dtype=np.float16), rand(8, seed=1, dtype=np.float16)]
    segs = fd.segments(inputs)
    assert len(segs) > 2 and not any("= cast<Float>(T0)" in e for s in segs[1:] for e in s.exprs)
    run_and_check(fd, inputs)


def test_symbolic_scalars_and_sizes_reach_segments() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        s = fd.define_scalar(dtype=DataType.Double)
        m = fd.ops.mean(x * s, [1])  # divides by a SizeOp result
        fd.add_output(fd.ops.mean(m, [0]))
        fd.add_output(fd.ops.broadcast_in_dim(m, [fd.ops.size(x, 0), 3], [0]))
    inputs = [rand(4, 10), 1.5]
    segs = fd.segments(inputs)
    assert len(segs) >= 2
    assert any(name.startswith("S") for seg in segs for name in seg.inputs)
    run_and_check(fd, inputs)


def test_segmentation_is_cached_per_signature(monkeypatch: pytest.MonkeyPatch) -> None:
    import kfuse.engine.compiler as compiler

    calls = []
    real = compiler.segment_fusion
    monkeypatch.setattr(compiler, "segment_fusion", lambda *a: calls.append(1) or real(*a))
    fd = two_axis_sum()
    inputs = [rand(2, 5), rand(2, 5, seed=1)]
    run_and_check(fd, inputs)
    run_and_check(fd, [rand(2, 5, seed=2), rand(2, 5, seed=3)])
    fd.segments(inputs)
    assert len(calls) == 1
    run_and_check(fd, [rand(3, 6), rand(3, 6, seed=1)])  # a new signature segments again
    assert len(calls) == 2


def test_manual_execute_on_a_fusion_that_needs_segments_raises() -> None:
    fd = two_axis_sum()
    inputs = [rand(2, 5), rand(2, 5, seed=1)]
    from kfuse._C import ReductionParams

    with pytest.raises(SchedulerError, match="several segments"):
        fd.manual_execute(inputs, ReductionParams("reduction"))
    with pytest.raises(SchedulerError, match="reduction"):
        schedule.compute_heuristics(fd, SchedulerType.reduction, inputs)


def test_single_scheduler_fusions_give_one_segment() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        fd.add_output(fd.ops.relu(x))
    segs = fd.segments([rand(3, 4)])
    assert len(segs) == 1 and segs[0].scheduler is PW and "whole fusion" in segs[0].reason


# ---- library ops ----
def matmul_bias() -> FusionDefinition:
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1])
        b = fd.define_tensor(shape=[-1, -1])
        bias = fd.define_tensor(shape=[-1])
        fd.add_output(fd.ops.matmul(a, b) + bias)
    return fd


def test_matmul_plus_bias_gives_expr_eval_and_pointwise_segments() -> None:
    fd = matmul_bias()
    inputs = [rand(5, 8), rand(8, 3, seed=1), rand(3, seed=2)]
    assert schedule.find_compatible_schedulers(fd, inputs) == []
    ok, why = schedule.can_schedule(fd, SchedulerType.pointwise, inputs)
    assert not ok and "matmul" in why and "expr_eval" in why
    segs = fd.segments(inputs)
    assert schedulers(segs) == [EE, PW]
    out = run_and_check(fd, inputs)
    np.testing.assert_allclose(out[0], inputs[0] @ inputs[1] + inputs[2], rtol=1e-5, atol=1e-5)


def test_matmul_alone_runs_through_expr_eval() -> None:
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1, -1])
        b = fd.define_tensor(shape=[-1, -1])
        fd.add_output(fd.ops.matmul(a, b))
    inputs = [rand(2, 3, 4), rand(4, 5, seed=1)]
    assert schedule.find_compatible_schedulers(fd, inputs) == [EE]
    out = run_and_check(fd, inputs)
    assert fd.last_scheduler() is EE and out[0].shape == (2, 3, 5)
    assert fd.last_cuda_source() is None


@pytest.mark.parametrize("bias", [False, True])
def test_linear_matches_torch(bias: bool) -> None:
    torch = pytest.importorskip("torch")
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1, -1], dtype=DataType.BFloat16)
        w = fd.define_tensor(shape=[-1, -1], dtype=DataType.BFloat16)
        b = fd.define_tensor(shape=[-1], dtype=DataType.BFloat16) if bias else None
        fd.add_output(fd.ops.gelu(fd.ops.linear(x, w, b)))
    g = torch.Generator().manual_seed(0)
    inputs = [
        torch.randn(2, 4, 16, generator=g).bfloat16(),
        torch.randn(16, 16, generator=g).bfloat16(),
    ]
    if bias:
        inputs.append(torch.randn(16, generator=g).bfloat16())
    assert schedulers(fd.segments(inputs)) == [EE, PW]
    out = fd.execute(inputs)
    assert out[0].dtype == torch.bfloat16
    want = torch.nn.functional.gelu(torch.nn.functional.linear(*inputs))
    torch.testing.assert_close(out[0], want, rtol=1.6e-2, atol=1e-2)
    assert_outputs_close(fd, out, evaluate(fd.fusion, inputs), inputs)


def test_matmul_definition_and_input_errors() -> None:
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1])
        b = fd.define_tensor(shape=[-1, -1], dtype=DataType.Int)
        c = fd.define_tensor(shape=[3, 4])
        d = fd.define_tensor(shape=[5, 2])
        with pytest.raises(DefinitionError, match="rank >= 2"):
            fd.ops.matmul(a, c)
        with pytest.raises(DefinitionError, match="floating"):
            fd.ops.matmul(b, c)
        with pytest.raises(DefinitionError, match="columns"):
            fd.ops.matmul(c, d)
        fd.add_output(fd.ops.matmul(c, fd.ops.permute(c, [1, 0])))
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        y = fd.define_tensor(shape=[-1, -1])
        fd.add_output(fd.ops.matmul(x, y))
    with pytest.raises(InputError, match="4 != 5"):
        fd.execute([rand(3, 4), rand(5, 2)])


def test_printed_library_fusion_rebuilds() -> None:
    from kfuse.frontend import FusionDefinition as FD

    fd = matmul_bias()
    namespace: dict = {"FusionDefinition": FD, "DataType": DataType}
    exec(repr(fd), namespace)
    assert namespace["fd"].fusion == fd.fusion
    assert "fd.ops.matmul(T0, T1)" in repr(fd)


def test_reshape_of_another_segments_value_is_a_view_of_it() -> None:
    """A reshape of a value computed with a broadcast operand is no view of an input, so the
    value is a segment's output; that output is contiguous, so the reshape is a view of it,
    folded into the reduction's operands (no segment of its own:
    boundary_views.folded_for_a_kernel)."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        z = fd.define_tensor(shape=[-1])
        y = fd.ops.reshape(fd.ops.add(x, fd.ops.broadcast(z, is_broadcast_dim=[True, False])), [-1])
        fd.add_output(fd.ops.sum(y, dims=[0]))
    inputs = [rand(3, 4), rand(4)]
    assert schedulers(fd.segments(inputs)) == [PW, RED]
    run_and_check(fd, inputs)


def test_reshape_of_a_function_of_one_input_is_a_view_of_it() -> None:
    """reshape(exp(x)) is exp(reshape(x)) in the canonical form: a view of a contiguous x,
    folded into one pointwise kernel; of a transposed x no view, so a segment again."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        y = fd.ops.reshape(fd.ops.exp(x), [-1])
        fd.add_output(y * 2.0)
    inputs = [rand(3, 4)]
    assert schedulers(fd.segments(inputs)) == [PW]
    run_and_check(fd, inputs)
    transposed = [rand(4, 3).T]
    assert schedulers(fd.segments(transposed)) == [EE, PW]
    run_and_check(fd, transposed)


# ---- properties ----
@settings(
    max_examples=examples(10),
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.filter_too_much,
    ],
)
@given(data=st.data())
def test_random_multi_segment_fusions_match_the_reference(data: st.DataObject) -> None:
    fd = data.draw(fusions(kinds={"multi_segment"}, max_ops=4, max_rank=3))
    # The emulator takes NumPy bf16 (float32 storage) only contiguous.
    bf16 = any(v.dtype is DataType.BFloat16 for v in fd.fusion.tensor_inputs)
    inputs = data.draw(inputs_for(fd, max_elements=256, layouts=not bf16))
    run_and_check(fd, inputs)


@settings(
    max_examples=examples(6),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_random_multi_segment_fusions_on_cpu_torch(data: st.DataObject) -> None:
    pytest.importorskip("torch")
    fd = data.draw(fusions(kinds={"multi_segment", "multi_reduction"}, max_ops=3, max_outputs=2))
    inputs = data.draw(inputs_for(fd, framework="torch", max_elements=256))
    run_and_check(fd, inputs)


def test_the_multi_segment_kind_needs_several_segments() -> None:
    seen = []

    @settings(
        max_examples=examples(15),
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(data=st.data())
    def count(data: st.DataObject) -> None:
        fd = data.draw(fusions(kinds={"multi_segment"}, max_ops=3))
        inputs = data.draw(inputs_for(fd, max_elements=64, allow_empty=False))
        seen.append(len(fd.segments(inputs)))

    count()
    assert sum(n > 1 for n in seen) >= len(seen) // 2


def test_a_gather_before_a_reshape_stays_a_kernel() -> None:
    """The gather is a generated kernel (its positions checked on the device, with no wait
    for the GPU), the reshape of its rows a view folded into the reduction: two kernels, where
    a library segment (index_select, reshape, cast) checked the ids on the host each call."""
    import ml_dtypes

    fd = embedding_sum()
    rng = np.random.default_rng(7)
    ids = rng.integers(0, 50, (3, 11))
    table = rng.standard_normal((50, 24)).astype(ml_dtypes.bfloat16)
    inputs = [ids, table, rand(3, 11, 24, seed=8)]
    assert schedulers(fd.segments(inputs)) == [PW, RED]
    run_and_check(fd, inputs)
    gather, reduction = (launch.name for launch in fd.last_program().launches)
    assert gather.startswith("kfuse_pointwise_") and "_ix" in gather  # an indexed read
    assert reduction.startswith("kfuse_inner_")
    ids[1, 4] = 50  # one past the table's rows
    with pytest.raises(InputError, match="outside"):
        fd.execute(inputs)

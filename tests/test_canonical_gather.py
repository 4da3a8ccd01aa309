"""gather(f(x), index) -> f(gather(x, index)) in the canonical form (kfuse.ir.canonical_rules):
a gather after element-wise ops of one tensor reads that tensor, so a library gather no longer
makes f(x) in full (a cross entropy cast its whole bf16 logits to fp32 to read one element a
row), and the values stay the definition's."""

from __future__ import annotations

import numpy as np

from kfuse.dtypes import DataType
from kfuse.frontend import FusionDefinition
from kfuse.ir.canonicalize import canonical_fusion
from kfuse.ir.exprs import CastOp, GatherOp, PadOp, ReshapeOp, SqueezeOp, UnaryOp
from kfuse.reference import evaluate
from kfuse.schedule.types import SchedulerType
from kfuse.testing import assert_outputs_close


def _gather_of(body: str) -> FusionDefinition:
    """take_along_axis(body(x), index) of a [rows, cols] Half x along its columns."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Half)
        y = fd.define_tensor(shape=[-1, -1], dtype=DataType.Half)
        index = fd.define_tensor(shape=[-1, 1], dtype=DataType.Int)
        value = fd.ops.cast(x, DataType.Float)
        if body == "neg":
            value = fd.ops.mul(fd.ops.neg(value), 2.0)
        elif body == "two tensors":
            value = fd.ops.mul(value, fd.ops.cast(y, DataType.Float))
        fd.add_output(fd.ops.take_along_axis(value, index, dim=1))
    return fd


def _inputs(rows: int = 6, cols: int = 40) -> list[np.ndarray]:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((rows, cols)).astype(np.float16)
    x[0, :4] = [np.nan, np.inf, -np.inf, -0.0]
    y = rng.standard_normal((rows, cols)).astype(np.float16)
    index = rng.integers(0, cols, (rows, 1))
    index[0, 0] = 1  # the infinity
    return [x, y, index]


def _gather(fd: FusionDefinition) -> GatherOp:
    form = canonical_fusion(fd.fusion)
    (gather,) = [e for e in form.exprs if isinstance(e, GatherOp)]
    return gather


def test_gather_of_a_cast_reads_the_input() -> None:
    fd = _gather_of("cast")
    gather = _gather(fd)
    form = canonical_fusion(fd.fusion)
    assert gather.inputs[0] is form.inputs[0]
    assert gather.outputs[0].dtype is DataType.Half
    (cast,) = [e for e in form.exprs if isinstance(e, CastOp)]
    assert cast.inputs[0] is gather.outputs[0]  # the cast acts on the gathered elements
    inputs = _inputs()
    out = fd.execute(inputs)
    assert_outputs_close(fd, out, evaluate(fd.fusion, inputs), inputs)


def test_gather_of_a_chain_of_unary_ops_reads_the_input() -> None:
    fd = _gather_of("neg")
    form = canonical_fusion(fd.fusion)
    assert _gather(fd).inputs[0] is form.inputs[0]
    inputs = _inputs()
    expected = evaluate(fd.fusion, inputs)
    np.testing.assert_array_equal(evaluate(form, inputs)[0], expected[0])
    assert_outputs_close(fd, fd.execute(inputs), expected, inputs)


def test_gather_of_two_tensors_stays() -> None:
    """A product of two tensors is not pushed after the gather (both would need gathering)."""
    fd = _gather_of("two tensors")
    form = canonical_fusion(fd.fusion)
    assert _gather(fd).inputs[0] not in form.inputs
    inputs = _inputs()
    assert_outputs_close(fd, fd.execute(inputs), evaluate(fd.fusion, inputs), inputs)


def _cross_entropy_forward() -> FusionDefinition:
    """The forward region Thunder's nvFuser executor writes for F.cross_entropy of bf16 logits
    (cast to float32 first) with ignore_index=-100, mean reduction (here Half logits)."""
    with FusionDefinition() as fd:
        logits = fd.define_tensor(shape=[-1, -1], dtype=DataType.Half)
        target = fd.define_tensor(shape=[-1], dtype=DataType.Int)
        t2 = fd.ops.cast(logits, DataType.Float)
        keep = fd.ops.ne(target, -100)
        safe = fd.ops.where(keep, fd.ops.cast(target, DataType.Float), 0.0)
        rows = fd.ops.size(target, dim=0)
        index = fd.ops.cast(
            fd.ops.expand(fd.ops.broadcast(safe, [False, True]), shape=[rows, -1]), DataType.Int
        )
        picked = fd.ops.reshape(fd.ops.take_along_axis(t2, index, dim=1), new_shape=[rows])
        top = fd.ops.max(t2, dims=[1])
        shifted = fd.ops.sub(t2, fd.ops.expand(fd.ops.broadcast(top, [False, True]), [rows, -1]))
        lse = fd.ops.log(fd.ops.sum(fd.ops.exp(shifted), dims=[1]))
        loss = fd.ops.where(keep, fd.ops.neg(fd.ops.sub(fd.ops.sub(picked, top), lse)), 0.0)
        count = fd.ops.cast(fd.ops.sum(fd.ops.cast(keep, DataType.Int), dims=[0]), DataType.Float)
        fd.add_output(fd.ops.div(fd.ops.sum(loss, dims=[0]), count))
        fd.add_output(top)
        fd.add_output(lse)
    return fd


def test_cross_entropy_forward_gathers_the_half_logits_in_a_kernel() -> None:
    """The gather reads the logits as they are, and with the [rows, 1] -> [rows] reshape a
    squeeze, a pointwise kernel's indexed read takes it: no library segment (a framework call
    on every execute, which keeps the region off the host fast path), no cast of the whole
    logits; the loss is the definition's."""
    fd = _cross_entropy_forward()
    rng = np.random.default_rng(5)
    logits = rng.standard_normal((8, 96)).astype(np.float16)
    target = rng.integers(0, 96, 8)
    target[::3] = -100
    inputs = [logits, target]
    segments = fd.segments(inputs)
    assert SchedulerType.expr_eval not in [s.scheduler for s in segments]
    (gathering,) = [s for s in segments if any("GatherOp" in e for e in s.exprs)]
    assert gathering.scheduler is SchedulerType.pointwise and gathering.fusion is not None
    (gather,) = [e for e in gathering.fusion.exprs if isinstance(e, GatherOp)]
    assert gather.inputs[0] in gathering.fusion.inputs
    assert gather.inputs[0].dtype is DataType.Half
    assert_outputs_close(fd, fd.execute(inputs), evaluate(fd.fusion, inputs), inputs)


def test_reshape_of_a_column_to_a_vector_is_a_squeeze() -> None:
    """reshape([rows, 1] -> [rows]) of a computed value inside a fusion is a squeeze."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, 1], dtype=DataType.Float)
        y = fd.define_tensor(shape=[-1], dtype=DataType.Float)
        rows = fd.ops.size(x, dim=0)
        flat = fd.ops.reshape(fd.ops.exp(x), new_shape=[rows])
        fd.add_output(fd.ops.add(flat, y))
    form = canonical_fusion(fd.fusion)
    assert not any(isinstance(e, ReshapeOp) for e in form.exprs)
    assert any(isinstance(e, SqueezeOp) for e in form.exprs)
    inputs = [np.array([[0.5], [-np.inf], [np.nan]], np.float32), np.ones(3, np.float32)]
    (segment,) = fd.segments(inputs)
    assert segment.scheduler is SchedulerType.pointwise
    assert_outputs_close(fd, fd.execute(inputs), evaluate(fd.fusion, inputs), inputs)


def _nll_of_padded(pad_widths: list[int]) -> FusionDefinition:
    """The forward region Thunder writes for F.nll_loss(F.log_softmax(logits.float()), target,
    ignore_index=-100): the negated log-probabilities padded with one column of zeros, which
    an ignored target's index (the column count) reads."""
    with FusionDefinition() as fd:
        logits = fd.define_tensor(shape=[-1, -1], dtype=DataType.Half)
        target = fd.define_tensor(shape=[-1], dtype=DataType.Int)
        cols = fd.ops.size(logits, dim=1)
        t2 = fd.ops.cast(logits, DataType.Float)
        top = fd.ops.broadcast(fd.ops.max(t2, dims=[1]), [False, True])
        shifted = fd.ops.sub(t2, top)
        lse = fd.ops.log(fd.ops.sum(fd.ops.exp(shifted), dims=[1]))
        logp = fd.ops.sub(shifted, fd.ops.broadcast(lse, [False, True]))
        t18 = fd.ops.broadcast(target, [False, True])
        index = fd.ops.where(fd.ops.ne(t18, -100), t18, cols)
        padded = fd.ops.pad(fd.ops.neg(logp), pad_widths, 0.0)
        picked = fd.ops.take_along_axis(padded, index, dim=1)
        fd.add_output(logp)
        fd.add_output(fd.ops.sum(picked, dims=[0, 1]))
    return fd


def _nll_inputs(rows: int = 9, cols: int = 70) -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    logits = rng.standard_normal((rows, cols)).astype(np.float16)
    target = rng.integers(0, cols, rows)
    target[::4] = -100  # these read the padding
    target[1] = cols - 1  # the last real column
    return [logits, target]


def test_gather_of_a_padded_end_reads_the_unpadded_value() -> None:
    """gather(pad(-logp), index) -> where(index < n, -gather(logp, ...), 0): no pad left, the
    gather reads the log-probabilities that are an output anyway, and no library segment
    makes a padded copy; the values are the definition's (ignored rows read the zeros)."""
    fd = _nll_of_padded([0, 1, 0, 0])
    form = canonical_fusion(fd.fusion)
    assert not any(isinstance(e, PadOp) for e in form.exprs)
    (gather,) = [e for e in form.exprs if isinstance(e, GatherOp)]
    assert gather.inputs[0] is form.outputs[0]
    inputs = _nll_inputs()
    expected = evaluate(fd.fusion, inputs)
    for got, want in zip(evaluate(form, inputs), expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12)
    for segment in fd.segments(inputs):
        assert segment.fusion is not None
        assert not any(
            isinstance(e, (PadOp, UnaryOp))
            for e in segment.fusion.exprs
            if segment.scheduler is SchedulerType.expr_eval
        )
    assert_outputs_close(fd, fd.execute(inputs), expected, inputs)


def test_gather_of_a_pad_of_another_axis_stays() -> None:
    """A pad of an axis the gather does not index (or at its start) is kept as written."""
    fd = _nll_of_padded([1, 0, 0, 0])  # a zero column before the first: indices move
    assert any(isinstance(e, PadOp) for e in canonical_fusion(fd.fusion).exprs)
    inputs = _nll_inputs()
    assert_outputs_close(fd, fd.execute(inputs), evaluate(fd.fusion, inputs), inputs)

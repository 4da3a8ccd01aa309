"""Slices and pads of element-wise work that reads a full (fd.ops.full): the canonical form
moves the slices onto the inputs through the full, which no element's index changes, so
that one kernel computes the pads and slices (Thunder's RoPE backward, where the incoming
gradient is scaled by a full of the loss's scale, was three kernels)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from kfuse import DataType, FusionDefinition
from kfuse.engine.compiler import stage_canonicalize
from kfuse.errors import InputError
from kfuse.ir.exprs import GeneratedOp, SliceOp
from kfuse.reference import evaluate
from kfuse.testing import assert_outputs_close

torch = pytest.importorskip("torch")


def rope_backward(
    batch: int = 2, heads: int = 2, seq: int = 8, dim: int = 8, cuda_loss: bool = False
) -> FusionDefinition:
    """Thunder's RoPE backward as it hands it to nvFuser (shapes given as numbers): the
    gradient times a full, times cos and sin, its halves sliced, rotated and padded back.
    `cuda_loss`: the loss's gradient a 0-d tensor expanded to the gradient's shape instead
    of a scalar filling a full, as it comes from a loss on a GPU."""
    half = dim // 2
    shape = [batch, heads, seq, dim]
    with FusionDefinition() as fd:
        if cuda_loss:
            loss_grad = fd.define_tensor(shape=[], dtype=DataType.Float)
        else:
            scale = fd.define_scalar(None, dtype=DataType.Float)
        grad = fd.define_tensor(shape=shape, dtype=DataType.Float)
        cos = fd.define_tensor(shape=[seq, dim], dtype=DataType.BFloat16)
        sin = fd.define_tensor(shape=[seq, dim], dtype=DataType.BFloat16)
        if cuda_loss:
            loss = fd.ops.broadcast_in_dim(loss_grad, shape=shape, broadcast_dims=[])
        else:
            loss = fd.ops.full(shape=shape, fill_value=scale, dtype=DataType.Float)
        g = fd.ops.mul(grad, loss)

        def widened(t: Any) -> Any:
            b = fd.ops.broadcast(t, is_broadcast_dim=[True, True, False, False])
            return fd.ops.cast(fd.ops.expand(b, shape=[batch, heads, -1, -1]), DataType.Float)

        rotated = fd.ops.cast(fd.ops.mul(widened(sin), g), DataType.BFloat16)
        first = fd.ops.slice(rotated, [0, 0, 0, 0], [batch, heads, seq, half], [1, 1, 1, 1])
        second = fd.ops.slice(rotated, [0, 0, 0, half], [batch, heads, seq, dim], [1, 1, 1, 1])
        right = fd.ops.pad(second, [0, half, 0, 0, 0, 0, 0, 0], 0.0)
        negated = fd.ops.cast(fd.ops.neg(fd.ops.cast(first, DataType.Float)), DataType.BFloat16)
        left = fd.ops.pad(negated, [half, 0, 0, 0, 0, 0, 0, 0], 0.0)
        total = fd.ops.add(fd.ops.mul(widened(cos), g), fd.ops.cast(right, DataType.Float))
        total = fd.ops.add(total, fd.ops.cast(left, DataType.Float))
        fd.add_output(fd.ops.cast(total, DataType.BFloat16))
    return fd


def rope_inputs(seed: int, batch: int = 2, heads: int = 2, seq: int = 8, dim: int = 8) -> list:
    g = torch.Generator().manual_seed(seed)
    return [
        0.5 + seed,
        torch.randn(batch, heads, seq, dim, generator=g),
        torch.randn(seq, dim, generator=g).bfloat16(),
        torch.randn(seq, dim, generator=g).bfloat16(),
    ]


def test_the_rope_backward_with_a_full_is_one_kernel() -> None:
    fd = rope_backward()
    for seed in (0, 1):
        inputs = rope_inputs(seed)
        assert [s.scheduler.name for s in fd.segments(inputs)] == ["pointwise"]
        out = fd.execute(inputs)
        assert_outputs_close(fd, out, evaluate(fd.fusion, inputs), inputs)
    canonical = stage_canonicalize(fd.fusion)
    # every slice is of an input now, and the full under them holds its one value
    assert all(e.inputs[0].is_input for e in canonical.exprs if isinstance(e, SliceOp))
    fulls = [e for e in canonical.exprs if isinstance(e, GeneratedOp)]
    assert any(all(ax.is_broadcast for ax in e.outputs[0].axes) for e in fulls)


def test_a_slice_of_a_full_itself_keeps_its_shape() -> None:
    """The sliced value itself a full: left as it is (its slice has the slice's shape)."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[4, 6], dtype=DataType.Float)
        full = fd.ops.full(shape=[4, 6], fill_value=2.5, dtype=DataType.Float)
        part = fd.ops.slice(full, [1, 2], [3, 6], [1, 1])
        fd.add_output(fd.ops.add(fd.ops.slice(x, [1, 2], [3, 6], [1, 1]), part))
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    (out,) = fd.execute([x])
    np.testing.assert_array_equal(out, x[1:3, 2:6] + 2.5)


@pytest.mark.parametrize(
    "make",
    [
        # slice(abs(full)) with steps: no operand but the full has the extents
        lambda fd, x: fd.ops.slice(
            fd.ops.abs(fd.ops.full([4, 6], 0.5, DataType.Float)), [2, 1], [4, 6], [2, 2]
        ),
        # the full under another op before it meets x: lerp(x, x, exp(full))
        lambda fd, x: fd.ops.slice(
            fd.ops.lerp(x, x, fd.ops.exp(fd.ops.full([4, 6], 0.25, DataType.Float))),
            [0, 0],
            [4, 6],
            [2, 1],
        ),
    ],
    ids=["only_a_full", "a_full_under_exp"],
)
def test_a_slice_of_work_whose_extents_only_a_full_has_keeps_its_shape(make: Any) -> None:
    """An emulator campaign met slices of abs(full) and of lerp(x, x, exp(full)) made
    (1, 1) and a broadcast clash where the full alone carried the extents: a full is made
    with broadcast axes only where an operand beside it has them (canonical_rules
    ._broadcast_full)."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        fd.add_output(make(fd, x))
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    out = fd.execute([x])
    assert_outputs_close(fd, out, evaluate(fd.fusion, [x]), [x])


def test_a_slice_of_work_on_an_iota_is_not_moved_through_it() -> None:
    """iota's value is its element's index: a slice cannot take it as a full's one value,
    so the slice stays where it is, and the result is right."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[6], dtype=DataType.Float)
        ramp = fd.ops.iota(6, 0.0, 1.0, dtype=DataType.Float)
        fd.add_output(fd.ops.slice(fd.ops.mul(x, ramp), [2], [5], [1]))
    canonical = stage_canonicalize(fd.fusion)
    assert any(isinstance(e, SliceOp) and not e.inputs[0].is_input for e in canonical.exprs), (
        canonical
    )
    x = np.linspace(1, 2, 6, dtype=np.float32)
    (out,) = fd.execute([x])
    np.testing.assert_allclose(out, (x * np.arange(6))[2:5], rtol=1e-6)


@pytest.mark.gpu
def test_the_rope_backward_with_a_full_on_the_gpu() -> None:
    """The one kernel on the GPU at a head size Thunder's models use, fp32 and bf16 inputs."""
    shape = {"batch": 2, "heads": 4, "seq": 256, "dim": 128}
    fd = rope_backward(**shape)
    for seed in (0, 1, 2):
        inputs = [t.cuda() if hasattr(t, "cuda") else t for t in rope_inputs(seed, **shape)]
        out = fd.execute(inputs)
        assert_outputs_close(fd, out, evaluate(fd.fusion, inputs), inputs)
    assert fd.last_scheduler().name == "pointwise"


def test_the_rope_backward_with_a_cuda_loss_gradient_is_one_kernel() -> None:
    """On a GPU the loss's gradient reaches Thunder's RoPE backward as a 0-d tensor
    expanded to the gradient's shape (on the host, a CPU scalar filling a full): the slices
    move through the expand too, dropped beside the gradient, which has its axes."""
    fd = rope_backward(cuda_loss=True)
    inputs = [torch.tensor(0.5), *rope_inputs(0)[1:]]
    assert [s.scheduler.name for s in fd.segments(inputs)] == ["pointwise"]
    out = fd.execute(inputs)
    assert_outputs_close(fd, out, evaluate(fd.fusion, inputs), inputs)


def _expanded_to(cut_first: bool) -> FusionDefinition:
    """x * expand(g, x's sizes) of x [?, ?] and g [1, ?], sliced: the first axis (which the
    expand expands) cut by its start where `cut_first`, else the second (whose size g has
    already, and the expand asks all the same) cut at both ends."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        g = fd.define_tensor(shape=[1, -1], dtype=DataType.Float)
        rows, columns = fd.ops.size(x, 0), fd.ops.size(x, 1)
        y = fd.ops.mul(x, fd.ops.expand(g, shape=[rows, columns]))
        if cut_first:
            fd.add_output(fd.ops.slice(y, [1, 0], [rows, columns]))
        else:
            fd.add_output(fd.ops.slice(y, [0, 1], [rows, fd.ops.sub(columns, 1)]))
    return fd


@pytest.mark.parametrize("cut_first", [True, False], ids=["expanded axis cut", "checked axis cut"])
def test_an_expand_that_asks_the_size_an_axis_has_keeps_its_check(cut_first: bool) -> None:
    """An expand asks a size of an axis its input has already (not broadcast): each call
    checks that the input's size is that one. A slice cutting that axis cannot move past the
    expand (its input would be cut and fail the check: a campaign met it, InputError on a
    valid call), and an expand with such an axis is not dropped beside an operand with its
    extents (the check would go with it: a wider g was read in part, no error)."""
    fd = _expanded_to(cut_first)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    g = np.arange(4, dtype=np.float32).reshape(1, 4)
    (out,) = fd.execute([x, g])
    expected = (x * g)[1:, :] if cut_first else (x * g)[:, 1:3]
    np.testing.assert_array_equal(out, expected)
    wider = np.arange(5, dtype=np.float32).reshape(1, 5)
    with pytest.raises(InputError, match="asked to be"):
        _expanded_to(cut_first).execute([x, wider])

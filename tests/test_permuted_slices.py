"""Slices of permuted views and of library outputs read in place (host emulator).

Thunder writes RoPE on a fused QKV projection as slices of the [b, s, 3h] projection,
reshaped to heads and permuted to [b, heads, s, d], whose halves are then sliced and
concatenated (rotate_half). Each slice of a permute of an input is a view of the input
(kfuse.engine.boundary_views), so the whole rotation is one kernel; before, the halves' slices
and the cat ran as framework copies between four kernels. In its backward, the slices of
sdpfa_bwd's gradients times sin move onto the library's outputs (kfuse.ir.canonical_rules),
where the kernel after the library reads them as views too, and its pads of the negated
half become cats with a full, which the kernel computes.
"""

from __future__ import annotations

import numpy as np
import pytest

from kfuse.dtypes import DataType
from kfuse.engine.program import KernelProgram
from kfuse.frontend import FusionDefinition
from kfuse.ir.canonicalize import canonical_fusion
from kfuse.ir.exprs import ExpandOp, MatmulOp, SliceOp
from kfuse.schedule import SchedulerType
from reference_checks import check, rand

B, S, HEADS, D = 2, 8, 3, 8
H = HEADS * D


def rotated(fd: FusionDefinition, qkv: object, part: int, cos: object, sin: object) -> object:
    """Thunder's RoPE of head-split part `part` of qkv: x * cos + cat(-x2, x1) * sin, with
    x = permute(reshape(slice(qkv))) in bf16, the math in float."""
    x = fd.ops.slice(qkv, [0, 0, part * H], [B, S, (part + 1) * H])
    x = fd.ops.permute(fd.ops.reshape(x, [B, S, HEADS, D]), [0, 2, 1, 3])

    def widened(t: object) -> object:
        t = fd.ops.expand(fd.ops.broadcast(t, [True, True, False, False]), [B, HEADS, -1, -1])
        return fd.ops.cast(t, DataType.Float)

    upper = fd.ops.slice(x, [0, 0, 0, D // 2], [B, HEADS, S, D])
    upper = fd.ops.cast(fd.ops.neg(fd.ops.cast(upper, DataType.Float)), DataType.BFloat16)
    lower = fd.ops.slice(x, [0, 0, 0, 0], [B, HEADS, S, D // 2])
    turned = fd.ops.cast(fd.ops.cat([upper, lower], dim=3), DataType.Float)
    both = fd.ops.add(
        fd.ops.mul(fd.ops.cast(x, DataType.Float), widened(cos)),
        fd.ops.mul(turned, widened(sin)),
    )
    return fd.ops.cast(both, DataType.BFloat16)


def rope_fd(with_v: bool) -> FusionDefinition:
    with FusionDefinition() as fd:
        qkv = fd.define_tensor(shape=[B, S, 3 * H], dtype=DataType.BFloat16)
        cos = fd.define_tensor(shape=[S, D], dtype=DataType.BFloat16)
        sin = fd.define_tensor(shape=[S, D], dtype=DataType.BFloat16)
        fd.add_output(rotated(fd, qkv, 0, cos, sin))
        fd.add_output(rotated(fd, qkv, 1, cos, sin))
        if with_v:
            v = fd.ops.slice(qkv, [0, 0, 2 * H], [B, S, 3 * H])
            fd.add_output(fd.ops.permute(fd.ops.reshape(v, [B, S, HEADS, D]), [0, 2, 1, 3]))
    return fd


def bf16(a: np.ndarray) -> np.ndarray:
    import ml_dtypes

    return a.astype(ml_dtypes.bfloat16)


@pytest.mark.parametrize("with_v", [False, True])
def test_thunders_rope_on_a_fused_projection_is_one_kernel(with_v: bool) -> None:
    fd = rope_fd(with_v)
    qkv, cos, sin = bf16(rand((B, S, 3 * H))), bf16(rand((S, D), 1)), bf16(rand((S, D), 2))
    out = check(fd, [qkv, cos, sin])
    program = fd.last_program()
    assert isinstance(program, KernelProgram) and program.scheduler is SchedulerType.pointwise
    # Spot-check the rotation itself against NumPy: q's first head, first position.
    x = qkv[0, 0, :D].astype(np.float32)
    want = x * cos[0].astype(np.float32) + np.concatenate([-x[D // 2 :], x[: D // 2]]) * sin[
        0
    ].astype(np.float32)
    np.testing.assert_allclose(out[0][0, 0, 0].astype(np.float32), want, rtol=1e-2, atol=1e-2)
    if with_v:
        np.testing.assert_array_equal(
            out[2], qkv[:, :, 2 * H :].reshape(B, S, HEADS, D).swapaxes(1, 2)
        )


def test_rope_of_a_strided_projection_reads_through_its_strides() -> None:
    """The projection itself a view with gaps (every other row of a wider array): the
    slices' pointers and strides compose with the input's, and the result is right."""
    fd = rope_fd(True)
    wide = bf16(rand((B, 2 * S, 3 * H + 4)))
    qkv = wide[:, ::2, 2 : 2 + 3 * H]
    check(fd, [qkv, bf16(rand((S, D), 1)), bf16(rand((S, D), 2))])


def sliced_product_fd(stop_rows: int) -> FusionDefinition:
    """slice(matmul(a, b) * expand(broadcast(w))): rows [0, stop_rows), columns [2, 6)."""
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        b = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        w = fd.define_tensor(shape=[8], dtype=DataType.Float)
        weight = fd.ops.expand(fd.ops.broadcast(w, [True, False]), [6, -1])
        product = fd.ops.mul(fd.ops.exp(fd.ops.matmul(a, b)), weight)
        fd.add_output(fd.ops.slice(product, [0, 2], [stop_rows, 6]))
    return fd


def test_a_slice_moves_onto_a_library_output_through_an_expand() -> None:
    """The slice keeps the expanded axis whole: it is taken of the matmul's output (a view
    the kernel after the matmul reads) and of w, and the program is the matmul and one
    kernel."""
    fd = sliced_product_fd(6)
    a, b, w = rand((6, 5)), rand((5, 8), 1), rand((8,), 2)
    check(fd, [a, b, w])
    canonical = canonical_fusion(fd.fusion)
    sliced = [e.inputs[0].definition for e in canonical.exprs if isinstance(e, SliceOp)]
    assert any(isinstance(d, MatmulOp) for d in sliced)
    assert fd.last_program().schedulers() == [SchedulerType.expr_eval, SchedulerType.pointwise]


def test_a_slice_that_cuts_an_expanded_axis_drops_the_expand() -> None:
    """Rows [0, 4) of an axis expanded to 6, beside exp(matmul), which has that axis: the
    slice is taken of the matmul's output and w is read broadcast, without the expand (whose
    extent would be the slice's); the result is right."""
    fd = sliced_product_fd(4)
    check(fd, [rand((6, 5)), rand((5, 8), 1), rand((8,), 2)])
    canonical = canonical_fusion(fd.fusion)
    sliced = [e.inputs[0].definition for e in canonical.exprs if isinstance(e, SliceOp)]
    assert any(isinstance(d, MatmulOp) for d in sliced)
    assert not any(isinstance(e, ExpandOp) for e in canonical.exprs)


def test_a_slice_of_an_expand_alone_stays_where_it_is() -> None:
    """Nothing beside the expand has the axis it expands: the slice is not moved through it
    (the expand's extent would be the slice's)."""
    with FusionDefinition() as fd:
        w = fd.define_tensor(shape=[8], dtype=DataType.Float)
        weight = fd.ops.expand(fd.ops.broadcast(w, [True, False]), [6, -1])
        fd.add_output(fd.ops.slice(fd.ops.exp(weight), [0, 2], [4, 6]))
    w = rand((8,), 2)
    check(fd, [w])
    canonical = canonical_fusion(fd.fusion)
    assert any(isinstance(e, ExpandOp) for e in canonical.exprs)


def test_a_cat_of_slices_of_a_computed_value_written_into_its_windows() -> None:
    """cat(slice(t) * 3, slice(t) * 3, slice(t)) of t = squeeze(-x) as an output, its parts 4,
    3 and 0 wide: each part's segment reads its slice of t as a view and writes into its
    window of the output, at the output's row stride (a campaign met the parts written at
    their own, folded segments having dropped the window: failure-2956-132)."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1, -1], dtype=DataType.Int32)
        t = fd.ops.squeeze(fd.ops.neg(x), dims=[0])
        rows, cols = fd.ops.size(t, dim=0), fd.ops.size(t, dim=1)
        parts = [
            fd.ops.mul(fd.ops.slice(t, [0, 0], [rows, 4]), 3),
            fd.ops.mul(fd.ops.slice(t, [0, 4], [rows, 8]), 3),
            fd.ops.slice(t, [0, 8], [rows, cols]),
        ]
        fd.add_output(fd.ops.cat(parts, dim=1))
    x = np.arange(64 * 7, dtype=np.int32).reshape(1, 64, 7)
    (out,) = check(fd, [x])
    np.testing.assert_array_equal(out, -3 * x[0])


def rotation_backward_fd() -> FusionDefinition:
    """The RoPE backward's rotate_half: with gs = grad * sin (grad a matmul's output, as
    sdpfa_bwd's gradient is), the gradient of x is grad * cos + pad(gs's upper half, on the
    right) + pad(-(gs's lower half), on the left)."""
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        b = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        cos = fd.define_tensor(shape=[D], dtype=DataType.Float)
        sin = fd.define_tensor(shape=[D], dtype=DataType.Float)
        grad = fd.ops.matmul(a, b)

        def row(t: object) -> object:
            return fd.ops.expand(fd.ops.broadcast(t, [True, False]), [6, -1])

        gs = fd.ops.mul(grad, row(sin))
        upper = fd.ops.slice(gs, [0, D // 2], [6, D])
        lower = fd.ops.neg(fd.ops.slice(gs, [0, 0], [6, D // 2]))
        moved = fd.ops.add(
            fd.ops.pad(upper, [0, D // 2], value=0.0),
            fd.ops.pad(lower, [D // 2, 0], value=0.0),
        )
        fd.add_output(fd.ops.add(fd.ops.mul(grad, row(cos)), moved))
    return fd


def test_rotation_backward_pads_are_cats_in_the_kernel_after_the_library() -> None:
    """Each pad of a computed half becomes a cat of it and a full, which the pointwise
    kernel computes (it reads pads of its inputs only): the program is the matmul and one
    kernel, and the gradient is right."""
    fd = rotation_backward_fd()
    a, b = rand((6, 5)), rand((5, D), 1)
    cos, sin = rand((D,), 2), rand((D,), 3)
    (out,) = check(fd, [a, b, cos, sin])
    assert fd.last_program().schedulers() == [SchedulerType.expr_eval, SchedulerType.pointwise]
    grad = (a.astype(np.float64) @ b).astype(np.float32)
    gs = grad * sin
    half = np.zeros((6, D // 2), np.float32)
    want = grad * cos + np.concatenate([gs[:, D // 2 :], half], axis=1)
    want += np.concatenate([half, -gs[:, : D // 2]], axis=1)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("widths", "kernels"), [([2, 0], 1), ([0, 4], 1), ([2, 3], 2), ([0, 0, 1, 2], 2)]
)
def test_a_pad_of_computed_values_with_a_fill(widths: list[int], kernels: int) -> None:
    """pad(exp(x) * y, widths, -1.5) read by a square: padded on one side of one axis, a cat
    with a full in one kernel; on both sides, or along another axis, as before (the pad a
    kernel of its own). Right either way, NaN and infinities among the inputs included."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        y = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        padded = fd.ops.pad(fd.ops.mul(fd.ops.exp(x), y), widths, value=-1.5)
        fd.add_output(fd.ops.mul(padded, padded))
    x, y = rand((5, 7)), rand((5, 7), 1)
    x[1, 2], x[3, 4], y[0, 0] = np.nan, np.inf, -np.inf
    check(fd, [x, y])
    assert len(fd.segments([x, y])) == kernels


def test_a_gathered_pad_is_left_to_the_gather_rule() -> None:
    """take_along_axis(pad(exp(x), one column after the end), index), as Thunder's nll_loss
    writes it: the gather reads the few elements it needs through the pad
    (kfuse.ir.canonical_gather), so the pad does not become a cat the whole size of x."""
    from kfuse.ir.exprs import CatOp

    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        index = fd.define_tensor(shape=[-1, 1], dtype=DataType.Int)
        padded = fd.ops.pad(fd.ops.exp(x), [0, 1], value=0.0)
        fd.add_output(fd.ops.take_along_axis(padded, index, dim=1))
    x = rand((6, 9))
    index = np.array([[0], [8], [9], [3], [9], [1]], dtype=np.int64)
    (out,) = check(fd, [x, index])
    e = np.exp(x.astype(np.float64))
    want = [e[0, 0], e[1, 8], 0.0, e[3, 3], 0.0, e[5, 1]]
    np.testing.assert_allclose(out[:, 0], want, rtol=1e-6)
    assert not any(isinstance(e, CatOp) for e in canonical_fusion(fd.fusion).exprs)


def test_a_pad_of_a_broadcast_value_stays_a_pad() -> None:
    """pad(exp(w) broadcast over rows) along the columns, read by an add: the padded value
    has a broadcast axis, which a full (a cat's part) would not have, so the pad is left as
    it is, and the result is right."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        w = fd.define_tensor(shape=[-1], dtype=DataType.Float)
        row = fd.ops.broadcast(fd.ops.exp(w), [True, False])
        fd.add_output(fd.ops.add(fd.ops.pad(row, [0, 2], value=1.0), x))
    check(fd, [rand((4, 7)), rand((5,), 1)])


def test_casts_and_slices_of_a_library_output_go_with_the_kernels_after_it() -> None:
    """cast(matmul(a, b)) and casts of slices of the product, read by element-wise work: the
    library segment is the matmul alone (the cast was a framework cast writing the product
    again at twice the size, the slices copies of the library's output), and the kernels
    after it read the product in place."""
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1], dtype=DataType.BFloat16)
        b = fd.define_tensor(shape=[-1, -1], dtype=DataType.BFloat16)
        product = fd.ops.matmul(a, b)
        wide = fd.ops.cast(product, DataType.Float)
        left = fd.ops.cast(fd.ops.slice(product, [0, 0], [6, D // 2]), DataType.Float)
        right = fd.ops.cast(fd.ops.slice(product, [0, D // 2], [6, D]), DataType.Float)
        fd.add_output(fd.ops.mul(wide, wide))
        fd.add_output(fd.ops.sub(left, right))
    inputs = [bf16(rand((6, 5))), bf16(rand((5, D), 1))]
    check(fd, inputs)
    first, *rest = fd.segments(inputs)
    assert first.scheduler is SchedulerType.expr_eval and len(first.exprs) == 1
    assert rest and all(s.scheduler is SchedulerType.pointwise for s in rest)


@pytest.mark.parametrize("dims", [[0, 1, 2], [2], [0, 1]])
def test_a_sum_of_a_cat_is_the_cat_of_its_parts_sums(dims: list[int]) -> None:
    """sum((x * cos + cat(-x2, x1) * sin) * g, dims), the RoPE loss Thunder writes: the
    element-wise work moves into the cat's parts (canonical_rules), and the sum reads the
    parts (summed and added where it sums the cat's axis, a cat of their sums where it
    does not), so no framework cat writes the rotated tensor out first. Right either way."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[4, S, D], dtype=DataType.Float)
        cos = fd.define_tensor(shape=[S, D], dtype=DataType.Float)
        sin = fd.define_tensor(shape=[S, D], dtype=DataType.Float)
        g = fd.define_tensor(shape=[4, S, D], dtype=DataType.Float)
        turned = fd.ops.cat(
            [
                fd.ops.neg(fd.ops.slice(x, [0, 0, D // 2], [4, S, D])),
                fd.ops.slice(x, [0, 0, 0], [4, S, D // 2]),
            ],
            dim=2,
        )
        wide = [True, False, False]
        y = fd.ops.add(
            fd.ops.mul(x, fd.ops.broadcast(cos, wide)),
            fd.ops.mul(turned, fd.ops.broadcast(sin, wide)),
        )
        fd.add_output(fd.ops.sum(fd.ops.mul(y, g), dims=dims))
    inputs = [rand((4, S, D)), rand((S, D), 1), rand((S, D), 2), rand((4, S, D), 3)]
    check(fd, inputs)
    assert SchedulerType.expr_eval not in fd.last_program().schedulers()

"""FusionDefinition: the IR it builds, printing, structural equality and shape inference."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given

from kfuse.dtypes import DataType
from kfuse.errors import InputError
from kfuse.frontend import FusionDefinition
from kfuse.ir import (
    BinaryOp,
    BroadcastOp,
    CastOp,
    ExpandOp,
    ReductionOp,
    SizeOp,
    TensorView,
    WelfordOp,
)
from kfuse.testing import fusions


def rms_norm_fd() -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.BFloat16)
        w = fd.define_tensor(shape=[-1], contiguity=True, dtype=DataType.BFloat16)
        xf = fd.ops.cast(x, DataType.Float)
        ms = fd.ops.sum(fd.ops.mul(xf, xf), dims=[1], keepdim=True)
        y = fd.ops.mul(
            fd.ops.mul(xf, fd.ops.rsqrt(fd.ops.add(fd.ops.div(ms, fd.ops.size(x, 1)), 1e-6))),
            fd.ops.broadcast_in_dim(
                fd.ops.cast(w, DataType.Float), shape=fd.ops.shape(x), broadcast_dims=[1]
            ),
        )
        fd.add_output(fd.ops.cast(y, DataType.BFloat16))
    return fd


def rebuild(fd: FusionDefinition) -> FusionDefinition:
    namespace = {"FusionDefinition": FusionDefinition, "DataType": DataType}
    exec(repr(fd), namespace)
    return namespace["fd"]


def test_issue_example_builds_the_expected_ir() -> None:
    fusion = rms_norm_fd().fusion
    kinds = [type(e).__name__ for e in fusion.exprs]
    assert kinds.count("ReductionOp") == 1 and kinds.count("ExpandOp") == 1
    red = next(e for e in fusion.exprs if isinstance(e, ReductionOp))
    assert (red.op, red.dims, red.dtype) == ("sum", (1,), DataType.Float)
    assert fusion.outputs[0].dtype is DataType.BFloat16
    assert [v.name for v in fusion.inputs] == ["T0", "T1"]
    text = str(fusion)
    assert "rsqrt(" in text and "ReductionOp" in text


def test_repr_is_runnable_and_round_trips() -> None:
    fd = rms_norm_fd()
    text = repr(fd)
    assert text.startswith("def kfuse_fusion(fd : FusionDefinition) -> None :")
    again = rebuild(fd)
    assert again.fusion == fd.fusion
    assert hash(again.fusion) == hash(fd.fusion)
    assert repr(again) == text


@given(fusions(kinds={"pointwise", "reduction", "normalization", "multi_reduction"}))
def test_repr_round_trips_for_random_fusions(fd: FusionDefinition) -> None:
    again = rebuild(fd)
    assert again.fusion == fd.fusion
    assert repr(again) == repr(fd)


def typed_constants_fd() -> FusionDefinition:
    """Constants whose dtypes a bare Python literal would not give back: where's two scalar
    branches decide its output's dtype, and a slice bound keeps its own."""
    with FusionDefinition() as fd:
        c = fd.define_tensor(shape=[-1], dtype=DataType.Bool)
        x = fd.define_tensor(shape=[-1], dtype=DataType.Int32)
        three = fd.define_scalar(3.0, DataType.Float)
        fd.add_output(fd.ops.where(c, three, fd.define_scalar(5.0, DataType.Float)))
        half = fd.define_scalar(-2.0, DataType.Half)
        fd.add_output(fd.ops.where(c, fd.define_scalar(1.5, DataType.Half), half))
        seven = fd.define_scalar(7, DataType.Int32)
        fd.add_output(fd.ops.where(c, seven, seven))
        fd.add_output(fd.ops.slice(x, [fd.define_scalar(1, DataType.Int32)], [fd.ops.size(x, 0)]))
        fd.add_output(fd.ops.add(x, 2))  # the op casts the literal to Int32 itself
    return fd


def test_the_printed_definition_rebuilds_typed_constants() -> None:
    """nvFuser's tests run every printed definition again and compare the outputs' dtypes:
    a Float constant printed as the literal 3.0 comes back as a Double, and so would where's
    output. Such constants are printed as named define_scalars with their dtype."""
    fd = typed_constants_fd()
    text = repr(fd)
    assert "C0 = fd.define_scalar(3.0, dtype=DataType.Float)" in text
    assert "fd.ops.where(T0, C0, C1)" in text
    assert text.count("fd.define_scalar(7, dtype=DataType.Int32)") == 1  # one constant, twice
    assert "fd.ops.add(T1, 2)" in text  # a literal that rebuilds itself stays a literal
    again = rebuild(fd)
    assert again.fusion == fd.fusion
    assert [o.dtype for o in again.fusion.outputs] == [
        DataType.Float,
        DataType.Half,
        DataType.Int32,
        DataType.Int32,
        DataType.Int32,
    ]
    assert repr(again) == text
    # On the host emulator (NumPy inputs), the rebuilt definition computes the same arrays.
    inputs = [np.array([True, False, True, False]), np.arange(4, dtype=np.int32)]
    for want, got in zip(fd.execute(inputs), again.execute(inputs), strict=True):
        assert got.dtype == want.dtype and np.array_equal(got, want)


def test_structural_equality_sees_differences() -> None:
    def make(op: str) -> FusionDefinition:
        with FusionDefinition() as fd:
            x = fd.define_tensor(shape=[-1])
            fd.add_output(getattr(fd.ops, op)(x, 2.0))
        return fd

    assert make("add").fusion == make("add").fusion
    assert make("add").fusion != make("mul").fusion


def test_pointwise_inserts_broadcasts_and_casts() -> None:
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1, -1], dtype=DataType.Half)
        b = fd.define_tensor(shape=[-1], dtype=DataType.Float)
        c = a + b
        fd.add_output(c)
    assert c.dtype is DataType.Float and c.ndim == 3
    add = c.definition
    assert isinstance(add, BinaryOp)
    lhs, rhs = add.inputs
    assert isinstance(lhs.definition, CastOp)
    assert isinstance(rhs.definition, BroadcastOp)
    assert rhs.definition.is_new_axis == (True, True, False)
    assert all(isinstance(v, TensorView) and v.ndim == 3 for v in add.inputs)


def test_python_operators_and_scalars() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], dtype=DataType.Int32)
        s = fd.define_scalar(dtype=DataType.Int)
        outs = [
            x + 1,
            2 * x,
            1 - x,
            x / 2,
            -x,
            abs(x),
            x < s,
            x % 3,
            x**2,
            ~x,
            x & 3,
            1.5 + x,
            2.0 / x,
        ]
        for o in outs:
            fd.add_output(o)
    dtypes = [o.dtype for o in outs]
    assert dtypes[:3] == [DataType.Int32] * 3
    assert dtypes[3] is DataType.Float and dtypes[6] is DataType.Bool
    assert dtypes[11] is DataType.Float and dtypes[12] is DataType.Float
    sub = outs[2].definition
    assert sub.op == "sub" and sub.inputs[0].value == 1  # reflected operand order kept
    assert outs[6].definition.inputs[1].definition is not None  # symbolic scalar cast to Int32


def test_output_may_be_an_input_and_scalar_math_stays_scalar() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        n = fd.ops.mul(fd.ops.size(x, 0), fd.ops.size(x, 1))
        fd.add_output(x)
        fd.add_output(fd.ops.div(fd.ops.sum(x, [0, 1]), n))
    assert fd.fusion.outputs[0] is x
    assert n.ndim == 0 and isinstance(n.definition, BinaryOp)
    shapes = fd.fusion.infer_shapes([np.zeros((3, 5), np.float32)])
    assert shapes[n] == 15


def test_composites_expand_to_primitives() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.BFloat16)
        w = fd.define_tensor(shape=[-1], dtype=DataType.BFloat16)
        fd.add_output(fd.ops.layer_norm(x, w, w))
        fd.add_output(fd.ops.softmax(x, dim=1))
        fd.add_output(fd.ops.var(x, [1]))
    types = {type(e) for e in fd.fusion.exprs}
    assert WelfordOp in types and ReductionOp in types and SizeOp in types
    assert [o.dtype for o in fd.fusion.outputs] == [DataType.BFloat16] * 3


def test_define_tensor_from_sizes_strides_and_arrays() -> None:
    with FusionDefinition() as fd:
        a = fd.define_tensor(sizes=[4, 1, 6], strides=[6, 6, 1])
        b = fd.from_array(np.zeros((5, 3), np.float64).T)
        c = fd.from_array(torch.zeros(2, 8, dtype=torch.bfloat16)[:, ::2])
        fd.add_output(a)
    assert [ax.is_broadcast for ax in a.axes] == [False, True, False]
    assert a.contiguity == (True, None, True) and a.stride_order is None
    assert b.dtype is DataType.Double and b.stride_order == (0, 1)
    assert c.dtype is DataType.BFloat16 and c.contiguity == (True, False)


def test_broadcast_in_dim_with_ints_and_expand() -> None:
    with FusionDefinition() as fd:
        w = fd.define_tensor(shape=[-1])
        y = fd.ops.broadcast_in_dim(w, shape=[4, -1], broadcast_dims=[1])
        fd.add_output(y)
    assert isinstance(y.definition, ExpandOp) and y.axes[0].extent == 4
    assert fd.fusion.infer_shapes([(7,)])[y] == (4, 7)


def test_reshape_permute_squeeze_shapes() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, 1, -1])
        y = fd.ops.reshape(fd.ops.permute(fd.ops.squeeze(x, [1]), [1, 0]), [-1])
        fd.add_output(y)
    assert fd.fusion.infer_shapes([(3, 1, 4)])[y] == (12,)


@pytest.mark.parametrize(
    ("shapes", "fragment"),
    [
        ([(3, 4)], "rank 1"),
        ([(3,), (5,)], "input 0 (T0) axis 0 has size 3 but input 1 (T1) axis 0 has size 5"),
        ([(3,), (3, 2)], "defined as a broadcast axis"),
        ([(3,)], "takes 2 inputs"),
    ],
)
def test_infer_shapes_errors_name_the_input(shapes: list, fragment: str) -> None:
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1])
        b = fd.define_tensor(shape=[-1] if fragment != "defined as a broadcast axis" else [-1, 1])
        fd.add_output(a + b if b.ndim == 1 else b * 2.0)
    if len(shapes) == 2 and len(shapes[0]) == 2:
        pass
    if fragment == "rank 1":
        shapes = [(3, 4), (3,)]
    with pytest.raises(InputError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        fd.fusion.infer_shapes(shapes)


def test_a_floating_reshape_size_is_cast_toward_zero() -> None:
    """nvFuser casts every reshape size to its index type: a Double scalar size (Thunder's
    reshape(-1) computes one as numel * reciprocal(rows)) truncates, given or computed."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1])
        rows = fd.define_scalar(dtype=DataType.Double)
        fd.add_output(fd.ops.reshape(x, [rows, -1]))
        fd.add_output(fd.ops.reshape(x, [fd.define_scalar(3.9), -1]))
    by_rows, by_constant = fd.execute([np.arange(6.0, dtype=np.float32), 2.7])
    assert by_rows.shape == (2, 3) and by_constant.shape == (3, 2)
    np.testing.assert_array_equal(by_rows.ravel(), np.arange(6.0))


def test_a_run_time_float_scalar_cast_to_an_integer_saturates_as_a_tensor_cast_does() -> None:
    """A Double scalar input cast to Int beside the same value's tensor cast: both truncate
    toward zero and saturate at the type's ends (the scalar's cast runs on the host; it
    wrapped modulo 2**64 before, where the kernel's conversion saturates)."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], dtype=DataType.Double)
        s = fd.define_scalar(dtype=DataType.Double)
        zero = fd.ops.mul(fd.ops.cast(x, DataType.Int), 0)
        fd.add_output(fd.ops.add(zero, fd.ops.cast(s, DataType.Int)))
        fd.add_output(fd.ops.cast(x, DataType.Int))
    for value in (-1e20, 1e20, 3.7, -3.7, 2.0**63, -(2.0**63)):
        from_scalar, from_tensor = fd.execute([np.array([value, 1.0]), value])
        assert from_scalar[0] == from_tensor[0], value
    assert from_tensor[0] == -(2**63)
    assert fd.execute([np.array([1e20, 0.0]), 1e20])[0][0] == 2**63 - 1


def test_infer_shapes_reshape_mismatch() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        fd.add_output(fd.ops.reshape(x, [4, 3]))
    assert fd.fusion.infer_shapes([(6, 2)])[fd.fusion.outputs[0]] == (4, 3)
    with pytest.raises(InputError, match="reshape"):
        fd.fusion.infer_shapes([(5, 2)])

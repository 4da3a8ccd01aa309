"""nvFuser's spellings in kfuse's own FusionDefinition, as Lightning Thunder's nvFuser executor
and nvFuser's printed repros write them, run on the host emulator."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from kfuse import DataType, FusionDefinition
from kfuse.dtypes import ALL_DTYPES
from kfuse.errors import DefinitionError, InputError

DECLARED_ONLY = ["UInt64", "Float4_e2m1fn_x2"]


@pytest.mark.parametrize("name", ["Null", *DECLARED_ONLY])
def test_nvfusers_other_dtypes_are_names_of_datatype(name: str) -> None:
    dtype = getattr(DataType, name)
    assert isinstance(dtype, DataType)
    assert repr(dtype) == f"DataType.{name}"
    assert dtype not in ALL_DTYPES


@pytest.mark.parametrize("name", DECLARED_ONLY)
def test_a_tensor_of_a_dtype_kfuse_does_not_compute_names_it(name: str) -> None:
    with FusionDefinition() as fd:
        with pytest.raises(DefinitionError, match=f"DataType.{name}: .* not supported"):
            fd.define_tensor(shape=[-1], dtype=getattr(DataType, name))
        x = fd.define_tensor(shape=[-1])
        with pytest.raises(DefinitionError, match=f"DataType.{name}"):
            fd.ops.cast(x, getattr(DataType, name))
        fd.add_output(x)


def test_complex_arrays_and_numbers_are_complex_values() -> None:
    """The complex dtypes are computed: a complex64 tensor is ComplexFloat, a Python complex
    ComplexDouble, and a complex value in a real dtype a DefinitionError naming it."""
    with FusionDefinition() as fd:
        assert fd.from_pytorch(torch.zeros(2, dtype=torch.complex64)).dtype is DataType.ComplexFloat
        assert fd.define_scalar(1j).dtype is DataType.ComplexDouble
        assert fd.define_scalar(1.0, DataType.ComplexDouble).value == 1 + 0j
        with pytest.raises(DefinitionError, match="complex number"):
            fd.define_scalar(1j, DataType.Double)
        fd.add_output(fd.define_tensor(shape=[-1]))


def test_null_is_the_default_where_a_dtype_is_optional() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Half)
        s = fd.ops.sum(x, [1], False, DataType.Null)
        m = fd.ops.max(x, dims=[0], dtype=DataType.Null)
        c = fd.define_scalar(2, dtype=DataType.Null)
        fd.add_output(s)
        fd.add_output(m)
        fd.add_output(fd.ops.mul(x, c))
    assert (s.dtype, m.dtype, c.dtype) == (DataType.Half, DataType.Half, DataType.Int)
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1])
        with pytest.raises(DefinitionError, match="DataType.Null means no dtype"):
            fd.define_tensor(shape=[-1], dtype=DataType.Null)
        with pytest.raises(DefinitionError, match="DataType.Null"):
            fd.ops.cast(x, DataType.Null)
        fd.add_output(x)


def test_define_scalar_of_a_dtype_alone_is_a_symbolic_input() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], dtype=DataType.Double)
        seed = fd.define_scalar(DataType.Int)
        scale = fd.define_scalar(dtype=DataType.Float)
        one = fd.define_scalar(1, DataType.Int)
        fd.add_output(fd.ops.mul(fd.ops.add(x, fd.ops.add(seed, one)), scale))
    assert [v.dtype for v in fd.inputs[1:]] == [DataType.Int, DataType.Float]
    assert one.is_constant and one.value == 1
    (out,) = fd.execute([np.zeros(3), 4, 0.5])
    np.testing.assert_array_equal(out, [2.5, 2.5, 2.5])
    with FusionDefinition() as fd:
        with pytest.raises(DefinitionError, match="is a dtype and dtype="):
            fd.define_scalar(DataType.Int, DataType.Float)
        fd.add_output(fd.define_tensor(shape=[-1]))


def test_define_vector_takes_a_tuple_of_sizes_at_execute() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        shape = fd.define_vector(2)
        fd.add_output(fd.ops.reshape(x, shape))
    assert len(shape) == 2 and all(s.dtype is DataType.Int and s.is_input for s in shape)
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    (out,) = fd.execute([x, (2, 6)])
    torch.testing.assert_close(out, x.reshape(2, 6))
    (out,) = fd.execute([x, [6, 2]])
    torch.testing.assert_close(out, x.reshape(6, 2))


def test_tensor_view_size_and_shape_as_nvfuser() -> None:
    with FusionDefinition() as fd:
        ids = fd.define_tensor(shape=[-1, -1], dtype=DataType.Int)
        weight = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        # Thunder's embedding of 2-D token ids, as it writes it.
        restore = [ids.size(0), ids.size(1), weight.size(weight.ndim - 1)]
        rows = fd.ops.index_select(weight, fd.ops.reshape(ids, [-1]), 0)
        fd.add_output(fd.ops.reshape(rows, restore))
        shape = weight.shape()
    assert isinstance(shape, list) and len(shape) == 2
    assert all(s.dtype is DataType.Int for s in shape)
    ids_t = torch.tensor([[0, 2], [1, 1], [2, 0]])
    weight_t = torch.randn(3, 5)
    (out,) = fd.execute([ids_t, weight_t])
    torch.testing.assert_close(out, torch.nn.functional.embedding(ids_t, weight_t))


def test_define_tensor_is_cpu() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float,
                             stride_order=[1, 0], is_cpu=False)  # fmt: skip
        c = fd.define_tensor(shape=[], dtype=DataType.Double, is_cpu=True)
        fd.add_output(fd.ops.mul(x, c))
        fd.add_output(fd.ops.broadcast_in_dim(c, x.shape(), []))
    x_t = torch.randn(2, 3)
    for value in (3.0, -1.0, 0.5):  # the later calls take the fast path
        out, full = fd.execute([x_t, torch.tensor(value, dtype=torch.float64)])
        torch.testing.assert_close(out, x_t * value)  # it promotes as a scalar: Float
        torch.testing.assert_close(full, torch.full((2, 3), value, dtype=torch.float64))
    with FusionDefinition() as fd:
        with pytest.raises(DefinitionError, match="is_cpu=True is for 0-dim tensors"):
            fd.define_tensor(shape=[-1], is_cpu=True)
        with pytest.raises(DefinitionError, match="is_cpu must be True or False"):
            fd.define_tensor(shape=[], is_cpu="yes")
        fd.add_output(fd.define_tensor(shape=[-1]))


def test_define_tensor_takes_nvfusers_positional_order() -> None:
    """nvFuser's define_tensor(shape, contiguity, dtype, is_cpu, stride_order), positionally."""
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], [True, True], DataType.Float, False, [0, 1])
        fd.add_output(fd.ops.neg(x))
        with pytest.raises(DefinitionError, match="is_cpu must be True or False"):
            fd.define_tensor([-1, -1], [True, True], DataType.Float, [1, 0])
    assert list(fd.fusion.inputs[0].stride_order) == [0, 1]
    x_t = torch.randn(3, 2).t()  # column-major: stride order [0, 1]
    torch.testing.assert_close(fd.execute([x_t])[0], -x_t)


def test_from_pytorch() -> None:
    a = torch.randn(4, 2, 3).permute(2, 1, 0)  # strides (1, 3, 6)
    with FusionDefinition() as fd:
        t0 = fd.from_pytorch(a)
        t1 = fd.from_pytorch(torch.zeros(2, 3), static_sizes=True)
        s = fd.from_pytorch(torch.tensor(2.0))
        fd.add_output(fd.ops.mul(t0, s))
        fd.add_output(t1)
    assert [ax.extent for ax in t0.axes] == [None, None, None]
    assert t0.stride_order == (0, 1, 2)
    assert [ax.extent for ax in t1.axes] == [2, 3]
    assert not hasattr(s, "axes") and s.dtype is DataType.Float
    out, _ = fd.execute([a, torch.ones(2, 3), torch.tensor(2.0)])
    torch.testing.assert_close(out, a * 2.0)
    with pytest.raises(InputError):
        fd.execute([a, torch.ones(2, 4), torch.tensor(2.0)])  # a static size


def test_reduction_dtype_in_dims_place() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Half)
        total = fd.ops.sum(x, DataType.Double)
        product = fd.ops.prod(x, DataType.Float)
        fd.add_output(total)
        fd.add_output(product)
        with pytest.raises(DefinitionError, match="no keepdim or dtype may follow"):
            fd.ops.sum(x, DataType.Double, True)
    assert (total.dtype, product.dtype) == (DataType.Double, DataType.Float)
    x_t = torch.rand(3, 4, dtype=torch.float16) + 0.5
    total_t, product_t = fd.execute([x_t])
    assert total_t.shape == () and product_t.shape == ()
    torch.testing.assert_close(total_t, x_t.double().sum())
    torch.testing.assert_close(product_t, x_t.float().prod(), rtol=1e-5, atol=0)


def test_gather_and_take_along_axis_take_a_float_index() -> None:
    """Thunder's cross-entropy: take_along_axis at where(target != ignore, target, 0.0)."""
    with FusionDefinition() as fd:
        logits = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        target = fd.define_tensor(shape=[-1], dtype=DataType.Int)
        zero = fd.define_scalar(0, dtype=DataType.Float)
        valid = fd.ops.ne(target, -100)
        safe = fd.ops.where(valid, target, zero)
        assert safe.dtype is DataType.Float
        where = fd.ops.broadcast_in_dim(safe, shape=[target.shape()[-1], 1], broadcast_dims=[0])
        picked = fd.ops.take_along_axis(logits, where, dim=1)
        fd.add_output(fd.ops.reshape(picked, new_shape=[target.shape()[-1]]))
        fd.add_output(fd.ops.gather(logits, fd.ops.add(where, 0.75), 1))  # truncated: as 1.0
    logits_t = torch.randn(4, 5)
    target_t = torch.tensor([3, -100, 0, 4])
    picked_t, gathered_t = fd.execute([logits_t, target_t])
    safe_t = torch.where(target_t != -100, target_t, 0)
    torch.testing.assert_close(picked_t, logits_t[torch.arange(4), safe_t])
    torch.testing.assert_close(gathered_t[:, 0], logits_t[torch.arange(4), safe_t])


def test_execute_accepts_thunders_keywords() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1])
        fd.add_output(fd.ops.neg(x))
    fd._selected_device = None  # Thunder sets it before defining, and reads it back
    x_t = torch.arange(3.0)
    (out,) = fd.execute(
        [x_t],
        device=fd._selected_device,
        save_repro_inputs=False,
        _enable_options=[],
        _disable_options=[],
    )
    torch.testing.assert_close(out, -x_t)
    # nvFuser's option names steer its own compiler: accepted, changing nothing in kfuse.
    (out,) = fd.execute([x_t], _enable_options=["fuse_matmul"], _disable_options=["fma"])
    torch.testing.assert_close(out, -x_t)
    with pytest.raises(InputError, match="'kernel_reuse' is not one of nvFuser's options"):
        fd.execute([x_t], _enable_options=["kernel_reuse"])  # a disable option, not enable
    with pytest.raises(InputError, match="'fuse_matmull' is not one of nvFuser's options"):
        fd.execute([x_t], _enable_options=["fuse_matmull"])
    with pytest.raises(InputError, match="must be a list of strings"):
        fd.execute([x_t], _disable_options="parallel_compile")
    # Thunder passes its unset nv_save_fake_inputs option as None: nvFuser reads it as False.
    (out,) = fd.execute([x_t], device=None, save_repro_inputs=None)
    torch.testing.assert_close(out, -x_t)
    with pytest.raises(InputError, match="save_repro_inputs must be a bool"):
        fd.execute([x_t], save_repro_inputs="yes")
    # Mistakes with no truth value, or a false one, are refused as clearly.
    with pytest.raises(InputError, match="save_repro_inputs must be a bool"):
        fd.execute([x_t], save_repro_inputs=np.ones(3))
    with pytest.raises(InputError, match="save_repro_inputs must be a bool"):
        fd.execute([x_t], save_repro_inputs=0)
    with pytest.raises(InputError, match="_enable_options must be a list of strings"):
        fd.execute([x_t], _enable_options=0)
    with pytest.raises(InputError, match="_disable_options must be a list of strings"):
        fd.execute([x_t], _disable_options=np.array(["fma"]))


@pytest.mark.parametrize("dtype", [DataType.Int, DataType.Int32], ids=lambda d: d.value)
def test_integer_division(dtype: DataType) -> None:
    """nvFuser's test_integer_division: div of integer tensors is torch's
    div(rounding_mode="trunc"), truediv true division; a zero divisor gives 0 (the CPU of the
    emulator would trap) and INT_MIN / -1 wraps to INT_MIN."""
    from kfuse.reference import evaluate

    torch_dtype = torch.int64 if dtype is DataType.Int else torch.int32
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1], dtype=dtype)
        t1 = fd.define_tensor(shape=[-1], dtype=dtype)
        fd.add_output(fd.ops.div(t0, t1))
        fd.add_output(fd.ops.truediv(t0, t1))
        fd.add_output(fd.ops.div(t0, 3))
    low = torch.iinfo(torch_dtype).min
    a = torch.tensor([7, -7, 7, -7, 6, 0, 5, low, low, 9, 1000], dtype=torch_dtype)
    b = torch.tensor([2, 2, -2, -2, 3, 5, 0, -1, 1, -1, 7], dtype=torch_dtype)
    quotient, true_quotient, thirds = fd.execute([a, b])
    nonzero = b != 0
    divides = nonzero & ~((a == low) & (b == -1))
    expected = torch.div(a[divides], b[divides], rounding_mode="trunc")
    assert quotient.dtype == torch_dtype
    torch.testing.assert_close(quotient[divides], expected, rtol=0, atol=0)
    assert quotient[~nonzero].tolist() == [0]
    assert quotient[(a == low) & (b == -1)].tolist() == [low]
    torch.testing.assert_close(true_quotient[nonzero], torch.true_divide(a, b)[nonzero])
    torch.testing.assert_close(thirds, torch.div(a, 3, rounding_mode="trunc"), rtol=0, atol=0)
    for reference, kernel in zip(evaluate(fd.fusion, [a, b]), (quotient, true_quotient, thirds)):
        torch.testing.assert_close(reference.to(kernel.dtype)[nonzero], kernel[nonzero])
    assert evaluate(fd.fusion, [a, b])[0].tolist() == quotient.tolist()


def test_broadcast_in_dim_with_dynamic_shapes() -> None:
    """nvFuser's test_broadcast_in_dim_with_dynamic_shapes (test_high_complexity.py): a shape
    from TensorView.shape() follows the inputs; a torch.Size is a fixed shape."""
    small = [torch.randn(2, 3, 4), torch.randn(4)]
    large = [torch.randn(2, 3, 1024), torch.randn(1024)]

    def define(shape_of: Any) -> FusionDefinition:
        with FusionDefinition() as fd:
            t0 = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True, True, True])
            t1 = fd.define_tensor(shape=[-1], contiguity=[True])
            fd.add_output(fd.ops.add(t0, fd.ops.broadcast_in_dim(t1, shape_of(t0), [2])))
        return fd

    dynamic = define(lambda t0: t0.shape())
    for x, y in (small, large):
        torch.testing.assert_close(dynamic.execute([x, y])[0], x + y)
    for x, y in (small, large):
        size = x.size()
        fixed = define(lambda t0: size)  # noqa: B023 - called before the loop moves on
        torch.testing.assert_close(fixed.execute([x, y])[0], x + y)
    with pytest.raises(InputError):
        define(lambda t0: small[0].size()).execute(large)


# ---- nvFuser's tests/python/direct/test_python_frontend.py, ported (emulator sizes) ----


def test_tensor_ndim() -> None:
    shape = [2] * 12
    new_shape = [*shape[:9], 8]
    x = torch.randn(shape)
    with FusionDefinition() as fd:
        t0 = fd.from_pytorch(x)
        n_shape = fd.define_vector(10)
        fd.add_output(fd.ops.sum(fd.ops.reshape(t0, n_shape), dims=[3]))
    torch.testing.assert_close(fd.execute([x, new_shape])[0], x.reshape(new_shape).sum(3))


def test_execute_with_tuple_and_list() -> None:
    x = torch.randn(2, 3, 4)
    with FusionDefinition() as fd:
        t0 = fd.from_pytorch(x)
        fd.add_output(fd.ops.sum(fd.ops.reshape(t0, fd.define_vector(2)), dims=[0]))
    expected = x.reshape(6, 4).sum(0)
    torch.testing.assert_close(fd.execute([x, [6, 4]])[0], expected)
    torch.testing.assert_close(fd.execute([x, (6, 4)])[0], expected)


def test_prod() -> None:
    x = torch.rand(2, 4, 8) + 0.5
    with FusionDefinition() as fd:
        t0 = fd.from_pytorch(x)
        fd.add_output(fd.ops.prod(t0, DataType.Float))
        fd.add_output(fd.ops.prod(t0, 1, False, DataType.Float))
        fd.add_output(fd.ops.prod(t0, 1, True, DataType.Float))
        fd.add_output(fd.ops.prod(t0, [-1], False, DataType.Float))
    expected = [x.prod(), x.prod(1), x.prod(1, keepdim=True), x.prod(-1)]
    for out, want in zip(fd.execute([x]), expected, strict=True):
        torch.testing.assert_close(out, want, rtol=1e-5, atol=0)


def test_tensor_size_both_args_bcast() -> None:
    a, b = torch.randn(1, 3), torch.randn(2, 1)
    with FusionDefinition() as fd:
        t0, t1 = fd.from_pytorch(a), fd.from_pytorch(b)
        t0_b = fd.ops.broadcast_in_dim(t0, [t1.size(0), t0.size(1)], [0, 1])
        t1_b = fd.ops.broadcast_in_dim(t1, [t1.size(0), t0.size(1)], [0, 1])
        fd.add_output(fd.ops.add(t0_b, t1_b))
    torch.testing.assert_close(fd.execute([a, b])[0], a + b)


def test_cpu_add() -> None:
    """A CPU scalar tensor from from_pytorch, added to a tensor."""
    inputs = [torch.tensor(2.0, dtype=torch.float), torch.randn(3)]
    with FusionDefinition() as fd:
        t0 = fd.from_pytorch(inputs[0])
        s0 = fd.from_pytorch(inputs[1])
        fd.add_output(fd.ops.add(t0, s0))
    torch.testing.assert_close(fd.execute(inputs)[0], inputs[0] + inputs[1])


def test_full_with_cpu_inputs() -> None:
    """A fusion whose only input is a CPU scalar tensor."""
    inputs = [torch.tensor(2.0, dtype=torch.float)]
    with FusionDefinition() as fd:
        tv0 = fd.from_pytorch(inputs[0])
        s0 = fd.define_scalar(3.0)
        tv1 = fd.ops.full(shape=[2, 2], fill_value=s0, dtype=DataType.Float)
        fd.add_output(fd.ops.mul(tv0, tv1))
    # No tensor input names a framework: the output is kfuse's default array for the host.
    (out,) = fd.execute(inputs)
    torch.testing.assert_close(torch.as_tensor(out), torch.full((2, 2), 6.0))

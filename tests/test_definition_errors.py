"""A catalogue of invalid definitions: each raises DefinitionError with a useful message."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from kfuse.dtypes import DataType
from kfuse.errors import DefinitionError
from kfuse.frontend import FusionDefinition


def t2(fd: FusionDefinition, dtype: DataType = DataType.Float, shape: Any = (-1, -1)) -> Any:
    return fd.define_tensor(shape=list(shape), dtype=dtype)


# (id, body(fd), regex the message must match). The body runs inside `with fd:`.
CASES: list[tuple[str, Callable[[FusionDefinition], Any], str]] = [
    ("bitwise_and_float", lambda fd: fd.ops.bitwise_and(t2(fd), t2(fd)), "bitwise_and.*floating"),
    (
        "bitwise_or_float_scalar",
        lambda fd: fd.ops.bitwise_or(t2(fd, DataType.Int), 1.5),
        "bitwise_or.*floating",
    ),
    ("bitwise_not_float", lambda fd: ~t2(fd), "bitwise_not.*floating"),
    ("xor_half", lambda fd: t2(fd, DataType.Half) ^ t2(fd, DataType.Int), "bitwise_xor"),
    ("neg_bool", lambda fd: -t2(fd, DataType.Bool), "neg: Bool"),
    ("sub_bool", lambda fd: t2(fd, DataType.Bool) - t2(fd, DataType.Bool), "sub: Bool"),
    ("cast_unknown_dtype", lambda fd: fd.ops.cast(t2(fd), "float8"), "cast: dtype.*float8"),
    ("cast_not_a_dtype", lambda fd: fd.ops.cast(t2(fd), 3), "cast: dtype"),
    (
        "define_tensor_bad_dtype",
        lambda fd: fd.define_tensor(shape=[-1], dtype="complex"),
        "define_tensor: dtype",
    ),
    (
        "incompatible_static_broadcast",
        lambda fd: t2(fd, shape=(3, -1)) + t2(fd, shape=(4, -1)),
        "incompatible broadcast.*size 3.*size 4",
    ),
    (
        "incompatible_static_rank_aligned",
        lambda fd: fd.define_tensor(shape=[2]) + fd.define_tensor(shape=[5, 3]),
        "incompatible broadcast",
    ),
    ("sum_missing_axis", lambda fd: fd.ops.sum(t2(fd), dims=[2]), "sum: dim 2 is out of range"),
    (
        "max_negative_missing_axis",
        lambda fd: fd.ops.max(t2(fd), dims=[-3]),
        "max: dim -3 is out of range",
    ),
    ("sum_duplicate_dims", lambda fd: fd.ops.sum(t2(fd), dims=[1, -1]), "listed twice"),
    ("sum_no_dims", lambda fd: fd.ops.sum(t2(fd), dims=[]), "no dims"),
    ("sum_bad_dim_type", lambda fd: fd.ops.sum(t2(fd), dims=[0.5]), "not an integer"),
    ("sum_unknown_accumulate_dtype", lambda fd: fd.ops.sum(t2(fd), [0], dtype="fp8"), "sum: dtype"),
    ("mean_of_ints", lambda fd: fd.ops.mean(t2(fd, DataType.Int), [0]), "mean.*floating"),
    ("var_of_bool", lambda fd: fd.ops.var(t2(fd, DataType.Bool), [0]), "var_mean.*floating"),
    ("var_negative_correction", lambda fd: fd.ops.var(t2(fd), [0], correction=-1), "correction"),
    ("softmax_missing_dim", lambda fd: fd.ops.softmax(t2(fd), dim=5), "softmax: dim 5"),
    (
        "layer_norm_too_many_dims",
        lambda fd: fd.ops.layer_norm(t2(fd), normalized_ndim=3),
        "normalized_ndim",
    ),
    ("rms_norm_weight_not_tensor", lambda fd: fd.ops.rms_norm(t2(fd), "w"), "rms_norm: operand 1"),
    ("permute_not_permutation", lambda fd: fd.ops.permute(t2(fd), [0, 0]), "not a permutation"),
    ("permute_wrong_length", lambda fd: fd.ops.permute(t2(fd), [0]), "not a permutation"),
    (
        # A symbolic axis may be squeezed (checked to be 1 per call); a fixed 2 never is.
        "squeeze_size_other_than_one",
        lambda fd: fd.ops.squeeze(t2(fd, shape=(2, -1)), [0]),
        "axis 0 .* has size 2",
    ),
    ("squeeze_missing_axis", lambda fd: fd.ops.squeeze(t2(fd), [4]), "out of range"),
    ("reshape_two_inferred", lambda fd: fd.ops.reshape(t2(fd), [-1, -1]), "at most one"),
    (
        "reshape_static_count",
        lambda fd: fd.ops.reshape(t2(fd, shape=(2, 3)), [4, 2]),
        "cannot reshape",
    ),
    ("reshape_negative", lambda fd: fd.ops.reshape(t2(fd), [-2, 3]), "sizes are >= 0"),
    (
        # (a floating scalar is cast toward zero, as nvFuser's reshape casts to its index type)
        "reshape_bool_scalar",
        lambda fd: fd.ops.reshape(t2(fd), [fd.define_scalar(True), -1]),
        "not an integer",
    ),
    (
        "broadcast_wrong_count",
        lambda fd: fd.ops.broadcast(t2(fd), [True, False]),
        "has 1 False entries",
    ),
    (
        "broadcast_in_dim_dims_length",
        lambda fd: fd.ops.broadcast_in_dim(t2(fd), shape=[2, 3, 4], broadcast_dims=[0]),
        "broadcast_dims",
    ),
    (
        "broadcast_in_dim_out_of_range",
        lambda fd: fd.ops.broadcast_in_dim(
            fd.define_tensor(shape=[-1]), shape=[2, 3], broadcast_dims=[2]
        ),
        "not an axis",
    ),
    (
        "broadcast_in_dim_unsorted",
        lambda fd: fd.ops.broadcast_in_dim(t2(fd), shape=[2, 3, 4], broadcast_dims=[2, 0]),
        "strictly increasing",
    ),
    ("expand_wrong_rank", lambda fd: fd.ops.expand(t2(fd), [3]), "expand: shape has 1"),
    (
        "expand_static_conflict",
        lambda fd: fd.ops.expand(t2(fd, shape=(3, 1)), [4, 5]),
        "cannot expand",
    ),
    (
        "expand_bad_entry",
        lambda fd: fd.ops.expand(t2(fd, shape=(1, -1)), ["x", -1]),
        "shape entry 0",
    ),
    ("size_missing_axis", lambda fd: fd.ops.size(t2(fd), 2), "size: dim 2"),
    (
        "size_of_scalar",
        lambda fd: fd.ops.size(fd.define_scalar(dtype=DataType.Int), 0),
        "expected a tensor",
    ),
    (
        "where_non_bool_condition",
        lambda fd: fd.ops.where(t2(fd), t2(fd), t2(fd)),
        "where: the condition",
    ),
    ("unary_wrong_arity", lambda fd: fd.ops.exp(t2(fd), t2(fd)), "exp takes 1"),
    ("operand_is_a_string", lambda fd: fd.ops.add(t2(fd), "one"), "add: operand 1"),
    ("operand_is_a_list", lambda fd: fd.ops.mul([1.0], t2(fd)), "mul: operand 0"),
    ("operand_is_a_numpy_array", lambda fd: fd.ops.add(t2(fd), np.ones(3)), "add: operand 1"),
    (
        "constant_overflows_int32",
        lambda fd: t2(fd, DataType.Int32) + 2**40,
        "does not fit in Int32",
    ),
    ("gelu_bad_approximate", lambda fd: fd.ops.gelu(t2(fd), approximate="fast"), "approximate"),
    ("define_tensor_bad_shape_entry", lambda fd: fd.define_tensor(shape=[-3]), "shape entry 0"),
    (
        "define_tensor_contiguity_length",
        lambda fd: fd.define_tensor(shape=[-1, -1], contiguity=[True]),
        "contiguity has 1",
    ),
    (
        "define_tensor_bad_stride_order",
        lambda fd: fd.define_tensor(shape=[-1, -1], stride_order=[0, 2]),
        "stride_order",
    ),
    (
        "define_tensor_sizes_without_strides",
        lambda fd: fd.define_tensor(sizes=[2, 3]),
        "sizes and strides",
    ),
    (
        "define_tensor_sizes_strides_mismatch",
        lambda fd: fd.define_tensor(sizes=[2, 3], strides=[1]),
        "2 sizes but 1 strides",
    ),
    ("from_array_not_array", lambda fd: fd.from_array([1, 2, 3]), "from_array"),
    (
        "add_output_scalar",
        lambda fd: fd.add_output(fd.define_scalar(dtype=DataType.Int)),
        "outputs must be tensors",
    ),
    ("add_output_number", lambda fd: fd.add_output(3.0), "outputs must be tensors"),
]


@pytest.mark.parametrize(
    ("body", "pattern"), [(c[1], c[2]) for c in CASES], ids=[c[0] for c in CASES]
)
def test_bad_definition_raises_definition_error(body: Callable, pattern: str) -> None:
    with pytest.raises(DefinitionError, match=pattern):
        with FusionDefinition() as fd:
            body(fd)
            fd.add_output(fd.define_tensor(shape=[-1]))


def test_catalogue_is_large_enough() -> None:
    assert len(CASES) >= 40


def test_tensor_from_another_definition() -> None:
    with FusionDefinition() as other:
        foreign = other.define_tensor(shape=[-1])
        other.add_output(foreign)
    with pytest.raises(DefinitionError, match="operand 1 .* another FusionDefinition"):
        with FusionDefinition() as fd:
            x = fd.define_tensor(shape=[-1])
            fd.ops.add(x, foreign)


def test_operator_with_tensor_from_another_open_definition() -> None:
    with pytest.raises(DefinitionError, match="another FusionDefinition"):
        with FusionDefinition() as a, FusionDefinition() as b:
            a.define_tensor(shape=[-1]) + b.define_tensor(shape=[-1])


def test_op_outside_the_with_block() -> None:
    fd = FusionDefinition()
    with pytest.raises(DefinitionError, match="outside the `with"):
        fd.define_tensor(shape=[-1])
    with fd:
        x = fd.define_tensor(shape=[-1])
        fd.add_output(x)
    with pytest.raises(DefinitionError, match="already finished"):
        fd.ops.exp(x)
    with pytest.raises(DefinitionError, match="already finished"):
        x + 1.0


def test_fusion_without_outputs_fails_when_the_block_exits() -> None:
    with pytest.raises(DefinitionError, match="no outputs"):
        with FusionDefinition() as fd:
            fd.ops.exp(fd.define_tensor(shape=[-1]))


def test_errors_are_never_internal_exceptions() -> None:
    """Misuse surfaces as DefinitionError, not AttributeError/IndexError/KeyError."""
    bad_calls = [
        lambda fd: fd.ops.sum(None, [0]),
        lambda fd: fd.ops.permute(fd.define_tensor(shape=[-1]), ["a"]),
        lambda fd: fd.ops.cast(None, DataType.Float),
        lambda fd: fd.ops.reshape(fd.define_tensor(shape=[-1]), [None]),
        lambda fd: fd.ops.broadcast_in_dim(fd.define_tensor(shape=[-1]), [3], ["x"]),
    ]
    for call in bad_calls:
        with pytest.raises(DefinitionError):
            with FusionDefinition() as fd:
                call(fd)


@pytest.mark.parametrize("stream", ["0", -1, True, 1.5])
def test_a_stream_must_be_a_handle(stream: object) -> None:
    from kfuse.errors import InputError

    with FusionDefinition() as fd:
        fd.add_output(fd.ops.exp(fd.define_tensor(shape=[-1])))
    with pytest.raises(InputError, match="stream must be a CUDA stream handle"):
        fd.execute([np.ones(3, np.float32)], stream=stream)


@pytest.mark.parametrize("error", [ValueError("user code failed"), "definition"])
def test_a_definition_whose_block_raised_says_so_when_run(error: object) -> None:
    """It used to fail with a raw KeyError from deep in the runtime."""
    with pytest.raises((ValueError, DefinitionError)):
        with FusionDefinition() as fd:
            x = fd.define_tensor(shape=[-1])
            fd.add_output(fd.ops.exp(x))
            if isinstance(error, Exception):
                raise error
            fd.ops.exp(None)  # a DefinitionError inside the block
    for run in (
        lambda: fd.execute([np.ones(3, np.float32)]),
        lambda: fd.segments([np.ones(3, np.float32)]),
    ):
        with pytest.raises(DefinitionError, match="`with` block raised .*define it again"):
            run()
    with pytest.raises(DefinitionError, match="`with` block raised"):
        fd.ops.exp(x)


def test_an_output_too_large_to_allocate_is_a_kfuse_error() -> None:
    import kfuse

    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[1])
        fd.add_output(fd.ops.expand(x, shape=[2**50]))
    with pytest.raises(kfuse.OutOfMemoryError, match=r"output T1: Float \(1125899906842624,\)"):
        fd.execute([np.ones(1, np.float32)])


@pytest.mark.parametrize(
    "call",
    [
        lambda fd, x: fd.ops.sum(x, [1], keepdim="no"),
        lambda fd, x: fd.ops.mean(x, [1], keepdim=1),
        lambda fd, x: fd.ops.broadcast(x, [True, "x", False]),
        lambda fd, x: fd.ops.broadcast(x, "ab"),
    ],
)
def test_flags_are_bools_not_anything_truthy(call: Callable) -> None:
    with pytest.raises(DefinitionError, match="bool"):
        with FusionDefinition() as fd:
            call(fd, fd.define_tensor(shape=[-1, -1]))

"""Transposes (nvFuser's test_transpose.py): the sum of two [B, M, N] inputs permuted by
swapping two axes, then relu as where(x > 0, x, 0), one case per pair of axes that move.

Swapping axes 0 and 1 keeps the innermost axis: a pointwise kernel. Swapping (0, 2) or
(1, 2) moves it: the transpose scheduler's tiles. API differences: no is_cpu; nvFuser's
segment_set before the output (which keeps its presegmentation from turning the output into
a view of the input) has no kfuse counterpart and is not needed: kfuse writes every output.
"""

from __future__ import annotations

from typing import Any

from kfuse import DataType, FusionDefinition
from models.case import Case, Shape, demote, promote, randn
from models.sweeps import (
    BCAST_ADD,
    BCAST_ADD_QUICK,
    GPU_TEST_2D,
    GPU_TEST_3D,
    TEST_2D_TILED,
    TEST_3D,
    TRANSPOSE,
    TRANSPOSE_QUICK,
)

AXES = ((0, 1), (0, 2), (1, 2))
BOTH_DTYPES = ("bfloat16", "float32")  # the family sweeps its dtypes (issue 24)


def _permutation(axes: tuple[int, int]) -> list[int]:
    dims = [0, 1, 2]
    dims[axes[0]], dims[axes[1]] = dims[axes[1]], dims[axes[0]]
    return dims


def transpose_definition(axes: tuple[int, int]) -> Any:
    def define(dtype: DataType) -> FusionDefinition:
        # from test_transpose.py::transpose_fusion
        with FusionDefinition() as fd:
            a = fd.define_tensor(shape=[-1] * 3, contiguity=[True] * 3, dtype=dtype)
            b = fd.define_tensor(shape=[-1] * 3, contiguity=[True] * 3, dtype=dtype)
            s = fd.ops.add(promote(fd, a, dtype), promote(fd, b, dtype))
            t = demote(fd, fd.ops.permute(s, dims=_permutation(axes)), dtype)
            zero = fd.define_scalar(0.0, dtype=DataType.Double)
            fd.add_output(fd.ops.where(fd.ops.gt(t, zero), t, zero))
        return fd

    return define


def transpose_torch(axes: tuple[int, int]) -> Any:
    def fn(a: Any, b: Any) -> tuple[Any]:
        import torch

        t = (a.float() + b.float()).permute(_permutation(axes)).to(a.dtype)
        return (torch.relu(t).contiguous(),)

    fn.__name__ = f"transpose_{axes[0]}{axes[1]}"
    return fn


def transpose_reference(axes: tuple[int, int]) -> Any:
    def fn(a: Any, b: Any) -> tuple[Any]:
        import torch

        return (torch.relu((a.double() + b.double()).permute(_permutation(axes))),)

    return fn


def _inputs(torch: Any, shape: Shape, dtype: Any, device: str) -> list[Any]:
    return [randn(torch, shape, dtype, device), randn(torch, shape, dtype, device)]


CASES = [
    Case(
        "transpose",
        f"transpose_{axes[0]}{axes[1]}",
        "test_transpose.py::transpose_fusion",
        transpose_definition(axes),
        transpose_torch(axes),
        transpose_reference(axes),
        _inputs,
        TRANSPOSE,
        TRANSPOSE_QUICK,
        TEST_3D,
        GPU_TEST_3D,
        dtypes=BOTH_DTYPES,
    )
    for axes in AXES
]


def bcast_add_definition(bcast_axis: int) -> Any:
    def define(dtype: DataType) -> FusionDefinition:
        # from test_broadcast_add_fwd.py::bcast_add_fusion (contiguous=False: stride_order [0, 1])
        with FusionDefinition() as fd:
            v = fd.define_tensor(shape=[-1], contiguity=[True], dtype=dtype, stride_order=[0])
            x = fd.define_tensor(
                shape=[-1, -1], contiguity=[True, True], dtype=dtype, stride_order=[0, 1]
            )
            shape = [fd.ops.size(x, 0), fd.ops.size(x, 1)]
            b = fd.ops.broadcast_in_dim(v, shape=shape, broadcast_dims=[1 - bcast_axis])
            fd.add_output(
                demote(fd, fd.ops.add(promote(fd, x, dtype), promote(fd, b, dtype)), dtype)
            )
        return fd

    return define


def bcast_add_torch(bcast_axis: int, layout: str = "strided") -> Any:
    """x + v broadcast along `bcast_axis`, a contiguous output whatever x's layout (pointwise.py
    uses it for its contiguous x: `layout` names the function)."""

    def fn(v: Any, x: Any) -> tuple[Any]:
        b = v.unsqueeze(bcast_axis).float()
        return ((x.float() + b).to(x.dtype).contiguous(),)

    fn.__name__ = f"bcast_add_{layout}_dim{bcast_axis}"
    return fn


def bcast_add_reference(bcast_axis: int) -> Any:
    def fn(v: Any, x: Any) -> tuple[Any]:
        return (x.double() + v.unsqueeze(bcast_axis).double(),)

    return fn


def _bcast_inputs(bcast_axis: int) -> Any:
    def make(torch: Any, shape: Shape, dtype: Any, device: str) -> list[Any]:
        x = randn(torch, shape[::-1], dtype, device).t()  # stride_order [0, 1]: axis 0 fastest
        return [randn(torch, (shape[1 - bcast_axis],), dtype, device), x]

    return make


CASES += [
    Case(
        "transpose",
        f"bcast_add_strided_dim{axis}",
        "test_broadcast_add_fwd.py::bcast_add_fusion",
        bcast_add_definition(axis),
        bcast_add_torch(axis),
        bcast_add_reference(axis),
        _bcast_inputs(axis),
        BCAST_ADD,
        BCAST_ADD_QUICK,
        TEST_2D_TILED,
        GPU_TEST_2D,
        dtypes=BOTH_DTYPES,
    )
    for axis in (0,)  # axis 1 too would pass the suite's 5-minute budget
]

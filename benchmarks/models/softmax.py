"""Softmax forward and backward over axis 1 (the rows' last axis) or axis 0 of [rows, columns]
(nvFuser's test_softmax_fwd.py and test_softmax_bwd.py, both reduction axes).

The definitions keep nvFuser's spelling: max, sub, exp, sum, then reciprocal and mul in the
forward; in the backward the sum of y * grad is rounded to the input dtype and cast back before
it is subtracted, as nvFuser writes it. API differences: fd.ops.size for T.size(i); no
is_cpu; sum's dtype=DataType.Null is the default.
"""

from __future__ import annotations

import functools
from typing import Any

from kfuse import DataType, FusionDefinition
from models.case import Shape, demote, matrix, promote, randn, sweep_case
from models.sweeps import GPU_TEST_2D, SOFTMAX, SOFTMAX_QUICK, TEST_2D


def softmax_fwd_definition(axis: int) -> Any:
    def define(dtype: DataType) -> FusionDefinition:
        # from test_softmax_fwd.py::softmax_fwd_fusion
        with FusionDefinition() as fd:
            x = promote(fd, matrix(fd, dtype), dtype)
            is_bcast = [i == axis for i in range(2)]
            top = fd.ops.broadcast(
                fd.ops.max(x, dims=[axis], keepdim=False), is_broadcast_dim=is_bcast
            )
            e = fd.ops.exp(fd.ops.sub(x, top))
            total = fd.ops.broadcast(
                fd.ops.sum(e, dims=[axis], keepdim=False), is_broadcast_dim=is_bcast
            )
            y = fd.ops.mul(e, fd.ops.reciprocal(total))
            fd.add_output(demote(fd, y, dtype))
        return fd

    return define


def softmax_bwd_definition(axis: int) -> Any:
    def define(dtype: DataType) -> FusionDefinition:
        # from test_softmax_bwd.py::softmax_bwd_fusion
        narrow = dtype is not DataType.Float
        with FusionDefinition() as fd:
            y: Any = matrix(fd, dtype)
            g: Any = matrix(fd, dtype)
            if narrow:
                y = fd.ops.cast(y, dtype=DataType.Float)
                g = fd.ops.cast(g, dtype=DataType.Float)
            dot = fd.ops.sum(fd.ops.mul(y, g), dims=[axis], keepdim=False)
            keep = 1 - axis
            kept_shape = (
                [fd.ops.size(y, 0), 1] if axis else [1, fd.ops.size(y, 1)]
            )  # nvFuser's shape_v9
            dot_b: Any = fd.ops.broadcast_in_dim(dot, shape=kept_shape, broadcast_dims=[keep])
            if narrow:
                dot_b = fd.ops.cast(dot_b, dtype=dtype)
            dot_full: Any = fd.ops.broadcast_in_dim(
                dot_b, shape=[fd.ops.size(y, 0), fd.ops.size(y, 1)], broadcast_dims=[0, 1]
            )
            if narrow:
                dot_full = fd.ops.cast(dot_full, dtype=DataType.Float)
            dx = fd.ops.mul(y, fd.ops.sub(g, dot_full))
            if narrow:
                dx = fd.ops.cast(dx, dtype=dtype)
            fd.add_output(dx)
        return fd

    return define


def softmax_fwd_torch(axis: int) -> Any:
    def fn(x: Any) -> tuple[Any]:
        import torch

        return (torch.softmax(x.float(), dim=axis).to(x.dtype),)

    fn.__name__ = f"softmax_fwd_dim{axis}"
    return fn


def softmax_bwd_torch(axis: int) -> Any:
    def fn(y: Any, g: Any) -> tuple[Any]:
        import torch

        yf, gf = y.float(), g.float()
        dot = (yf * gf).sum(axis, keepdim=True)
        if y.dtype != torch.float32:
            dot = dot.to(y.dtype).float()  # rounded as nvFuser's fusion rounds it
        return ((yf * (gf - dot)).to(y.dtype),)

    fn.__name__ = f"softmax_bwd_dim{axis}"
    return fn


def softmax_fwd_reference(axis: int) -> Any:
    def fn(x: Any) -> tuple[Any]:
        import torch

        return (torch.softmax(x.double(), dim=axis),)

    return fn


def softmax_bwd_reference(axis: int) -> Any:
    def fn(y: Any, g: Any) -> tuple[Any]:
        y64, g64 = y.double(), g.double()
        return (y64 * (g64 - (y64 * g64).sum(axis, keepdim=True)),)

    return fn


def _fwd_inputs(torch: Any, shape: Shape, dtype: Any, device: str) -> list[Any]:
    return [randn(torch, shape, dtype, device)]


def _bwd_inputs(axis: int) -> Any:
    def make(torch: Any, shape: Shape, dtype: Any, device: str) -> list[Any]:
        logits = torch.randn(shape, device=device, dtype=torch.float32)
        y = torch.softmax(logits, dim=axis).to(dtype)
        return [y, randn(torch, shape, dtype, device)]

    return make


_case = functools.partial(
    sweep_case, "softmax", sweep=(SOFTMAX, SOFTMAX_QUICK, TEST_2D, GPU_TEST_2D)
)


CASES = [
    case
    for axis in (1, 0)
    for case in (
        _case(
            f"softmax_fwd_dim{axis}",
            "test_softmax_fwd.py::softmax_fwd_fusion",
            softmax_fwd_definition(axis),
            (softmax_fwd_torch(axis), softmax_fwd_reference(axis), _fwd_inputs),
        ),
        _case(
            f"softmax_bwd_dim{axis}",
            "test_softmax_bwd.py::softmax_bwd_fusion",
            softmax_bwd_definition(axis),
            (softmax_bwd_torch(axis), softmax_bwd_reference(axis), _bwd_inputs(axis)),
        ),
    )
]

"""Group norm forward over [N, C, H, W] with G groups (nvFuser's test_groupnorm_fwd.py): the
input is reshaped to [N, G, C / G, H, W], normalized over its last three axes, scaled and
shifted per channel, and reshaped back.

As nvFuser spells it: the group size C / G is fd.ops.div of two Int scalars, an Int in
nvFuser and in kfuse (integer scalar division), so it is a reshape extent. API differences:
fd.ops.size / fd.ops.shape for T.size(i) / T.shape(); no is_cpu.
"""

from __future__ import annotations

from typing import Any

from kfuse import DataType, FusionDefinition
from models.case import Case, Shape, demote, promote, randn
from models.sweeps import GPU_TEST_SPATIAL, GROUPNORM, GROUPNORM_QUICK, TEST_SPATIAL

EPS = 1e-5
GROUPS = (32, 8, 1)  # 32: nvFuser's get_n_groups for C >= 32; 1: one group, LayerNorm-like


def groupnorm_fwd_definition(groups: int) -> Any:
    """The definition for `groups` groups."""

    def define(dtype: DataType) -> FusionDefinition:
        # from test_groupnorm_fwd.py::groupnorm_fwd_fusion
        with FusionDefinition() as fd:
            x = fd.define_tensor(shape=[-1] * 4, contiguity=[True] * 4, dtype=dtype)
            w = fd.define_tensor(shape=[-1], contiguity=[True], dtype=dtype)
            b = fd.define_tensor(shape=[-1], contiguity=[True], dtype=dtype)
            in_shape = fd.ops.shape(x)
            g = fd.define_scalar(groups, dtype=DataType.Int)

            def per_group(t: Any, axis: int) -> Any:
                return fd.ops.div(fd.ops.size(t, axis), g)  # Int / Int: an Int

            n, h, wd = fd.ops.size(x, 0), fd.ops.size(x, 2), fd.ops.size(x, 3)
            x = fd.ops.reshape(x, new_shape=[n, groups, per_group(x, 1), h, wd])
            x, w, b = (promote(fd, t, dtype) for t in (x, w, b))
            var, mean = fd.ops.var_mean(x, dims=[2, 3, 4], correction=0, keepdim=False)
            stat_shape = [fd.ops.size(x, 0), groups, 1, 1, 1]
            var_b = fd.ops.broadcast_in_dim(var, shape=stat_shape, broadcast_dims=[0, 1])
            mean_b = fd.ops.broadcast_in_dim(mean, shape=stat_shape, broadcast_dims=[0, 1])
            eps = fd.define_scalar(EPS, dtype=DataType.Double)
            invstd = fd.ops.rsqrt(fd.ops.add(var_b, eps))
            shape = fd.ops.shape(x)
            every = [0, 1, 2, 3, 4]
            centered = fd.ops.sub(
                x, fd.ops.broadcast_in_dim(mean_b, shape=shape, broadcast_dims=every)
            )
            xhat = fd.ops.mul(
                centered, fd.ops.broadcast_in_dim(invstd, shape=shape, broadcast_dims=every)
            )
            # nvFuser takes the weight's and the bias's group size from their own sizes.
            w = fd.ops.reshape(w, new_shape=[1, groups, per_group(w, 0), 1, 1])
            b = fd.ops.reshape(b, new_shape=[1, groups, per_group(b, 0), 1, 1])
            y = fd.ops.mul(xhat, fd.ops.broadcast_in_dim(w, shape=shape, broadcast_dims=every))
            y = fd.ops.add(y, fd.ops.broadcast_in_dim(b, shape=shape, broadcast_dims=every))
            y = demote(fd, y, dtype)
            fd.add_output(fd.ops.reshape(y, new_shape=in_shape))
        return fd

    return define


def groupnorm_fwd_torch(groups: int) -> Any:
    def fn(x: Any, w: Any, b: Any) -> tuple[Any]:
        import torch

        n, c, h, wd = x.shape
        xg = x.float().reshape(n, groups, c // groups, h, wd)
        var, mean = torch.var_mean(xg, dim=(2, 3, 4), correction=0, keepdim=True)
        y = (xg - mean) * torch.rsqrt(var + EPS)
        per_channel = (1, groups, c // groups, 1, 1)
        y = y * w.float().reshape(per_channel) + b.float().reshape(per_channel)
        return (y.to(x.dtype).reshape(n, c, h, wd),)

    fn.__name__ = f"groupnorm_fwd_g{groups}"
    return fn


def groupnorm_fwd_reference(groups: int) -> Any:
    def fn(x: Any, w: Any, b: Any) -> tuple[Any]:
        import torch

        return (torch.nn.functional.group_norm(x.double(), groups, w.double(), b.double(), EPS),)

    return fn


def _inputs(torch: Any, shape: Shape, dtype: Any, device: str) -> list[Any]:
    c = shape[1]
    return [
        randn(torch, shape, dtype, device),
        randn(torch, (c,), dtype, device),
        randn(torch, (c,), dtype, device),
    ]


CASES = [
    Case(
        "groupnorm",
        f"groupnorm_fwd_g{groups}",
        "test_groupnorm_fwd.py::groupnorm_fwd_fusion",
        groupnorm_fwd_definition(groups),
        groupnorm_fwd_torch(groups),
        groupnorm_fwd_reference(groups),
        _inputs,
        GROUPNORM,
        GROUPNORM_QUICK,
        TEST_SPATIAL,
        GPU_TEST_SPATIAL,
    )
    for groups in GROUPS
]

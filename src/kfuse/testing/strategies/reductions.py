"""The fusion generator's reduction and normalization steps: sums, max/min, means,
variances, softmax and norms (forward and backward) of values of its pool."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import strategies as st

from kfuse.dtypes import DataType
from kfuse.testing.strategies.generator import Entry, Gen, one_in


def reduction_step(gen: Gen) -> None:
    o = gen.fd.ops
    e = gen.pick(full=True)
    if e.val.ndim == 0:
        return
    dims = gen.draw(st.lists(st.integers(0, e.val.ndim - 1), min_size=1, max_size=2, unique=True))
    op = gen.draw(st.sampled_from(["sum", "max", "min", "mean", "prod", "var"]))
    keep = gen.draw(st.booleans())
    v: Any = e.val
    if op in ("mean", "var", "prod") and not v.dtype.is_floating:
        v = o.cast(v, DataType.Float)
    if op == "prod":
        v = o.add(o.mul(o.tanh(v), 1e-3), 1.0)
    if all(v.axes[d].is_broadcast for d in dims):
        # Over size-1 axes only, a reduction is a squeeze (the builder makes it one):
        # expanded first, it stays a reduction.
        v = o.expand(v, shape=[3 if i in dims else -1 for i in range(v.ndim)])
    if op == "var":
        out = o.var(v, dims, correction=gen.draw(st.sampled_from([0, 1])), keepdim=keep)
    else:
        out = getattr(o, op)(v, dims, keepdim=keep)
    grow = 1100.0 if op == "sum" else 1.0
    entry = Entry(out, e.exact and op in ("max", "min"), e.bound * grow + 3.0)
    gen.results.append(entry)
    gen.required.append(entry)
    if keep:
        gen.pool.append(entry)


def normalization_step(gen: Gen) -> None:
    o = gen.fd.ops
    x = gen.pick(full=True, floating=True)
    v = x.val
    if any(ax.is_broadcast for ax in v.axes):
        # Over size-1 axes a reduction is a squeeze (the builder makes it one), and the
        # fusion would have none: expanded first, every axis reduces.
        v = o.expand(v, shape=[3 if ax.is_broadcast else -1 for ax in v.axes])
    pattern = gen.draw(
        st.sampled_from(
            ["softmax", "log_softmax", "layer_norm", "rms_norm", "var_mean", "center"]
            + (["backward", "backward", "batch_norm", "group_norm"] if v.ndim > 1 else [])
        )
    )
    if pattern == "group_norm":
        group_norm_step(gen)
        return
    dim = gen.draw(st.integers(0, v.ndim - 1))
    if pattern == "backward":
        # Mostly over the innermost axis, as models' norms are (the others segment).
        backward_step(gen, x, v.ndim - 1 if gen.draw(st.integers(0, 3)) else dim)
        return
    if pattern in ("softmax", "log_softmax"):
        out = getattr(o, pattern)(v, dim)
    elif pattern in ("layer_norm", "rms_norm"):
        k = gen.draw(st.integers(1, min(2, v.ndim)))
        dt = gen.draw(st.sampled_from([d for d in gen.dtypes if d.is_floating] or [DataType.Float]))
        w = gen.fd.define_tensor(shape=[-1] * k, dtype=dt) if gen.draw(st.booleans()) else None
        if pattern == "layer_norm":
            b = gen.fd.define_tensor(shape=[-1] * k, dtype=dt) if gen.draw(st.booleans()) else None
            out = o.layer_norm(v, w, b, normalized_ndim=k)
        else:
            out = o.rms_norm(v, w, normalized_ndim=k)
    elif pattern == "batch_norm":
        # Statistics over every axis but one (a batch norm's channel; the last one in
        # channels-last layouts, outer_persistent's fusions), the input normalized by them.
        keep = v.ndim - 1 if gen.draw(st.booleans()) else dim
        others = [d for d in range(v.ndim) if d != keep]
        var, mean = o.var_mean(v, others, correction=0, keepdim=True)
        out = o.mul(o.sub(v, mean), o.rsqrt(o.add(var, 1e-5)))
    elif pattern == "var_mean":
        var, mean = o.var_mean(v, [dim], keepdim=True)
        gen.results.append(Entry(mean, False, x.bound))
        out = var
    else:
        out = o.sub(v, o.mean(v, [dim], keepdim=True))
    e = Entry(out, False, 4.0 * x.bound + 10.0)
    gen.pool.append(e)
    gen.results.append(e)
    gen.required.append(e)


def group_norm_step(gen: Gen) -> None:
    """A group norm as models write it (nvFuser's groupnorm benchmark): an input of
    [N, C, spatial...] with C = G * K channels (a fixed extent, so the split is exact)
    reshaped to [N, G, K, spatial...], normalized over all but its first two axes,
    scaled and shifted per channel, and reshaped back; sometimes the mean and the
    inverse standard deviation are outputs too (of the statistics' shape). Its values
    have their own shape, so they reach only the outputs."""
    fd = gen.fd
    o = fd.ops
    groups = gen.draw(st.sampled_from([1, 2, 3, 4]))
    per_group = gen.draw(st.sampled_from([1, 2, 3, 5, 8]))
    channels = groups * per_group
    n_spatial = gen.draw(st.integers(1, 2))
    floating = [d for d in gen.dtypes if d.is_floating] or [DataType.Float]
    dt = gen.draw(st.sampled_from(floating))
    x: Any = fd.define_tensor(shape=[-1, channels] + [-1] * n_spatial, dtype=dt)
    n = o.size(x, 0)
    spatial = [o.size(x, 2 + i) for i in range(n_spatial)]
    if dt not in (DataType.Float, DataType.Double):  # bf16, half, float8: in float
        x = o.cast(x, DataType.Float)
    grouped = o.reshape(x, new_shape=[n, groups, per_group, *spatial])
    reduced = list(range(2, grouped.ndim))
    keep = gen.draw(st.booleans())
    var, mean = o.var_mean(grouped, reduced, correction=0, keepdim=keep)
    invstd = o.rsqrt(o.add(var, 1e-5))
    shape = o.shape(grouped)
    if keep:
        mean_b, invstd_b = mean, invstd
    else:
        mean_b, invstd_b = (
            o.broadcast_in_dim(t, shape=shape, broadcast_dims=[0, 1]) for t in (mean, invstd)
        )
    y = o.mul(o.sub(grouped, mean_b), invstd_b)
    bound = 4.0 * math.sqrt(per_group * 1100.0) + 10.0
    every = list(range(grouped.ndim))
    per_channel = [1, groups, per_group] + [1] * n_spatial
    for affine in ("mul", "add"):
        if gen.draw(st.booleans()):
            p: Any = fd.define_tensor(shape=[channels], dtype=dt)
            if dt is not x.dtype:  # float8 promotes with no other type
                p = o.cast(p, x.dtype)
            p = o.reshape(p, new_shape=per_channel)
            y = getattr(o, affine)(y, o.broadcast_in_dim(p, shape=shape, broadcast_dims=every))
            bound = bound * 2.0 if affine == "mul" else bound + 2.0
    out = o.reshape(y, new_shape=[n, channels, *spatial])
    entry = Entry(out, False, bound)
    gen.results.append(entry)
    gen.required.append(entry)
    if one_in(gen.draw, 4):
        stats = [Entry(mean, False, 2.0), Entry(invstd, False, 1e3)]
        gen.results += stats
        gen.required += stats


def backward_step(gen: Gen, x: Entry, dim: int) -> None:
    """A normalization's backward shape: a row reduction over `dim` that the full-size
    output reads again, and a column reduction (sum, max or min over every other axis) of
    the same values, as dx and dweight (inner_outer_persistent's fusions)."""
    o = gen.fd.ops
    v = x.val
    g = gen.pick(full=True, floating=True)
    prod = o.mul(g.val, v)
    row = o.sum(prod, [dim], keepdim=True)
    dx = o.sub(g.val, o.mul(v, row))
    others = [d for d in range(v.ndim) if d != dim]
    op = gen.draw(st.sampled_from(["sum", "max", "min"]))
    col = getattr(o, op)(prod, others)
    if gen.draw(st.booleans()):
        col = o.cast(col, DataType.BFloat16)
    bound = g.bound * x.bound
    row_entry = Entry(dx, False, g.bound + x.bound * bound * 1100.0 + 3.0)
    col_entry = Entry(col, False, bound * (1100.0 if op == "sum" else 1.0) + 3.0)
    gen.pool.append(row_entry)
    gen.results += [row_entry, col_entry]
    gen.required += [row_entry, col_entry]

"""fusions(): a Hypothesis strategy of random valid FusionDefinitions.

Generated fusions keep comparisons with the reference meaningful:
* ops with restricted domains get guarded operands (log(|x| + 0.5), atanh(0.9 tanh(x)), ...);
* values that could overflow are squashed with tanh before exp-like ops;
* discontinuous ops (floor, round, sign, comparisons, logical ops, float->int casts, fmod)
  only see *exact* operands (inputs, or values derived from inputs without rounding), so a
  kernel computing in float32 and the float64 reference take the same branch;
* Half/BFloat16 (and float8, when `dtypes` has them: DEFAULT_DTYPES has not) inputs are cast
  to Float before math, and narrow dtypes appear again only as final output casts (the usual
  mixed-precision pattern), which round as exactly in the kernel as in the reference.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, cast

from hypothesis import strategies as st

from kfuse.dtypes import REDUCED_FLOATS, DataType
from kfuse.errors import DefinitionError
from kfuse.frontend import FusionDefinition
from kfuse.ir.ops import OPS
from kfuse.ir.values import TensorView, Val

KINDS = frozenset(
    {
        "pointwise",
        "reduction",
        "normalization",
        "multi_reduction",
        "multi_segment",
        "resize",
        "indexing",
    }
)
"""Fusion kinds: "resize" and "indexing" draw the data-movement ops (slices, pads and cats;
index_select, gather and take_along_axis) in every fusion, on top of one of the first four
kinds' work, so that a campaign over all kinds draws them as often as any other kind."""
_BASE_KINDS = ("pointwise", "reduction", "normalization", "multi_reduction")
DEFAULT_DTYPES = (
    DataType.Float,
    DataType.Half,
    DataType.BFloat16,
    DataType.Double,
    DataType.Int32,
    DataType.Int,
    DataType.Bool,
)
_DOMAIN = {
    "log": "pos",
    "log2": "pos",
    "log10": "pos",
    "sqrt": "pos",
    "rsqrt": "pos",
    "reciprocal": "pos",
    "log1p": "nonneg",
    "acosh": "ge1",
    "asin": "unit",
    "acos": "unit",
    "atanh": "unit",
    "tan": "tan",
    "exp": "small",
    "exp2": "small",
    "expm1": "small",
    "sinh": "small",
    "cosh": "small",
    "sin": "moderate",
    "cos": "moderate",
}
_EXACT_ONLY = {
    "floor",
    "ceil",
    "round",
    "trunc",
    "sign",
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "logical_and",
    "logical_or",
    "logical_not",
    "atan2",
    "fmod",
    "remainder",
}
_EXACT_KEEPING = {
    "abs",
    "neg",
    "relu",
    "maximum",
    "minimum",
    "floor",
    "ceil",
    "round",
    "trunc",
    "sign",
    "where",
    "clamp",
    "isnan",
    "isinf",
    "isfinite",
    "bitwise_not",
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "logical_and",
    "logical_or",
    "logical_not",
}


def one_in(draw: Any, n: int) -> bool:
    """True one time in `n`, drawn; shrinks to False (Hypothesis shrinks integers to 0), so
    a failure's shrunk example keeps only the rare features it needs."""
    return bool(draw(st.integers(0, n - 1)) == n - 1)


@dataclass
class _Entry:
    val: TensorView
    exact: bool  # computed without rounding from the inputs
    bound: float  # an upper bound of |value| for inputs within the default value range


class _Gen:
    def __init__(
        self,
        draw: Any,
        fd: FusionDefinition,
        rank: int,
        dtypes: tuple,
        ops: tuple[str, ...],
        max_rank: int,
    ) -> None:
        self.draw, self.fd, self.rank, self.dtypes, self.ops = draw, fd, rank, dtypes, ops
        self.max_rank = max_rank  # the most axes an input may have (fusions' max_rank)
        self.pool: list[_Entry] = []
        self.results: list[_Entry] = []  # candidates for outputs, newest last
        self.required: list[_Entry] = []  # reductions that must reach an output

    # ---- inputs ----
    def add_input(self, rank: int, full: bool, dtype: DataType) -> _Entry:
        shape = [-1 if full or not self.draw(st.integers(0, 4)) == 0 else 1 for _ in range(rank)]
        contiguity = self.draw(st.sampled_from([None, None, True]))
        # Sometimes, where max_rank leaves room, one more axis, symbolic, that a squeeze
        # removes (kfuse.testing.inputs draws it 1): an axis whose size 1 only the call
        # tells, as cross-entropy's [N, 1] targets have; squeezed from the input itself or
        # from a value computed of it.
        room = rank < self.max_rank
        squeezed = self.draw(st.integers(0, rank)) if room and one_in(self.draw, 8) else None
        if squeezed is not None:
            shape.insert(squeezed, -1)
        t: Any = self.fd.define_tensor(shape=shape, contiguity=contiguity, dtype=dtype)
        if squeezed is not None:
            # Narrow dtypes only meet math after their cast (the module docstring).
            plain = dtype is not DataType.Bool and dtype not in REDUCED_FLOATS
            if plain and self.draw(st.booleans()):
                t = self.fd.ops.neg(t)  # exact, as the input is
            t = self.fd.ops.squeeze(t, [squeezed])
        bound = 1.0 if dtype is DataType.Bool else 8.0 if not dtype.is_floating else 2.0
        e = _Entry(t, True, bound)
        self.pool.append(e)
        return e

    def pick(self, *, exact: bool = False, full: bool = False, floating: bool = False) -> _Entry:
        cands = [
            e for e in self.pool if (e.exact or not exact) and (not full or e.val.ndim == self.rank)
        ]
        if not cands:
            cands = [
                e for e in self.pool if e.val.is_input and (not full or e.val.ndim == self.rank)
            ]
        if not cands:
            cands = self.pool
        # Prefer recent values (chains) but reach back (DAGs).
        e = self.draw(st.sampled_from(cands[-4:] if self.draw(st.booleans()) else cands))
        if e.val.dtype in REDUCED_FLOATS or (floating and not e.val.dtype.is_floating):
            e = _Entry(cast(TensorView, self.fd.ops.cast(e.val, DataType.Float)), e.exact, e.bound)
        return e

    # ---- pointwise ----
    def guard(self, op: str, e: _Entry) -> _Entry:
        o = self.fd.ops
        kind = _DOMAIN.get(op)
        v, b = e.val, e.bound
        if kind == "pos":
            return _Entry(o.add(o.abs(v), 0.5), False, b + 0.5)
        if kind == "nonneg":
            return _Entry(o.abs(v), e.exact, b)
        if kind == "ge1":
            return _Entry(o.add(o.abs(v), 1.5), False, b + 1.5)
        if kind == "unit":
            return _Entry(o.mul(o.tanh(v), 0.9), False, 0.9)
        if kind == "tan" or (kind == "small" and b > 8) or (kind == "moderate" and b > 50):
            return _Entry(o.tanh(v), False, 1.0)
        return e

    def unary(self, op: str) -> _Entry | None:
        e = self.guard(op, self.pick(exact=op in _EXACT_ONLY))
        bound = _unary_bound(op, e.bound)
        out = (
            getattr(self.fd.ops, op)(e.val)
            if op != "gelu_tanh"
            else self.fd.ops.gelu(e.val, approximate="tanh")
        )
        return _Entry(cast(TensorView, out), e.exact and op in _EXACT_KEEPING, bound)

    def operand(self, exact: bool) -> tuple[Any, bool, float]:
        """A tensor entry, or sometimes a constant or symbolic scalar."""
        r = self.draw(st.integers(0, 5))
        if r == 0:
            c = self.draw(st.sampled_from([2, -1, 3, 0.5, 1.5, -0.25, True]))
            return c, True, abs(float(c))
        if r == 1 and self.scalars:
            s = self.draw(st.sampled_from(self.scalars))
            return s, True, 2.0 if s.dtype.is_floating else 4.0
        e = self.pick(exact=exact)
        return e.val, e.exact, e.bound

    scalars: list[Val] = []

    def binary(self, op: str) -> _Entry | None:
        o = self.fd.ops
        need_exact = op in _EXACT_ONLY
        a, ea, ba = self.operand(need_exact)
        b, eb, bb = self.operand(need_exact)
        if not isinstance(a, Val) and not isinstance(b, Val):
            picked = self.pick(exact=need_exact)  # keep the exactness a discontinuous op needs
            a, ea, ba = picked.val, picked.exact, picked.bound
        if op in ("div", "fmod", "remainder", "pow"):
            return self.divlike(op, a, ea, ba, b)
        if op == "mul" and ba * bb > 1e4 or op == "add" and ba + bb > 1e4:
            return None
        if op == "atan2":
            # atan2 shows the sign of a zero, which is unspecified where a max, min or clamp
            # tie made it (torch on the CPU keeps the first operand's, NumPy the second's):
            # + 0.0 turns -0.0 into +0.0 in the kernel and the reference alike.
            a, b = (o.add(v, 0.0) if isinstance(v, Val) else v for v in (a, b))
        out = getattr(o, op)(a, b)
        bound = {"add": ba + bb, "sub": ba + bb, "mul": ba * bb, "atan2": math.pi}.get(
            op, max(ba, bb)
        )
        return _Entry(out, ea and eb and op in _EXACT_KEEPING, bound)

    def divlike(self, op: str, a: Any, ea: bool, ba: float, b: Any) -> _Entry | None:
        o = self.fd.ops
        is_int = isinstance(a, Val) and not a.dtype.is_floating
        if op == "pow":
            if is_int:
                return _Entry(o.pow(a, self.draw(st.sampled_from([0, 1, 2, 3]))), ea, ba**3)
            base = o.add(o.abs(a), 0.5)
            expo = self.draw(st.sampled_from([2.0, 3.0, 0.5, -1.0, -2.0]))
            return _Entry(o.pow(base, expo), False, max((ba + 0.5) ** abs(expo), 4.0))
        if op in ("fmod", "remainder"):
            if is_int and isinstance(b, Val) and not b.dtype.is_floating:
                return _Entry(getattr(o, op)(a, o.add(o.abs(b), 1)), ea, ba)
            if not ea:
                return None
            d = self.draw(st.sampled_from([0.5, 2.0, 0.25, -0.5]))
            return _Entry(getattr(o, op)(a, d), True, abs(d))
        denom = (
            b
            if not isinstance(b, Val)
            else (o.add(o.abs(b), 0.5) if b.dtype.is_floating else o.add(o.abs(b), 1))
        )
        if not isinstance(denom, Val) and abs(float(denom)) < 0.25:
            denom = 0.5
        return _Entry(o.div(a, denom), False, ba * 4)

    def ternary(self, op: str) -> _Entry | None:
        o = self.fd.ops
        if op == "where":
            x, y = self.pick(exact=True), self.pick(exact=True)
            cond = o.lt(x.val, y.val) if self.draw(st.booleans()) else o.ge(x.val, 0.5)
            a, b = self.pick(), self.pick()
            return _Entry(o.where(cond, a.val, b.val), a.exact and b.exact, max(a.bound, b.bound))
        if op == "clamp":
            a = self.pick()
            if a.val.dtype is DataType.Bool:
                return None
            lo = self.draw(st.sampled_from([-1, 0, -2]))
            return _Entry(
                o.clamp(a.val, lo, lo + self.draw(st.sampled_from([1, 2, 3]))), a.exact, a.bound
            )
        s, e, w = self.pick(floating=True), self.pick(floating=True), self.pick(floating=True)
        return _Entry(o.lerp(s.val, e.val, w.val), False, (s.bound + e.bound) * (1 + w.bound))

    def pointwise_step(self) -> None:
        op = self.draw(st.sampled_from(self.ops))
        arity = OPS[op].arity
        try:
            e = (self.unary, self.binary, self.ternary)[arity - 1](op)
        except DefinitionError:
            return  # e.g. a bitwise op drew floating operands; dead exprs are pruned
        if e is not None and isinstance(e.val, TensorView):
            self.pool.append(e)
            self.results.append(e)

    # ---- reductions ----
    def reduction_step(self) -> None:
        o = self.fd.ops
        e = self.pick(full=True)
        if e.val.ndim == 0:
            return
        dims = self.draw(
            st.lists(st.integers(0, e.val.ndim - 1), min_size=1, max_size=2, unique=True)
        )
        op = self.draw(st.sampled_from(["sum", "max", "min", "mean", "prod", "var"]))
        keep = self.draw(st.booleans())
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
            out = o.var(v, dims, correction=self.draw(st.sampled_from([0, 1])), keepdim=keep)
        else:
            out = getattr(o, op)(v, dims, keepdim=keep)
        grow = 1100.0 if op == "sum" else 1.0
        entry = _Entry(out, e.exact and op in ("max", "min"), e.bound * grow + 3.0)
        self.results.append(entry)
        self.required.append(entry)
        if keep:
            self.pool.append(entry)

    def normalization_step(self) -> None:
        o = self.fd.ops
        x = self.pick(full=True, floating=True)
        v = x.val
        if any(ax.is_broadcast for ax in v.axes):
            # Over size-1 axes a reduction is a squeeze (the builder makes it one), and the
            # fusion would have none: expanded first, every axis reduces.
            v = o.expand(v, shape=[3 if ax.is_broadcast else -1 for ax in v.axes])
        pattern = self.draw(
            st.sampled_from(
                ["softmax", "log_softmax", "layer_norm", "rms_norm", "var_mean", "center"]
                + (["backward", "backward", "batch_norm", "group_norm"] if v.ndim > 1 else [])
            )
        )
        if pattern == "group_norm":
            self.group_norm_step()
            return
        dim = self.draw(st.integers(0, v.ndim - 1))
        if pattern == "backward":
            # Mostly over the innermost axis, as models' norms are (the others segment).
            self.backward_step(x, v.ndim - 1 if self.draw(st.integers(0, 3)) else dim)
            return
        if pattern in ("softmax", "log_softmax"):
            out = getattr(o, pattern)(v, dim)
        elif pattern in ("layer_norm", "rms_norm"):
            k = self.draw(st.integers(1, min(2, v.ndim)))
            dt = self.draw(
                st.sampled_from([d for d in self.dtypes if d.is_floating] or [DataType.Float])
            )
            w = (
                self.fd.define_tensor(shape=[-1] * k, dtype=dt)
                if self.draw(st.booleans())
                else None
            )
            if pattern == "layer_norm":
                b = (
                    self.fd.define_tensor(shape=[-1] * k, dtype=dt)
                    if self.draw(st.booleans())
                    else None
                )
                out = o.layer_norm(v, w, b, normalized_ndim=k)
            else:
                out = o.rms_norm(v, w, normalized_ndim=k)
        elif pattern == "batch_norm":
            # Statistics over every axis but one (a batch norm's channel; the last one in
            # channels-last layouts, outer_persistent's fusions), the input normalized by them.
            keep = v.ndim - 1 if self.draw(st.booleans()) else dim
            others = [d for d in range(v.ndim) if d != keep]
            var, mean = o.var_mean(v, others, correction=0, keepdim=True)
            out = o.mul(o.sub(v, mean), o.rsqrt(o.add(var, 1e-5)))
        elif pattern == "var_mean":
            var, mean = o.var_mean(v, [dim], keepdim=True)
            self.results.append(_Entry(mean, False, x.bound))
            out = var
        else:
            out = o.sub(v, o.mean(v, [dim], keepdim=True))
        e = _Entry(out, False, 4.0 * x.bound + 10.0)
        self.pool.append(e)
        self.results.append(e)
        self.required.append(e)

    def group_norm_step(self) -> None:
        """A group norm as models write it (nvFuser's groupnorm benchmark): an input of
        [N, C, spatial...] with C = G * K channels (a fixed extent, so the split is exact)
        reshaped to [N, G, K, spatial...], normalized over all but its first two axes,
        scaled and shifted per channel, and reshaped back; sometimes the mean and the
        inverse standard deviation are outputs too (of the statistics' shape). Its values
        have their own shape, so they reach only the outputs."""
        fd = self.fd
        o = fd.ops
        groups = self.draw(st.sampled_from([1, 2, 3, 4]))
        per_group = self.draw(st.sampled_from([1, 2, 3, 5, 8]))
        channels = groups * per_group
        n_spatial = self.draw(st.integers(1, 2))
        floating = [d for d in self.dtypes if d.is_floating] or [DataType.Float]
        dt = self.draw(st.sampled_from(floating))
        x: Any = fd.define_tensor(shape=[-1, channels] + [-1] * n_spatial, dtype=dt)
        n = o.size(x, 0)
        spatial = [o.size(x, 2 + i) for i in range(n_spatial)]
        if dt not in (DataType.Float, DataType.Double):  # bf16, half, float8: in float
            x = o.cast(x, DataType.Float)
        grouped = o.reshape(x, new_shape=[n, groups, per_group, *spatial])
        reduced = list(range(2, grouped.ndim))
        keep = self.draw(st.booleans())
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
            if self.draw(st.booleans()):
                p: Any = fd.define_tensor(shape=[channels], dtype=dt)
                if dt is not x.dtype:  # float8 promotes with no other type
                    p = o.cast(p, x.dtype)
                p = o.reshape(p, new_shape=per_channel)
                y = getattr(o, affine)(y, o.broadcast_in_dim(p, shape=shape, broadcast_dims=every))
                bound = bound * 2.0 if affine == "mul" else bound + 2.0
        out = o.reshape(y, new_shape=[n, channels, *spatial])
        entry = _Entry(out, False, bound)
        self.results.append(entry)
        self.required.append(entry)
        if one_in(self.draw, 4):
            stats = [_Entry(mean, False, 2.0), _Entry(invstd, False, 1e3)]
            self.results += stats
            self.required += stats

    def backward_step(self, x: _Entry, dim: int) -> None:
        """A normalization's backward shape: a row reduction over `dim` that the full-size
        output reads again, and a column reduction (sum, max or min over every other axis) of
        the same values, as dx and dweight (inner_outer_persistent's fusions)."""
        o = self.fd.ops
        v = x.val
        g = self.pick(full=True, floating=True)
        prod = o.mul(g.val, v)
        row = o.sum(prod, [dim], keepdim=True)
        dx = o.sub(g.val, o.mul(v, row))
        others = [d for d in range(v.ndim) if d != dim]
        op = self.draw(st.sampled_from(["sum", "max", "min"]))
        col = getattr(o, op)(prod, others)
        if self.draw(st.booleans()):
            col = o.cast(col, DataType.BFloat16)
        bound = g.bound * x.bound
        row_entry = _Entry(dx, False, g.bound + x.bound * bound * 1100.0 + 3.0)
        col_entry = _Entry(col, False, bound * (1100.0 if op == "sum" else 1.0) + 3.0)
        self.pool.append(row_entry)
        self.results += [row_entry, col_entry]
        self.required += [row_entry, col_entry]


def _unary_bound(op: str, b: float) -> float:
    if op in ("exp", "exp2", "expm1", "sinh", "cosh"):
        return math.exp(min(b, 50.0)) * 2 + 1
    if op in (
        "isnan",
        "isinf",
        "isfinite",
        "logical_not",
        "sign",
        "sigmoid",
        "tanh",
        "erf",
        "sin",
        "cos",
    ):
        return 1.0
    if op in ("rsqrt", "reciprocal"):
        return 2.0
    if op in (
        "log",
        "log2",
        "log10",
        "log1p",
        "sqrt",
        "atan",
        "asin",
        "acos",
        "atanh",
        "asinh",
        "acosh",
        "tan",
        "erfc",
    ):
        return b + 4.0
    return b + 1.0


@st.composite
def _fusions(
    draw: Any,
    max_inputs: int,
    max_ops: int,
    max_rank: int,
    dtypes: tuple,
    kinds: frozenset,
    ops: tuple,
    allow_scalars: bool,
    max_outputs: int,
) -> FusionDefinition:
    kind = draw(st.sampled_from(sorted(kinds)))
    moves = kind if kind in ("resize", "indexing") else None
    if moves is not None:
        kind = draw(st.sampled_from(_BASE_KINDS))
    rank = draw(st.integers(1, max_rank))
    with FusionDefinition() as fd:
        gen = _Gen(draw, fd, rank, dtypes, ops, max_rank)
        gen.scalars = []
        n_inputs = draw(st.integers(1, max_inputs))
        for i in range(n_inputs):
            full = i == 0
            gen.add_input(
                rank if full else draw(st.integers(1, rank)), full, draw(st.sampled_from(dtypes))
            )
        if allow_scalars and draw(st.integers(0, 3)) == 0:
            gen.scalars.append(
                fd.define_scalar(dtype=draw(st.sampled_from([DataType.Double, DataType.Int])))
            )
        n_ops = draw(st.integers(1, max_ops))
        if kind == "multi_segment":
            _multi_segment(draw, fd, gen, n_ops, max_outputs)
            return fd
        if kind == "reduction":
            n_red = 1
        elif kind == "multi_reduction":
            n_red = draw(st.integers(2, 3))
        else:
            n_red = 0
        special_at = sorted(draw(st.lists(st.integers(0, n_ops), min_size=n_red, max_size=n_red)))
        norm_at = draw(st.integers(0, n_ops)) if kind == "normalization" else -1
        moves_at = draw(st.integers(0, n_ops)) if moves is not None else -1
        for step in range(n_ops + 1):
            for _ in range(special_at.count(step)):
                gen.reduction_step()
            if step == norm_at:
                gen.normalization_step()
            if step == moves_at:
                (_resized_input_step if moves == "resize" else _indexing_step)(draw, fd, gen)
            if step < n_ops:
                gen.pointwise_step()
        # Half the resize fusions add cats alone: a slice or pad of computed values runs
        # between kernels, and a fusion with one does not fold its cats (their parts'
        # kernels writing into the windows) at all.
        cats_only = moves == "resize" and draw(st.booleans())
        resized_one_in = 2 if moves == "resize" and not cats_only else 8
        _add_outputs(draw, fd, gen, max_outputs, resized_one_in)
        if moves == "resize":
            _resized_intermediates(draw, fd, gen, cats_only)
    return fd


def _multi_segment(
    draw: Any, fd: FusionDefinition, gen: _Gen, n_ops: int, max_outputs: int
) -> None:
    """A fusion no single scheduler takes (for most inputs): two reductions over different
    axes, outputs of unrelated shapes, or a matmul with pointwise work around it."""
    patterns = ["unrelated_outputs", "matmul"]
    if gen.rank >= 2:
        patterns.append("two_reductions")
    pattern = draw(st.sampled_from(patterns))
    o = fd.ops
    if pattern == "two_reductions":
        for _ in range(draw(st.integers(0, n_ops))):
            gen.pointwise_step()
        e = gen.pick(full=True, floating=True)
        op1, op2 = (
            draw(st.sampled_from(["sum", "max", "mean"])),
            draw(st.sampled_from(["sum", "max", "min", "mean"])),
        )
        r1 = getattr(o, op1)(e.val, [draw(st.integers(0, e.val.ndim - 1))])
        r2 = getattr(o, op2)(r1, [draw(st.integers(0, r1.ndim - 1))])
        grow = 1100.0 if op1 == "sum" else 1.0
        grow *= 1100.0 if op2 == "sum" else 1.0
        last = _Entry(r2, False, e.bound * grow + 3.0)
        gen.results.append(last)
        gen.required.append(last)
        if draw(st.booleans()):
            gen.results.append(_Entry(r1, False, e.bound * 1100.0 + 3.0))
        _add_outputs(draw, fd, gen, max_outputs)
        return
    # Library results are not exact: keep them away from discontinuous ops.
    ops = (
        gen.ops
        if pattern != "matmul"
        else tuple(op for op in gen.ops if op not in _EXACT_ONLY and op != "where") or ("add",)
    )
    other = _Gen(draw, fd, draw(st.integers(1, gen.rank)), gen.dtypes, ops, gen.max_rank)
    other.scalars = gen.scalars
    if pattern == "matmul":
        dt = draw(st.sampled_from([DataType.Float, DataType.Double]))
        x = fd.define_tensor(shape=[-1] * draw(st.integers(2, 3)), dtype=dt)
        w = fd.define_tensor(shape=[-1, -1], dtype=dt)
        if draw(st.booleans()):
            y = o.matmul(x, w)
        else:
            y = o.linear(
                x, w, fd.define_tensor(shape=[-1], dtype=dt) if draw(st.booleans()) else None
            )
        other.rank = y.ndim
        other.pool.append(_Entry(y, False, 4.0 * 1100.0))
    else:
        other.add_input(other.rank, True, draw(st.sampled_from(gen.dtypes)))
    for _ in range(n_ops):
        (gen if draw(st.booleans()) else other).pointwise_step()
    _add_outputs(draw, fd, gen, max(1, max_outputs - 1))
    _add_outputs(draw, fd, other, 1)


def _add_outputs(
    draw: Any, fd: FusionDefinition, gen: _Gen, max_outputs: int, resized_one_in: int = 8
) -> None:
    results = gen.results or gen.pool
    chosen = [results[-1]]
    extra = draw(st.integers(0, max_outputs - 1))
    for _ in range(extra):
        chosen.append(draw(st.sampled_from(results + gen.pool[:1])))
    reached = _cone_ids([e.val for e in chosen])
    chosen += [e for e in gen.required if id(e.val) not in reached]
    narrow = [d for d in gen.dtypes if d in REDUCED_FLOATS]
    # Sometimes the outputs of full rank come in another axis order than the values they are
    # made of, all in the same one (a fusion the transpose scheduler takes whole), and
    # sometimes a single output does (one that takes segments).
    moved = gen.rank > 1 and one_in(draw, 4)
    common = _axis_order(draw, gen.rank) if moved else None
    for e in chosen:
        v: Any = e.val
        if narrow and v.dtype.is_floating and e.bound < 6e4 and draw(st.booleans()):
            v = fd.ops.cast(v, draw(st.sampled_from(narrow)))
        order = common if v.ndim == gen.rank else None
        if order is None and v.ndim > 1 and one_in(draw, 16):
            order = _axis_order(draw, v.ndim)
        if order is not None:
            v = fd.ops.permute(v, dims=order)
        fd.add_output(_maybe_resized(draw, fd, v, gen.ops, resized_one_in))


def _maybe_resized(
    draw: Any, fd: FusionDefinition, v: Any, ops: tuple[str, ...], one_in_n: int = 8
) -> Any:
    """One output in `one_in_n` is resized: mostly a slice of its value (_sliced), else a
    pad of it or a cat of it with itself or its negation (where `ops` has neg): a cat of
    computed parts is written part by part by the kernels, the others run between kernels."""
    if v.ndim == 0 or not one_in(draw, one_in_n):
        return v
    how = draw(st.sampled_from(["slice", "slice", "slice", "pad", "cat"]))
    if how == "slice":
        return _sliced(draw, fd, v, ops)
    if how == "pad":
        widths = [draw(st.integers(0, 2)) for _ in range(2 * draw(st.integers(1, v.ndim)))]
        fills = {"bool": True, "int": 3, "float": -1.5}
        kind = "bool" if v.dtype is DataType.Bool else "float" if v.dtype.is_floating else "int"
        return fd.ops.pad(v, widths, draw(st.sampled_from([None, fills[kind]])))
    negated = v.dtype is not DataType.Bool and "neg" in ops and draw(st.booleans())
    other = fd.ops.neg(v) if negated else v
    return fd.ops.cat([v, other], dim=draw(st.integers(-v.ndim, v.ndim - 1)))


def _sliced(draw: Any, fd: FusionDefinition, v: Any, ops: tuple[str, ...]) -> Any:
    """A slice of `v`: some of its axes start up to 2 elements in and end at their size, 1
    to 3 before it (where `ops` has sub) or far past it (clamped), every first, second or
    third element. The canonical form moves a slice of element-wise work onto the inputs
    (each then read in place), and a slice of anything else is indexing between segments."""
    starts: list[Any] = []
    stops: list[Any] = []
    steps: list[int] = []
    for i, axis in enumerate(v.axes):
        size = fd.ops.size(v, i)
        if axis.is_broadcast or draw(st.booleans()):
            starts.append(0)
            stops.append(size)  # the whole axis: a broadcast one stays one
            steps.append(1)
            continue
        starts.append(draw(st.integers(0, 2)))
        # An end before the size is computed with sub, where the fusion may use it.
        ends = ["size", "before", "past"] if "sub" in ops else ["size", "past"]
        end = draw(st.sampled_from(ends))
        if end == "before":
            stops.append(fd.ops.sub(size, draw(st.integers(1, 3))))
        else:
            stops.append(size if end == "size" else 1 << 20)
        steps.append(draw(st.sampled_from([1, 1, 2, 3])))
    return fd.ops.slice(v, starts, stops, steps)


def _resized_intermediates(draw: Any, fd: FusionDefinition, gen: _Gen, cats_only: bool) -> None:
    """One or two more outputs, each a cat (or, unless `cats_only`, sometimes a pad or a
    slice) of a value the fusion computes, or one time in four a partial rotary cat of the
    first input (_partial_rotary), sometimes with an element-wise op after it.

    A cat's parts are distinct computed values, which the kernels computing them write into
    their windows of the output, and the first part is often reduced as well, as another
    output: where that reduction is another kernel, it reads the part back from its window.
    An H100 campaign found two fusions whose reduction read it from elsewhere; they drew a
    cat at one output in 40, its parts rarely computed and read again, and the emulator
    campaigns before them had met none."""
    o = fd.ops
    for _ in range(draw(st.integers(1, 2))):
        e = gen.pick(full=draw(st.booleans()))
        v: Any = e.val
        if v.ndim == 0:
            continue
        if v.is_input or draw(st.booleans()):  # a part computed here, of any value
            v = o.abs(v) if v.dtype is not DataType.Bool else o.logical_not(v)
        how = "cat" if cats_only else draw(st.sampled_from(["cat", "cat", "cat", "pad", "slice"]))
        if one_in(draw, 4):
            out = _partial_rotary(draw, fd, gen)
        elif how != "cat":
            out = _maybe_resized(draw, fd, v, gen.ops, 1)
        else:
            other = o.neg(v) if v.dtype is not DataType.Bool else o.logical_not(v)
            parts = [v, other] if draw(st.integers(0, 3)) else [other, v]
            out = o.cat(parts, dim=draw(st.integers(-v.ndim, v.ndim - 1)))
            if draw(st.integers(0, 2)) and v.dtype is not DataType.Bool:
                dims = draw(
                    st.lists(st.integers(0, v.ndim - 1), min_size=1, max_size=2, unique=True)
                )
                red = o.sum(v, dims) if draw(st.booleans()) else o.max(v, dims)
                fd.add_output(red)
        if out.dtype.is_floating and draw(st.booleans()):
            out = o.mul(o.abs(out), 2.0)  # moves into the parts of a cat
        fd.add_output(out)


def _partial_rotary(draw: Any, fd: FusionDefinition, gen: _Gen) -> Any:
    """A cat along the last axis of an input of a computed part of its first 1 or 2 elements
    there and the rest of it as it is (a view of the input, of another size): Llama's partial
    rotary embedding, whose parts a kernel each writes into their windows."""
    o = fd.ops
    x: Any = gen.pool[0].val  # the first input, of the fusion's full rank
    rank = x.ndim
    n = draw(st.integers(1, 2))
    size = o.size(x, rank - 1)
    starts, stops = [0] * rank, [o.size(x, i) for i in range(rank)]
    head = o.slice(x, starts, [*stops[:-1], n])
    rest = o.slice(x, [*starts[:-1], n], [*stops[:-1], size])
    if head.dtype is DataType.Bool:
        head = o.logical_not(head)
    else:
        head = o.neg(o.abs(head)) if head.dtype.is_floating else o.mul(head, 3)
    return o.cat([head, rest], dim=rank - 1)


def _resized_input_step(draw: Any, fd: FusionDefinition, gen: _Gen) -> None:
    """A slice or a pad (widths from -1 to 2, negative ones cropping) of an input, read by
    the kernel that uses it (a slice in place, a pad inside its window): an element-wise op
    of it, sometimes reduced over an axis, as an output (its shape is its own)."""
    o = fd.ops
    inputs = [e.val for e in gen.pool if e.val.is_input and e.val.ndim > 0]
    if not inputs:
        return
    x: Any = draw(st.sampled_from(inputs))
    padded = draw(st.booleans())
    if padded:
        widths = [draw(st.integers(-1, 2)) for _ in range(2 * draw(st.integers(1, x.ndim)))]
        fills = {"bool": True, "int": 3, "float": -1.5}
        kind = "bool" if x.dtype is DataType.Bool else "float" if x.dtype.is_floating else "int"
        x = o.pad(x, widths, draw(st.sampled_from([None, fills[kind]])))
    if x.dtype in REDUCED_FLOATS:
        x = o.cast(x, DataType.Float)
    v = x if padded and draw(st.booleans()) else _sliced(draw, fd, x, gen.ops)
    if v.dtype.is_floating:
        v = o.add(o.mul(v, draw(st.sampled_from([2.0, -0.5]))), 1.5)
    elif v.dtype is not DataType.Bool:
        v = o.mul(v, 3)
    if v.dtype.is_floating and draw(st.booleans()):
        v = o.sum(v, [draw(st.integers(0, v.ndim - 1))])
    entry = _Entry(v, False, 4096.0)
    gen.results.append(entry)
    gen.required.append(entry)


def _indexing_step(draw: Any, fd: FusionDefinition, gen: _Gen) -> None:
    """index_select, gather or take_along_axis of a value of the fusion at positions an
    integer input holds (inputs_for draws them inside the axis), sometimes with an
    element-wise op or a reduction after it, as an output. take_along_axis with a [..., 1]
    index, then a sum over that axis, is how cross-entropy picks each row's target."""
    o = fd.ops
    e = gen.pick(full=True)
    x: Any = e.val
    if x.ndim == 0:
        return
    d = draw(st.integers(0, x.ndim - 1))
    int_type = draw(st.sampled_from([DataType.Int, DataType.Int32]))
    op = draw(st.sampled_from(["index_select", "gather", "take_along_axis"]))
    if op == "index_select":
        index = fd.define_tensor(shape=[-1], dtype=int_type)
        out: Any = o.index_select(x, index, d)
    elif op == "gather":
        index = fd.define_tensor(shape=[-1] * x.ndim, dtype=int_type)
        out = o.gather(x, index, d)
    else:
        # Each other axis of the index either matches x's or is 1 (broadcast); the
        # indexed one is free, sometimes 1 (one position a row).
        shape = [
            (1 if draw(st.booleans()) else -1)
            if i == d
            else (1 if a.is_broadcast or one_in(draw, 4) else -1)
            for i, a in enumerate(x.axes)
        ]
        index = fd.define_tensor(shape=shape, dtype=int_type)
        out = o.take_along_axis(x, index, d)
    if out.dtype.is_floating and draw(st.booleans()):
        out = o.mul(out, 2.0)
    if draw(st.booleans()):
        if out.dtype is DataType.Bool:
            out = o.cast(out, DataType.Float)
        out = o.sum(out, [d])
    entry = _Entry(out, e.exact, e.bound * 1100.0 + 3.0)
    gen.results.append(entry)
    gen.required.append(entry)


def _axis_order(draw: Any, rank: int) -> list[int]:
    """A permutation of `rank` axes other than the identity."""
    return list(draw(st.permutations(range(rank)).filter(lambda p: list(p) != sorted(p))))


def _cone_ids(vals: list[Val]) -> set[int]:
    seen: set[int] = set()
    stack = list(vals)
    while stack:
        v = stack.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        if v.definition is not None:
            stack.extend(v.definition.inputs)
    return seen


def fusions(
    *,
    max_inputs: int = 3,
    max_ops: int = 8,
    max_rank: int = 3,
    dtypes: tuple[DataType, ...] = DEFAULT_DTYPES,
    kinds: frozenset[str] | set[str] = frozenset({"pointwise"}),
    ops: tuple[str, ...] | None = None,
    allow_scalars: bool = True,
    max_outputs: int = 3,
) -> st.SearchStrategy[FusionDefinition]:
    """A strategy of finished FusionDefinitions.

    max_inputs: tensor inputs (>= 1; layer/rms norm may add weight and bias inputs).
    max_ops: pointwise ops per fusion (composites count as one). max_rank: rank of the
    largest input. dtypes: input dtypes to draw from (narrow dtypes also used for output
    casts). kinds: subset of {"pointwise", "reduction", "normalization", "multi_reduction",
    "multi_segment"}; "pointwise" fusions contain no ReductionOp/WelfordOp; "multi_segment"
    fusions need several segments for most inputs (two reductions over different axes,
    outputs of unrelated shapes, or a matmul/linear with pointwise work after it).
    ops: pointwise op names from kfuse.ir.ops.OPS to use (default all). allow_scalars:
    sometimes add a symbolic scalar input. max_outputs: outputs chosen per fusion (a
    reduction or normalization result that no chosen output uses is added as an output too,
    so it is never pruned).
    """
    kinds = frozenset(kinds)
    if not kinds or not kinds <= KINDS:
        raise ValueError(f"kinds must be a non-empty subset of {sorted(KINDS)}, got {kinds}")
    if max_inputs < 1 or max_ops < 1 or max_rank < 1 or max_outputs < 1:
        raise ValueError("max_inputs, max_ops, max_rank and max_outputs must be >= 1")
    ops = tuple(ops) if ops is not None else tuple(OPS)
    unknown = [op for op in ops if op not in OPS]
    if unknown:
        raise ValueError(f"unknown ops {unknown}")
    return _fusions(
        max_inputs, max_ops, max_rank, tuple(dtypes), kinds, ops, allow_scalars, max_outputs
    )

"""The fusion generator's pool of values and its pointwise steps, which draw ops from the
op table (kfuse.ir.ops): a row's domain guards its operand, its precision class and
discontinuity keep exact values apart from rounded ones, its bound class estimates the
result's magnitude and its draw class picks the operands' shape (see the package docstring).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, cast

from hypothesis import strategies as st

from kfuse.dtypes import REDUCED_FLOATS, DataType
from kfuse.errors import DefinitionError
from kfuse.frontend import FusionDefinition
from kfuse.ir.ops import OPS, fd_call
from kfuse.ir.random_ops import RANDOM_DTYPES
from kfuse.ir.values import TensorView, Val
from kfuse.testing.strategies import complex_values


def one_in(draw: Any, n: int) -> bool:
    """True one time in `n`, drawn; shrinks to False (Hypothesis shrinks integers to 0), so
    a failure's shrunk example keeps only the rare features it needs."""
    return bool(draw(st.integers(0, n - 1)) == n - 1)


@dataclass
class Entry:
    val: TensorView
    exact: bool  # computed without rounding from the inputs
    bound: float  # an upper bound of |value| for inputs within the default value range


def input_bound(dtype: DataType) -> float:
    """An upper bound of |value| of a real input of `dtype` as kfuse.testing.inputs draws it
    (floats within its default value_range of 2, small integers, Bool)."""
    return 1.0 if dtype is DataType.Bool else 8.0 if not dtype.is_floating else 2.0


class Gen:
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
        self.pool: list[Entry] = []
        self.results: list[Entry] = []  # candidates for outputs, newest last
        self.required: list[Entry] = []  # reductions that must reach an output
        # Complex values (kfuse.testing.strategies.complex_values): only the pointwise ops
        # that take them draw from here; the pool gets a real part of each.
        self.complex_pool: list[Entry] = []

    # ---- inputs ----
    def add_input(self, rank: int, full: bool, dtype: DataType) -> Entry:
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
        e = Entry(t, True, 3.0 if dtype.is_complex else input_bound(dtype))
        if dtype.is_complex:
            self.complex_pool.append(e)
            e = complex_values.real_of(self, e)
        self.pool.append(e)
        return e

    def real_floating_dtypes(self) -> list[DataType]:
        """The fusion's real floating dtypes (Float where it has none), for a new input."""
        return [d for d in self.dtypes if d.is_floating and not d.is_complex] or [DataType.Float]

    def pick(self, *, exact: bool = False, full: bool = False, floating: bool = False) -> Entry:
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
        if floating and e.val.dtype.is_complex:  # its real part: a cast to Float would warn
            e = Entry(cast(TensorView, self.fd.ops.real(e.val)), e.exact, e.bound)
        if e.val.dtype in REDUCED_FLOATS or (floating and not e.val.dtype.is_floating):
            e = Entry(cast(TensorView, self.fd.ops.cast(e.val, DataType.Float)), e.exact, e.bound)
        return e

    # ---- pointwise ----
    def guard(self, op: str, e: Entry) -> Entry:
        o = self.fd.ops
        kind = OPS[op].domain
        v, b = e.val, e.bound
        if kind == "pos":
            return Entry(o.add(o.abs(v), 0.5), False, b + 0.5)
        if kind == "nonneg":
            return Entry(o.abs(v), e.exact, b)
        if kind == "ge1":
            return Entry(o.add(o.abs(v), 1.5), False, b + 1.5)
        if kind == "unit":
            return Entry(o.mul(o.tanh(v), 0.9), False, 0.9)
        if kind == "zero_two":
            return Entry(o.add(o.mul(o.tanh(v), 0.9), 1.0), False, 1.9)
        if kind == "tan" or (kind == "small" and b > 8) or (kind == "moderate" and b > 50):
            return Entry(o.tanh(v), False, 1.0)
        return e

    def unary(self, op: str) -> Entry | None:
        row = OPS[op]
        if row.complex_only:  # imag: of a complex value made of two drawn parts
            return self.complex_part(op)
        e = self.guard(op, self.pick(exact=row.discontinuous))
        bound = _unary_bound(row.bound, e.bound)
        v = self.zero_sign_hidden(op, e.val)
        out = build(self.fd, op, [v])
        return Entry(cast(TensorView, out), e.exact and row.precision == "exact", bound)

    def complex_part(self, op: str) -> Entry:
        """`op` (a part of a complex value) of fd.ops.complex of two drawn floating values:
        exactly the second one for imag."""
        re, im = self.pick(floating=True), self.pick(floating=True)
        o = self.fd.ops
        z = o.complex(re.val, im.val)  # pick gives them as Float or Double
        return Entry(cast(TensorView, build(self.fd, op, [z])), re.exact and im.exact, im.bound)

    def zero_sign_hidden(self, op: str, v: Any) -> Any:
        """v + 0.0 for an op that shows the sign of a zero (atan2, signbit) of a floating
        Val: that sign is unspecified where a max, min or clamp tie made the zero (torch on
        the CPU keeps the first operand's, NumPy the second's); + 0.0 turns -0.0 into +0.0 in
        the kernel and the reference alike. signbit (the Bool one) shows a NaN's sign too,
        which arithmetic leaves unspecified (a GPU gives its canonical +NaN, x86 keeps an
        operand's sign): a NaN becomes the constant +NaN there."""
        if not (OPS[op].shows_zero_sign and isinstance(v, Val) and v.dtype.is_floating):
            return v
        o = self.fd.ops
        hidden = o.add(v, 0.0)
        if OPS[op].result == "bool":
            hidden = o.where(o.isnan(v), math.nan, hidden)
        return hidden

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

    def binary(self, op: str) -> Entry | None:
        row = OPS[op]
        if row.draw == "integer":
            return self.integer_binary(op)
        if row.draw == "floating":  # nextafter: Float or Double operands
            x, y = self.pick(floating=True), self.pick(floating=True)
            return Entry(build(self.fd, op, [x.val, y.val]), False, max(x.bound, y.bound))
        a, ea, ba = self.operand(row.discontinuous)
        b, eb, bb = self.operand(row.discontinuous)
        if not isinstance(a, Val) and not isinstance(b, Val):
            picked = self.pick(exact=row.discontinuous)  # the exactness a jump needs
            a, ea, ba = picked.val, picked.exact, picked.bound
        if row.draw == "divide":
            return self.divlike(op, a, ea, ba, b)
        bound = {"sum": ba + bb, "product": ba * bb, "angle": math.pi}.get(row.bound, max(ba, bb))
        if row.bound in ("sum", "product") and bound > 1e4:
            return None
        a, b = (self.zero_sign_hidden(op, v) for v in (a, b))
        out = build(self.fd, op, [a, b])
        return Entry(out, ea and eb and row.precision == "exact", bound)

    def integer_binary(self, op: str) -> Entry | None:
        """An op of the draw class 'integer' (gcd, the shifts) of an integer value and
        another, or a constant; a shift's constant count is often about the width, where
        the shifts' edge cases are."""
        ints = [e for e in self.pool if e.val.dtype.is_integral and not e.val.dtype.is_boolean]
        if not ints:
            # An exact value truncated to Int32, made finite and within Int32's range first
            # (a kernel's cast saturates and maps NaN to 0, as torch's on a GPU does; a CPU
            # framework's does not): the same integers in a kernel and the reference.
            exact = self.pick(exact=True)
            if not exact.exact or exact.val.dtype is DataType.Bool:
                return None
            o = self.fd.ops
            v = o.where(o.isfinite(exact.val), o.clamp(exact.val, -(2**30), 2**30), 0)
            ints = [
                Entry(cast(TensorView, o.cast(v, DataType.Int32)), True, min(exact.bound, 2.0**30))
            ]
        a = self.draw(st.sampled_from(ints))
        b: Any
        if self.draw(st.booleans()):
            b = self.draw(st.sampled_from(ints)).val
        elif "shift" in op:
            b = self.draw(st.sampled_from([0, 1, 3, 7, 31, 32, 33, 63, 64, -1]))
        else:
            b = self.draw(st.sampled_from([0, 6, -4, 12]))
        return Entry(build(self.fd, op, [a.val, b]), a.exact, a.bound)

    def divlike(self, op: str, a: Any, ea: bool, ba: float, b: Any) -> Entry | None:
        """An op of the draw class 'divide': pow of a positive base (integers: by a small
        exponent), fmod and remainder of an exact dividend, else a / b with b kept away
        from 0."""
        o = self.fd.ops
        is_int = isinstance(a, Val) and not a.dtype.is_floating
        if op == "pow":
            if is_int:
                return Entry(o.pow(a, self.draw(st.sampled_from([0, 1, 2, 3]))), ea, ba**3)
            base = o.add(o.abs(a), 0.5)
            expo = self.draw(st.sampled_from([2.0, 3.0, 0.5, -1.0, -2.0]))
            return Entry(o.pow(base, expo), False, max((ba + 0.5) ** abs(expo), 4.0))
        if OPS[op].discontinuous:  # fmod, remainder: a jump where a / b crosses an integer
            if is_int and isinstance(b, Val) and not b.dtype.is_floating:
                return Entry(getattr(o, op)(a, o.add(o.abs(b), 1)), ea, ba)
            if not ea:
                return None
            d = self.draw(st.sampled_from([0.5, 2.0, 0.25, -0.5]))
            return Entry(getattr(o, op)(a, d), True, abs(d))
        denom = (
            b
            if not isinstance(b, Val)
            else (o.add(o.abs(b), 0.5) if b.dtype.is_floating else o.add(o.abs(b), 1))
        )
        if not isinstance(denom, Val) and abs(float(denom)) < 0.25:
            denom = 0.5
        return Entry(build(self.fd, op, [a, denom]), False, ba * 4)

    def ternary(self, op: str) -> Entry | None:
        o = self.fd.ops
        draw = OPS[op].draw
        if draw == "where":
            x, y = self.pick(exact=True), self.pick(exact=True)
            cond = o.lt(x.val, y.val) if self.draw(st.booleans()) else o.ge(x.val, 0.5)
            a, b = self.pick(), self.pick()
            return Entry(
                build(self.fd, op, [cond, a.val, b.val]), a.exact and b.exact, max(a.bound, b.bound)
            )
        if draw == "clamp":
            a = self.pick()
            if a.val.dtype is DataType.Bool:
                return None
            lo = self.draw(st.sampled_from([-1, 0, -2]))
            return Entry(
                build(self.fd, op, [a.val, lo, lo + self.draw(st.sampled_from([1, 2, 3]))]),
                a.exact,
                a.bound,
            )
        assert draw == "floating", op
        s, e, w = self.pick(floating=True), self.pick(floating=True), self.pick(floating=True)
        return Entry(
            build(self.fd, op, [s.val, e.val, w.val]), False, (s.bound + e.bound) * (1 + w.bound)
        )

    def pointwise_step(self) -> None:
        op = self.draw(st.sampled_from(self.ops))
        arity = OPS[op].arity
        try:
            if self.complex_pool and one_in(self.draw, 3):
                e = complex_values.complex_step(self)
            else:
                e = (self.unary, self.binary, self.ternary)[arity - 1](op)
        except DefinitionError:
            return  # e.g. a bitwise op drew floating operands; dead exprs are pruned
        if e is not None and isinstance(e.val, TensorView):
            if e.val.dtype.is_complex:  # fd.ops.complex, or an op of complex values
                self.complex_pool.append(e)
                e = complex_values.real_of(self, e)
            self.pool.append(e)
            self.results.append(e)


_GROWTH = {"unit": 1.0, "two": 2.0}


def _unary_bound(growth: str, b: float) -> float:
    """|op(x)| for |x| <= b, by the op's bound class (kfuse.ir.op_info.BOUNDS)."""
    if growth == "exp":
        return math.exp(min(b, 50.0)) * 2 + 1
    if growth in _GROWTH:
        return _GROWTH[growth]
    return b + 4.0 if growth == "log" else b + 1.0


def build(fd: FusionDefinition, op: str, operands: list[Any]) -> Any:
    """op of the operands, through its fd.ops method (gelu_tanh: gelu(approximate='tanh'))."""
    method, keywords = fd_call(op)
    return getattr(fd.ops, method)(*operands, **keywords)


def factory_step(draw: Any, fd: FusionDefinition, gen: Gen) -> None:
    """A generated value (kfuse.ir.generated) into the pool, sized by the first input: a
    full of its shape, or a mask of iotas along its axes (a causal mask where it has two),
    each exact."""
    first = gen.pool[0].val
    o = fd.ops
    if draw(st.booleans()):
        fill = draw(st.sampled_from([0.5, -1.5, 2.0, 0.0]))
        made = o.full(o.shape(first), fill, DataType.Float)
        gen.pool.append(Entry(made, True, abs(fill)))
        return
    rank = first.ndim
    if rank == 1:
        mask = o.lt(o.iota(o.size(first, 0), dtype=DataType.Int), 3)
    else:
        rows = o.iota(o.size(first, rank - 2), dtype=DataType.Int)
        cols = o.iota(o.size(first, rank - 1), 1, 1, dtype=DataType.Int)
        lead = [True] * (rank - 2)
        mask = o.ge(
            o.broadcast(rows, [*lead, False, True]), o.broadcast(cols, [*lead, True, False])
        )
    gen.pool.append(Entry(mask, True, 1.0))


def random_step(draw: Any, fd: FusionDefinition, gen: Gen) -> None:
    """Random numbers (kfuse.ir.random_ops) into the pool, of the first input's shape, with
    a drawn seed and offset (stateless: the reference computes the same numbers exactly) and
    a drawn floating dtype (Half and BFloat16 numbers are generated in float and rounded, Double
    ones from two words): a uniform or normal value, or a dropout of a floating value of full
    shape by a uniform mask (kept where u < p, p a binary fraction, so that float32 and
    float64 compare alike)."""
    first = gen.pool[0].val
    o = fd.ops
    seeds = {
        "rng_seed": draw(st.integers(0, (1 << 63) - 1)),
        "rng_offset": draw(st.integers(0, (1 << 40))),
    }
    kind = draw(st.sampled_from(["uniform", "normal", "dropout"]))
    dtype = draw(st.sampled_from([d for d in RANDOM_DTYPES if d in gen.dtypes] or [DataType.Float]))
    if kind == "normal":
        mean, std = draw(st.sampled_from([(0.0, 1.0), (0.5, 0.25), (-1.0, 2.0)]))
        z = o.normal(mean, std, o.shape(first), **seeds, dtype=dtype)
        # Box-Muller: |z| < 7 standard deviations from float32 words (u >= 2^-33), 9 from
        # Double's 53 bits (u >= 2^-54)
        spread = 9 if dtype == DataType.Double else 7
        gen.pool.append(Entry(z, True, abs(mean) + spread * std))
        return
    low, high = draw(st.sampled_from([(0.0, 1.0), (-2.0, 3.0)]))
    u = o.uniform(low, high, o.shape(first), **seeds, dtype=dtype)
    if kind == "uniform":
        gen.pool.append(Entry(u, True, max(abs(low), abs(high))))
        return
    kept = gen.pick(full=True, floating=True)
    p = draw(st.sampled_from([0.5, 0.75, 0.875]))
    masked = o.where(o.lt(u, low + (high - low) * p), kept.val, 0.0)
    gen.pool.append(Entry(masked, kept.exact, kept.bound))

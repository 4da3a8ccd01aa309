"""What a float64 reference alone cannot judge: how far rounding may move a fusion's outputs.

Tracked alongside the float64 evaluation (kfuse.reference.conditioning), per tensor:

* magnitude: where sums feed a tensor linearly, the float64 sum of the absolute values of
  the terms they added. A float32 sum's rounding error is bounded by that, not by the result,
  which cancellation can make exactly zero (kfuse.testing.assert_close's `magnitude`). It
  follows sums, scans (each prefix sum its own) and Welford means through casts, neg, abs,
  shape ops, add, sub, maximum, minimum, clamp, threshold and where (magnitudes add), lerp
  (scaled by 1 + |weight|), mul (the product of the operands' magnitudes, a value without one its
  |value|), div (by a value without one: scaled by 1 / |value|; by one with one: also
  |quotient| times the divisor's magnitude, over |divisor|), the functions
  that map 0 to 0 with a bounded slope (SLOPE_BOUNDS: scaled by the bound, so that
  gelu(x - mean) is near zero where x - mean is) and the other unary
  functions (scaled by their steepest secant over the operand's rounding bound: exp, lgamma
  of a cancelling sum move its rounding by their slope there); any other op ends it. A unary
  function of an untracked value that was itself computed (rounded: a few ulps of it) starts
  one: its value's size plus its steepest secant over that rounding times the operand's
  size (lgamma of asin(...) near a pole). A sum
  or difference of a product starts one too (its terms' magnitudes), where the kernel may
  compute it as one fma (switches.FMA_CONTRACT): a * b - b * a is then the rounding of
  b * a, not 0.
* terms: how many terms the tracked sums added (a worst-case rounding bound grows with it).
* indeterminate: elements whose value is an infinity or NaN of a sign or kind that rounding
  decides. A tracked value within its rounding bound of zero (x - mean of a row whose mean
  is one of its values) times an infinity is +inf, -inf or NaN (exactly 0) depending on how
  the sum rounded: float64, the kernel's precision and the kernel each pick one (so is a
  lerp whose weight is such a value and whose end - start is infinite). Such an element
  stays indeterminate through ops that keep a value non-finite (casts, neg, abs, shape ops,
  add, sub, mul, a division's numerator, sums, lerp); any other op ends it. So are complex
  results whose sign C leaves unspecified (kfuse.reference.complex_signs).
* order_decides: elements whose value the order of a product's multiplications decides. A
  float32 product of n factors is only as exact as its partial products: where the factors
  above 1 multiply to more than float32's largest value, or those below 1 (not 0) to less
  than its smallest normal one, some order of the same multiplications overflows to inf or
  underflows to 0 on the way, whatever the exact product is (a GPU campaign met a prod of
  540,000 factors of 1 +- 0.001 whose exact value is 1e-80: float64 and the reference in
  the kernel's precision gave 0, the kernel's split order inf, two partial products of 3e33
  meeting first). So are a sum's whose partial sums can leave the range in some order, a
  Welford reduction's whose partial means can be further apart than the largest value (their
  difference overflows in some merge orders: inf, then inf - inf), and the elements of a
  unary function that meets a pole or its domain's edge within its operand's rounding
  bound (lgamma, log, 1/x of an x - mean that cancels): the order of the operand's sums
  decides the side it lands on. Any value is right there, and in everything computed from
  it: every op carries it on but the library ops (matmul, linear), which end it.
"""

from __future__ import annotations

from typing import Any

from kfuse.dtypes import DataType
from kfuse.ir.exprs import (
    BinaryOp,
    CastOp,
    Expr,
    GeneratedOp,
    ReductionOp,
    ScanOp,
    TernaryOp,
    UnaryOp,
    WelfordOp,
)
from kfuse.ir.ops import OPS
from kfuse.ir.structural import structural_info
from kfuse.ir.values import Scalar, TensorView, Val
from kfuse.reference.complex_signs import CARRIED_UNARY, track_complex
from kfuse.reference.function_bounds import ABSOLUTE_NEAR_ZEROS, OPERAND_SCALED_ERRORS, holds_pole
from kfuse.reference.order_marks import OrderMarks
from kfuse.reference.rounding import EPSILON, SUM_ROUNDING, may_fuse

SLOPE_BOUNDS: dict[str, float] = {
    name: row.slope for name, row in OPS.items() if row.slope is not None
}
"""Unary functions with f(0) = 0 and |f(a) - f(b)| <= bound * |a - b| everywhere (the op
table's OpInfo.slope): a rounding
error of their argument moves their value by at most bound times as much. A GPU campaign met
gelu_tanh(x - mean) * w: a row of equal x has x - mean exactly 0 in float64 (gelu 0, times an
infinite w NaN) and a residue in the kernel's sum order (gelu of it, times w, an infinity)."""


_EXACT_UNARY = ("neg", "abs")
"""Unary ops that change no bit of a magnitude: their value carries their operand's rounding
as it is."""


def _op_of(v: Val) -> str | None:
    """The name of the unary op that computed v, if one did."""
    expr = v.definition if isinstance(v, TensorView) else None
    return expr.op if isinstance(expr, UnaryOp) else None


class ConditionTracker(OrderMarks):
    """The module docstring's magnitude, terms and indeterminate of every tensor an evaluator
    (kfuse.reference.evaluator._Evaluator) computes, fed one expr at a time after it ran."""

    def __init__(self, evaluator: Any) -> None:
        self.ev = evaluator
        self.be = evaluator.be
        self.f64 = self.be.storage_dtype(DataType.Double, True)
        self.magnitudes: dict[Val, Any] = {}
        self.terms: dict[Val, int] = {}
        # float64 arrays of 0 and 1 (so shape ops and sums carry them as values do)
        self.indeterminate: dict[Val, Any] = {}
        self.order_decides: dict[Val, Any] = {}  # the same kind of arrays

    def track(self, expr: Expr) -> None:
        out = expr.outputs[0]
        if isinstance(expr, GeneratedOp):
            return  # made, not computed from operands: no sum, no mark reaches it
        if isinstance(out, TensorView):
            self._track_order(expr)
            if out.dtype.is_complex:
                track_complex(self, expr, out)  # signs C leaves unspecified
        if not isinstance(out, TensorView) or not out.dtype.is_floating:
            return
        self._track_magnitude(expr, out)
        self._track_indeterminate(expr, out)

    # ---- magnitudes ----
    def size(self, v: Val) -> Any:
        """|v| in float64, or its magnitude where it has one."""
        if v in self.magnitudes:
            return self.magnitudes[v]
        value = self.value(v)
        if isinstance(v, Scalar):
            return abs(float(value))
        return abs(self.as_f64(v))

    def value(self, v: Val) -> Any:
        return v.value if isinstance(v, Scalar) and v.is_constant else self.ev.env[v]

    def as_f64(self, v: Val) -> Any:
        """v's float64 value: an array for a tensor, a 0-d one for a scalar."""
        if isinstance(v, Scalar):
            return self.be.constant(float(self.value(v)), self.f64, self.ev.like)
        return self.be.astype(self.value(v), self.f64)

    def _track_magnitude(self, expr: Expr, out: TensorView) -> None:
        mags, terms = self.magnitudes, self.terms
        op = getattr(expr, "op", None)
        inputs = [v for v in expr.inputs if isinstance(v, (TensorView, Scalar))]
        first = expr.inputs[0]
        if isinstance(expr, ReductionOp) and op == "sum":
            mags[out] = self.be.reduce("sum", self.size(first), expr.dims, self.f64)
            terms[out] = self._reduced_count(expr) * terms.get(first, 1)
        elif isinstance(expr, WelfordOp):
            count = self._reduced_count(expr)
            if count > 0:  # the mean's magnitude: that of the sum it divides
                total = self.be.reduce("sum", self.size(first), expr.dims, self.f64)
                mags[out] = total / count
                terms[out] = count * terms.get(first, 1)
        elif isinstance(expr, ScanOp) and op == "sum":  # each prefix sum: its terms'
            mags[out] = self.be.cumsum(self.size(first), expr.dim, self.f64)
            terms[out] = self.ev.shapes[first][expr.dim] * terms.get(first, 1)
        elif may_fuse(expr):
            # A sum of a product, which the kernel may compute as one fma (kfuse.codegen.
            # contraction): one rounding, no longer the twin of the other term's, so where the
            # two cancel that term's rounding shows (a * b - b * a is it, not 0). A sum's
            # error, bounded by its terms' magnitudes as any sum's.
            a, b = expr.inputs
            mags[out] = self.size(a) + self.size(b)
            terms[out] = terms.get(a, 1) + terms.get(b, 1)
        elif (
            isinstance(expr, UnaryOp)
            and first not in mags
            and op not in _EXACT_UNARY
            and op not in SLOPE_BOUNDS
            and first.dtype.is_floating
            and self._rounded(first)
        ):
            # The operand was rounded where it was computed (a few ulps of itself, which the
            # kernel's math functions and float64 differ by), and the function moves that by
            # its slope there: lgamma of asin(0.9 * tanh(x)) near the pole at -1 (an emulator
            # campaign: 1.5 ulps of the operand moved lgamma by 5.6e-4 of 8.7, past float's
            # tolerance). The value's own rounding is bounded by its size, as a sum's by its
            # terms': the magnitude is both (never less than |value|, which a later sum of
            # it adds as its term's magnitude). Well-conditioned functions so gain a few ulps
            # of their value; an infinity or NaN none (it must still match).
            value = self.as_f64(out)
            finite = self.be.fn("isfinite")(value)
            own = self.be.where(finite, abs(value), self.be.constant(0.0, self.f64, self.ev.like))
            rounded = self._computed_size(first)
            mags[out], terms[out] = own + self._through(str(op), first, out, rounded, 1), 1
        elif any(v in mags for v in inputs):
            self._carry_magnitude(expr, out)

    def _carry_magnitude(self, expr: Expr, out: TensorView) -> None:
        """The magnitude of an op some of whose operands have one (the module docstring's
        list); nothing where the op ends it."""
        mags, terms = self.magnitudes, self.terms
        op = getattr(expr, "op", None)
        inputs = [v for v in expr.inputs if isinstance(v, (TensorView, Scalar))]
        first = expr.inputs[0]
        if isinstance(expr, CastOp) or (isinstance(expr, UnaryOp) and op in _EXACT_UNARY):
            mags[out], terms[out] = mags[first], terms[first]
        elif isinstance(expr, UnaryOp) and op in SLOPE_BOUNDS:
            mags[out], terms[out] = mags[first] * SLOPE_BOUNDS[op], terms[first]
        elif isinstance(expr, UnaryOp) and first.dtype.is_floating:
            mags[out] = self._through(str(op), first, out, mags[first], terms[first])
            terms[out] = terms[first]
        elif (row := structural_info(expr)) is not None:
            # Elements moved keep their magnitudes; a pad's value is exact: magnitude 0.
            data = row.data_inputs(expr)
            mags[out] = self._structural(expr, [self.size(t) for t in data])
            terms[out] = max(terms.get(t, 1) for t in data)
        elif isinstance(expr, BinaryOp) and op in ("add", "sub"):
            a, b = expr.inputs
            mags[out] = self.size(a) + self.size(b)
            terms[out] = terms.get(a, 1) + terms.get(b, 1)
        elif (isinstance(expr, BinaryOp) and op in ("maximum", "minimum")) or (
            isinstance(expr, TernaryOp) and op == "clamp"
        ):
            # Each operand moves the result at most as far as it moves itself (a slope of 0
            # or 1): bounded as a sum of the operands would be (a cumulative sum that
            # cancels to about 0, clamped below 2, then log(|.| + 0.5): a GPU campaign).
            mags[out] = sum((self.size(v) for v in inputs[1:]), self.size(first))
            terms[out] = max(terms.get(v, 1) for v in inputs)
        elif isinstance(expr, TernaryOp) and op in ("threshold", "where"):
            # A selection of one of two values (threshold: x or its replacement; where: the
            # condition picks), each carried as it is (lgamma(lgamma(u)) thresholded, then
            # gelu: a GPU campaign). A rounding that moves x across the threshold, or a
            # condition computed from rounded values, is not judged here.
            picked = [expr.inputs[0], expr.inputs[2]] if op == "threshold" else expr.inputs[1:]
            mags[out] = sum((self.size(v) for v in picked[1:]), self.size(picked[0]))
            terms[out] = max(terms.get(v, 1) for v in picked if isinstance(v, (TensorView, Scalar)))
        elif isinstance(expr, TernaryOp) and op == "lerp":
            # start + weight * (end - start) or end - (end - start) * (1 - weight) (torch's
            # two forms): start and end move the result by up to 1 + |weight| times as much,
            # the weight by |end - start|; so a large weight carries a cancelling operand's
            # rounding (an emulator campaign: a weight of 2^33 times an end - start of 5e-4
            # whose start was x - x * sum(x * x)).
            start, end, weight = expr.inputs
            scale = 1.0 + abs(self.as_f64(weight))
            mags[out] = scale * (self.size(start) + self.size(end))
            if weight in mags:
                mags[out] = mags[out] + abs(self.as_f64(end) - self.as_f64(start)) * mags[weight]
            terms[out] = max(terms.get(v, 1) for v in inputs) + 2  # lerp's own roundings
        elif isinstance(expr, BinaryOp) and op == "mul":
            # (a + da)(b + db) - ab = a db + b da + da db: bounded by the product of the
            # magnitudes (each at least its value's size), with both operands' terms
            mags[out] = self.size(expr.inputs[0]) * self.size(expr.inputs[1])
            terms[out] = sum(terms.get(v, 1) for v in inputs if v in mags) or 1
        elif isinstance(expr, BinaryOp) and op == "div" and expr.inputs[1] not in mags:
            mags[out] = mags[first] / self.size(expr.inputs[1])
            terms[out] = terms[first]
        elif isinstance(expr, BinaryOp) and op == "div":
            a, b = expr.inputs
            mags[out] = self._quotient_magnitude(a, b)
            terms[out] = terms.get(a, 1) + terms[b]

    def _quotient_magnitude(self, a: Val, b: Val) -> Any:
        """a / b's magnitude where the divisor b has one: a / b moves by da / b - a db / b^2,
        so (|a|'s magnitude + |a / b| times b's) / |b|; 0 where b is 0 (the quotient is an
        infinity or NaN, which must match as it is) or the bound is not finite."""
        at = self.as_f64(b)
        zeros = self.be.constant(0.0, self.f64, self.ev.like)
        nonzero = at != 0
        safe = self.be.where(nonzero, abs(at), zeros + 1.0)
        quotient = abs(self.as_f64(a)) / safe
        moved = (self.size(a) + quotient * self.magnitudes[b]) / safe
        finite = self.be.fn("isfinite")(moved)
        return self.be.where(nonzero & finite, moved, zeros)

    def _computed_size(self, v: Val) -> Any:
        """The size whose few ulps bound a computed value v's rounding: |v|, plus the
        absolute size of the function that computed it where it is accurate to that near
        its zeros (ABSOLUTE_NEAR_ZEROS), plus its operand's size where its value is
        accurate to a few ulps of that (OPERAND_SCALED_ERRORS: gelu of a negative x)."""
        op = _op_of(v) or ""
        size = self.size(v) + ABSOLUTE_NEAR_ZEROS.get(op, 0.0)
        if op in OPERAND_SCALED_ERRORS:
            x = v.definition.inputs[0]  # type: ignore[union-attr]
            size = size + OPERAND_SCALED_ERRORS[op] * self.size(x)
        return size

    def _rounded(self, v: Val) -> bool:
        """Whether v's float64 value may differ from the kernel's by v's own rounding: it was
        computed by an op that rounds (not a fusion input, a generated tensor, or moves,
        negations, absolute values, widening casts and casts of integers of those)."""
        expr = v.definition if isinstance(v, TensorView) else None
        if expr is None or isinstance(expr, GeneratedOp):
            return False
        source = expr.inputs[0].dtype if expr.inputs else None
        exact = (
            structural_info(expr) is not None
            or (isinstance(expr, UnaryOp) and expr.op in _EXACT_UNARY)
            or (
                isinstance(expr, CastOp)
                and (
                    not source.is_floating  # type: ignore[union-attr]
                    or EPSILON.get(source, 0.0) >= EPSILON.get(v.dtype, 1.0)  # type: ignore[arg-type]
                )
            )
        )
        if not exact:
            return True
        return any(self._rounded(u) for u in expr.inputs if isinstance(u, TensorView))

    def _through(self, op: str, x: Val, out: TensorView, mag: Any, terms: int) -> Any:
        """The magnitude of unary `op`'s value where its operand x has one, `mag` (of
        `terms` terms): that times the steepest secant of op over x's rounding bound either
        side, so that op carries x's rounding as it moves it (lgamma of 1 - a * b, whose
        product the kernel fuses into an fma: the sum rounds within its terms' magnitudes,
        and near lgamma's steep parts that moves the value by more than its own dtype's
        tolerance; a GPU-less campaign met it). Where the secant is not finite (a pole, the
        domain's edge inside the bound) it is 0, and the element is marked order_decides
        (_mark_poles), as where the bound holds a pole between its ends (holds_pole)."""
        be = self.be
        row = OPS[op]
        reference = row.reference
        fn = (lambda a: reference(be, a)) if reference is not None else be.fn(row.name)
        at = self.as_f64(x)
        delta = SUM_ROUNDING * EPSILON[x.dtype] * terms * mag  # type: ignore[attr-defined]
        value, above, below = fn(at), fn(at + delta), fn(at - delta)
        move = be.fn("maximum")(abs(above - value), abs(below - value))
        zeros = self.be.constant(0.0, self.f64, self.ev.like)
        slope = be.where(delta > 0, move / be.where(delta > 0, delta, zeros + 1.0), zeros)
        isfinite = be.fn("isfinite")
        inside = holds_pole(self.be, op, at - delta, at + delta)
        self._mark_poles(out, isfinite(at) & (delta > 0), [value, above, below], inside)
        return be.where(isfinite(slope), slope, zeros) * mag

    def _mark_poles(
        self, out: TensorView, rounded: Any, values: list[Any], inside: Any = None
    ) -> None:
        """Mark `out` order_decides where a unary function met a pole or its domain's edge
        within its finite operand's rounding bound (`rounded`): of its value and those at
        the bound's ends (`values`), some are finite and some an infinity or NaN. Which side
        of the pole the operand lands on is the order its sums added in: a GPU campaign met
        lgamma of a normalized x - mean that is exactly 0 in float64 and in the kernel's
        precision (lgamma inf) and a residue in the kernel (lgamma 15.5)."""
        be, isfinite = self.be, self.be.fn("isfinite")
        # Finite at some of the three and not at others: a pole or an edge inside the bound
        # (log of a negative operand is NaN at all three: not rounding's doing).
        at, above, below = (isfinite(v) for v in values)
        met = rounded & ((at != above) | (at != below))
        if inside is not None:  # a pole between the three points (function_bounds.holds_pole)
            met = met | (rounded & inside)
        shape = self.ev.shapes[out]
        self._add_order_mark(out, be.broadcast_to(be.astype(met, self.f64), shape))

    def _reduced_count(self, expr: Expr) -> int:
        shape = self.ev.shapes[expr.inputs[0]]
        count = 1
        for d in expr.dims:  # type: ignore[attr-defined]
            count *= shape[d]
        return count

    def _zeros(self, shape: tuple[int, ...], value: Any) -> Any:
        """A float64 array of `shape` holding `value`."""
        return self.be.full(shape, float(value), self.f64, self.ev.like)

    def _structural(self, expr: Expr, arrays: list[Any]) -> Any:
        """The structural op `expr` (kfuse.ir.structural) evaluated with `arrays` (float64,
        or a number: an array of it) in place of its data inputs' values; the elements
        none of them gives (a pad's) are 0."""
        row = structural_info(expr)
        assert row is not None
        shapes = self.ev.shapes
        data = iter(arrays)
        args = []
        for k, v in enumerate(expr.inputs):
            if k == 0 or row.joins:
                a = next(data)
                if hasattr(a, "shape") and tuple(a.shape) != tuple(shapes[v]):  # a broadcast's
                    a = self.be.broadcast_to(a, tuple(shapes[v]))  # marks, in full (a reshape)
                args.append(a if hasattr(a, "shape") else self._zeros(shapes[v], a))
            elif k == row.fill_input:
                args.append(0.0)
            else:
                args.append(self.value(v))  # sizes, bounds, positions
        return row.reference(self.be, expr, args, shapes, self._zeros)

    # ---- indeterminate ----
    def near_zero(self, v: Val) -> Any:
        """Where tracked `v` is within its sums' worst-case rounding of zero (None: v has no
        magnitude)."""
        if v not in self.magnitudes:
            return None
        eps = EPSILON[v.dtype]  # type: ignore[attr-defined]
        bound = eps * self.terms[v] * self.magnitudes[v]
        return abs(self.as_f64(v)) <= bound

    def _track_indeterminate(self, expr: Expr, out: TensorView) -> None:
        ind = self.indeterminate
        op = getattr(expr, "op", None)
        first = expr.inputs[0]
        if isinstance(expr, CastOp) or (isinstance(expr, UnaryOp) and op in CARRIED_UNARY):
            if first in ind:
                ind[out] = ind[first]
        elif (row := structural_info(expr)) is not None:
            data = row.data_inputs(expr)
            if any(t in ind for t in data):
                ind[out] = self._structural(expr, [ind.get(t, 0.0) for t in data])
        elif isinstance(expr, ReductionOp) and op == "sum":
            if first in ind:
                ind[out] = self.be.reduce("sum", ind[first], expr.dims, self.f64) > 0
        elif isinstance(expr, ScanOp) and op == "sum":  # every later prefix holds it
            if first in ind:
                ind[out] = self.be.cumsum(ind[first], expr.dim, self.f64) > 0
        elif isinstance(expr, BinaryOp) and op in ("add", "sub", "mul", "div"):
            a, b = expr.inputs
            carried = [ind[v] for v in ((a, b) if op != "div" else (a,)) if v in ind]
            carried += self._rounding_decides(op, a, b)
            self.mark(out, carried)
        elif isinstance(expr, TernaryOp) and op == "lerp":
            # start + weight * (end - start): a near-zero tracked weight times an infinite
            # difference is +inf, -inf or NaN by the weight's rounding (a campaign met
            # lerp(x, f(x), f(x) - mean) with x = inf in a column of equal values)
            start, end, weight = expr.inputs
            carried = [ind[v] for v in expr.inputs if v in ind]
            small = self.near_zero(weight)
            if small is not None:
                gap = self.as_f64(end) - self.as_f64(start)
                carried.append(self.be.astype(small & self.be.fn("isinf")(gap), self.f64))
            self.mark(out, carried)

    def mark(self, out: TensorView, masks: list[Any]) -> None:
        """out is indeterminate where any of `masks` (float64 0/1 arrays) is; none: it is not."""
        if not masks:
            return
        mask = masks[0]
        for m in masks[1:]:
            mask = (mask + m) > 0
        self.indeterminate[out] = self.be.astype(mask, self.f64)

    def _rounding_decides(self, op: str, a: Val, b: Val) -> list[Any]:
        """Where a mul or div of `a` by `b` is non-finite of a kind rounding decides: a
        near-zero tracked factor times an infinity, a near-zero tracked numerator over zero
        (0 / 0 is NaN, a residue over 0 an infinity), an infinity over a near-zero tracked
        denominator (its sign)."""
        isinf = self.be.fn("isinf")
        found = []
        if op == "mul":
            for x, y in ((a, b), (b, a)):
                small = self.near_zero(x)
                if small is not None:
                    found.append(small & isinf(self.as_f64(y)))
        elif op == "div":
            small = self.near_zero(a)
            if small is not None:
                found.append(small & (self.as_f64(b) == 0))
            small = self.near_zero(b)
            if small is not None:
                found.append(small & isinf(self.as_f64(a)))
        return [self.be.astype(m, self.f64) for m in found]

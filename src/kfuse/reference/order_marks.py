"""The `order_decides` marks of the reference's condition tracking (kfuse.reference.conditions,
whose module docstring says what they are): elements whose value the order of a kernel's
operations decides, or whether it fused a product into a sum, so that any value is right
there. A mixin of ConditionTracker, which holds the state these methods read (be, f64, ev,
order_decides, magnitudes, terms) and the helpers they call (as_f64, _structural,
_rounded)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kfuse.dtypes import DataType
from kfuse.ir.exprs import (
    BinaryOp,
    CastOp,
    Expr,
    ReductionOp,
    ScanOp,
    TernaryOp,
    UnaryOp,
    WelfordOp,
)
from kfuse.ir.structural import structural_info
from kfuse.ir.values import Val
from kfuse.reference.rounding import (
    EPSILON,
    OVERFLOW_AT,
    SUM_ROUNDING,
    fused_products,
    largest_finite,
    may_fuse,
)


class OrderMarks:
    """ConditionTracker's order_decides part (see the module docstring)."""

    be: Any
    f64: Any
    ev: Any
    order_decides: dict[Val, Any]
    magnitudes: dict[Val, Any]
    terms: dict[Val, int]

    # ConditionTracker's methods these call
    as_f64: Callable[[Val], Any]
    _structural: Callable[[Expr, list[Any]], Any]
    _rounded: Callable[[Val], bool]

    def _track_order(self, expr: Expr) -> None:
        self._carry_order(expr)
        if may_fuse(expr):
            self._mark_fused_overflow(expr)
        elif isinstance(expr, CastOp):
            self._mark_cast_overflow(expr)

    def _carry_order(self, expr: Expr) -> None:
        """The marks of the order-deciding reductions `expr` is, and its operands' marks
        carried to its outputs."""
        marks = self.order_decides
        first = expr.inputs[0]
        floating = expr.outputs[0].dtype.is_floating  # type: ignore[union-attr]
        if isinstance(expr, ReductionOp) and expr.op == "prod" and floating:
            self._mark_products(expr, lambda a: self.be.reduce("sum", a, expr.dims, self.f64))
            return
        if isinstance(expr, ScanOp) and expr.op == "prod" and floating:
            self._mark_products(expr, lambda a: self.be.scan("sum", a, expr.dim, self.f64))
            if first not in marks:
                return
        if isinstance(expr, ReductionOp) and expr.op == "sum" and floating:
            self._mark_overflowing_sums(expr)
            if first not in marks:
                return
        if isinstance(expr, WelfordOp) and floating:
            self._mark_overflowing_welford(expr)
            if first not in marks:
                return
        if not any(v in marks for v in expr.inputs):
            return
        if isinstance(expr, (UnaryOp, BinaryOp, TernaryOp, CastOp)):
            # Arrays of the inputs' shapes, whose sizes broadcast as the op's operands do.
            mask: Any = 0.0
            for v in expr.inputs:
                if v in marks:
                    mask = mask + marks[v]
            for out in expr.outputs:
                shape = self.ev.shapes[out]
                marks[out] = self.be.broadcast_to(self.be.astype(mask > 0, self.f64), shape)
        elif (row := structural_info(expr)) is not None:
            data = row.data_inputs(expr)
            marks[expr.outputs[0]] = self._structural(expr, [marks.get(t, 0.0) for t in data])
        elif isinstance(expr, ScanOp) and first in marks:
            reached = self.be.cumsum(marks[first], expr.dim, self.f64) > 0
            mask = self.be.astype(reached, self.f64)
            out = expr.outputs[0]
            marks[out] = (
                mask if out not in marks else self.be.astype((mask + marks[out]) > 0, self.f64)
            )
        elif isinstance(expr, (ReductionOp, WelfordOp)) and first in marks:
            reached = self.be.reduce("sum", marks[first], expr.dims, self.f64) > 0
            for out in expr.outputs:
                mask = self.be.astype(reached, self.f64)
                marks[out] = (
                    mask if out not in marks else self.be.astype((mask + marks[out]) > 0, self.f64)
                )

    def _mark_products(self, expr: Expr, total: Any) -> None:
        """Where the prod's (or cumprod's) partial products can leave its precision's range
        (the module docstring); a factor that is NaN makes the product NaN in any order.
        `total`: the sum of an array over the factors of each result element."""
        import math

        be, x = self.be, self.as_f64(expr.inputs[0])
        wide = expr.outputs[0].dtype is DataType.Double
        largest = math.log2(largest_finite(expr))
        smallest = -1022.0 if wide else -126.0  # log2 of the smallest normal value
        size = abs(x)
        zeros = be.constant(0.0, self.f64, self.ev.like)
        ones = be.constant(1.0, self.f64, self.ev.like)
        logs = be.fn("log2")(be.where(size > 0, size, ones))  # log2 of inf is inf
        above = total(be.where(size > 1, logs, zeros))
        below = total(be.where(size < 1, logs, zeros))
        nan = total(be.astype(be.fn("isnan")(x), self.f64))
        # Each of the n multiplications rounds by a factor within (1 +- eps), so a product
        # within n * log2(1 + eps) of the range's end may leave it in the kernel's rounding
        # though not in float64's (a GPU campaign met a cumprod of 238,975 factors of
        # 1.00076: exactly -3.397e38, in the kernel -inf).
        eps = EPSILON[DataType.Double if wide else DataType.Float]
        slack = total(be.where(size > 0, ones, ones)) * math.log2(1.0 + eps)  # n of each
        mask = ((above + slack > largest) | (below - slack < smallest)) & (nan == 0)
        self.order_decides[expr.outputs[0]] = be.astype(mask, self.f64)

    def _add_order_mark(self, out: Val, marked: Any) -> None:
        """`out` is order_decides where `marked` (a float64 0/1 array of its shape) is 1, as
        well as where it was already."""
        earlier = self.order_decides.get(out)
        self.order_decides[out] = (
            marked if earlier is None else self.be.fn("maximum")(earlier, marked)
        )

    def _mark_overflowing_sums(self, expr: Expr) -> None:
        """Where a sum's partial sums can leave its dtype's range in some order and not in
        another: its positive terms (or its negative ones) add up past the largest value
        while the other sign's terms could bring the total back, or both signs' do (an
        emulator campaign met 64 terms of +-3.4e38: float64 and a sequential float32 sum give
        inf, the kernel's split order one partial +inf and one -inf: NaN). Any value is right
        there, as for a product whose order decides. A sum whose total is past the range by
        more than the other sign's terms is an infinity in every order: not marked."""
        be = self.be
        x = self.as_f64(expr.inputs[0])
        dims = expr.dims  # type: ignore[attr-defined]
        largest = largest_finite(expr)
        zeros = be.constant(0.0, self.f64, self.ev.like)
        nan = be.reduce("sum", be.astype(be.fn("isnan")(x), self.f64), dims, self.f64)
        pos = be.reduce("sum", be.where(x > 0, x, zeros), dims, self.f64)
        neg = be.reduce("sum", be.where(x < 0, -x, zeros), dims, self.f64)
        # float64's own sum of such terms may overflow too: inf in pos or neg is past it
        near = largest * (1.0 - 2.0**-20)  # a float32 sum's rounding on the way
        both = (pos > near) & (neg > near)
        back = ((pos > near) & (neg > 0) & (pos - neg <= largest * (1.0 + 2.0**-20))) | (
            (neg > near) & (pos > 0) & (neg - pos <= largest * (1.0 + 2.0**-20))
        )
        mask = (both | back) & (nan == 0)
        self._add_order_mark(expr.outputs[0], be.astype(mask, self.f64))

    def _mark_overflowing_welford(self, expr: Expr) -> None:
        """Where a Welford reduction's partial means can be further apart than its dtype's
        largest value: merging two partials takes their difference, which then overflows to
        an infinity in some orders (the mean inf, the next difference inf - inf: NaN) and in
        others not (an emulator campaign met 16 floats with -3.4e38 and 3.4e38 among them: the
        variance 1.5e76 in float64, inf in float32 taken in order, NaN in the kernel's tree of
        merges). Any value is right there, for every floating output. A group holding an
        infinity or NaN is left alone (its mean and variance are that in any order)."""
        be = self.be
        x = self.as_f64(expr.inputs[0])
        dims = expr.dims  # type: ignore[attr-defined]
        largest = largest_finite(expr)
        finite = be.fn("isfinite")(x)
        zeros = be.constant(0.0, self.f64, self.ev.like)
        nonfinite = be.reduce("sum", be.astype(~finite, self.f64), dims, self.f64)
        high = be.reduce("max", be.where(finite, x, zeros - largest), dims, self.f64)
        low = be.reduce("min", be.where(finite, x, zeros + largest), dims, self.f64)
        # the partial means lie between the group's extremes; a mean's rounding on the way
        mask = ((high - low) > largest * (1.0 - 2.0**-20)) & (nonfinite == 0)
        for out in expr.outputs:
            self._add_order_mark(out, be.astype(mask, self.f64))

    def _mark_fused_overflow(self, expr: Expr) -> None:
        """Where a double product the kernel may fuse into this sum (one fma: kfuse.codegen.
        contraction; nvFuser and torch.compile contract too) is past float64's range: the
        reference's product is an infinity (and the sum one, or NaN against the other term's
        infinity), the fma's exact and the sum perhaps finite. Either is right. (A float32
        product cannot leave float64's range, where the reference computes it: the fused
        value is the reference's, and the product rounded apart its alternative's.)"""
        if expr.outputs[0].dtype is not DataType.Double:  # type: ignore[union-attr]
            return
        be = self.be
        isfinite = be.fn("isfinite")
        shape = self.ev.shapes[expr.outputs[0]]
        for product in fused_products(expr):
            a, b = (self.as_f64(v) for v in product.definition.inputs)  # type: ignore[union-attr]
            over = isfinite(a) & isfinite(b) & ~isfinite(a * b)
            mark = be.broadcast_to(be.astype(over, self.f64), shape)
            self._add_order_mark(expr.outputs[0], mark)

    def _mark_cast_overflow(self, expr: Expr) -> None:
        """Where a cast to a narrower floating dtype meets the value from which it overflows
        (OVERFLOW_AT) within its operand's rounding bound: the kernel's value and float64's
        may fall either side, one the largest finite value, the other an infinity (a GPU
        campaign met a float32 cumulative sum of 98,989 terms cast to Half: 65504 in float64,
        inf in the kernel). The bound is a tracked sum's (its terms' magnitudes, as
        ConditionTracker._through's) or a few ulps of a computed value."""
        out, x = expr.outputs[0], expr.inputs[0]
        target, source = out.dtype, x.dtype  # type: ignore[union-attr]
        if target not in OVERFLOW_AT or not source.is_floating or source.is_complex:
            return
        if EPSILON.get(source, 1.0) >= EPSILON[target]:
            return  # not narrower: the cast is exact
        be = self.be
        at = self.as_f64(x)
        eps = EPSILON[source]
        if x in self.magnitudes:
            delta = SUM_ROUNDING * eps * self.terms[x] * self.magnitudes[x]
        elif self._rounded(x):
            delta = SUM_ROUNDING * eps * abs(at)
        else:
            return  # an input's exact value: the cast rounds it one way everywhere
        near = be.fn("isfinite")(at) & (abs(abs(at) - OVERFLOW_AT[target]) <= delta)
        self._add_order_mark(out, be.astype(near, self.f64))

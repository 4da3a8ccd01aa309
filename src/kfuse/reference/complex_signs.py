"""Complex values whose sign C leaves unspecified: indeterminate elements
(kfuse.reference.conditions) of complex tensors.

C's Annex G gives csqrt(-inf + i NaN) as NaN +- i inf, "where the sign of the imaginary part
of the result is unspecified". kfuse's sqrt, like glibc's, takes it from the NaN's sign bit,
which no IEEE operation but a negation, abs or copysign defines: the float64 reference and
the kernel may hold NaNs of either sign there (an emulator campaign met sqrt(-complex(inf,
NaN)) giving -inf in the kernel and +inf in the reference, the same expression alone -inf in
both). Such an element is marked, and the mark follows it through the ops that keep a
non-finite part non-finite (negation, casts, adds and subtractions, products, real, imag);
any other op ends it, as for the real marks.
"""

from __future__ import annotations

from typing import Any

from kfuse.ir.exprs import BinaryOp, CastOp, Expr, UnaryOp
from kfuse.ir.values import TensorView

UNSPECIFIED_SQRT = ("sqrt", "rsqrt")
"""Unary ops of a complex operand whose result at -inf + i NaN has an unspecified sign."""

CARRIED_UNARY = ("neg", "abs", "real", "imag")
"""Unary ops that keep an indeterminate element of their operand indeterminate (real and
imag: the part they take of a complex value that was marked whole)."""


def track_complex(tracker: Any, expr: Expr, out: TensorView) -> None:
    """Mark the elements of complex `out` (computed by `expr`) whose sign C leaves unspecified,
    and carry the marks of its operands through the ops that keep them (the module
    docstring), in `tracker.indeterminate` (float64 arrays of 0 and 1)."""
    ind, be = tracker.indeterminate, tracker.be
    tensors = [v for v in expr.inputs if isinstance(v, TensorView)]
    masks = [ind[v] for v in tensors if v in ind]
    if isinstance(expr, UnaryOp) and expr.op in UNSPECIFIED_SQRT and tensors:
        if tensors[0].dtype.is_complex:
            z, xp = tracker.ev.env[tensors[0]], be.xp
            at = (xp.real(z) == -float("inf")) & be.fn("isnan")(xp.imag(z))
            masks.append(be.astype(at, tracker.f64))
    elif not (
        isinstance(expr, CastOp)
        or (isinstance(expr, UnaryOp) and expr.op in CARRIED_UNARY)
        or (isinstance(expr, BinaryOp) and expr.op in ("add", "sub", "mul"))
    ):
        return
    if masks:
        tracker.mark(out, masks)

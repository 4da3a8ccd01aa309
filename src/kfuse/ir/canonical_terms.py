"""What the canonical rules (kfuse.ir.canonical_rules, canonical_gather, canonical_pads) ask
of the values they rewrite: which exprs act on every element alone, a constant's value,
which values are leaves that moved work is taken of, and which are one value everywhere."""

from __future__ import annotations

from typing import Any

from kfuse.ir.exprs import LIBRARY_EXPRS, BinaryOp, CastOp, GeneratedOp, TernaryOp, UnaryOp
from kfuse.ir.generated import GENERATORS
from kfuse.ir.values import Scalar, Val

ELEMENTWISE = (UnaryOp, BinaryOp, TernaryOp, CastOp)
"""Exprs whose every output element is a function of the same element of their operands."""


def constant_value(v: Val) -> Any:
    """A constant's value, or None for any other Val."""
    return v.value if isinstance(v, Scalar) and v.is_constant else None


def is_leaf(u: Val) -> bool:
    """Whether a slice moved onto u is taken of u itself: a fusion input, or the output of a
    library op (a segment's input, which its kernel reads through the slice as a view:
    kfuse.engine.boundary_views; Thunder's RoPE backward slices the halves of sdpfa_bwd's
    gradients times sin)."""
    return u.is_input or isinstance(u.definition, LIBRARY_EXPRS)


def is_full(u: Val) -> bool:
    """Whether u is a generated value that no element's index changes (fd.ops.full): one
    value wherever it is read, of any slice of it."""
    e = u.definition
    return isinstance(e, GeneratedOp) and not GENERATORS[e.op].uses_index

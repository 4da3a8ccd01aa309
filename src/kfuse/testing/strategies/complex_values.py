"""Complex values in drawn fusions: complex inputs (ComplexFloat, ComplexDouble among the
dtypes), fd.ops.complex of drawn parts, and the pointwise ops drawn on them.

A complex value lives in the generator's complex_pool, which only the ops below draw from;
the pool of real values gets a part of it (real, imag or abs), so every other step
(reductions, normalizations, indexing, outputs) meets real values as before, and the
complex computations reach the outputs through their parts. A binary op's second operand is
sometimes a run-time scalar (a real one promoted, or a ComplexDouble input). The ops drawn
are those whose every part is well conditioned on finite operands of modest size (the
complex exp, log and trigonometric functions, whose parts can be tiny next to |z|, are
tested against torch in tests/test_complex.py instead).
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any

from hypothesis import strategies as st

from kfuse.dtypes import DataType
from kfuse.ir.ops import OPS

if TYPE_CHECKING:
    from kfuse.testing.strategies.generator import Entry, Gen

DRAWN_ON_COMPLEX = ("set", "neg", "abs", "add", "sub", "mul", "sqrt", "eq", "ne", "isreal")
"""The ops complex_step draws on complex values (the module docstring says why these)."""

_PARTS = ("real", "imag", "abs")
_CONSTANTS = (0.5 - 1j, 2j, 1.5 + 0.25j, -1.0 + 0j)


def real_of(gen: Gen, z: Entry) -> Entry:
    """A drawn part of complex value z, for the pool of real values: real and imag are
    exact parts, abs a rounded one (|z| <= its bound, as a part's magnitude)."""
    part = gen.draw(st.sampled_from(_PARTS))
    val = getattr(gen.fd.ops, part)(z.val)
    return dataclasses.replace(z, val=val, exact=z.exact and part != "abs")


def _pick(gen: Gen, exact: bool) -> Entry:
    cands = [e for e in gen.complex_pool if e.exact or not exact] or gen.complex_pool
    return gen.draw(st.sampled_from(cands[-4:] if gen.draw(st.booleans()) else cands))


def _run_time_scalar(gen: Gen) -> tuple[Any, bool, float]:
    """A run-time scalar operand (a value given per call, which kernels read as its parts):
    one of the fusion's real symbolic scalars, promoted to complex, or a new ComplexDouble
    scalar input (kept out of gen.scalars, which real ops draw from); with its exactness and
    bound, as Gen.operand gives them (testing.inputs draws each part within the range)."""
    if gen.draw(st.booleans()):
        s = gen.draw(st.sampled_from(gen.scalars))
        return s, True, 2.0 if s.dtype.is_floating else 4.0
    return gen.fd.define_scalar(dtype=DataType.ComplexDouble), True, 3.0


def complex_step(gen: Gen) -> Entry | None:
    """One of DRAWN_ON_COMPLEX (those among the generator's ops) on complex values of the
    pool, with a real value or a complex constant as a binary op's second operand sometimes;
    None where the generator draws none of them."""
    ops = [op for op in DRAWN_ON_COMPLEX if op in gen.ops]
    if not ops:
        return None
    op = gen.draw(st.sampled_from(ops))
    row = OPS[op]
    o = gen.fd.ops
    z = _pick(gen, row.discontinuous)
    if row.arity == 1:
        bound = math.sqrt(z.bound) + 1 if op == "sqrt" else z.bound
        exact = z.exact and row.precision == "exact" and op != "abs"
        return dataclasses.replace(z, val=getattr(o, op)(z.val), exact=exact, bound=bound)
    second = gen.draw(st.integers(0, 2))
    w: Any
    if gen.scalars and gen.draw(st.integers(0, 2)) == 0:  # symbolic scalars are allowed
        w, w_exact, w_bound = _run_time_scalar(gen)
    elif second == 0:
        w = gen.draw(st.sampled_from(_CONSTANTS))
        w_exact, w_bound = True, abs(w)
    else:
        other = _pick(gen, row.discontinuous) if second == 1 else gen.pick(exact=row.discontinuous)
        w, w_exact, w_bound = other.val, other.exact, other.bound
    bound = z.bound * w_bound if op == "mul" else z.bound + w_bound
    if bound > 1e4:
        return None
    out = getattr(o, op)(z.val, w)
    return dataclasses.replace(
        z, val=out, exact=z.exact and w_exact and row.precision == "exact", bound=bound
    )

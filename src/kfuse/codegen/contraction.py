"""Fused multiply-adds that the code generator writes itself: `a * b + c` as kf::fma(a, b, c).

Kernels are compiled without contraction (NVRTC --fmad=false, kfuse.runtime.backends.cuda):
where the compiler fuses a product into a sum on its own, it may do so at one place a value is
computed and not at another (a persistent kernel's stage, in the reduction and again in the
epilogue), and the emulator, g++ in ISO C++ mode, contracts nothing. So the choice is made
here, per expression, and written out: a sum or difference in float or double with a product
of its dtype as an operand becomes one fma, `a * b - c` as fma(a, b, -c) and `c - a * b` as
fma(-a, b, c) (negation is exact), where nothing else reads the product. CUDA's fmaf and fma
and the host's are correctly rounded, so an fma is the same value wherever it is computed, on
the GPU and on the emulator: one rounding where the two operations made two.

A product that something else reads (another op, a reduction, an output) stays a rounded value
of its own, computed once and read by all, as without contraction: x = a * b summed into a mean
and read again in x - mean is one x in both (a row of one element normalizes to exactly 0).
Of a sum of two such products, the left one is fused.

The choice is the whole fusion's. A segment, or a side of the inner_outer scheduler, is a
Fusion of its own holding a part of its parent's exprs (kfuse.schedule.sub_fusion), in which a
product may look read once where its parent reads it elsewhere too; and segments that compute
one forwarded value again must compute it alike. So a sub-fusion carries the products its
parent keeps rounded (Fusion.rounded_products, set by `parent_rounded`), and keeps them so.
switches.FMA_CONTRACT turns contraction off for an A/B.
"""

from __future__ import annotations

from kfuse import switches
from kfuse.dtypes import DataType
from kfuse.ir.exprs import BinaryOp, Expr
from kfuse.ir.fusion import Fusion
from kfuse.ir.values import TensorView, Val

_FLOATING = (DataType.Float, DataType.Double)


def products(fusion: Fusion) -> frozenset[Val]:
    """The products `fusion`'s kernels compute inside an fma: each is read by one sum alone
    (sum_operand of that sum names it). Empty while switches.FMA_CONTRACT is off."""
    if not switches.FMA_CONTRACT:
        return frozenset()
    reads: dict[int, int] = {}
    for v in [*fusion.outputs, *(v for e in fusion.exprs for v in e.inputs)]:
        reads[id(v)] = reads.get(id(v), 0) + 1
    kept = {id(v) for v in fusion.rounded_products}
    fused: list[Val] = []
    for e in fusion.exprs:
        for v in _product_operands(e):
            if reads[id(v)] == 1 and id(v) not in kept:
                fused.append(v)
                break
    return frozenset(fused)


def _product_operands(e: Expr) -> list[Val]:
    """The operands of `e`, if it is a floating sum or difference, that are products computed
    in its dtype from operands of its dtype; [] for any other expr."""
    if not (isinstance(e, BinaryOp) and e.op in ("add", "sub")):
        return []
    dtype = e.outputs[0].dtype
    if dtype not in _FLOATING or any(v.dtype is not dtype for v in e.inputs):
        return []
    return [
        v
        for v in e.inputs
        if isinstance(v, TensorView)
        and isinstance(v.definition, BinaryOp)
        and v.definition.op == "mul"
        and all(f.dtype is dtype for f in v.definition.inputs)
    ]


def sum_operand(e: Expr, fused: frozenset[Val]) -> int | None:
    """The position of the operand of `e` that is one of the `fused` products (see
    `products`), or None where `e` is no sum with one."""
    if not fused or not isinstance(e, BinaryOp) or e.op not in ("add", "sub"):
        return None
    return next((k for k, v in enumerate(e.inputs) if v in fused), None)


def fma(e: BinaryOp, at: int, factors: list[str], other: str) -> str:
    """The C++ of sum `e` whose operand `at` is the product of `factors` (C++ expressions in
    the compute type) and whose other operand is `other`, as one kf::fma."""
    a, b = factors
    if e.op == "add":
        return f"kf::fma({a}, {b}, {other})"
    if at == 0:
        return f"kf::fma({a}, {b}, -{other})"
    return f"kf::fma(-{a}, {b}, {other})"


def parent_rounded(sub: Fusion, parent: Fusion, origin: dict[int, Val]) -> frozenset[Val]:
    """The products of `sub` (a part of `parent`'s exprs, cloned: origin maps id(a clone) to
    its parent Val) that `sub` alone would fuse and `parent` keeps rounded, read elsewhere
    there (Fusion.rounded_products of `sub`)."""
    own = products(sub)
    if not own:
        return frozenset()
    fused_in_parent = {id(v) for v in products(parent)}
    return frozenset(v for v in own if id(origin[id(v)]) not in fused_in_parent)

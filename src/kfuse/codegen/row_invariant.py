"""Row-invariant values of the persistent kernel: computed once per row, not once per element.

A normalization's backward computes per element from per-row values: 1 / rms, rms ** -2,
the mean broadcast back, a reduction result times a constant. Those depend only on inputs
broadcast along the row (read once per row), the Scalars and the reductions' results, so
they are the same at every element of the row. Inlined into the per-element loops under each
element's bounds guard, the compiler computes them again for every element (RMS norm
backward's PTX had 32 powf and 96 divisions for a thread's 32 elements, and the kernel ran
at a fifth of copy bandwidth, bound by arithmetic).

So each per-element function (a stage, the full-size outputs) is given its row-invariant
values as parameters h<n>: the *frontier* of the invariant uses (those read by a use that
varies along the row, or returned), computed by a prelude function <function>_row once per
row, before the function's loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from kfuse.codegen.body import emit_body, from_storage
from kfuse.codegen.domain import DomainMap, Use, View, operand_views
from kfuse.codegen.expressions import compute_ctype
from kfuse.codegen.layout import BCAST
from kfuse.ir.exprs import BinaryOp, CastOp, GeneratedOp, TernaryOp, UnaryOp
from kfuse.ir.values import Scalar, TensorView, Val


@dataclass(frozen=True)
class Hoisted:
    """The row-invariant values one per-element function takes as parameters."""

    uses: tuple[Use, ...]  # the frontier, as parameters h0, h1, ...
    invariant: tuple[Use, ...]  # every invariant use the prelude computes, in order
    inputs: tuple[int, ...]  # the loop inputs (broadcast along the row) the prelude reads

    def params(self) -> list[str]:
        return [f"{compute_ctype(u.val.dtype)} h{n}" for n, u in enumerate(self.uses)]

    def leaves(self) -> dict[Use, str]:
        return {u: f"h{n}" for n, u in enumerate(self.uses)}


NONE = Hoisted((), (), ())


def operand_uses(use: Use, fused: frozenset[Val] = frozenset()) -> list[Use] | None:
    """The uses `use` is computed from (Scalars left out), or None for a leaf (a fusion input,
    or a generated value the kernel reads as one). A sum computed as an fma (`fused`: its
    product operand's, kfuse.codegen.contraction) reads its product's operands instead: the
    product is never a value of its own to pass from the prelude."""
    expr = use.val.definition
    if expr is None or isinstance(expr, GeneratedOp):
        return None
    if isinstance(expr, (UnaryOp, BinaryOp, TernaryOp, CastOp)):
        out = []
        for v in expr.inputs:
            if isinstance(v, TensorView):
                view = tuple(None if ax.is_broadcast else r for ax, r in zip(v.axes, use.view))
                if v in fused:
                    out += operand_uses(Use(v, view)) or []
                else:
                    out.append(Use(v, view))
        return out
    return [Use(expr.inputs[0], cast(View, operand_views(expr, use.view)[0]))]


def hoisted(
    dm: DomainMap,
    loop_inputs: tuple[Use, ...],
    loop_kinds: tuple[str, ...],
    results: dict[Use, str],
    roots: tuple[Use, ...],
    varying: tuple[Use, ...] = (),
    fused: frozenset[Val] = frozenset(),
) -> Hoisted:
    """The row-invariant frontier of `dm`'s uses: loop inputs broadcast along the row and the
    reduction results `results` are invariant, and so is every value computed only from
    invariant values and Scalars. roots: the uses the function returns or stores; varying:
    other leaves of the function (kept stage values); fused: the products computed inside an
    fma (see operand_uses)."""
    leaves = set(loop_inputs) | set(results) | set(varying)
    invariant = {u for u, kind in zip(loop_inputs, loop_kinds) if kind == BCAST}
    invariant |= set(results)
    computed: list[Use] = []
    for u in dm.uses:
        if u in leaves:
            continue
        deps = operand_uses(u, fused)
        if deps is not None and all(d in invariant for d in deps):
            invariant.add(u)
            computed.append(u)
    if not computed:
        return NONE
    read_by_varying = {
        d
        for u in dm.uses
        if u not in invariant
        for d in (operand_uses(u, fused) or ())
        if d in invariant
    }
    frontier = tuple(u for u in computed if u in read_by_varying or u in roots)
    inputs = tuple(
        i
        for i, (u, kind) in enumerate(zip(loop_inputs, loop_kinds))
        if kind == BCAST and u in {d for c in computed for d in operand_uses(c, fused) or ()}
    )
    return Hoisted(frontier, tuple(computed), inputs)


def prelude_function(
    name: str,
    hoist: Hoisted,
    loop_inputs: tuple[Use, ...],
    scalars: dict[Scalar, str],
    results: dict[Use, str],
    result_params: list[str],
    fast: frozenset,
    fused: frozenset[Val] = frozenset(),
) -> list[str]:
    """`name(x_i.., s.., results.., h_n&..)`: the frontier values from the row's values."""
    if not hoist.uses:
        return []
    leaves = {loop_inputs[i]: from_storage(f"x{i}", loop_inputs[i].val.dtype) for i in hoist.inputs}
    leaves.update(results)
    body = emit_body(list(hoist.invariant), leaves, scalars, prefix="w", fast=fast, fused=fused)
    params = [f"{loop_inputs[i].val.dtype.cuda_type} x{i}" for i in hoist.inputs]
    params += [f"{compute_ctype(s.dtype)} {n}" for s, n in scalars.items()]
    params += result_params
    params += [f"{compute_ctype(u.val.dtype)}& h{n}" for n, u in enumerate(hoist.uses)]
    lines = [f"__device__ __forceinline__ void {name}({', '.join(params)}) {{"]
    lines += [f"  {line}" for line in body.lines]
    lines += [f"  h{n} = {body.names[u]};" for n, u in enumerate(hoist.uses)]
    return lines + ["}", ""]


def prelude_call(
    name: str, hoist: Hoisted, prefix: str, bcast_value: dict[int, str], args: list[str]
) -> list[str]:
    """Declare this function's h values (named <prefix>h<n>) and compute them. bcast_value:
    loop input -> its row value; args: the scalars' and results' arguments."""
    if not hoist.uses:
        return []
    decls = [f"{compute_ctype(u.val.dtype)} {prefix}h{n};" for n, u in enumerate(hoist.uses)]
    call = [bcast_value[i] for i in hoist.inputs] + args
    call += [f"{prefix}h{n}" for n in range(len(hoist.uses))]
    return [*decls, f"{name}({', '.join(call)});"]


def call_args(hoist: Hoisted, prefix: str) -> list[str]:
    """The h arguments of a call of the per-element function."""
    return [f"{prefix}h{n}" for n in range(len(hoist.uses))]


__all__ = ["NONE", "Hoisted", "call_args", "hoisted", "prelude_call", "prelude_function"]

"""Full-size outputs of the inner persistent kernel that need no reduction's result: stored in
the row's first pass (switches.EARLY_OUTPUTS) instead of in the output pass after the
reductions.

Why: a dropout + norm forward that draws its mask returns the mask, which needs the drawn
numbers alone. Stored in the output pass, it made the kernel draw the numbers twice (a
regenerated read, kfuse.codegen.reduction_functions.regenerated_inputs): once for the
reduction's first pass and again for the mask, and Philox is most of such a kernel's
instructions at wide rows (sm_90, layer norm [2048, 16384] bf16: 2,464 instructions, the twin
with the mask given 816). Stored in the first pass, the output pass's copy of the numbers (and
of anything else only such outputs read) is dead code that the compiler drops.

The first pass computes them with `<name>_early`: the full-size outputs' function
(reduction_functions.full_function) without row-invariant hoists (their prelude reads the
results) and without kept stage values, the results passed as zeros; the outputs it stores
read none of them, and the compiler drops the rest. Lanes are gathered into one vector a slot
and stored as the output pass stores them. The output pass still calls `<name>_full` for
every output but stores only the others.

An output is stored early where its expression reaches no reduction result and no streamed
input (loaded in the output pass only) and it is not summed into column partials. No early
store lands in an input that a later pass reads again: an output written into an input is
staged by every kernel but a lone pointwise one (kfuse.engine.aliasing).
"""

from __future__ import annotations

from typing import Any

from kfuse import switches
from kfuse.codegen import column_partials
from kfuse.codegen.kernel import Code
from kfuse.codegen.persistent_loads import in_row, store_slot_vectors
from kfuse.codegen.reduction_functions import (
    full_function,
    loop_arguments,
    scalar_names,
    streamed_inputs,
)
from kfuse.codegen.reduction_plan import ReductionPlan
from kfuse.codegen.reduction_spec import ReductionKernelSpec, result_vars
from kfuse.codegen.row_invariant import NONE

SUFFIX = "_eo"  # in the kernel's name where it stores outputs early (profiles, A/Bs)


def early_outputs(plan: ReductionPlan, spec: ReductionKernelSpec) -> tuple[int, ...]:
    """The loop outputs (indices into the fusion's outputs) the first pass stores."""
    if not switches.EARLY_OUTPUTS or not plan.reductions:
        return ()
    summed = column_partials.accumulated(spec)
    results = set(plan.reduction_outputs())
    inputs = {id(u.val): i for i, u in enumerate(plan.loop_inputs)}
    streamed = streamed_inputs(plan)
    needs_late: dict[int, bool] = {}

    def late(val: object) -> bool:
        """Whether `val` needs a reduction's result or a streamed input."""
        key = id(val)
        if key in needs_late:
            return needs_late[key]
        if val in results:
            found = True
        elif key in inputs:
            found = inputs[key] in streamed
        else:
            expr = getattr(val, "definition", None)
            found = expr is not None and any(late(v) for v in expr.inputs)
        needs_late[key] = found
        return found

    outs = plan.fusion.outputs
    return tuple(k for k in plan.loop_outputs if k not in summed and not late(outs[k]))


def early_function(plan: ReductionPlan, name: str) -> list[str]:
    """`<name>_early`: the full-size outputs' function with no hoists and no kept values."""
    return full_function(plan, f"{name}_early", scalar_names(plan), (), NONE)


def declare(plan: ReductionPlan, spec: ReductionKernelSpec, early: tuple[int, ...]) -> list[str]:
    """Before a slot's lanes: the vector each early output's lanes are gathered in."""
    outs = plan.fusion.outputs
    return [f"kf::Vec<{outs[k].dtype.cuda_type}, {spec.vector}> e{k};" for k in early]


def compute(plan: ReductionPlan, name: str, early: tuple[int, ...], loaded: list[str]) -> list[str]:
    """A lane's statements (inside its in-row test): `<name>_early` on the lane's loop values
    `loaded` (the first pass's), every result a zero, the early outputs into e<k>[j] and the
    others into scratch values the compiler drops."""
    early_set = set(early)
    args = loop_arguments(plan, loaded) + list(scalar_names(plan).values())
    lines = []
    ctypes = [t for k in range(len(plan.reductions)) for t, _ in result_vars(plan, k)]
    for n, ctype in enumerate(ctypes):
        lines.append(f"const {ctype} z{n} = static_cast<{ctype}>(0);")
        args.append(f"z{n}")
    outs = plan.fusion.outputs
    for k in plan.loop_outputs:
        if k in early_set:
            args.append(f"e{k}[j]")
        else:
            lines.append(f"{outs[k].dtype.cuda_type} d{k};")
            args.append(f"d{k}")
    return [*lines, f"{name}_early({', '.join(args)});"]


def store(
    code: Code, plan: ReductionPlan, spec: ReductionKernelSpec, early: tuple[int, ...]
) -> None:
    """After a slot's lanes: store each early output's vector as the output pass stores its
    outputs (one vector where the slot lies in the row, else lane by lane)."""
    kinds = dict(zip(plan.loop_outputs, spec.output_kinds, strict=True))
    with code.block(f"if (row_ok && {in_row(spec, 'i0 < n_red')})"):
        store_slot_vectors(code, spec, kinds, list(early), "e")


def lane_hooks(
    plan: ReductionPlan, spec: ReductionKernelSpec, early: tuple[int, ...]
) -> dict[str, Any]:
    """persistent_loads.valid_element_loop's before_lanes and after_lanes for the first pass
    (none where nothing is stored early)."""
    if not early:
        return {}
    return {
        "before_lanes": lambda reloaded: declare(plan, spec, early),
        "after_lanes": lambda code: store(code, plan, spec, early),
    }


__all__ = [
    "SUFFIX",
    "compute",
    "declare",
    "early_function",
    "early_outputs",
    "lane_hooks",
    "store",
]

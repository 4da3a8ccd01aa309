"""The device functions of a reduction-shaped kernel and its parameter list: each reduction's
input (stage functions), the full-size outputs, the epilogue (kfuse.codegen.body emits their
bodies, so an op means the same under every scheduler), the kernel's name and tensor
parameters, and the calls of those functions."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

from kfuse import switches
from kfuse.codegen import bf16_words, contraction, generated, outlined_math, shared_math
from kfuse.codegen.body import emit_body, from_storage
from kfuse.codegen.domain import Use
from kfuse.codegen.expressions import compute_ctype
from kfuse.codegen.kernel import Code, decompose
from kfuse.codegen.precision import approximable
from kfuse.codegen.reduction_plan import ReductionPlan
from kfuse.codegen.reduction_spec import (
    ReductionKernelSpec,
    _result_leaves,
    accumulators,
    result_vars,
)
from kfuse.codegen.row_invariant import NONE, Hoisted, hoisted, prelude_call, prelude_function
from kfuse.ir.exprs import BinaryOp, CastOp, TernaryOp, UnaryOp
from kfuse.ir.values import Scalar


@dataclass
class Functions:
    """The device functions of one kernel source and how to call them."""

    lines: list[str]
    scalar_names: list[str]


def scalar_ctype(s: Scalar) -> str:
    """Kernel ABI: Half/BFloat16 scalars travel as float."""
    return compute_ctype(s.dtype)


def _function(name: str, ret: str, params: list[str], body: list[str]) -> list[str]:
    wrappers, body = outlined_math.outlined(shared_math.paired(body))
    lines = [*wrappers, f"__device__ __forceinline__ {ret} {name}({', '.join(params)}) {{"]
    lines += [f"  {line}" for line in body]
    lines += ["}", ""]
    return lines


def stage_function(
    plan: ReductionPlan, name: str, k: int, scalars: dict, hoist: Hoisted = NONE
) -> list[str]:
    """`name(x0.., s0.., results of reductions < k, h0..)` -> reduction k's input value;
    hoist: its row-invariant values, computed by name_row (kfuse.codegen.row_invariant)."""
    dm = plan.stages[k]
    leaves = {u: from_storage(f"x{i}", u.val.dtype) for i, u in enumerate(plan.loop_inputs)}
    results = _result_leaves(plan, dm)
    leaves.update(results)
    leaves.update(hoist.leaves())
    fast = approximable(plan.fusion)
    fused = contraction.products(plan.fusion)
    body = emit_body(dm.uses, leaves, scalars, fast=fast, fused=fused)
    r = plan.reductions[k]
    value = body.names[stage_value(plan, k)]
    deps = _result_params(plan, stage_dependencies(plan, k))
    params = _loop_params(plan) + _scalar_params(scalars) + deps + hoist.params()
    prelude = prelude_function(
        f"{name}_row", hoist, plan.loop_inputs, scalars, results, deps, fast, fused
    )
    return prelude + _function(
        name, compute_ctype(r.inputs[0].dtype), params, body.lines + [f"return {value};"]
    )


def stage_dependencies(plan: ReductionPlan, k: int) -> list[int]:
    """The earlier reductions whose results reduction k's input reads."""
    where = plan.reduction_outputs()
    return sorted({where[u.val][0] for u in plan.stages[k].uses if u.val in where})


def stage_value(plan: ReductionPlan, k: int) -> Use:
    """The Use whose value stage k returns (reduction k's input on the row)."""
    r = plan.reductions[k]
    return next(u for u in plan.stages[k].uses if u.val is r.inputs[0])


def full_function(
    plan: ReductionPlan,
    name: str,
    scalars: dict,
    kept: tuple[int, ...] = (),
    hoist: Hoisted = NONE,
) -> list[str]:
    """`name(x0.., s0.., all results, kept stage values.., h0.., y_k&..)` computing the
    full-size outputs; `kept` stages' values arrive as parameters c<k> instead of being
    recomputed, row-invariant ones (hoist) as h<n> from name_row."""
    dm = plan.full_map
    leaves = {u: from_storage(f"x{i}", u.val.dtype) for i, u in enumerate(plan.loop_inputs)}
    results = _result_leaves(plan, dm)
    leaves.update(results)
    leaves.update({stage_value(plan, k): f"c{k}" for k in kept})
    leaves.update(hoist.leaves())
    fast = approximable(plan.fusion)
    fused = contraction.products(plan.fusion)
    body = emit_body(dm.uses, leaves, scalars, fast=fast, fused=fused)
    outs = plan.fusion.outputs
    lines = list(body.lines)
    all_results = _result_params(plan, range(len(plan.reductions)))
    params = _loop_params(plan) + _scalar_params(scalars) + all_results
    params += [f"{compute_ctype(stage_value(plan, k).val.dtype)} c{k}" for k in kept]
    params += hoist.params()
    prelude = prelude_function(
        f"{name}_row", hoist, plan.loop_inputs, scalars, results, all_results, fast, fused
    )
    for k in plan.loop_outputs:
        o = outs[k]
        params.append(f"{o.dtype.cuda_type}& y{k}")
        lines.append(f"y{k} = {body.store(Use(o, plan.output_views[k]))};")
    return prelude + _function(name, "void", params, lines)


def epilogue_function(plan: ReductionPlan, name: str, scalars: dict) -> list[str]:
    """`name(rx0.., s0.., all results, y_k&..)` computing the outputs on the kept axes."""
    dm = plan.epilogue
    leaves = {u: from_storage(f"rx{i}", u.val.dtype) for i, u in enumerate(dm.input_uses)}
    leaves.update(_result_leaves(plan, dm))
    fast, fused = approximable(plan.fusion), contraction.products(plan.fusion)
    body = emit_body(dm.uses, leaves, scalars, prefix="e", fast=fast, fused=fused)
    outs = plan.fusion.outputs
    lines = list(body.lines)
    params = [f"{u.val.dtype.cuda_type} rx{i}" for i, u in enumerate(dm.input_uses)]
    params += _scalar_params(scalars) + _result_params(plan, range(len(plan.reductions)))
    for k in plan.row_outputs:
        o = outs[k]
        params.append(f"{o.dtype.cuda_type}& y{k}")
        lines.append(f"y{k} = {body.store(Use(o, plan.output_views[k]))};")
    return _function(name, "void", params, lines)


def _loop_params(plan: ReductionPlan) -> list[str]:
    return [f"{bf16_words.param_type(u.val.dtype)} x{i}" for i, u in enumerate(plan.loop_inputs)]


def loop_arguments(plan: ReductionPlan, loaded: list[str]) -> list[str]:
    """The stage and full functions' arguments for the loop values `loaded` (storage-typed
    expressions, one a loop input): kfuse.codegen.bf16_words.argument of each."""
    return [
        bf16_words.argument(e, u.val.dtype) for e, u in zip(loaded, plan.loop_inputs, strict=True)
    ]


def _scalar_params(scalars: dict) -> list[str]:
    return [f"{scalar_ctype(s)} {n}" for s, n in scalars.items()]


def _result_params(plan: ReductionPlan, ks: range | list[int]) -> list[str]:
    return [f"{t} {n}" for k in ks for t, n in result_vars(plan, k)]


def result_args(plan: ReductionPlan, ks: range | list[int]) -> list[str]:
    """The result variable names of reductions `ks`, as call arguments."""
    return [n for k in ks for _, n in result_vars(plan, k)]


def kernel_name(plan: ReductionPlan, spec: ReductionKernelSpec, suffix: str = "") -> str:
    """A stable name: the kind plus a hash of the fusion and the spec."""
    digest = hashlib.sha1(f"{plan.fusion.structure()!r}|{spec!r}".encode()).hexdigest()[:16]
    return f"kfuse_{spec.kind}_{digest}{suffix}"


def tensor_params(
    plan: ReductionPlan, spec: ReductionKernelSpec, *, loop: bool, row: bool, workspace: bool
) -> list[str]:
    """Kernel parameters in the order the scheduler passes operands: loop inputs (only the
    first when not `loop`: its sizes carry the reduced extent; a generated read's named for
    kfuse.codegen.generated.loop_setup), row inputs, scalars, the random numbers' seed and
    offset where a loop input is a stateful random op, outputs, workspace arrays."""
    rank, index = spec.rank, spec.index_type
    params = [
        f"kf::Tensor<{u.val.dtype.cuda_type}, {spec.loop_rank(i)}, {index}> "
        + (generated.loop_param(plan, i) if loop else f"in{i}")
        for i, u in enumerate(plan.loop_inputs)
        if loop or i == 0
    ]
    if row:
        params += [
            f"kf::Tensor<{u.val.dtype.cuda_type}, {rank}, {index}> rin{i}"
            for i, u in enumerate(plan.epilogue.input_uses)
        ]
    params += [f"{scalar_ctype(s)} s{i}" for i, s in enumerate(plan.scalars)]
    if loop and generated.loop_stateful_ops(plan):  # filled per launch (RngStateOperand)
        params += generated.RNG_PARAMS
    skipped = {c.output for c in spec.columns}  # accumulated per column, never stored
    params += [
        f"kf::Tensor<{o.dtype.cuda_type}, {rank}, {index}> out{k}"
        for k, o in enumerate(plan.fusion.outputs)
        if k not in skipped
    ]
    if workspace:
        for acc in accumulators(plan):
            for f in acc.partial_fields:
                params.append(f"kf::Tensor<{acc.partial_type}, 1, {index}> ws{acc.k}{f}")
    return params


def scalar_names(plan: ReductionPlan) -> dict:
    """Scalar -> its kernel parameter name."""
    return {s: f"s{i}" for i, s in enumerate(plan.scalars)}


def epilogue_operands(plan: ReductionPlan) -> list[str]:
    """The tensors the epilogue addresses per row: its row inputs, then the row outputs."""
    n_row = len(plan.epilogue.input_uses)
    return [f"rin{i}" for i in range(n_row)] + [f"out{k}" for k in plan.row_outputs]


def epilogue_statement(
    plan: ReductionPlan, name: str, at: Callable[[str], str] = lambda op: f"base_{op}"
) -> list[str]:
    """Declare the row outputs' values y<k> and call the epilogue on the row inputs loaded at
    at(rin<i>) (default their bases), the scalars and the reductions' results."""
    n_row = len(plan.epilogue.input_uses)
    outs = plan.fusion.outputs
    args = [f"kf::load(rin{i}, {at(f'rin{i}')})" for i in range(n_row)]
    args += list(scalar_names(plan).values()) + result_args(plan, range(len(plan.reductions)))
    args += [f"y{k}" for k in plan.row_outputs]
    return [
        *[f"{outs[k].dtype.cuda_type} y{k};" for k in plan.row_outputs],
        f"{name}_epi({', '.join(args)});",
    ]


def epilogue_call(code: Code, plan: ReductionPlan, name: str, row: str, kept_axes: range) -> None:
    """Load the row inputs at kept index `row`, run the epilogue, store the row outputs."""
    if not plan.row_outputs:
        return
    ops = epilogue_operands(plan)
    with code.block():
        code(*[f"Index base_{op} = 0;" for op in ops])
        code.extend(decompose(row, kept_axes, ops, code.indent))
        code(*epilogue_statement(plan, name))
        code(*[f"kf::store(out{k}, base_out{k}, y{k});" for k in plan.row_outputs])


def functions_source(
    plan: ReductionPlan,
    name: str,
    *,
    stages: bool,
    full: bool,
    epilogue: bool,
    kept: tuple[int, ...] = (),
    hoists: dict[str, Hoisted] | None = None,
) -> list[str]:
    """The device functions a kernel source needs; hoists: the row-invariant values of the
    stages ("stage<k>") and the full-size outputs ("full") where they are hoisted."""
    scalars = scalar_names(plan)
    hoists = hoists or {}
    lines: list[str] = []
    if stages:
        for k in range(len(plan.reductions)):
            hoist = hoists.get(f"stage{k}", NONE)
            lines += stage_function(plan, f"{name}_stage{k}", k, scalars, hoist)
    if full and plan.loop_outputs:
        lines += full_function(plan, f"{name}_full", scalars, kept, hoists.get("full", NONE))
    if epilogue and plan.row_outputs:
        lines += epilogue_function(plan, f"{name}_epi", scalars)
    return lines


def stage_call(
    plan: ReductionPlan, name: str, k: int, loaded: list[str], hoisted: tuple[str, ...] = ()
) -> str:
    """A call of stage k on loaded loop values (storage-typed expressions) and its hoisted
    row-invariant values."""
    args = loop_arguments(plan, loaded) + list(scalar_names(plan).values())
    args += result_args(plan, stage_dependencies(plan, k))
    return f"{name}_stage{k}({', '.join([*args, *hoisted])})"


def streamed_inputs(plan: ReductionPlan) -> set[int]:
    """Loop inputs no reduction reads (weights, biases): they are loaded again where the
    full-size outputs are computed instead of being held in registers across the reductions."""
    held = {u for dm in plan.stages for u in dm.input_uses}
    return {i for i, u in enumerate(plan.loop_inputs) if u not in held}


def regenerated_inputs(plan: ReductionPlan) -> set[int]:
    """Loop inputs that are generated reads (full, iota, random numbers: kfuse.codegen.
    generated) and that a reduction reads: the persistent kernels compute them again at the
    element's offset in every pass that reads them, as they load a streamed input again,
    instead of holding them (switches.REGENERATED_READS; empty where it is off). A held
    uniform() costs 4 bytes an element, more than the bf16 inputs beside it: a dropout +
    layer norm forward's row went to shared memory where its twin with the Bool mask given
    stayed in registers."""
    if not switches.REGENERATED_READS:
        return set()
    streamed = streamed_inputs(plan)
    return {i for i in generated.loop_reads(plan) if i not in streamed}


def keepable(plan: ReductionPlan) -> tuple[int, ...]:
    """Reductions whose per-element input the full-size outputs use again and that cost
    arithmetic to compute (softmax's exp(x - max), a dropout + layer norm's x + mask * r *
    scale): worth keeping in registers between the reduction and the outputs. Values that
    are loads and casts are cheaper to recompute than to hold. A Welford's kept value also
    serves its second pass (the squared deviations), so a dropout + layer norm forward
    computes its stage once instead of three times, and its held inputs die after the first
    pass (its sm_90 kernel at 16384 x 4096 bf16 went from 1,160 instructions to 776, with no
    spills; it is issue-bound: 0.67 of copy on an H200)."""
    full_uses = set(plan.full_map.uses)
    leaves = {u.val for u in plan.loop_inputs} | set(plan.reduction_outputs())

    def computed(val: object) -> bool:
        if val in leaves:
            return False
        expr = getattr(val, "definition", None)
        if isinstance(expr, (UnaryOp, BinaryOp, TernaryOp)) and not isinstance(expr, CastOp):
            return True
        return expr is not None and bool(expr.inputs) and computed(expr.inputs[0])

    return tuple(
        k
        for k, r in enumerate(plan.reductions)
        if stage_value(plan, k) in full_uses and computed(stage_value(plan, k).val)
    )


def row_hoists(plan: ReductionPlan, spec: ReductionKernelSpec) -> dict[str, Hoisted]:
    """The row-invariant values of each stage ("stage<k>") and of the full-size outputs
    ("full"), computed once a row (kfuse.codegen.row_invariant)."""
    out = {}
    fused = contraction.products(plan.fusion)
    for k in range(len(plan.reductions)):
        dm = plan.stages[k]
        results = _result_leaves(plan, dm)
        roots: tuple[Use, ...] = (stage_value(plan, k),)
        out[f"stage{k}"] = hoisted(
            dm, plan.loop_inputs, spec.loop_kinds, results, roots, fused=fused
        )
    dm = plan.full_map
    roots = tuple(Use(plan.fusion.outputs[k], plan.output_views[k]) for k in plan.loop_outputs)
    varying = tuple(stage_value(plan, k) for k in spec.kept)
    results = _result_leaves(plan, dm)
    out["full"] = hoisted(dm, plan.loop_inputs, spec.loop_kinds, results, roots, varying, fused)
    return out


def prelude_lines(
    plan: ReductionPlan,
    function: str,
    hoist: Hoisted,
    prefix: str,
    results: list[str],
    indent: str = "    ",
) -> list[str]:
    """The call of `function` computing a per-element function's row-invariant values from
    the row's broadcast inputs (x<i>[0]), the Scalars and the results."""
    rows = {i: f"x{i}[0]" for i in hoist.inputs}
    args = list(scalar_names(plan).values()) + results
    return [indent + line for line in prelude_call(function, hoist, prefix, rows, args)]

"""Reduction kernels: CUDA source for a ReductionPlan under a ReductionKernelSpec.

Every kernel sees its tensors on the canonical domain (kept..., reduced) of
kfuse.codegen.reduction_plan; `rows` are the kept elements (flattened), `n_red` the reduced
extent. Three kernels:

* inner (reduced axis innermost in memory): block_x threads share a row, block_y rows per block,
  rows grid-strided over blockIdx.x. Each thread loads U vectors of V elements before
  accumulating them (bytes in flight), a scalar loop takes the ragged end, then
  kf::block_reduce_x combines the threads of a row;
* outer (a kept axis innermost): threadIdx.x walks vectors of V kept elements (coalesced),
  threadIdx.y splits the reduced axis (U rows loaded per step; the rows left one at a time,
  or in batches of halving powers of two where threads have few rows), and the block_y
  partial results are combined through shared memory in a fixed order (a tree for many);
* finalize: when grid_parts (gridDim.y) > 1 the blocks along y each reduce a slice of the
  reduced axis and write a partial result to a workspace; this second kernel combines the
  partials of each output in a fixed order and runs the epilogue. No atomics, no spinning:
  results are deterministic for given parameters.

The prologue (computing each reduction's input), the epilogue (outputs from reduction results)
and, for persistent kernels, the full-size outputs are device functions emitted by
kfuse.codegen.body, so an op means the same thing under every scheduler.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from kfuse.codegen.body import emit_body, from_storage, round_to_dtype
from kfuse.codegen.domain import DomainMap, Use
from kfuse.codegen.expressions import compute_ctype, literal
from kfuse.codegen.kernel import kernel_header
from kfuse.codegen.layout import BCAST, VEC
from kfuse.codegen.precision import approximable
from kfuse.codegen.reduction_plan import ReductionPlan
from kfuse.codegen.registers import register_array
from kfuse.codegen.runtime_header import runtime_header
from kfuse.dtypes import DataType
from kfuse.ir.exprs import ReductionOp, WelfordOp
from kfuse.ir.values import Scalar

_FUNCTORS = {"sum": "kf::SumOp", "prod": "kf::ProdOp", "max": "kf::MaxOp", "min": "kf::MinOp"}


@dataclass(frozen=True)
class ReductionKernelSpec:
    """Everything the source depends on (sizes are run-time arguments).

    kind: "inner" | "outer" | "persistent". rank: canonical rank (merged kept axes + 1).
    vector: V elements per access along the vectorized axis (the reduced axis for inner and
    persistent, the innermost kept axis for outer). unroll: inner/outer: vectors loaded per
    thread before accumulating; persistent: vectors held per thread (the batch).
    grid_parts: blocks along y splitting the reduced axis (> 1 means partials + finalize).
    loop_kinds: VEC/BCAST/STRIDED per loop input along the vectorized axis; output_kinds: the
    same for outputs (persistent full-size outputs along the reduced axis). exact: rows are
    whole vectors (no vector is cut by the row end), so no element-wise tail code is emitted.
    """

    kind: str
    rank: int
    vector: int
    unroll: int
    block_x: int
    block_y: int
    grid_parts: int
    index_type: str
    loop_kinds: tuple[str, ...]
    output_kinds: tuple[str, ...]
    exact: bool = False  # persistent: the row length is a multiple of `vector`
    # persistent: reductions whose per-element input values are kept in registers for the
    # full-size outputs instead of being computed again (kfuse.codegen.persistent.keepable)
    kept: tuple[int, ...] = ()
    # persistent: the held row lives in dynamic shared memory (smem_bytes_held) rather than
    # in registers; each thread reads back only the slots it wrote, so no barrier is needed
    smem_held: bool = False
    # persistent: the last `reload` of the `unroll` vectors per thread are not held; every pass
    # over the row reads them again from global memory (the first pass from DRAM, later ones
    # mostly from L2), so a row longer than the chip holds per block still moves once
    reload: int = 0
    # persistent: the row is split over the `cluster` blocks of a thread-block cluster (sm_90+),
    # whose reductions combine through distributed shared memory; 1: one block per row
    cluster: int = 1
    # outer: the rows a thread has left after its whole batches are loaded in batches of
    # halving powers of two rather than one at a time. For threads with few rows in all; it
    # costs registers (W3's kernel went from 32 to 34, 8 blocks an SM to 6, 8% slower).
    tail_batches: bool = False
    # __launch_bounds__ on the kernels; False where a register limit decides the registers
    # (CompileParams.maxrregcount: see kfuse.codegen.kernel). Not in the repr, which names
    # kernels: the source differs by the attribute alone.
    launch_bounds: bool = field(default=True, repr=False)

    @property
    def held_batch(self) -> int:
        """persistent: the vectors per thread held on chip (the rest are reloaded)."""
        return self.unroll - self.reload


# ---------------------------------------------------------------------------------------------
# Accumulators
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Accumulator:
    """How reduction k accumulates: C++ types, identity, update and combine statements."""

    k: int
    welford: bool
    value_type: str  # compute type of the reduction's input
    op: str  # sum|prod|max|min|welford

    @property
    def ctype(self) -> str:
        return f"kf::WelfordState<{self.value_type}>" if self.welford else self.value_type

    @property
    def functor(self) -> str:
        return "kf::WelfordOp" if self.welford else _FUNCTORS[self.op]

    def identity(self) -> str:
        if self.welford:
            return f"kf::welford_identity<{self.value_type}>()"
        return f"{self.functor}::identity<{self.value_type}>()"

    def update(self, acc: str, value: str) -> str:
        if self.welford:
            return f"kf::welford_update({acc}, {value});"
        return f"{acc} = {self.functor}()({acc}, {value});"

    def combine(self, acc: str, other: str) -> str:
        if self.welford:
            return f"{acc} = kf::welford_combine({acc}, {other});"
        return f"{acc} = {self.functor}()({acc}, {other});"

    def block_reduce(self, acc: str, smem: str, block_x: int) -> str:
        """The combine of `acc` over the block_x threads of a row (block_x is blockDim.x: a
        literal lets NVRTC fold the branches for other row lengths)."""
        scratch = f"reinterpret_cast<{self.ctype}*>({smem})"
        if self.welford:
            return f"kf::block_welford_x({acc}, {scratch}, {block_x})"
        return f"kf::block_reduce_x({acc}, {self.functor}(), {scratch}, {block_x})"

    @property
    def size(self) -> int:
        """Bytes of one accumulator."""
        base = {"float": 4, "double": 8, "int": 4, "long long": 8, "bool": 1}[self.value_type]
        return len(self.partial_fields) * base

    @property
    def partial_fields(self) -> tuple[str, ...]:
        """Workspace arrays this accumulator needs (one per field)."""
        return ("shift", "sum", "m2", "count") if self.welford else ("",)

    @property
    def partial_type(self) -> str:
        return self.value_type


def accumulators(plan: ReductionPlan) -> list[Accumulator]:
    """One Accumulator per reduction of the plan."""
    out = []
    for k, r in enumerate(plan.reductions):
        vt = compute_ctype(r.inputs[0].dtype)
        if isinstance(r, WelfordOp):
            out.append(Accumulator(k, True, vt, "welford"))
        else:
            assert isinstance(r, ReductionOp)
            out.append(Accumulator(k, False, vt, r.op))
    return out


def result_vars(plan: ReductionPlan, k: int) -> list[tuple[str, str]]:
    """(C++ type, name) of the result variables of reduction k."""
    r = plan.reductions[k]
    if isinstance(r, WelfordOp):
        t = compute_ctype(r.inputs[0].dtype)
        return [(t, f"r{k}_avg"), (t, f"r{k}_m2"), ("long long", f"r{k}_n")]
    return [(compute_ctype(r.outputs[0].dtype), f"r{k}")]


def result_assignments(plan: ReductionPlan, k: int, acc: str, n_red: str) -> list[str]:
    """Statements defining reduction k's result variables from its combined accumulator."""
    r = plan.reductions[k]
    if isinstance(r, WelfordOp):
        t = compute_ctype(r.inputs[0].dtype)
        nan = literal(float("nan"), r.inputs[0].dtype)
        return [
            f"const {t} r{k}_avg = {acc}.count == ({t})0 ? {nan} : kf::welford_mean({acc});",
            f"const {t} r{k}_m2 = {acc}.count == ({t})0 ? {nan} : {acc}.m2;",
            f"const long long r{k}_n = (long long){n_red};",
        ]
    return [
        f"const {compute_ctype(r.outputs[0].dtype)} r{k} = "
        f"{round_to_dtype(acc, r.outputs[0].dtype)};"
    ]


def _result_leaves(plan: ReductionPlan, dm: DomainMap) -> dict[Use, str]:
    """Leaves for the reduction results a domain map reads."""
    where = plan.reduction_outputs()
    leaves = {}
    for u in dm.uses:
        if u.val in where:
            k, j = where[u.val]
            leaves[u] = result_vars(plan, k)[j][1]
    return leaves


# ---------------------------------------------------------------------------------------------
# Device functions: prologue stages, full-size outputs, epilogue
# ---------------------------------------------------------------------------------------------


@dataclass
class Functions:
    """The device functions of one kernel source and how to call them."""

    lines: list[str]
    scalar_names: list[str]


def scalar_ctype(s: Scalar) -> str:
    """Kernel ABI: Half/BFloat16 scalars travel as float."""
    return compute_ctype(s.dtype)


def _function(name: str, ret: str, params: list[str], body: list[str]) -> list[str]:
    lines = [f"__device__ __forceinline__ {ret} {name}({', '.join(params)}) {{"]
    lines += [f"  {line}" for line in body]
    lines += ["}", ""]
    return lines


def stage_function(plan: ReductionPlan, name: str, k: int, scalars: dict) -> list[str]:
    """`name(x0.., s0.., results of reductions < k)` -> reduction k's input value."""
    dm = plan.stages[k]
    leaves = {u: from_storage(f"x{i}", u.val.dtype) for i, u in enumerate(plan.loop_inputs)}
    leaves.update(_result_leaves(plan, dm))
    body = emit_body(dm.uses, leaves, scalars, fast=approximable(plan.fusion))
    r = plan.reductions[k]
    value = body.names[stage_value(plan, k)]
    params = _loop_params(plan) + _scalar_params(scalars)
    params += _result_params(plan, stage_dependencies(plan, k))
    return _function(
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
    plan: ReductionPlan, name: str, scalars: dict, kept: tuple[int, ...] = ()
) -> list[str]:
    """`name(x0.., s0.., all results, kept stage values.., y_k&..)` computing the full-size
    outputs; `kept` stages' values arrive as parameters c<k> instead of being recomputed."""
    dm = plan.full_map
    leaves = {u: from_storage(f"x{i}", u.val.dtype) for i, u in enumerate(plan.loop_inputs)}
    leaves.update(_result_leaves(plan, dm))
    leaves.update({stage_value(plan, k): f"c{k}" for k in kept})
    body = emit_body(dm.uses, leaves, scalars, fast=approximable(plan.fusion))
    outs = plan.fusion.outputs
    lines = list(body.lines)
    params = _loop_params(plan) + _scalar_params(scalars)
    params += _result_params(plan, range(len(plan.reductions)))
    params += [f"{compute_ctype(stage_value(plan, k).val.dtype)} c{k}" for k in kept]
    for k in plan.loop_outputs:
        o = outs[k]
        params.append(f"{o.dtype.cuda_type}& y{k}")
        lines.append(f"y{k} = {body.store(Use(o, plan.output_views[k]))};")
    return _function(name, "void", params, lines)


def epilogue_function(plan: ReductionPlan, name: str, scalars: dict) -> list[str]:
    """`name(rx0.., s0.., all results, y_k&..)` computing the outputs on the kept axes."""
    dm = plan.epilogue
    leaves = {u: from_storage(f"rx{i}", u.val.dtype) for i, u in enumerate(dm.input_uses)}
    leaves.update(_result_leaves(plan, dm))
    body = emit_body(dm.uses, leaves, scalars, prefix="e", fast=approximable(plan.fusion))
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
    return [f"{u.val.dtype.cuda_type} x{i}" for i, u in enumerate(plan.loop_inputs)]


def _scalar_params(scalars: dict) -> list[str]:
    return [f"{scalar_ctype(s)} {n}" for s, n in scalars.items()]


def _result_params(plan: ReductionPlan, ks: range | list[int]) -> list[str]:
    return [f"{t} {n}" for k in ks for t, n in result_vars(plan, k)]


def result_args(plan: ReductionPlan, ks: range | list[int]) -> list[str]:
    """The result variable names of reductions `ks`, as call arguments."""
    return [n for k in ks for _, n in result_vars(plan, k)]


# ---------------------------------------------------------------------------------------------
# Kernel parameters and shared snippets
# ---------------------------------------------------------------------------------------------


def kernel_name(plan: ReductionPlan, spec: ReductionKernelSpec, suffix: str = "") -> str:
    """A stable name: the kind plus a hash of the fusion and the spec."""
    digest = hashlib.sha1(f"{plan.fusion.structure()!r}|{spec!r}".encode()).hexdigest()[:16]
    return f"kfuse_{spec.kind}_{digest}{suffix}"


def tensor_params(
    plan: ReductionPlan, spec: ReductionKernelSpec, *, loop: bool, row: bool, workspace: bool
) -> list[str]:
    """Kernel parameters in the order the scheduler passes operands: loop inputs (only the
    first when not `loop`: its sizes carry the reduced extent), row inputs, scalars, outputs,
    workspace arrays."""
    rank, index = spec.rank, spec.index_type
    params = [
        f"kf::Tensor<{u.val.dtype.cuda_type}, {rank}, {index}> in{i}"
        for i, u in enumerate(plan.loop_inputs)
        if loop or i == 0
    ]
    if row:
        params += [
            f"kf::Tensor<{u.val.dtype.cuda_type}, {rank}, {index}> rin{i}"
            for i, u in enumerate(plan.epilogue.input_uses)
        ]
    params += [f"{scalar_ctype(s)} s{i}" for i, s in enumerate(plan.scalars)]
    params += [
        f"kf::Tensor<{o.dtype.cuda_type}, {rank}, {index}> out{k}"
        for k, o in enumerate(plan.fusion.outputs)
    ]
    if workspace:
        for acc in accumulators(plan):
            for f in acc.partial_fields:
                params.append(f"kf::Tensor<{acc.partial_type}, 1, {index}> ws{acc.k}{f}")
    return params


def scalar_names(plan: ReductionPlan) -> dict:
    """Scalar -> its kernel parameter name."""
    return {s: f"s{i}" for i, s in enumerate(plan.scalars)}


def decompose(index: str, axes: range, operands: list[str], indent: str) -> list[str]:
    """Add to `base_<op>` the offsets of flattened kept index `index` over canonical `axes`
    (outermost first), using out0's sizes."""
    axes_l = list(axes)
    if not axes_l or not operands:
        return []
    lines = [f"{indent}{{", f"{indent}  Index rem = {index};"]
    for n, d in enumerate(reversed(axes_l)):
        last = n == len(axes_l) - 1
        coord = "rem" if last else f"rem % out0.size[{d}]"
        lines.append(f"{indent}  const Index c{d} = {coord};")
        if not last:
            lines.append(f"{indent}  rem /= out0.size[{d}];")
        lines += [f"{indent}  base_{op} += c{d} * {op}.stride[{d}];" for op in operands]
    lines.append(f"{indent}}}")
    return lines


def epilogue_call(
    plan: ReductionPlan, name: str, row: str, indent: str, kept_axes: range
) -> list[str]:
    """Load the row inputs at kept index `row`, run the epilogue, store the row outputs."""
    if not plan.row_outputs:
        return []
    n_row = len(plan.epilogue.input_uses)
    ops = [f"rin{i}" for i in range(n_row)] + [f"out{k}" for k in plan.row_outputs]
    lines = [f"{indent}{{"]
    lines += [f"{indent}  Index base_{op} = 0;" for op in ops]
    lines += decompose(row, kept_axes, ops, indent + "  ")
    outs = plan.fusion.outputs
    for k in plan.row_outputs:
        lines.append(f"{indent}  {outs[k].dtype.cuda_type} y{k};")
    args = [f"kf::load(rin{i}, base_rin{i})" for i in range(n_row)]
    args += list(scalar_names(plan).values()) + result_args(plan, range(len(plan.reductions)))
    args += [f"y{k}" for k in plan.row_outputs]
    lines.append(f"{indent}  {name}_epi({', '.join(args)});")
    lines += [f"{indent}  kf::store(out{k}, base_out{k}, y{k});" for k in plan.row_outputs]
    lines.append(f"{indent}}}")
    return lines


def functions_source(
    plan: ReductionPlan,
    name: str,
    *,
    stages: bool,
    full: bool,
    epilogue: bool,
    kept: tuple[int, ...] = (),
) -> list[str]:
    """The device functions a kernel source needs."""
    scalars = scalar_names(plan)
    lines: list[str] = []
    if stages:
        for k in range(len(plan.reductions)):
            lines += stage_function(plan, f"{name}_stage{k}", k, scalars)
    if full and plan.loop_outputs:
        lines += full_function(plan, f"{name}_full", scalars, kept)
    if epilogue and plan.row_outputs:
        lines += epilogue_function(plan, f"{name}_epi", scalars)
    return lines


def stage_call(plan: ReductionPlan, name: str, k: int, loaded: list[str]) -> str:
    """A call of stage k on loaded loop values (storage-typed expressions)."""
    args = loaded + list(scalar_names(plan).values())
    args += result_args(plan, stage_dependencies(plan, k))
    return f"{name}_stage{k}({', '.join(args)})"


def smem_bytes(plan: ReductionPlan, spec: ReductionKernelSpec) -> int:
    """Static shared memory the kernel declares for its combines."""
    biggest = max(a.size for a in accumulators(plan))
    per = spec.block_x * spec.block_y
    if spec.kind == "outer":
        per *= spec.vector
    return max(16, per * biggest)


def _loaded(spec: ReductionKernelSpec, u: str, j: str) -> list[str]:
    """Per loop input, the expression of element j of unrolled vector u."""
    out = []
    for i, kind in enumerate(spec.loop_kinds):
        if kind == VEC:
            out.append(f"x{i}[{u}][{j}]")
        elif kind == BCAST:
            out.append(f"x{i}[{u}]")
        else:
            out.append(f"x{i}[{u}][{j}]")
    return out


def load_block(
    plan: ReductionPlan, spec: ReductionKernelSpec, count: str, offset: str, indent: str
) -> list[str]:
    """Declare x{i}[count] and load `count` vectors: vector u starts at element offset
    `offset` (an expression of u) along the vectorized axis."""
    vec = spec.vector
    lines = []
    for i, (u, kind) in enumerate(zip(plan.loop_inputs, spec.loop_kinds)):
        lines.append(register_array(f"x{i}", u.val.dtype.cuda_type, kind, vec, count, indent))
    lines += [
        "#pragma unroll",
        f"{indent}for (int u = 0; u < {count}; ++u) {{",
        f"{indent}  const Index i0 = {offset};",
    ]
    for i, kind in enumerate(spec.loop_kinds):
        if kind == VEC:
            lines.append(
                f"{indent}  x{i}[u] = kf::load_vec<{vec}>(in{i}, base_in{i} + i0 * step_in{i});"
            )
        elif kind == BCAST:
            lines.append(f"{indent}  x{i}[u] = kf::load(in{i}, base_in{i});")
        else:
            lines += [
                "#pragma unroll",
                f"{indent}  for (int j = 0; j < {vec}; ++j) x{i}[u][j] = "
                f"kf::load(in{i}, base_in{i} + (i0 + j) * step_in{i});",
            ]
    lines.append(f"{indent}}}")
    return lines


def accumulate_block(
    plan: ReductionPlan,
    spec: ReductionKernelSpec,
    name: str,
    count: str,
    indent: str,
    acc_suffix: str = "",
) -> list[str]:
    """Run every stage on the loaded block and fold it into the accumulators.

    acc_suffix "[j]" (the outer kernel): lane j of each vector has an accumulator of its
    own; otherwise every loaded element goes to the one accumulator. Welford accumulators
    take their values a batch at a time (kf::welford_update_batch: one division a batch)."""
    accs = accumulators(plan)
    plain = [a for a in accs if not a.welford]
    lines = []
    if plain:
        lines += [
            "#pragma unroll",
            f"{indent}for (int u = 0; u < {count}; ++u) {{",
            "#pragma unroll",
            f"{indent}  for (int j = 0; j < {spec.vector}; ++j) {{",
        ]
        loaded = _loaded(spec, "u", "j")
        for acc in plain:
            target = f"acc{acc.k}{acc_suffix}"
            call = stage_call(plan, name, acc.k, loaded)
            lines.append(f"{indent}    {acc.update(target, call)}")
        lines += [f"{indent}  }}", f"{indent}}}"]
    per_lane = acc_suffix == "[j]"
    for acc in (a for a in accs if a.welford):
        size = count if per_lane else f"({count}) * {spec.vector}"
        slot = "u" if per_lane else f"u * {spec.vector} + j"
        call = stage_call(plan, name, acc.k, _loaded(spec, "u", "j"))

        def fill(ind: str, slot: str = slot, call: str = call) -> list[str]:
            return [
                "#pragma unroll",
                f"{ind}for (int u = 0; u < {count}; ++u) {{",
                f"{ind}  batch[{slot}] = {call};",
                f"{ind}}}",
            ]

        fold = f"{indent}  kf::welford_update_batch(acc{acc.k}{acc_suffix}, batch);"
        declare = f"{indent}  {acc.value_type} batch[{size}];"
        if per_lane:  # a batch per lane: the lane's values of the loaded vectors
            lines += [
                "#pragma unroll",
                f"{indent}for (int j = 0; j < {spec.vector}; ++j) {{",
                declare,
                *fill(indent + "  "),
                fold,
                f"{indent}}}",
            ]
        else:  # one batch: every element loaded
            lines += [
                f"{indent}{{",
                declare,
                "#pragma unroll",
                f"{indent}  for (int j = 0; j < {spec.vector}; ++j) {{",
                *fill(indent + "    "),
                f"{indent}  }}",
                fold,
                f"{indent}}}",
            ]
    return lines


def scalar_accumulate(
    plan: ReductionPlan, name: str, offset: str, indent: str, acc_suffix: str = ""
) -> list[str]:
    """Load one element at `offset` along the vectorized axis and accumulate it."""
    loaded = [
        f"kf::load(in{i}, base_in{i} + ({offset}) * step_in{i})"
        for i in range(len(plan.loop_inputs))
    ]
    lines = [f"{indent}{{"]
    names = []
    for i, (u, arg) in enumerate(zip(plan.loop_inputs, loaded)):
        lines.append(f"{indent}  const {u.val.dtype.cuda_type} e{i} = {arg};")
        names.append(f"e{i}")
    for acc in accumulators(plan):
        call = stage_call(plan, name, acc.k, names)
        lines.append(f"{indent}  {acc.update(f'acc{acc.k}{acc_suffix}', call)}")
    lines.append(f"{indent}}}")
    return lines


# ---------------------------------------------------------------------------------------------
# The inner kernel
# ---------------------------------------------------------------------------------------------


def emit_inner(plan: ReductionPlan, spec: ReductionKernelSpec) -> tuple[str, str]:
    """Source and name of the inner-reduction kernel."""
    name = kernel_name(plan, spec)
    rank, vec, unroll = spec.rank, spec.vector, spec.unroll
    bx, by, parts = spec.block_x, spec.block_y, spec.grid_parts
    kept = range(rank - 1)
    n_loop = len(plan.loop_inputs)
    accs = accumulators(plan)
    lines = [runtime_header(), ""]
    lines += functions_source(plan, name, stages=True, full=False, epilogue=parts == 1)
    params = tensor_params(plan, spec, loop=True, row=parts == 1, workspace=parts > 1)
    lines += kernel_header(name, params, bx * by, bounded=spec.launch_bounds)
    lines += [
        f"  typedef {spec.index_type} Index;",
        f"  __shared__ __align__(16) unsigned char kf_smem[{smem_bytes(plan, spec)}];",
        f"  const Index n_red = in0.size[{rank - 1}];",
        "  Index n_rows = 1;",
    ]
    lines += [f"  n_rows *= out0.size[{d}];" for d in kept]
    lines += [
        f"  const Index n_vec = n_red / {vec};",
        f"  const Index vstride = (Index)gridDim.y * {bx};",
        f"  for (Index row0 = (Index)blockIdx.x * {by}; row0 < n_rows;"
        f" row0 += (Index)gridDim.x * {by}) {{",
        "    const Index row = row0 + threadIdx.y;",
        "    const bool row_ok = row < n_rows;",
    ]
    ins = [f"in{i}" for i in range(n_loop)]
    lines += [f"    Index base_{op} = 0;" for op in ins]
    lines.append("    if (row_ok) {")
    lines += decompose("row", kept, ins, "      ")
    lines.append("    }")
    lines += [f"    const Index step_in{i} = in{i}.stride[{rank - 1}];" for i in range(n_loop)]
    lines += [f"    {a.ctype} acc{a.k} = {a.identity()};" for a in accs]
    lines += [
        "    if (row_ok) {",
        f"      Index v = (Index)blockIdx.y * {bx} + threadIdx.x;",
        f"      for (; v + (Index)({unroll - 1}) * vstride < n_vec; v += {unroll} * vstride) {{",
    ]
    lines += load_block(plan, spec, str(unroll), f"(v + (Index)u * vstride) * {vec}", "        ")
    lines += accumulate_block(plan, spec, name, str(unroll), "        ")
    lines += ["      }"]
    if unroll > 1:
        lines += ["      for (; v < n_vec; v += vstride) {"]
        lines += load_block(plan, spec, "1", f"v * {vec}", "        ")
        lines += accumulate_block(plan, spec, name, "1", "        ")
        lines += ["      }"]
    if vec > 1:
        lines += [
            f"      for (Index i = n_vec * {vec} + (Index)blockIdx.y * {bx} + threadIdx.x;"
            " i < n_red; i += vstride)"
        ]
        lines += scalar_accumulate(plan, name, "i", "        ")
    lines.append("    }")
    for a in accs:
        combined = a.block_reduce(f"acc{a.k}", "kf_smem", spec.block_x)
        lines.append(f"    const {a.ctype} red{a.k} = {combined};")
    lines.append("    if (threadIdx.x == 0 && row_ok) {")
    if parts > 1:
        lines += _store_partials(accs, "(Index)blockIdx.y * n_rows + row", "      ")
    else:
        for a in accs:
            lines += [f"      {s}" for s in result_assignments(plan, a.k, f"red{a.k}", "n_red")]
        lines += epilogue_call(plan, name, "row", "      ", kept)
    lines += ["    }", "  }", "}", ""]
    return "\n".join(lines), name


def _store_partials(
    accs: list[Accumulator], index: str, indent: str, value_suffix: str = ""
) -> list[str]:
    lines = []
    for a in accs:
        value = f"red{a.k}{value_suffix}"
        if a.welford:
            for f in a.partial_fields:
                lines.append(f"{indent}kf::store(ws{a.k}{f}, {index}, {value}.{f});")
        else:
            lines.append(f"{indent}kf::store(ws{a.k}, {index}, {value});")
    return lines


# ---------------------------------------------------------------------------------------------
# The outer kernel
# ---------------------------------------------------------------------------------------------


SERIAL_COMBINE_MAX = 8
"""Outer kernels with at most this many threads along the reduced axis and no Welford
accumulator combine their partials by thread y == 0 in turn; the others go through the tree of
_combine_over_y (with Welford's division a chain of 7 took 3 us more in a bf16 norm over dim 0
of [64, 65536], 12.4 against 9.0 us on an H200)."""


def emit_outer(plan: ReductionPlan, spec: ReductionKernelSpec) -> tuple[str, str]:
    """Source and name of the outer-reduction kernel."""
    name = kernel_name(plan, spec)
    vec, parts = spec.vector, spec.grid_parts
    kept = range(spec.rank - 1)
    accs = accumulators(plan)
    lines = [runtime_header(), ""]
    lines += functions_source(plan, name, stages=True, full=False, epilogue=parts == 1)
    params = tensor_params(plan, spec, loop=True, row=parts == 1, workspace=parts > 1)
    lines += kernel_header(name, params, spec.block_x * spec.block_y, bounded=spec.launch_bounds)
    lines += outer_columns(plan, spec, "(Index)gridDim.y", [])
    lines += outer_accumulate(plan, spec, name, f"(Index)blockIdx.y * {spec.block_y}")
    lines += outer_combine(plan, spec)
    lines += [
        "    if (threadIdx.y == 0 && col_ok) {",
        "#pragma unroll",
        f"      for (int j = 0; j < {vec}; ++j) {{",
        "        if (j >= nvalid) continue;",
        "        const Index row = outer * n_in + c0 + j;",
    ]
    if parts > 1:
        for a in accs:
            lines.append(f"        const {a.ctype} red{a.k} = acc{a.k}[j];")
        lines += _store_partials(accs, "(Index)blockIdx.y * n_rows + row", "        ")
    else:
        for a in accs:
            lines += [
                f"        {s}" for s in result_assignments(plan, a.k, f"acc{a.k}[j]", "n_red")
            ]
        lines += epilogue_call(plan, name, "row", "        ", kept)
    lines += ["      }", "    }", "  }", "}", ""]
    return "\n".join(lines), name


def outer_columns(
    plan: ReductionPlan, spec: ReductionKernelSpec, splits: str, outputs: list[int]
) -> list[str]:
    """The start of an outer kernel: its shared memory and extents, then the loop over this
    block's groups of V columns (left open), with each thread's column group (cv, outer, c0,
    nvalid), its operands' bases and steps, and its accumulators. `splits`: the blocks along
    the reduced axis (rstride = splits * block_y); `outputs`: fusion outputs on the full
    domain the kernel also addresses (out<k>: base, step along the columns, stride along the
    reduced axis)."""
    rank, vec, bx, by = spec.rank, spec.vector, spec.block_x, spec.block_y
    inner_axis = rank - 2
    n_loop = len(plan.loop_inputs)
    lines = [
        f"  typedef {spec.index_type} Index;",
        f"  __shared__ __align__(16) unsigned char kf_smem[{smem_bytes(plan, spec)}];",
        f"  const Index n_red = in0.size[{rank - 1}];",
        f"  const Index n_in = out0.size[{inner_axis}];",
        "  Index n_rows = n_in;",
    ]
    lines += [f"  n_rows *= out0.size[{d}];" for d in range(inner_axis)]
    lines += [
        f"  const Index nvec_in = (n_in + {vec - 1}) / {vec};",
        "  const Index n_cols = n_in == 0 ? 0 : n_rows / n_in * nvec_in;",
        f"  const Index rstride = {splits} * {by};",
        f"  for (Index col0 = (Index)blockIdx.x * {bx}; col0 < n_cols;"
        f" col0 += (Index)gridDim.x * {bx}) {{",
        "    const Index cv = col0 + threadIdx.x;",
        "    const bool col_ok = cv < n_cols;",
        "    Index outer = 0;",
        "    Index c0 = 0;",
        "    int nvalid = 0;",
    ]
    ops = [f"in{i}" for i in range(n_loop)] + [f"out{k}" for k in outputs]
    lines += [f"    Index base_{op} = 0;" for op in ops]
    lines += [
        "    if (col_ok) {",
        "      outer = cv / nvec_in;",
        f"      c0 = (cv - outer * nvec_in) * {vec};",
        f"      nvalid = (int)(n_in - c0 < {vec} ? n_in - c0 : {vec});",
    ]
    lines += decompose("outer", range(inner_axis), ops, "      ")
    lines += [f"      base_{op} += c0 * {op}.stride[{inner_axis}];" for op in ops]
    lines.append("    }")
    lines += [f"    const Index step_{op} = {op}.stride[{inner_axis}];" for op in ops]
    lines += [f"    const Index rs_{op} = {op}.stride[{rank - 1}];" for op in ops]
    for a in accumulators(plan):
        lines += [
            f"    {a.ctype} acc{a.k}[{vec}];",
            f"    for (int j = 0; j < {vec}; ++j) acc{a.k}[j] = {a.identity()};",
        ]
    return lines


def outer_accumulate(
    plan: ReductionPlan, spec: ReductionKernelSpec, name: str, first: str
) -> list[str]:
    """Fold this thread's rows (first + threadIdx.y, then every rstride) of its column group
    into its accumulators: whole batches of `unroll` rows, the rest (spec.tail_batches), and
    element by element for a group cut by the end of the columns."""
    vec, unroll = spec.vector, spec.unroll
    n_loop = len(plan.loop_inputs)
    lines = [
        "    if (col_ok) {",
        f"      Index r = {first} + threadIdx.y;",
        f"      if (nvalid == {vec}) {{",
        f"        for (; r + (Index)({unroll - 1}) * rstride < n_red; r += {unroll} * rstride) {{",
    ]
    lines += _outer_block(plan, spec, name, str(unroll), "          ")
    lines.append("        }")
    if spec.tail_batches:
        # Fewer than `unroll` rows are left: take them in batches of halving powers of two (4,
        # 2, 1 after 8; 4, 2, 1 after 5), so that they cost about log2(unroll) memory latencies
        # rather than one each. Threads with few rows in all (a finely split or short reduced
        # axis) have nothing but this.
        count = 1 << ((unroll - 1).bit_length() - 1) if unroll > 1 else 0
        while count >= 1:
            last = "r" if count == 1 else f"r + (Index)({count - 1}) * rstride"
            lines.append(f"        if ({last} < n_red) {{")
            lines += _outer_block(plan, spec, name, str(count), "          ")
            lines += [f"          r += {'' if count == 1 else f'{count} * '}rstride;", "        }"]
            count //= 2
    elif unroll > 1:
        lines.append("        for (; r < n_red; r += rstride) {")
        lines += _outer_block(plan, spec, name, "1", "          ")
        lines.append("        }")
    lines += [
        "      } else {",
        "        for (; r < n_red; r += rstride) {",
        "#pragma unroll",
        f"          for (int j = 0; j < {vec}; ++j) {{",
        "            if (j >= nvalid) continue;",
    ]
    loaded = [f"kf::load(in{i}, base_in{i} + r * rs_in{i} + j * step_in{i})" for i in range(n_loop)]
    for i, (u, arg) in enumerate(zip(plan.loop_inputs, loaded)):
        lines.append(f"            const {u.val.dtype.cuda_type} e{i} = {arg};")
    for a in accumulators(plan):
        call = stage_call(plan, name, a.k, [f"e{i}" for i in range(n_loop)])
        lines.append(f"            {a.update(f'acc{a.k}[j]', call)}")
    lines += ["          }", "        }", "      }", "    }"]
    return lines


def outer_combine(plan: ReductionPlan, spec: ReductionKernelSpec) -> list[str]:
    """Combine the block_y threads' accumulators of each column into thread y == 0's."""
    bx, by, vec = spec.block_x, spec.block_y, spec.vector
    accs = accumulators(plan)
    lines: list[str] = []
    if by > SERIAL_COMBINE_MAX or (by > 1 and any(a.welford for a in accs)):
        for a in accs:
            lines += _combine_over_y(a, by, bx, vec, f"acc{a.k}")
    elif by > 1:
        # Few cheap partials: thread y == 0 combines them in turn, which costs fewer
        # registers than the tree (W3's kernel keeps 32 and 8 blocks an SM).
        other = f"scratch[(t * {bx} + threadIdx.x) * {vec} + j]"
        lines.append(f"    const int slot = (threadIdx.y * {bx} + threadIdx.x) * {vec};")
        for a in accs:
            lines += [
                "    {",
                f"      {a.ctype}* scratch = reinterpret_cast<{a.ctype}*>(kf_smem);",
                f"      for (int j = 0; j < {vec}; ++j) scratch[slot + j] = acc{a.k}[j];",
                "      __syncthreads();",
                "      if (threadIdx.y == 0) {",
                f"        for (int t = 1; t < {by}; ++t) {{",
                f"          for (int j = 0; j < {vec}; ++j) {{",
                f"            {a.combine(f'acc{a.k}[j]', other)}",
                "          }",
                "        }",
                "      }",
                "      __syncthreads();",
                "    }",
            ]
    return lines


def _outer_block(
    plan: ReductionPlan, spec: ReductionKernelSpec, name: str, count: str, indent: str
) -> list[str]:
    """Load `count` reduced rows (r + u * rstride) of V columns and accumulate them."""
    vec = spec.vector
    lines = []
    for i, (u, kind) in enumerate(zip(plan.loop_inputs, spec.loop_kinds)):
        lines.append(register_array(f"x{i}", u.val.dtype.cuda_type, kind, vec, count, indent))
    lines += [
        "#pragma unroll",
        f"{indent}for (int u = 0; u < {count}; ++u) {{",
        f"{indent}  const Index rr = r + (Index)u * rstride;",
    ]
    for i, kind in enumerate(spec.loop_kinds):
        at = f"base_in{i} + rr * rs_in{i}"
        if kind == VEC:
            lines.append(f"{indent}  x{i}[u] = kf::load_vec<{vec}>(in{i}, {at});")
        elif kind == BCAST:
            lines.append(f"{indent}  x{i}[u] = kf::load(in{i}, {at});")
        else:
            lines += [
                "#pragma unroll",
                f"{indent}  for (int j = 0; j < {vec}; ++j) x{i}[u][j] = "
                f"kf::load(in{i}, {at} + j * step_in{i});",
            ]
    lines.append(f"{indent}}}")
    lines += accumulate_block(plan, spec, name, count, indent, acc_suffix="[j]")
    return lines


# ---------------------------------------------------------------------------------------------
# The finalize kernel (grid_parts > 1)
# ---------------------------------------------------------------------------------------------

FINALIZE_X = 32
"""Kept elements a finalize block takes (threadIdx.x)."""
FINALIZE_BATCH = 8
"""Partials a finalize thread loads before it combines them."""


def finalize_threads_y(parts: int) -> int:
    """Threads sharing one kept element's partials (threadIdx.y; partial p goes to thread
    p % y): 4, or more for many partials, so that each thread loads at most about two
    batches (few kept elements give few blocks, and each thread's batches wait in turn)."""
    y = 4
    while y < 32 and y * 2 * FINALIZE_BATCH < parts:
        y *= 2
    return y


def emit_finalize(plan: ReductionPlan, spec: ReductionKernelSpec) -> tuple[str, str]:
    """Source and name of the kernel combining the partials and running the epilogue.

    A loop that loads one partial and combines it before loading the next waits a full
    memory latency per partial: with few kept elements (a batch norm over 512 channels has
    4 blocks of them) that took 40 us for 98 partials. So several threads share each kept
    element (finalize_threads_y), each loads FINALIZE_BATCH of its partials at a time, and
    their results are combined over threadIdx.y in a fixed tree (_combine_over_y), so
    results stay deterministic.
    """
    name = kernel_name(plan, spec, "_fin")
    rank, parts = spec.rank, spec.grid_parts
    fx, fy, batch = FINALIZE_X, finalize_threads_y(parts), FINALIZE_BATCH
    kept = range(rank - 1)
    accs = accumulators(plan)
    lines = [runtime_header(), ""]
    lines += functions_source(plan, name, stages=False, full=False, epilogue=True)
    params = tensor_params(plan, spec, loop=False, row=True, workspace=True)
    lines += kernel_header(name, params, fx * fy, bounded=spec.launch_bounds)
    lines += [
        f"  typedef {spec.index_type} Index;",
        "  __shared__ __align__(16) unsigned char "
        f"kf_smem[{fx * fy * max(a.size for a in accs)}];",  # an accumulator a thread
        f"  const Index n_red = in0.size[{rank - 1}];",
        "  Index n_rows = 1;",
    ]
    lines += [f"  n_rows *= out0.size[{d}];" for d in kept]
    # row0 is the same for the whole block, so every thread reaches the __syncthreads below.
    lines += [
        f"  for (Index row0 = (Index)blockIdx.x * {fx}; row0 < n_rows;"
        f" row0 += (Index)gridDim.x * {fx}) {{",
        "    const Index row = row0 + threadIdx.x;",
        "    const bool row_ok = row < n_rows;",
    ]
    for a in accs:
        lines.append(f"    {a.ctype} red{a.k} = {a.identity()};")
    lines += [
        "    if (row_ok) {",
        f"      for (int p0 = threadIdx.y; p0 < {parts}; p0 += {fy * batch}) {{",
    ]
    for a in accs:
        lines.append(f"        {a.ctype} part{a.k}[{batch}];")
    lines += [
        "#pragma unroll",
        f"        for (int u = 0; u < {batch}; ++u) {{",
        f"          const int p = p0 + u * {fy};",
        f"          if (p >= {parts}) break;",
        "          const Index at = (Index)p * n_rows + row;",
    ]
    for a in accs:
        if a.welford:
            lines += [
                f"          part{a.k}[u].{f} = kf::load(ws{a.k}{f}, at);" for f in a.partial_fields
            ]
        else:
            lines.append(f"          part{a.k}[u] = kf::load(ws{a.k}, at);")
    lines += [
        "        }",
        "#pragma unroll",
        f"        for (int u = 0; u < {batch}; ++u) {{",
        f"          if (p0 + u * {fy} >= {parts}) break;",
    ]
    lines += [f"          {a.combine(f'red{a.k}', f'part{a.k}[u]')}" for a in accs]
    lines += ["        }", "      }", "    }"]
    for a in accs:
        lines += _combine_over_y(a, fy, fx, None, f"red{a.k}")
    lines.append("    if (threadIdx.y == 0 && row_ok) {")
    for a in accs:
        lines += [f"      {s}" for s in result_assignments(plan, a.k, f"red{a.k}", "n_red")]
    lines += epilogue_call(plan, name, "row", "      ", kept)
    lines += ["    }", "  }", "}", ""]
    return "\n".join(lines), name


def _combine_over_y(a: Accumulator, ny: int, nx: int, vec: int | None, acc: str) -> list[str]:
    """Statements combining each thread's accumulator `acc` (an array of `vec`, or a scalar
    when vec is None) over threadIdx.y into thread y == 0's, through shared memory.

    Partners pair up in a fixed tree (y with y + 1, then y with y + 2, ...), so results are
    deterministic and there are log2(ny) steps. A loop in which thread y == 0 alone combined
    the other ny - 1 values in turn was one warp's chain of dependent combines: with ny = 32
    and Welford's division, it took most of a 32 us statistics kernel while the other warps
    waited at the barrier (Nsight Compute: 76% of their cycles). Ends with a barrier, so the
    shared memory is free for the next accumulator.
    """
    item = acc if vec is None else f"{acc}[j]"
    at = "" if vec is None else " + j"
    width = vec or 1

    def each(indent: str, body: list[str]) -> list[str]:
        if vec is None:
            return [indent + b for b in body]
        return (
            ["#pragma unroll", f"{indent}for (int j = 0; j < {vec}; ++j) {{"]
            + [f"{indent}  {b}" for b in body]
            + [f"{indent}}}"]
        )

    return (
        [
            "    {",
            f"      {a.ctype}* scratch = reinterpret_cast<{a.ctype}*>(kf_smem);",
            f"      const int mine = (threadIdx.y * {nx} + threadIdx.x) * {width};",
        ]
        + each("      ", [f"scratch[mine{at}] = {item};"])
        + [
            "      __syncthreads();",
            f"      for (int s = 1; s < {ny}; s *= 2) {{",
            f"        if ((threadIdx.y & (2 * s - 1)) == 0 && threadIdx.y + s < {ny}) {{",
            f"          const int theirs = ((threadIdx.y + s) * {nx} + threadIdx.x) * {width};",
        ]
        + each(
            "          ", [a.combine(item, f"scratch[theirs{at}]"), f"scratch[mine{at}] = {item};"]
        )
        + ["        }", "        __syncthreads();", "      }", "    }"]
    )


def emit_reduction(plan: ReductionPlan, spec: ReductionKernelSpec) -> list[tuple[str, str]]:
    """(source, name) of every kernel the spec needs, in launch order."""
    first = emit_inner(plan, spec) if spec.kind == "inner" else emit_outer(plan, spec)
    if spec.grid_parts > 1:
        return [first, emit_finalize(plan, spec)]
    return [first]


__all__ = [
    "ReductionKernelSpec",
    "emit_reduction",
    "emit_inner",
    "emit_outer",
    "emit_finalize",
    "accumulators",
    "DataType",
    "FINALIZE_X",
    "finalize_threads_y",
]

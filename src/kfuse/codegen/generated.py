"""Generated reads in the pointwise and reduction kernels: a generated value (full, iota,
random numbers: kfuse.ir.generated) read by the kernel that consumes it
(kfuse.codegen.domain.GeneratedRead), computed where an input would be loaded.

A generated read is input k of the kernel, a kf::Tensor with no data: its sizes are the
merged domain's and its strides those of the generated tensor's own shape, contiguous
(kfuse.schedule.pointwise lays it out so), 0 along the axes it is broadcast on. The kernel's
offset arithmetic, which moves every input's base along its strides, then gives
`base_in<k> + i * step_in<k>`: the element's linear index in the generated tensor, and the
generator's expression of that index (GeneratorInfo.cuda) is the value, in the read's storage
type as a load would give it. Nothing is read from memory.

A random read (uniform, normal: kfuse.ir.random_ops) also has a kf::PhiloxMemo of its own,
declared before the element loop: the consecutive elements a thread computes share one
Philox call per four (two for Double) instead of one call each. A stateful one takes its seed
and Philox offset from the kernel's parameters rng_seed and rng_offset (RNG_PARAMS), which
every launch fills from the generator (kfuse.runtime.launch.RngStateOperand): the kernel's
k-th stateful op, in the order the kernel first reads them, draws at rng_offset + k.

The reduction kernels (reduction, inner and outer persistent, inner-outer) read generated values
on their loop domain (kfuse.codegen.reduction_plan: the loop inputs) without a code path of their
own: loop input i's kf::Tensor parameter is named made_in<i>, and the kernel's first statements
make in<i> a kf::Generated of it (kf_generated.cuh) whose value is the element expression above,
through a PhiloxMemo of the read's own. Every load of in<i> the kernel already writes (elements,
vectors, guarded vectors, copies into shared memory) then computes what it would have read, at
the offset it would have read at, which is the element's linear index. The stateful ops are
numbered over the loop inputs in order, and the kernel takes RNG_PARAMS after its scalars.
The persistent kernels compute the generated reads a reduction reads again in every pass
instead of holding them (kfuse.codegen.reduction_functions.regenerated_inputs); the inner
persistent kernel's take no memo (loop_setup's by_vector).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kfuse.codegen.expressions import scalar_operand
from kfuse.codegen.layout import GENERATED
from kfuse.dtypes import DataType
from kfuse.ir.exprs import GeneratedOp
from kfuse.ir.generated import GENERATORS
from kfuse.ir.random_ops import is_random, is_stateful, random_cuda

if TYPE_CHECKING:
    from kfuse.codegen.domain import DomainMap
    from kfuse.codegen.pointwise import PointwiseKernelSpec
    from kfuse.codegen.reduction_plan import ReductionPlan


def reads(spec: PointwiseKernelSpec) -> list[int]:
    """The inputs of `spec` that are generated reads."""
    return [k for k, kind in enumerate(spec.input_kinds) if kind == GENERATED]


# The kernel parameters of a kernel with stateful random reads (after its scalars).
RNG_PARAMS = ("long long rng_seed", "long long rng_offset")


def stateful_ops(domain: DomainMap) -> list[GeneratedOp]:
    """The stateful random ops the kernel reads, in the order it first reads them."""
    ops = [domain.generated[u].expr for u in domain.input_uses if u in domain.generated]
    return list(dict.fromkeys(e for e in ops if is_stateful(e)))


def memo_declarations(spec: PointwiseKernelSpec, domain: DomainMap) -> list[str]:
    """One kf::PhiloxMemo per random read, declared before the element loop."""
    return [
        f"kf::PhiloxMemo rng_memo{k};"
        for k in reads(spec)
        if is_random(domain.generated[domain.input_uses[k]].expr)
    ]


def value(domain: DomainMap, k: int, index: str, narrow_index: bool = False) -> str:
    """Read k's element at linear index `index`, in its storage type (`narrow_index`: the
    kernel indexes with int, as element's)."""
    use = domain.input_uses[k]
    expr = domain.generated[use].expr
    return element(
        expr,
        use.val.dtype,
        index,
        [f"s{domain.scalars.index(p)}" if not p.is_constant else "" for p in expr.params],
        stateful_ops(domain),
        f"rng_memo{k}",
        narrow_index,
    )


def element(
    expr: GeneratedOp,
    storage: DataType,
    index: str,
    param_names: list[str],
    stateful: list[GeneratedOp],
    memo: str,
    narrow_index: bool = False,
) -> str:
    """`expr`'s element at linear index `index` (a CUDA expression), in `storage`: its
    parameters are constants or the kernel's scalars `param_names` (one a parameter; "" for a
    constant), a stateful random op draws at rng_offset + its place in `stateful` (the kernel's
    stateful ops in the order it first reads them), a random one through PhiloxMemo `memo`
    ("": a Philox call of its own). `narrow_index`: the kernel indexes with int, so `index` is
    below 2^31 (random_cuda's)."""
    params = [scalar_operand(p, name or None) for p, name in zip(expr.params, param_names)]
    at = f"(long long)({index})"
    if is_random(expr):
        made = _random_value(expr, at, params, stateful, memo or None, narrow_index)
    else:
        made = GENERATORS[expr.op].cuda(at, params, expr.dtype)
    return f"kf::cast<{storage.cuda_type}>({made})"


def _random_value(
    expr: GeneratedOp,
    index: str,
    params: list[str],
    stateful: list[GeneratedOp],
    memo: str | None,
    narrow_index: bool,
) -> str:
    if is_stateful(expr):
        params = [*params, "rng_seed", f"rng_offset + {stateful.index(expr)}"]
    a, b = expr.params[:2]
    # nvFuser's standard forms: constant 0 and 1 (the same numbers, two operations fewer)
    standard = a.is_constant and b.is_constant and (a.value, b.value) == (0, 1)
    return random_cuda(
        expr.op, index, params, expr.dtype, standard=standard, memo=memo, narrow_index=narrow_index
    )


def vector_load(spec: PointwiseKernelSpec, domain: DomainMap, k: int, indent: str) -> list[str]:
    """Read k's u-th vector into x<k>[u], at element i0 of the row: each lane its own."""
    at = f"base_in{k} + (i0 + j) * step_in{k}"
    return [
        "#pragma unroll",
        f"{indent}for (int j = 0; j < {spec.vector}; ++j) {{",
        f"{indent}  x{k}[u][j] = {value(domain, k, at, spec.index_type == 'int')};",
        f"{indent}}}",
    ]


# ---- the reduction kernels' loop inputs ----
def loop_reads(plan: ReductionPlan) -> dict[int, GeneratedOp]:
    """The loop inputs of `plan` that are generated reads: index -> the op."""
    reads = {}
    for i, use in enumerate(plan.loop_inputs):
        read = plan.generated_read(use)
        if read is not None:
            reads[i] = read.expr
    return reads


def loop_stateful_ops(plan: ReductionPlan) -> list[GeneratedOp]:
    """The stateful random ops `plan`'s loop inputs read, in loop-input order."""
    return list(dict.fromkeys(e for e in loop_reads(plan).values() if is_stateful(e)))


def loop_param(plan: ReductionPlan, i: int) -> str:
    """Loop input i's kernel parameter name: made_in<i> for a generated read (the kernel
    makes in<i> of it: loop_setup), else in<i>."""
    return f"made_in{i}" if i in loop_reads(plan) else f"in{i}"


def loop_setup(
    plan: ReductionPlan, index_type: str, by_vector: frozenset[int] = frozenset()
) -> list[str]:
    """The statements that open a reduction kernel reading its loop inputs: per generated
    read, its memo and in<i>, a kf::Generated of made_in<i> (nothing for the others).

    `by_vector`: reads the kernel computes a vector at a time (kf::load_vec, load_vec_groups:
    an inner persistent kernel's regenerated slots), whose groups of four indices make one
    Philox call each by common subexpressions alone: they take no memo, whose Philox block
    stayed live across the kernel (its registers spilled a dropout + layer norm forward of
    [2048, 16384]). `index_type`: the kernel's Index ("int": the elements' linear indices
    are below 2^31)."""
    names = {id(s): f"s{k}" for k, s in enumerate(plan.scalars)}
    stateful = loop_stateful_ops(plan)
    lines = []
    for i, expr in loop_reads(plan).items():
        storage = plan.loop_inputs[i].val.dtype
        params = [names.get(id(p), "") for p in expr.params]
        memo = "" if i in by_vector else f"rng_memo{i}"
        made = element(expr, storage, "e", params, stateful, memo, index_type == "int")
        if is_random(expr) and memo:
            lines.append(f"kf::PhiloxMemo rng_memo{i};")
        lines.append(
            f"const auto in{i} = kf::generated(made_in{i}, [&](long long e) {{ return {made}; }});"
        )
    return lines

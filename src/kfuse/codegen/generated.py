"""Generated reads in the pointwise kernel: a generated value (full, iota:
kfuse.ir.generated) read by the kernel that consumes it (kfuse.codegen.domain.GeneratedRead),
computed where an input would be loaded.

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
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kfuse.codegen.expressions import scalar_operand
from kfuse.codegen.layout import GENERATED
from kfuse.ir.exprs import GeneratedOp
from kfuse.ir.generated import GENERATORS
from kfuse.ir.random_ops import is_random, is_stateful, random_cuda

if TYPE_CHECKING:
    from kfuse.codegen.domain import DomainMap
    from kfuse.codegen.pointwise import PointwiseKernelSpec


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


def value(domain: DomainMap, k: int, index: str) -> str:
    """Read k's element at linear index `index`, in its storage type."""
    use = domain.input_uses[k]
    expr = domain.generated[use].expr
    params = [
        scalar_operand(p, None if p.is_constant else f"s{domain.scalars.index(p)}")
        for p in expr.params
    ]
    at = f"(long long)({index})"
    if is_random(expr):
        made = _random_value(domain, expr, k, at, params)
    else:
        made = GENERATORS[expr.op].cuda(at, params, expr.dtype)
    return f"kf::cast<{use.val.dtype.cuda_type}>({made})"


def _random_value(
    domain: DomainMap, expr: GeneratedOp, k: int, index: str, params: list[str]
) -> str:
    if is_stateful(expr):
        params = [*params, "rng_seed", f"rng_offset + {stateful_ops(domain).index(expr)}"]
    a, b = expr.params[:2]
    # nvFuser's standard forms: constant 0 and 1 (the same numbers, two operations fewer)
    standard = a.is_constant and b.is_constant and (a.value, b.value) == (0, 1)
    return random_cuda(expr.op, index, params, expr.dtype, standard=standard, memo=f"rng_memo{k}")


def vector_load(spec: PointwiseKernelSpec, domain: DomainMap, k: int, indent: str) -> list[str]:
    """Read k's u-th vector into x<k>[u], at element i0 of the row: each lane its own."""
    return [
        "#pragma unroll",
        f"{indent}for (int j = 0; j < {spec.vector}; ++j) {{",
        f"{indent}  x{k}[u][j] = {value(domain, k, f'base_in{k} + (i0 + j) * step_in{k}')};",
        f"{indent}}}",
    ]

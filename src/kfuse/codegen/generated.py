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
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kfuse.codegen.expressions import scalar_operand
from kfuse.codegen.layout import GENERATED
from kfuse.ir.generated import GENERATORS

if TYPE_CHECKING:
    from kfuse.codegen.domain import DomainMap
    from kfuse.codegen.pointwise import PointwiseKernelSpec


def reads(spec: PointwiseKernelSpec) -> list[int]:
    """The inputs of `spec` that are generated reads."""
    return [k for k, kind in enumerate(spec.input_kinds) if kind == GENERATED]


def value(domain: DomainMap, k: int, index: str) -> str:
    """Read k's element at linear index `index`, in its storage type."""
    use = domain.input_uses[k]
    expr = domain.generated[use].expr
    params = [
        scalar_operand(p, None if p.is_constant else f"s{domain.scalars.index(p)}")
        for p in expr.params
    ]
    made = GENERATORS[expr.op].cuda(f"(long long)({index})", params, expr.dtype)
    return f"kf::cast<{use.val.dtype.cuda_type}>({made})"


def vector_load(spec: PointwiseKernelSpec, domain: DomainMap, k: int, indent: str) -> list[str]:
    """Read k's u-th vector into x<k>[u], at element i0 of the row: each lane its own."""
    return [
        "#pragma unroll",
        f"{indent}for (int j = 0; j < {spec.vector}; ++j) {{",
        f"{indent}  x{k}[u][j] = {value(domain, k, f'base_in{k} + (i0 + j) * step_in{k}')};",
        f"{indent}}}",
    ]

"""The pointwise kernel's rows where its launch covers a row with its vectors exactly
(PointwiseKernelSpec.whole_rows: grid_x blocks of block_x threads of U vectors, chosen for
reads through an index by kfuse.schedule.gather_rows.gather_row_tile, switches.
WHOLE_GATHER_ROWS).

Each thread's U vectors of a row then all lie inside it: no loop along the row, no test of
its end and no ragged-end path. The inputs constant along a row (BCAST: an embedding's id)
are loaded once a row, and each indexed read whose index is one of them has its position
checked once a row (kfuse.codegen.indexed.row_position), where the generic loop loaded and
checked them once a vector: the model suite's embedding_fwd [32064, 3072, 8192] bf16 read its
id and checked it twice a thread, once a vector, and its second block of every row idled on
the ragged path half the time.

Inputs that read their own windows or sub-axes, or generate their values, keep the generic
loop (the scheduler does not set whole_rows for them).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from kfuse.codegen import indexed
from kfuse.codegen.kernel import Code, decompose, load_vector_block, vector_addresses
from kfuse.codegen.layout import BCAST, INDEXED_VEC, STRIDED, VEC
from kfuse.codegen.registers import register_array

if TYPE_CHECKING:
    from kfuse.codegen.pointwise import PointwiseKernelSpec, PointwisePlan


def whole_row_loop(
    code: Code,
    plan: PointwisePlan,
    spec: PointwiseKernelSpec,
    call: Callable[..., str],
    operands: list[str],
    compute_and_store: Callable[..., None],
) -> None:
    """The row loop (rows over blockIdx.y / threadIdx.y, grid-strided) of a whole-rows
    kernel: each row's constant inputs and positions once, then the thread's U vectors
    loaded, computed and stored with compute_and_store (codegen.pointwise's, which reads
    input k from x<k>[vectors[k]])."""
    rank, vec, unroll = spec.rank, spec.vector, spec.unroll
    ctypes = [u.val.dtype.cuda_type for u in plan.domain.input_uses]
    once = [k for k, kind in enumerate(spec.input_kinds) if kind == BCAST]
    reads = indexed.reads(spec)
    with code.block(
        "for (Index row = (Index)blockIdx.y * blockDim.y + threadIdx.y; row < n_rows;",
        "     row += (Index)gridDim.y * blockDim.y)",
    ):
        code(*[f"Index base_{op} = 0;" for op in operands])
        code.extend(decompose("row", range(rank - 1), operands, code.indent))
        code(*[f"const Index step_{op} = {op}.stride[{rank - 1}];" for op in operands])
        for k in once:
            code(register_array(f"x{k}", ctypes[k], BCAST, vec, 1))
            code(f"x{k}[0] = kf::load(in{k}, base_in{k});")
        positions = {k: indexed.row_position(spec, k) for k in reads}
        code(*[f"const Index p{k} = {p};" for k, p in positions.items() if p is not None])
        code(f"const Index v0 = (Index)blockIdx.x * (blockDim.x * {unroll}) + threadIdx.x;")
        offset = f"(v0 + (Index)u * blockDim.x) * {vec}"
        if len(once) + len(reads) < len(ctypes):
            code.extend(
                load_vector_block(
                    ctypes,
                    spec.input_kinds,
                    vec,
                    str(unroll),
                    code.indent,
                    f"const Index i0 = {offset}",
                    lambda k: vector_addresses(f"base_in{k}", k),
                    skip=once + reads,
                )
            )
        for k in reads:
            array = VEC if spec.input_kinds[k] == INDEXED_VEC else STRIDED
            code(register_array(f"x{k}", ctypes[k], array, vec, unroll))
        with code.block(f"for (int u = 0; u < {unroll}; ++u)", unroll=True):
            code(f"const Index i0 = {offset};")
            for k in reads:
                at = f"p{k}" if positions[k] is not None else None
                code.extend(indexed.vector_load(spec, k, code.indent, at))
        with code.block(f"for (int u = 0; u < {unroll}; ++u)", unroll=True):
            code(f"const Index i0 = {offset};")
            vectors = ["0" if k in once else "u" for k in range(len(ctypes))]
            compute_and_store(code, plan, spec, call, vectors, lambda k: f"base_out{k}")

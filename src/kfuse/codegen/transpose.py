"""The transpose kernel: a pointwise fusion whose operands disagree on their fastest axis,
computed tile by tile through shared memory so that every tensor is read and written along
its own fast axis.

Two axes of the merged domain are tiled: A, the innermost (the outputs' fast axis), and B,
the fast axis of the transposed operands ("tiled" operands: unit stride along B). The other
axes are flattened with the tiles into one grid-strided loop. A block of 32 x block_y
threads walks a tile of tile_a x tile_b elements in three phases:

    1. each tiled input's tile is loaded with threadIdx.x along B (coalesced for it) into
       shared memory, [a][b] with rows padded to an odd number of 4-byte words so that
       phase 2, walking a column, touches 32 different banks;
    2. __syncthreads; with threadIdx.x along A, every element is computed: untiled inputs
       are read from global memory (coalesced where their stride along A is 1, one element
       where it is 0), tiled ones from shared memory; untiled outputs are stored, tiled
       outputs (unit stride along B) go to their own shared tile;
    3. __syncthreads; tiled outputs are stored with threadIdx.x along B.

Every access is guarded by the tile's bounds (extents need not be multiples of the tile).
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field

from kfuse.codegen.kernel import Code
from kfuse.codegen.pointwise import PointwisePlan, open_domain_kernel
from kfuse.dtypes import DataType

WARP = 32


def tile_row_pad(itemsize: int) -> int:
    """Elements added to each shared tile row so that the row is an odd number of 4-byte
    words (a column of 32 elements then falls in 32 different banks); 8-byte elements take
    two banks each whatever the pad, so one element is enough."""
    return max(1, 4 // itemsize)


def tile_bytes(itemsize: int, tile_a: int, tile_b: int) -> int:
    """Shared memory of one operand's tile, padding included, rounded up to 16 bytes."""
    raw = tile_a * (tile_b + tile_row_pad(itemsize)) * itemsize
    return -(-raw // 16) * 16


@dataclass(frozen=True)
class TransposeKernelSpec:
    """Everything the CUDA source depends on: the compile-time half of a launch."""

    rank: int  # merged rank; axis A is rank - 1
    axis_b: int
    tile_a: int
    tile_b: int
    block_y: int
    index_type: str  # "int" | "long long"
    tiled_inputs: tuple[bool, ...]  # per input use: staged through shared memory
    tiled_outputs: tuple[bool, ...]
    launch_bounds: bool = field(default=True, repr=False)

    @property
    def other_axes(self) -> list[int]:
        """The axes flattened into the tile loop, outermost first."""
        return [d for d in range(self.rank - 1) if d != self.axis_b]


def kernel_name(plan: PointwisePlan, spec: TransposeKernelSpec) -> str:
    """A stable name: the scheduler plus a hash of the fusion and the spec."""
    digest = hashlib.sha1(f"{plan.fusion.structure()!r}|{spec!r}".encode()).hexdigest()[:16]
    return f"kfuse_transpose_{digest}"


def shared_bytes(plan: PointwisePlan, spec: TransposeKernelSpec) -> int:
    """Static shared memory the kernel declares: one tile per tiled operand."""
    dtypes = _tiled_dtypes(plan, spec)
    return sum(tile_bytes(d.itemsize, spec.tile_a, spec.tile_b) for _, d in dtypes)


def _tiled_dtypes(plan: PointwisePlan, spec: TransposeKernelSpec) -> list[tuple[str, DataType]]:
    """(shared tile name, dtype) of each tiled operand, inputs first."""
    tiles = [
        (f"tile_in{k}", u.val.dtype)
        for k, (u, t) in enumerate(zip(plan.domain.input_uses, spec.tiled_inputs))
        if t
    ]
    tiles += [
        (f"tile_out{k}", o.dtype)
        for k, (o, t) in enumerate(zip(plan.fusion.outputs, spec.tiled_outputs))
        if t
    ]
    return tiles


def emit_transpose(plan: PointwisePlan, spec: TransposeKernelSpec) -> tuple[str, str]:
    """CUDA source and kernel name for `plan` compiled as `spec` (the module docstring)."""
    name = kernel_name(plan, spec)
    uses, outputs = plan.domain.input_uses, plan.fusion.outputs
    code, call = open_domain_kernel(
        plan, name, spec.rank, spec.index_type, WARP * spec.block_y, spec.launch_bounds
    )
    a, b, ta, tb = spec.rank - 1, spec.axis_b, spec.tile_a, spec.tile_b
    code(
        f"typedef {spec.index_type} Index;",
        f"const Index n_a = out0.size[{a}];",
        f"const Index n_b = out0.size[{b}];",
        f"const Index tiles_a = (n_a + {ta - 1}) / {ta};",
        f"const Index tiles_b = (n_b + {tb - 1}) / {tb};",
        "Index n_other = 1;",
        *[f"n_other *= out0.size[{d}];" for d in spec.other_axes],
        "const Index n_tiles = tiles_a * tiles_b * n_other;",
    )
    for tile, dtype in _tiled_dtypes(plan, spec):
        row = tb + tile_row_pad(dtype.itemsize)
        # Bytes, not T[][]: a __shared__ variable may not have a constructor (bfloat16 has).
        code(
            f"__shared__ __align__(16) unsigned char {tile}_bytes"
            f"[{tile_bytes(dtype.itemsize, ta, tb)}];",
            f"{dtype.cuda_type} (*{tile})[{row}] = "
            f"reinterpret_cast<{dtype.cuda_type} (*)[{row}]>({tile}_bytes);",
        )
    operands = [f"in{k}" for k in range(len(uses))] + [f"out{k}" for k in range(len(outputs))]
    any_tiled_in, any_tiled_out = any(spec.tiled_inputs), any(spec.tiled_outputs)
    with code.block(
        "for (Index tile = blockIdx.x; tile < n_tiles; tile += gridDim.x)",
    ):
        code(
            f"const Index a0 = (tile % tiles_a) * {ta};",
            f"const Index b0 = ((tile / tiles_a) % tiles_b) * {tb};",
            *[f"Index base_{op} = 0;" for op in operands],
        )
        if spec.other_axes:
            code("Index rest = tile / tiles_a / tiles_b;")
        for d in reversed(spec.other_axes):
            code(f"const Index c{d} = rest % out0.size[{d}];", f"rest /= out0.size[{d}];")
            code(*[f"base_{op} += c{d} * {op}.stride[{d}];" for op in operands])
        if any_tiled_in:
            with _tile_loop(code, spec, along_b=True):
                for k, tiled in enumerate(spec.tiled_inputs):
                    if tiled:
                        code(f"tile_in{k}[i][j] = kf::load(in{k}, {_offset(f'in{k}', spec)});")
            code("__syncthreads();")
        with _tile_loop(code, spec, along_b=False):
            code(*[f"{o.dtype.cuda_type} y{k};" for k, o in enumerate(outputs)])
            loaded = [
                f"tile_in{k}[i][j]" if tiled else f"kf::load(in{k}, {_offset(f'in{k}', spec)})"
                for k, tiled in enumerate(spec.tiled_inputs)
            ]
            code(call(loaded, [f"y{k}" for k in range(len(outputs))]))
            for k, tiled in enumerate(spec.tiled_outputs):
                if tiled:
                    code(f"tile_out{k}[i][j] = y{k};")
                else:
                    code(f"kf::store(out{k}, {_offset(f'out{k}', spec)}, y{k});")
        if any_tiled_out:
            code("__syncthreads();")
            with _tile_loop(code, spec, along_b=True):
                for k, tiled in enumerate(spec.tiled_outputs):
                    if tiled:
                        code(f"kf::store(out{k}, {_offset(f'out{k}', spec)}, tile_out{k}[i][j]);")
        if any_tiled_in or any_tiled_out:
            code("__syncthreads();  // the next tile overwrites the shared tiles")
    return code.kernel_source(), name


@contextlib.contextmanager
def _tile_loop(code: Code, spec: TransposeKernelSpec, *, along_b: bool) -> Iterator[None]:
    """Within: the body for element (a, b) = (a0 + i, b0 + j) of the tile, inside the
    extents. along_b: threadIdx.x walks B (j), the tiled operands' fast axis; else A (i)."""
    fast, slow = ("j", "i") if along_b else ("i", "j")
    fast_n, slow_n = (spec.tile_b, spec.tile_a) if along_b else (spec.tile_a, spec.tile_b)
    with contextlib.ExitStack() as stack:
        stack.enter_context(
            code.block(
                f"for (int {slow} = threadIdx.y; {slow} < {slow_n}; {slow} += {spec.block_y})"
            )
        )
        stack.enter_context(
            code.block(f"for (int {fast} = threadIdx.x; {fast} < {fast_n}; {fast} += {WARP})")
        )
        stack.enter_context(code.block("if (a0 + i < n_a && b0 + j < n_b)"))
        code("const Index a = a0 + i, b = b0 + j;")
        yield


def _offset(operand: str, spec: TransposeKernelSpec) -> str:
    return (
        f"base_{operand} + a * {operand}.stride[{spec.rank - 1}]"
        f" + b * {operand}.stride[{spec.axis_b}]"
    )

"""The transpose kernel: a pointwise fusion whose operands disagree on their fastest axis,
computed tile by tile through shared memory so that every tensor is read and written along
its own fast axis, in vectors.

Two axes of the merged domain are tiled: A, the innermost (the outputs' fast axis), and B,
the fast axis of the transposed operands ("tiled" operands: unit stride along B). The other
axes are flattened with the tiles into one grid-strided loop. A block of 32 x block_y
threads walks a tile of tile_a x tile_b elements (powers of two) in three phases:

    1. phase B: each tiled input's tile is loaded in vectors of vector_b elements along B
       (one 16/8/4-byte access where the operand is aligned for it, else element by
       element); then the untiled inputs of phase A are loaded into registers, in vectors
       along A (one element where they are broadcast along A, element by element where they
       have a stride), so that both loads are in flight together; then the tiled inputs'
       registers are written to shared memory, [a][b] with padded rows, in accesses as wide
       as the banks allow (row_access_width);
    2. __syncthreads; phase A: every element is computed, a thread taking vector_a
       consecutive elements along A of one column b, the untiled inputs from its registers,
       tiled ones from shared memory; untiled outputs are
       stored as vectors along A, tiled outputs (unit stride along B) go to their own shared
       tile;
    3. __syncthreads; phase B again for the tiled outputs: read from shared memory element
       by element, stored in vectors along B.

Thread mapping of a phase: the tile is a grid of F x S slots (F vectors along the phase's
fast axis, S elements along the other); a warp covers `lanes` slots along F times 32 / lanes
along S (a warp spans several rows where the fast side is short, so a short axis still
gives every warp whole vectors of consecutive addresses), and the block's warps cover the
tile in turn, each thread taking ceil(F * S / threads) slots, loaded all before any is
stored (bytes in flight). `lanes` and each shared tile's row padding are chosen at code
generation by simulating the 32 banks over one warp's accesses of both phases (tile_layout):
no idle lanes first, then runs of at least one 32-byte sector along the global fast axis,
then the fewest bank wavefronts, then the longest runs.

Where A is short and held whole by every tile, a tile may also take tile_c consecutive
indices of axis C, the axis just outside A in the outputs' order: its A side is then C x A
(tile_c * tile_a rows of the shared tiles, row ti at c = ti / tile_a, a = ti % tile_a, both
by constants), and the tiles run along C where they would run along A. The outputs, walked
along A in phase A, then write runs of tile_c * A elements where C follows A in memory, not
A alone: bf16 with 8 elements along A wrote 16-byte runs, half a sector each.

Every access is guarded by the tile's bounds (extents need not be multiples of the tile;
they are multiples of the vector widths, which the scheduler checks).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from kfuse.codegen.kernel import Code, load_vector, store_vector
from kfuse.codegen.layout import BCAST, VEC
from kfuse.codegen.pointwise import PointwisePlan, open_domain_kernel
from kfuse.codegen.registers import register_array
from kfuse.codegen.transpose_tiles import (
    WARP,
    TileLayout,
    row_access_width,
    tile_bytes,
    tile_layout,
)
from kfuse.dtypes import DataType


@dataclass(frozen=True)
class TransposeKernelSpec:
    """Everything the CUDA source depends on: the compile-time half of a launch."""

    rank: int  # merged rank; axis A is rank - 1
    axis_b: int
    tile_a: int
    tile_b: int
    vector_a: int  # elements a thread takes along A in phase A
    vector_b: int  # elements a thread takes along B in phase B
    block_y: int
    index_type: str  # "int" | "long long"
    tiled_inputs: tuple[bool, ...]  # per input use: staged through shared memory
    tiled_outputs: tuple[bool, ...]
    # Access kinds (kfuse.codegen.layout): along B for tiled operands (VEC or STRIDED),
    # along A for the others (VEC, BCAST or STRIDED).
    input_kinds: tuple[str, ...] = ()
    output_kinds: tuple[str, ...] = ()
    launch_bounds: bool = field(default=True, repr=False)
    # Axis C and the rows of it a tile takes (the module docstring); None and 1: none. Not in
    # the repr, so that the kernels without them keep their names (kernel_name adds them).
    axis_c: int | None = field(default=None, repr=False)
    tile_c: int = field(default=1, repr=False)
    # The grid has a block for every tile: each block takes its tile with no loop around it.
    # The loop made the compiler keep every slot's shared-memory addresses and tile offsets
    # live across iterations that never came: the broadcast add of a transposed bf16 matrix
    # used R0-R50 with it, R0-R40 without (sm_90 SASS); transpose_12 of [16, 4096, 2048]
    # went from 200.8 to 188.9 us on an H200.
    single_tile: bool = False

    @property
    def other_axes(self) -> list[int]:
        """The axes flattened into the tile loop, outermost first."""
        return [d for d in range(self.rank - 1) if d not in (self.axis_b, self.axis_c)]

    @property
    def rows_a(self) -> int:
        """Rows of a shared tile: its elements along A, times the rows of C it takes."""
        return self.tile_a * self.tile_c

    @property
    def threads(self) -> int:
        return WARP * self.block_y


def kernel_name(plan: PointwisePlan, spec: TransposeKernelSpec) -> str:
    """A stable name: the scheduler plus a hash of the fusion and the spec."""
    grouped = f"|c{spec.axis_c}x{spec.tile_c}" if spec.axis_c is not None else ""
    digest = hashlib.sha1(f"{plan.fusion.structure()!r}|{spec!r}{grouped}".encode()).hexdigest()
    digest = digest[:16]
    return f"kfuse_transpose_{digest}"


def tiled_itemsizes(plan: PointwisePlan, spec: TransposeKernelSpec) -> tuple[int, ...]:
    """Element sizes of the tiled operands, inputs first."""
    return tuple(d.itemsize for _, d, _ in _tiles(plan, spec))


def run_itemsizes(plan: PointwisePlan, spec: TransposeKernelSpec) -> tuple[int, int]:
    """The smallest element size among the global operands that phase A (untiled, VEC along
    A) and phase B (tiled) walk along its fast axis (0: none)."""
    kinds = list(zip(spec.input_kinds, spec.tiled_inputs)) + list(
        zip(spec.output_kinds, spec.tiled_outputs)
    )
    dtypes = [u.val.dtype for u in plan.domain.input_uses] + [o.dtype for o in plan.fusion.outputs]
    along_a = [d.itemsize for d, (k, t) in zip(dtypes, kinds) if not t and k == VEC]
    along_b = [d.itemsize for d, (k, t) in zip(dtypes, kinds) if t]
    return (min(along_a, default=0), min(along_b, default=0))


def layout_of(plan: PointwisePlan, spec: TransposeKernelSpec) -> TileLayout:
    return tile_layout(
        tiled_itemsizes(plan, spec),
        run_itemsizes(plan, spec),
        spec.rows_a,
        spec.tile_b,
        spec.vector_a,
        spec.vector_b,
    )


def shared_bytes(plan: PointwisePlan, spec: TransposeKernelSpec) -> int:
    """Static shared memory the kernel declares: one tile per tiled operand."""
    layout = layout_of(plan, spec)
    return sum(
        tile_bytes(n, spec.rows_a, spec.tile_b, layout.pad(n)) for n in tiled_itemsizes(plan, spec)
    )


def _tiles(plan: PointwisePlan, spec: TransposeKernelSpec) -> list[tuple[str, DataType, int]]:
    """(shared tile name, dtype, operand index) of each tiled operand, inputs first."""
    tiles: list[tuple[str, DataType, int]] = [
        (f"tile_in{k}", u.val.dtype, k)
        for k, (u, t) in enumerate(zip(plan.domain.input_uses, spec.tiled_inputs))
        if t
    ]
    tiles += [
        (f"tile_out{k}", o.dtype, k)
        for k, (o, t) in enumerate(zip(plan.fusion.outputs, spec.tiled_outputs))
        if t
    ]
    return tiles


def emit_transpose(plan: PointwisePlan, spec: TransposeKernelSpec) -> tuple[str, str]:
    """CUDA source and kernel name for `plan` compiled as `spec` (the module docstring)."""
    name = kernel_name(plan, spec)
    uses, outputs = plan.domain.input_uses, plan.fusion.outputs
    code, call = open_domain_kernel(
        plan, name, spec.rank, spec.index_type, spec.threads, spec.launch_bounds
    )
    layout = layout_of(plan, spec)
    _declare_extents(code, spec)
    _declare_tiles(code, plan, spec, layout)
    operands = [f"in{k}" for k in range(len(uses))] + [f"out{k}" for k in range(len(outputs))]
    tiled_in = [k for k, t in enumerate(spec.tiled_inputs) if t]
    tiled_out = [k for k, t in enumerate(spec.tiled_outputs) if t]
    untiled_in = [k for k, t in enumerate(spec.tiled_inputs) if not t]
    if spec.single_tile:
        code("const Index tile = blockIdx.x;")
        tile_scope = code.block("if (tile < n_tiles)")
    else:
        tile_scope = code.block("for (Index tile = blockIdx.x; tile < n_tiles; tile += gridDim.x)")
    with tile_scope:
        _tile_bases(code, spec, operands)
        if tiled_in:
            # Phase B for the tiled inputs: vectors along B into registers, then shared.
            _load_inputs(code, spec, layout, plan, tiled_in, along_b=True)
        # Phase A's inputs are loaded before the tiled ones go to shared memory and the
        # block waits at the barrier: both phases' global reads are in flight at once, where
        # loading them after the barrier left a block's threads idle on one or the other.
        _load_inputs(code, spec, layout, plan, untiled_in, along_b=False)
        if tiled_in:
            _stage_tiled_inputs(code, plan, spec, layout, tiled_in)
            code("__syncthreads();")
        _phase_a(code, plan, spec, layout, call)
        if tiled_out:
            code("__syncthreads();")
            _store_tiled_outputs(code, plan, spec, layout, tiled_out)
        if (tiled_in or tiled_out) and not spec.single_tile:
            code("__syncthreads();  // the next tile overwrites the shared tiles")
    return code.kernel_source(), name


def _declare_extents(code: Code, spec: TransposeKernelSpec) -> None:
    """The index type, the extents along A and B, the tiles along each and over the other
    axes (with C: the A side's tiles run along C, A whole in every tile), and tid."""
    a, b, ta, tb = spec.rank - 1, spec.axis_b, spec.tile_a, spec.tile_b
    if spec.axis_c is None:
        a_side = [f"const Index tiles_a = (n_a + {ta - 1}) / {ta};"]
    else:
        tc = spec.tile_c
        a_side = [
            f"const Index n_c = out0.size[{spec.axis_c}];",
            f"const Index tiles_a = (n_c + {tc - 1}) / {tc};",
        ]
    code(
        f"typedef {spec.index_type} Index;",
        f"const Index n_a = out0.size[{a}];",
        f"const Index n_b = out0.size[{b}];",
        *a_side,
        f"const Index tiles_b = (n_b + {tb - 1}) / {tb};",
        "Index n_other = 1;",
        *[f"n_other *= out0.size[{d}];" for d in spec.other_axes],
        "const Index n_tiles = tiles_a * tiles_b * n_other;",
        "const int tid = threadIdx.y * 32 + threadIdx.x;",
    )


def _declare_tiles(
    code: Code, plan: PointwisePlan, spec: TransposeKernelSpec, layout: TileLayout
) -> None:
    """The shared-memory tile of every tiled input and output, rows padded by the layout."""
    for tile, dtype, _ in _tiles(plan, spec):
        n = dtype.itemsize
        row = spec.tile_b + layout.pad(n)
        # Bytes, not T[][]: a __shared__ variable may not have a constructor (bfloat16 has).
        code(
            f"__shared__ __align__(16) unsigned char {tile}_bytes"
            f"[{tile_bytes(n, spec.rows_a, spec.tile_b, layout.pad(n))}];",
            f"{dtype.cuda_type} (*{tile})[{row}] = "
            f"reinterpret_cast<{dtype.cuda_type} (*)[{row}]>({tile}_bytes);",
        )


def _tile_bases(code: Code, spec: TransposeKernelSpec, operands: list[str]) -> None:
    """The tile's origin and every operand's offset of its plane over the other axes."""
    # Unsigned division (kf::index_div): a few instructions fewer than signed, per tile.
    code(*_tile_origin(spec), *[f"Index base_{op} = 0;" for op in operands])
    if spec.other_axes:
        code("Index rest = plane;")
    for d in reversed(spec.other_axes):
        code(
            f"const Index q{d} = kf::index_div(rest, (Index)out0.size[{d}]);",
            f"const Index c{d} = rest - q{d} * out0.size[{d}];",
            f"rest = q{d};",
        )
        code(*[f"base_{op} += c{d} * {op}.stride[{d}];" for op in operands])


def _stage_tiled_inputs(
    code: Code,
    plan: PointwisePlan,
    spec: TransposeKernelSpec,
    layout: TileLayout,
    tiled_in: list[int],
) -> None:
    """Phase B for the tiled inputs, second half: the vectors loaded along B into their
    tiles."""
    with _slot_loop(code, spec, layout, along_b=True):
        for k in tiled_in:
            dtype = plan.domain.input_uses[k].val.dtype
            width = _row_width(spec, layout, dtype.itemsize, spec.input_kinds[k])
            code(*_row_copy(f"tile_in{k}[ti][tj + ", f"x{k}[u][", dtype, spec.vector_b, width))


def _phase_a(
    code: Code,
    plan: PointwisePlan,
    spec: TransposeKernelSpec,
    layout: TileLayout,
    call: Callable[..., str],
) -> None:
    """Phase A: every element, vector_a consecutive ones along A a thread; the untiled
    outputs stored, the tiled ones written to their tiles."""
    outputs, va, a = plan.fusion.outputs, spec.vector_a, spec.rank - 1
    with _slot_loop(code, spec, layout, along_b=False):
        code(*[f"kf::Vec<{o.dtype.cuda_type}, {va}> y{k};" for k, o in enumerate(outputs)])
        loaded = [
            f"tile_in{k}[ti + j][tj]"
            if tiled
            else (f"x{k}[u]" if spec.input_kinds[k] == BCAST else f"x{k}[u][j]")
            for k, tiled in enumerate(spec.tiled_inputs)
        ]
        with code.block(f"for (int j = 0; j < {va}; ++j)", unroll=True):
            code(call(loaded, [f"y{k}[j]" for k in range(len(outputs))]))
            tiled_out = [k for k, t in enumerate(spec.tiled_outputs) if t]
            code(*[f"tile_out{k}[ti + j][tj] = y{k}[j];" for k in tiled_out])
        for k, tiled in enumerate(spec.tiled_outputs):
            if tiled:
                continue
            at = _offset(f"out{k}", spec)
            code.extend(
                store_vector(
                    spec.output_kinds[k],
                    f"out{k}",
                    f"y{k}",
                    va,
                    code.indent,
                    at=at,
                    element_at=f"{at} + (Index)j * out{k}.stride[{a}]",
                )
            )


def _store_tiled_outputs(
    code: Code,
    plan: PointwisePlan,
    spec: TransposeKernelSpec,
    layout: TileLayout,
    tiled_out: list[int],
) -> None:
    """Phase B for the tiled outputs: shared memory to vectors along B, stored."""
    vb, b = spec.vector_b, spec.axis_b
    with _slot_loop(code, spec, layout, along_b=True):
        for k in tiled_out:
            o = plan.fusion.outputs[k]
            code(f"kf::Vec<{o.dtype.cuda_type}, {vb}> v{k};")
            width = _row_width(spec, layout, o.dtype.itemsize, VEC)
            code(*_row_copy(f"v{k}[", f"tile_out{k}[ti][tj + ", o.dtype, vb, width))
            at = _offset(f"out{k}", spec)
            code.extend(
                store_vector(
                    spec.output_kinds[k],
                    f"out{k}",
                    f"v{k}",
                    vb,
                    code.indent,
                    at=at,
                    element_at=f"{at} + (Index)j * out{k}.stride[{b}]",
                )
            )


def _tile_origin(spec: TransposeKernelSpec) -> list[str]:
    """Statements that set a0 and b0, the tile's first element along A and B, and (with other
    axes) plane, the index over those, from the tile's index (A fastest). One division a
    tile fewer than dividing by tiles_a first and taking B modulo tiles_b, which is on the
    path to every address of a block that loads one tile: a bf16 x + v with x column-major,
    [16384, 8192] on an H200, went from 165.4 to 142.6 us. (Tiles walked in groups along B,
    for longer runs along the fast axes of the blocks that run at once, measured the same.)"""
    # The A side's tiles run along A, or along C where a tile holds A whole.
    first, side = ("a0", spec.tile_a) if spec.axis_c is None else ("c_origin", spec.tile_c)
    if spec.other_axes:
        plane = [
            "const Index plane = kf::index_div(tile, tiles_a * tiles_b);",
            "const Index t = tile - plane * (tiles_a * tiles_b);",
        ]
    else:
        plane = ["const Index t = tile;"]
    return [
        *plane,
        "const Index t_b = kf::index_div(t, tiles_a);",
        f"const Index {first} = (t - t_b * tiles_a) * {side};",
        f"const Index b0 = t_b * {spec.tile_b};",
    ]


def _row_width(spec: TransposeKernelSpec, layout: TileLayout, itemsize: int, kind: str) -> int:
    """row_access_width for a tile of `itemsize`; 1 where the registers are not one
    kf::Vec (an operand loaded element by element)."""
    if kind != VEC:
        return 1
    pitch = spec.tile_b + layout.pad(itemsize)
    return row_access_width(
        itemsize, pitch, spec.rows_a, spec.tile_b, spec.vector_b, layout.lanes_b
    )


def _row_copy(dst: str, src: str, dtype: DataType, vector: int, width: int) -> list[str]:
    """Statements copying `vector` adjacent elements from `src` to `dst`, each an element
    expression open before its index (`dst` + "j]": a tile's row from the slot's first
    element, or a register kf::Vec), `width` of them an access (an aligned kf::Vec<T, width>
    each)."""
    if width == 1:
        return ["#pragma unroll", f"for (int j = 0; j < {vector}; ++j) {dst}j] = {src}j];"]
    part = f"kf::Vec<{dtype.cuda_type}, {width}>"
    return [
        "#pragma unroll",
        f"for (int p = 0; p < {vector // width}; ++p) "
        f"reinterpret_cast<{part}*>(&{dst}0])[p] = reinterpret_cast<const {part}*>(&{src}0])[p];",
    ]


def _load_inputs(
    code: Code,
    spec: TransposeKernelSpec,
    layout: TileLayout,
    plan: PointwisePlan,
    inputs: list[int],
    *,
    along_b: bool,
) -> None:
    """Register arrays x<k>[slot] for input uses `inputs`, filled in one walk of a phase's
    slots: vectors along B (the tiled inputs' fast axis) or along A."""
    axis, vec = (spec.axis_b, spec.vector_b) if along_b else (spec.rank - 1, spec.vector_a)
    slots = _slots(spec, layout, along_b=along_b)
    uses = plan.domain.input_uses
    code(
        *[
            register_array(f"x{k}", uses[k].val.dtype.cuda_type, spec.input_kinds[k], vec, slots)
            for k in inputs
        ]
    )
    if not inputs:
        return
    with _slot_loop(code, spec, layout, along_b=along_b):
        for k in inputs:
            at = _offset(f"in{k}", spec)
            code.extend(
                load_vector(
                    spec.input_kinds[k],
                    f"x{k}[u]",
                    f"in{k}",
                    vec,
                    code.indent,
                    at=at,
                    element_at=f"{at} + (Index)j * in{k}.stride[{axis}]",
                    bcast_at=at,
                )
            )


def _phase_shape(
    spec: TransposeKernelSpec, layout: TileLayout, *, along_b: bool
) -> tuple[int, int, int, int]:
    """(F, S, vector, lanes) of a phase: F vectors along its fast axis, S elements along
    the other, a warp `lanes` slots along F."""
    if along_b:
        return spec.tile_b // spec.vector_b, spec.rows_a, spec.vector_b, layout.lanes_b
    return spec.rows_a // spec.vector_a, spec.tile_b, spec.vector_a, layout.lanes_a


def _slot_count(spec: TransposeKernelSpec, layout: TileLayout, *, along_b: bool) -> int:
    """Slot indices the block walks in a phase: whole warps' shapes over the tile."""
    f, s, _, lanes = _phase_shape(spec, layout, along_b=along_b)
    rows = WARP // lanes
    return (f // lanes) * (-(-s // rows)) * WARP


def _slots(spec: TransposeKernelSpec, layout: TileLayout, *, along_b: bool) -> int:
    """Slots a thread takes in a phase."""
    return -(-_slot_count(spec, layout, along_b=along_b) // spec.threads)


@contextmanager
def _slot_loop(
    code: Code, spec: TransposeKernelSpec, layout: TileLayout, *, along_b: bool
) -> Iterator[None]:
    """Within: the body for this thread's slot u (unrolled) of a phase, at tile element
    (ti, tj) (the vector's first), global (ga, gb) = (a0 + ti, b0 + tj), or with axis C
    (ga, gc, gb) = (ti % tile_a, c_origin + ti / tile_a, b0 + tj), inside the extents."""
    f, s, vec, lanes = _phase_shape(spec, layout, along_b=along_b)
    rows = WARP // lanes
    total = _slot_count(spec, layout, along_b=along_b)
    count = -(-total // spec.threads)
    guards = []
    if total % spec.threads:
        guards.append(f"e < {total}")
    if rows > s:
        guards.append(f"ts < {s}")
    guards.append(
        "ga < n_a && gb < n_b" if spec.axis_c is None else "ga < n_a && gc < n_c && gb < n_b"
    )
    fast_group = f // lanes
    with code.block(f"for (int u = 0; u < {count}; ++u)", unroll=True):
        code(
            f"const int e = tid + u * {spec.threads};",
            "const int w = e / 32, lane = e % 32;",
            f"const int tf = (w % {fast_group}) * {lanes} + lane % {lanes};",
            f"const int ts = (w / {fast_group}) * {rows} + lane / {lanes};",
        )
        if along_b:
            code(f"const int ti = ts, tj = tf * {vec};")
        else:
            code(f"const int ti = tf * {vec}, tj = ts;")
        if spec.axis_c is None:
            code("const Index ga = a0 + ti, gb = b0 + tj;")
        else:
            ta = spec.tile_a
            code(f"const Index ga = ti % {ta}, gc = c_origin + ti / {ta}, gb = b0 + tj;")
        with code.block(f"if ({' && '.join(guards)})"):
            yield


def _offset(operand: str, spec: TransposeKernelSpec) -> str:
    grouped = "" if spec.axis_c is None else f" + gc * {operand}.stride[{spec.axis_c}]"
    return (
        f"base_{operand} + ga * {operand}.stride[{spec.rank - 1}]{grouped}"
        f" + gb * {operand}.stride[{spec.axis_b}]"
    )

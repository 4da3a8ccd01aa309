"""The transpose scheduler: pointwise fusions whose operands disagree on the fastest axis
(a transposed view in and a contiguous output out, a permute inside the fusion, an input
with a stride_order), as tiles staged through shared memory (kfuse.codegen.transpose).

It takes only what the pointwise scheduler takes, and of that only fusions where, over the
merged domain of the pointwise kernel (size-1 and broadcast axes folded, axes every
operand walks contiguously merged), some operand has unit stride along an axis B other
than the innermost axis A and is not broadcast along A: the pointwise kernel would read or
write it with a stride along A, one sector a lane. Operands with a stride of 0 along A
(broadcast) need no tile. Rejected, so left to the pointwise kernel: a plane A x B of fewer
than 256 elements (one tile would hold a few warps' work: both axes short, as a [4, 3]
transposed view), and operands whose smallest tiles (32 x 32, or a short axis whole) do not
fit in static shared memory. A short axis (2 elements or more) is no reason to decline: it
is tiled whole, and its tile still gets vector loads along the other operands' fast axis.

Heuristics:
* vector_b: 16 bytes of the widest tiled operand (at most 8 elements), halved until it
  divides B's extent and every tiled operand is aligned for it (its pointer and its other
  strides: access_kind along B); vector_a likewise over the untiled operands with unit
  stride along A (the outputs, inputs in their order), 1 when there are none. So bf16
  takes 8-element (16-byte) accesses, float 4, double 2, where the layout allows;
* tiles of 8 KiB of the widest tiled dtype: 64 x 64 of 2 bytes, 32 x 32 of 8, 128 x 64 of
  1; 16 KiB of 4 bytes, 64 x 64 (TILE_BYTES_OF_4_BYTES); a side longer than its axis is
  cut to the axis (rounded up to a power of two), the other side then grows to keep about
  as many elements, up to 1024
  (a bf16 [8192, 16] output of a transposed input: A has 16 elements, a 16 x 256 tile,
  there being no axis C); halved, the longer side first, while the tiles overflow 48 KiB
  of static shared memory;
* where A is that short that the outputs would write runs of fewer than MIN_A_RUN_BYTES
  (a whole A each) and the axis just outside A in their order is not B (axis C), a tile
  takes tile_c rows of C too, as many as make its A side as long as a square tile's, and
  B the square tile's side: the outputs then write C x A runs. A bf16 transpose of
  [8, 1024, 8192] swapping axes 0 and 2 wrote 16-byte runs, an 8 x 512 tile's; [16, 4096,
  2048] is now 16 x 64 with 4 rows of C;
* 8 warps a block, fewer where a phase has fewer than 8 warps' slots; one block a tile
  (grid-strided beyond 2**31 - 1 tiles); int32 indexing unless an offset or the element
  count needs int64 (as the pointwise scheduler).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kfuse.codegen.layout import VEC, OperandLayout, access_kind, needs_int64
from kfuse.codegen.pointwise import PointwisePlan, plan_pointwise
from kfuse.codegen.transpose import TransposeKernelSpec, emit_transpose
from kfuse.codegen.transpose_tiles import tile_bytes, tile_layout
from kfuse.errors import SchedulerError
from kfuse.ir.fusion import Fusion
from kfuse.runtime.info import RuntimeInfo
from kfuse.schedule.pointwise import PointwiseLayout, PointwiseScheduler, pointwise_layout
from kfuse.schedule.transpose_params import MAX_GRID_X, WARP, TransposeParams
from kfuse.schedule.types import Rejection, SchedulerType

# Static __shared__ arrays are limited to 48 KiB a block on every architecture.
STATIC_SHARED_LIMIT = 48 * 1024
BLOCK_Y = 8
MAX_VECTOR = 8  # elements; more buys nothing but registers (as the pointwise scheduler)
MAX_LONG_SIDE = 1024  # the long side of a tile whose other side is short
TILE_BYTES = 8192  # of the widest tiled operand (see _tile_shape)
TILE_BYTES_OF_4_BYTES = 16384
"""Tiles of 4-byte elements take 16 KiB (64 x 64). On an H200, float32 (us, 8 KiB -> 16 KiB,
torch.compile): transpose_02 [256, 512, 512] 202.9 -> 195.9 (190.1), [8, 1024, 8192] 197.1
-> 189.3 (201.9); transpose_12 [16, 4096, 2048] 381.8 -> 373.3 (370.9), [8, 1024, 8192]
190.3 -> 186.9 (186.6); bcast_add_strided_dim0 [16384, 8192] 265.6 -> 258.6 (255.2), [2048,
65536] 277.7 -> 262.2 (258.2); the other two within 1%. bf16 tiles of 16 KiB (128 x 64) were
slower: bcast_add_strided_dim0 [16384, 8192] 133.5 -> 144.8, transpose_02 [8, 1024, 8192]
98.3 -> 104.0."""
MIN_PLANE = 256  # A x B elements below which the pointwise kernel is left the fusion
# An output's run along a whole A below which a tile takes rows of C. On an H200, swapping
# axes 0 and 2 of [8, 1024, 8192] in bf16 (16-byte runs) went from 306 to 97 us with rows of
# C (torch.compile 282); with 32-byte runs, the float32 of that shape from 206.7 to 194.5
# and bf16 [16, 4096, 2048] from 211.4 to 198.1.
MIN_A_RUN_BYTES = 64


@dataclass(frozen=True)
class TileAxes:
    """Where a call's operands are tiled: axis B (axis A is the innermost merged axis) and
    which input uses and outputs go through shared memory."""

    axis_b: int
    tiled_inputs: tuple[bool, ...]
    tiled_outputs: tuple[bool, ...]

    def tiled_itemsizes(self, layout: PointwiseLayout) -> list[int]:
        """The element sizes of the tiled operands (inputs first)."""
        ops = zip(layout.inputs + layout.outputs, self.tiled_inputs + self.tiled_outputs)
        return [op.itemsize for op, tiled in ops if tiled]


def tile_axes(layout: PointwiseLayout) -> TileAxes | None:
    """Axis B and the tiled operands, or None when every operand agrees with axis A (has
    unit stride along it, or is broadcast along it, or has no unit stride at all)."""
    a = layout.rank - 1
    if layout.rank < 2:
        return None
    bytes_by_axis: dict[int, int] = {}
    for op in layout.inputs + layout.outputs:
        fast = _transposed_fast_axis(op.strides, a)
        if fast is not None:
            bytes_by_axis[fast] = bytes_by_axis.get(fast, 0) + op.itemsize
    if not bytes_by_axis:
        return None
    # The axis the most bytes a point walk contiguously; ties go to the innermost.
    axis_b = max(bytes_by_axis, key=lambda d: (bytes_by_axis[d], d))

    def tiled(strides: tuple[int, ...]) -> bool:
        return _transposed_fast_axis(strides, a) == axis_b

    return TileAxes(
        axis_b,
        tuple(tiled(op.strides) for op in layout.inputs),
        tuple(tiled(op.strides) for op in layout.outputs),
    )


def _transposed_fast_axis(strides: tuple[int, ...], a: int) -> int | None:
    """The axis other than A along which an operand has unit stride, if it has a stride
    along A (else A serves it: coalesced or broadcast)."""
    if strides[a] in (0, 1):
        return None
    for d, s in enumerate(strides):
        if s == 1 and d != a:
            return d
    return None


def _along_b(op: OperandLayout, axis_b: int) -> OperandLayout:
    """`op` with axis B moved innermost, for access_kind along B."""
    strides = tuple(s for d, s in enumerate(op.strides) if d != axis_b) + (op.strides[axis_b],)
    return OperandLayout(op.data_ptr, op.itemsize, strides)


def operand_kinds(
    layout: PointwiseLayout, axes: TileAxes, vector_a: int, vector_b: int
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Access kinds of the inputs and outputs: along B at vector_b for tiled operands,
    along A at vector_a for the others (kfuse.codegen.layout.access_kind)."""

    def kind(op: OperandLayout, tiled: bool) -> str:
        if tiled:
            return access_kind(_along_b(op, axes.axis_b), vector_b)
        return access_kind(op, vector_a)

    return (
        tuple(kind(op, t) for op, t in zip(layout.inputs, axes.tiled_inputs)),
        tuple(kind(op, t) for op, t in zip(layout.outputs, axes.tiled_outputs)),
    )


def _tiled_ops(layout: PointwiseLayout, axes: TileAxes) -> list[OperandLayout]:
    ops = zip(layout.inputs + layout.outputs, axes.tiled_inputs + axes.tiled_outputs)
    return [op for op, tiled in ops if tiled]


def _a_ops(layout: PointwiseLayout, axes: TileAxes) -> list[OperandLayout]:
    """The untiled operands with unit stride along A: phase A's vector accesses."""
    ops = zip(layout.inputs + layout.outputs, axes.tiled_inputs + axes.tiled_outputs)
    return [op for op, tiled in ops if not tiled and op.strides[-1] == 1]


def _vector(ops: list[OperandLayout], extent: int, fits: Any) -> int:
    """The widest vector (16 bytes of the widest of `ops`, at most 8 elements) that divides
    `extent` and that every one of `ops` is aligned for (`fits(op, v)`); 1 without ops."""
    if not ops:
        return 1
    v = min(MAX_VECTOR, 16 // max(op.itemsize for op in ops))
    while v > 1 and (extent % v != 0 or not all(fits(op, v) for op in ops)):
        v //= 2
    return v


def _pow2_ceil(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def shared_bytes_for(
    layout: PointwiseLayout,
    axes: TileAxes,
    tile_a: int,
    tile_b: int,
    vector_a: int,
    vector_b: int,
) -> int:
    """Shared memory of `axes`' tiled operands' tiles at this tile and vector size (the
    codegen's pads: kfuse.codegen.transpose_tiles.tile_layout)."""
    sizes = tuple(axes.tiled_itemsizes(layout))
    kinds_in, kinds_out = operand_kinds(layout, axes, vector_a, vector_b)
    ops = zip(
        layout.inputs + layout.outputs,
        axes.tiled_inputs + axes.tiled_outputs,
        kinds_in + kinds_out,
    )
    a_runs = [op.itemsize for op, t, k in ops if not t and k == VEC]
    runs = (min(a_runs, default=0), min(sizes, default=0))
    tl = tile_layout(sizes, runs, tile_a, tile_b, vector_a, vector_b)
    return sum(tile_bytes(n, tile_a, tile_b, tl.pad(n)) for n in sizes)


def grouped_axis(layout: PointwiseLayout, axes: TileAxes) -> int | None:
    """Axis C, which a tile may take rows of with a whole A (the module docstring): the axis
    just outside A in the merged domain (the outputs' order), if it is not B."""
    c = layout.rank - 2
    return c if c >= 0 and c != axes.axis_b else None


def _a_run_itemsize(layout: PointwiseLayout, axes: TileAxes) -> int:
    """The smallest element of phase A's vector operands (0: none)."""
    return min((op.itemsize for op in _a_ops(layout, axes)), default=0)


def _min_tile(layout: PointwiseLayout, axes: TileAxes) -> tuple[int, int]:
    """The smallest tile the heuristics go down to: 32 x 32, or a short axis whole."""
    n_a, n_b = layout.sizes[-1], layout.sizes[axes.axis_b]
    return min(_pow2_ceil(n_a), WARP), min(_pow2_ceil(n_b), WARP)


class TransposeScheduler:
    """Schedules pointwise fusions whose operands disagree on the innermost axis."""

    scheduler_type = SchedulerType.transpose
    generates_kernels = True

    def check(self, fusion: Fusion, info: RuntimeInfo | None) -> None:
        PointwiseScheduler().check(fusion, info)
        plan = plan_pointwise(fusion)
        if plan.domain.indexed or plan.domain.padded or plan.domain.generated:
            raise Rejection(
                "the fusion reads an index op's or a pad's tensor or computes a generated "
                "value inside the kernel, which only the pointwise kernel generates"
            )
        if info is None:
            return
        layout = pointwise_layout(plan, info, output_ptrs=None)
        if layout.numel == 0:
            raise Rejection("the fusion has no elements")
        axes = tile_axes(layout)
        if axes is None:
            raise Rejection(
                "every operand is contiguous or broadcast along the innermost axis "
                f"(merged sizes {list(layout.sizes)}): the pointwise kernel reads them coalesced"
            )
        n_a, n_b = layout.sizes[-1], layout.sizes[axes.axis_b]
        if n_a * n_b < MIN_PLANE:
            raise Rejection(
                f"the tile axes are short ({n_a} along the innermost axis, {n_b} along axis "
                f"{axes.axis_b}: {n_a * n_b} elements, fewer than {MIN_PLANE} a tile): the "
                "pointwise kernel loses little there"
            )
        ta, tb = _min_tile(layout, axes)
        if shared_bytes_for(layout, axes, ta, tb, 1, 1) > STATIC_SHARED_LIMIT:
            raise Rejection(
                f"{sum(axes.tiled_inputs) + sum(axes.tiled_outputs)} operands to tile: their "
                f"{ta} x {tb} tiles need more than {STATIC_SHARED_LIMIT} bytes of shared memory"
            )

    def heuristics(self, fusion: Fusion, info: RuntimeInfo) -> TransposeParams:
        """Tiles, vectors, block and grid for these inputs on this device (the module
        docstring)."""
        plan = plan_pointwise(fusion)
        layout = pointwise_layout(plan, info, output_ptrs=None)
        axes = _required_axes(layout)
        n_a, n_b, b = layout.sizes[-1], layout.sizes[axes.axis_b], axes.axis_b
        vb = _vector(
            _tiled_ops(layout, axes), n_b, lambda op, v: access_kind(_along_b(op, b), v) == VEC
        )
        va = _vector(_a_ops(layout, axes), n_a, lambda op, v: access_kind(op, v) == VEC)
        c = grouped_axis(layout, axes)
        a_run = _a_run_itemsize(layout, axes) * _pow2_ceil(n_a)
        n_c = layout.sizes[c] if c is not None and 0 < a_run < MIN_A_RUN_BYTES else None
        ta, tb, tc = _tile_shape(max(axes.tiled_itemsizes(layout)), n_a, n_b, n_c)
        min_a, min_b = _min_tile(layout, axes)
        while shared_bytes_for(layout, axes, ta * tc, tb, va, vb) > STATIC_SHARED_LIMIT:
            if tc > 1 and ta * tc >= tb:
                tc //= 2
            elif ta >= tb and ta > max(min_a, va):
                ta //= 2
            elif tb > max(min_b, vb):
                tb //= 2
            elif ta > max(min_a, va):
                ta //= 2
            elif tc > 1:
                tc //= 2
            else:  # the vectors' pads: the smallest tile, as check() measured it
                ta, tb, va, vb = min_a, min_b, 1, 1
                break
        slots = min(ta * tc * tb // va, ta * tc * tb // vb)
        block_y = max(1, min(BLOCK_Y, slots // WARP, info.device.max_threads_per_block // WARP))
        params = TransposeParams(
            tile_a=ta,
            tile_b=tb,
            tile_c=tc,
            vector_a=va,
            vector_b=vb,
            block_y=block_y,
            grid_x=min(MAX_GRID_X, _tiles(layout, axes, ta, tb, tc)),
        )
        params.cparams.index_type = "int64" if _needs_int64(layout) else "int32"
        params.lparams.grid_x, params.lparams.grid_y = params.grid_x, 1
        params.lparams.block_x, params.lparams.block_y = WARP, block_y
        return params

    def kernels(self, fusion: Fusion, info: RuntimeInfo, params: Any) -> list[Any]:
        """The kernel `params` generate for this call (GeneratedKernel; not compiled)."""
        from kfuse.runtime.launch import GeneratedKernel, InputOperand, OutputOperand, ScalarOperand

        if not isinstance(params, TransposeParams):
            raise SchedulerError(
                f"the transpose scheduler takes TransposeParams, got {type(params).__name__}"
            )
        plan = plan_pointwise(fusion)
        layout = pointwise_layout(plan, info, output_ptrs=None)
        spec = self.kernel_spec(plan, layout, params, info)
        source, name = emit_transpose(plan, spec)
        positions = {v: i for i, v in enumerate(fusion.inputs)}
        operands: list[Any] = [
            InputOperand(positions[use.val], layout.sizes, op.strides)
            for use, op in zip(plan.domain.input_uses, layout.inputs)
        ]
        operands += [ScalarOperand(s) for s in plan.domain.scalars]
        operands += [
            OutputOperand(k, layout.sizes, op.strides) for k, op in enumerate(layout.outputs)
        ]
        grid = (params.grid_x, 1, 1)
        block = (WARP, params.block_y, 1)
        return [GeneratedKernel(name, source, grid, block, 0, operands, self.scheduler_type, spec)]

    def kernel_spec(
        self,
        plan: PointwisePlan,
        layout: PointwiseLayout,
        params: TransposeParams,
        info: RuntimeInfo,
    ) -> TransposeKernelSpec:
        """The compile-time description of `params` applied to this call's layout;
        SchedulerError naming the field when params cannot run here."""
        axes = _required_axes(layout)
        extents = {"a": layout.sizes[-1], "b": layout.sizes[axes.axis_b]}
        for side in ("a", "b"):
            vec, tile = getattr(params, f"vector_{side}"), getattr(params, f"tile_{side}")
            if tile % vec != 0:
                raise SchedulerError(
                    f"TransposeParams.vector_{side} = {vec} does not divide tile_{side} = {tile}"
                )
            if extents[side] % vec != 0:
                axis = "A (the innermost)" if side == "a" else f"B ({axes.axis_b})"
                raise SchedulerError(
                    f"TransposeParams.vector_{side} = {vec}: axis {axis} has {extents[side]} "
                    "elements, not a multiple of the vector"
                )
        c = grouped_axis(layout, axes)
        if params.tile_c > 1 and (c is None or params.tile_a < extents["a"]):
            why = (
                f"the axis outside A is B ({axes.axis_b}) or none"
                if c is None
                else f"tile_a = {params.tile_a} does not hold axis A's {extents['a']} elements"
            )
            raise SchedulerError(f"TransposeParams.tile_c = {params.tile_c} needs axis C: {why}")
        rows = params.tile_a * params.tile_c
        smem = shared_bytes_for(layout, axes, rows, params.tile_b, params.vector_a, params.vector_b)
        if smem > STATIC_SHARED_LIMIT:
            raise SchedulerError(
                f"TransposeParams tile_a x tile_c x tile_b = {params.tile_a} x {params.tile_c}"
                f" x {params.tile_b}: the tiles need {smem} bytes of shared memory, more than "
                f"{STATIC_SHARED_LIMIT}"
            )
        threads = WARP * params.block_y
        if threads > info.device.max_threads_per_block:
            raise SchedulerError(
                f"TransposeParams.block_y = {params.block_y}: {threads} threads a block, more "
                f"than the device's {info.device.max_threads_per_block}"
            )
        wide = params.cparams.index_type == "int64" or _needs_int64(layout)
        kinds_in, kinds_out = operand_kinds(layout, axes, params.vector_a, params.vector_b)
        return TransposeKernelSpec(
            rank=layout.rank,
            axis_b=axes.axis_b,
            tile_a=params.tile_a,
            tile_b=params.tile_b,
            vector_a=params.vector_a,
            vector_b=params.vector_b,
            block_y=params.block_y,
            index_type="long long" if wide else "int",
            tiled_inputs=axes.tiled_inputs,
            tiled_outputs=axes.tiled_outputs,
            input_kinds=kinds_in,
            output_kinds=kinds_out,
            launch_bounds=params.cparams.maxrregcount is None,
            axis_c=c if params.tile_c > 1 else None,
            tile_c=params.tile_c,
            single_tile=params.grid_x
            >= _tiles(layout, axes, params.tile_a, params.tile_b, params.tile_c),
        )


def _tile_shape(itemsize: int, n_a: int, n_b: int, n_c: int | None) -> tuple[int, int, int]:
    """(tile_a, tile_b, tile_c) for tiled operands of at most `itemsize` bytes: 8 KiB a tile
    (64 x 64 of 2 bytes, 32 x 32 of 8, 128 x 64 of 1), 16 KiB of 4 bytes (64 x 64:
    TILE_BYTES_OF_4_BYTES); a short axis whole (its
    extent rounded up to a power of two) and the other side longer, up to 1024; or, with
    n_c (axis C's extent, where the scheduler groups it), a short A whole and rows of C that
    make the A side as long as the square tile's."""
    tile_bytes = TILE_BYTES_OF_4_BYTES if itemsize == 4 else TILE_BYTES
    target = max(1024, min(tile_bytes, tile_bytes // itemsize))
    side_b = 1 << ((target.bit_length() - 1) // 2)
    side_a = target // side_b
    pa, pb = _pow2_ceil(n_a), _pow2_ceil(n_b)
    if pa < side_a and n_c is not None:
        tc = min(_pow2_ceil(n_c), side_a // pa)
        if tc > 1:
            return pa, min(pb, max(side_b, target // (pa * tc)), MAX_LONG_SIDE), tc
    if pa < side_a:
        return pa, min(pb, max(side_b, target // pa), MAX_LONG_SIDE), 1
    if pb < side_b:
        return min(pa, max(side_a, target // pb), MAX_LONG_SIDE), pb, 1
    return side_a, side_b, 1


def _required_axes(layout: PointwiseLayout) -> TileAxes:
    axes = tile_axes(layout)
    if axes is None:
        raise SchedulerError(
            "the transpose scheduler has no axis to tile: every operand is contiguous or "
            "broadcast along the innermost axis"
        )
    return axes


def _tiles(layout: PointwiseLayout, axes: TileAxes, tile_a: int, tile_b: int, tile_c: int) -> int:
    """Tiles of the call: along A (along C with tile_c > 1, A whole), B and the other axes."""
    n_a, n_b = layout.sizes[-1], layout.sizes[axes.axis_b]
    c = grouped_axis(layout, axes)
    if tile_c > 1 and c is not None:
        n_c = layout.sizes[c]
        n_other = layout.numel // (n_a * n_b * n_c)
        return -(-n_c // tile_c) * -(-n_b // tile_b) * n_other
    n_other = layout.numel // (n_a * n_b)
    return -(-n_a // tile_a) * -(-n_b // tile_b) * n_other


def _needs_int64(layout: PointwiseLayout) -> bool:
    # The tile loop's index runs to tiles_a * tiles_b * n_other, below numel.
    return needs_int64(layout.sizes, layout.inputs + layout.outputs)

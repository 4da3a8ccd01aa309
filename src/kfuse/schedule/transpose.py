"""The transpose scheduler: pointwise fusions whose operands disagree on the fastest axis
(a transposed view in and a contiguous output out, a permute inside the fusion, an input
with a stride_order), as tiles staged through shared memory (kfuse.codegen.transpose).

It takes only what the pointwise scheduler takes, and of that only fusions where, over the
merged domain of the pointwise kernel (size-1 and broadcast axes folded, axes every
operand walks contiguously merged), some operand has unit stride along an axis B other
than the innermost axis A and is not broadcast along A: the pointwise kernel would read or
write it with a stride along A, one sector a lane. Operands with a stride of 0 along A
(broadcast) need no tile. Both A and B must be at least a warp long, else there is little
to gain over the pointwise kernel, and the tiles must fit in static shared memory.

Heuristics: 64 x 64 tiles where every tiled operand is 1 or 2 bytes, else 32 x 32 (a warp
then covers 32 consecutive elements of each tensor along its own fast axis: full 32-byte
sectors); 8 warps a block; one block a tile (grid-strided beyond 2**31 - 1 tiles); int32
indexing unless an offset or the element count needs int64 (as the pointwise scheduler).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kfuse.codegen.layout import needs_int64
from kfuse.codegen.pointwise import PointwisePlan, plan_pointwise
from kfuse.codegen.transpose import TransposeKernelSpec, emit_transpose, tile_bytes
from kfuse.errors import SchedulerError
from kfuse.ir.fusion import Fusion
from kfuse.runtime.info import RuntimeInfo
from kfuse.schedule.pointwise import PointwiseLayout, PointwiseScheduler, pointwise_layout
from kfuse.schedule.transpose_params import MAX_GRID_X, WARP, TransposeParams
from kfuse.schedule.types import Rejection, SchedulerType

# Static __shared__ arrays are limited to 48 KiB a block on every architecture.
STATIC_SHARED_LIMIT = 48 * 1024
BLOCK_Y = 8


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


def shared_bytes_for(layout: PointwiseLayout, axes: TileAxes, tile_a: int, tile_b: int) -> int:
    """Shared memory of the tiles of `axes`' tiled operands at this tile size."""
    return sum(tile_bytes(n, tile_a, tile_b) for n in axes.tiled_itemsizes(layout))


class TransposeScheduler:
    """Schedules pointwise fusions whose operands disagree on the innermost axis."""

    scheduler_type = SchedulerType.transpose
    generates_kernels = True

    def check(self, fusion: Fusion, info: RuntimeInfo | None) -> None:
        PointwiseScheduler().check(fusion, info)
        if info is None:
            return
        layout = pointwise_layout(plan_pointwise(fusion), info, output_ptrs=None)
        if layout.numel == 0:
            raise Rejection("the fusion has no elements")
        axes = tile_axes(layout)
        if axes is None:
            raise Rejection(
                "every operand is contiguous or broadcast along the innermost axis "
                f"(merged sizes {list(layout.sizes)}): the pointwise kernel reads them coalesced"
            )
        n_a, n_b = layout.sizes[-1], layout.sizes[axes.axis_b]
        if n_a < WARP or n_b < WARP:
            raise Rejection(
                f"the tile axes are shorter than a warp ({n_a} along the innermost axis, "
                f"{n_b} along axis {axes.axis_b}): the pointwise kernel loses little there"
            )
        if shared_bytes_for(layout, axes, WARP, WARP) > STATIC_SHARED_LIMIT:
            raise Rejection(
                f"{sum(axes.tiled_inputs) + sum(axes.tiled_outputs)} operands to tile: their "
                f"32 x 32 tiles need more than {STATIC_SHARED_LIMIT} bytes of shared memory"
            )

    def heuristics(self, fusion: Fusion, info: RuntimeInfo) -> TransposeParams:
        """Tiles, block and grid for these inputs on this device (the module docstring)."""
        plan = plan_pointwise(fusion)
        layout = pointwise_layout(plan, info, output_ptrs=None)
        axes = _required_axes(layout)
        tile = 64 if max(axes.tiled_itemsizes(layout)) <= 2 else WARP
        if shared_bytes_for(layout, axes, tile, tile) > STATIC_SHARED_LIMIT:
            tile = WARP
        threads = WARP * BLOCK_Y
        block_y = BLOCK_Y if threads <= info.device.max_threads_per_block else 1
        params = TransposeParams(
            tile_a=tile,
            tile_b=tile,
            block_y=block_y,
            grid_x=min(MAX_GRID_X, _tiles(layout, axes, tile, tile)),
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
        return [GeneratedKernel(name, source, grid, block, 0, operands, "transpose", spec)]

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
        smem = shared_bytes_for(layout, axes, params.tile_a, params.tile_b)
        if smem > STATIC_SHARED_LIMIT:
            raise SchedulerError(
                f"TransposeParams tile_a x tile_b = {params.tile_a} x {params.tile_b}: the "
                f"tiles need {smem} bytes of shared memory, more than {STATIC_SHARED_LIMIT}"
            )
        threads = WARP * params.block_y
        if threads > info.device.max_threads_per_block:
            raise SchedulerError(
                f"TransposeParams.block_y = {params.block_y}: {threads} threads a block, more "
                f"than the device's {info.device.max_threads_per_block}"
            )
        wide = params.cparams.index_type == "int64" or _needs_int64(layout)
        return TransposeKernelSpec(
            rank=layout.rank,
            axis_b=axes.axis_b,
            tile_a=params.tile_a,
            tile_b=params.tile_b,
            block_y=params.block_y,
            index_type="long long" if wide else "int",
            tiled_inputs=axes.tiled_inputs,
            tiled_outputs=axes.tiled_outputs,
            launch_bounds=params.cparams.maxrregcount is None,
        )


def _required_axes(layout: PointwiseLayout) -> TileAxes:
    axes = tile_axes(layout)
    if axes is None:
        raise SchedulerError(
            "the transpose scheduler has no axis to tile: every operand is contiguous or "
            "broadcast along the innermost axis"
        )
    return axes


def _tiles(layout: PointwiseLayout, axes: TileAxes, tile_a: int, tile_b: int) -> int:
    n_other = layout.numel // (layout.sizes[-1] * layout.sizes[axes.axis_b])
    return -(-layout.sizes[-1] // tile_a) * -(-layout.sizes[axes.axis_b] // tile_b) * n_other


def _needs_int64(layout: PointwiseLayout) -> bool:
    # The tile loop's index runs to tiles_a * tiles_b * n_other, below numel.
    return needs_int64(layout.sizes, layout.inputs + layout.outputs)

"""The scan scheduler: one inclusive scan (fd.ops.cumsum) with the pointwise work before and
after it, as one generated kernel (kfuse.codegen.scan).

Takes a fusion of exactly one ScanOp, pointwise ops, casts and views (broadcast, expand,
squeeze, permute) of its inputs, whose outputs all have the scan's shape and read the scan's
result where it is computed (not through a permute or broadcast of it). The scan may run
along any axis: every operand is read at its own strides, so a scan along an outer axis is
read across rows (uncoalesced, in place, no transposed copy). Reductions, a second scan and
ops no kernel reads in place are the segmenter's to split off.

Params: `_C.PointwiseParams(SchedulerType.scan)`, of which this scheduler reads
* block_x: threads scanning one row (a multiple of 32, at most 1024), or 1: each thread
  scans a row of its own serially (the layout for scans along an outer axis);
* block_y: rows a block scans side by side (block_x * block_y <= 1024);
* unroll_factor: consecutive elements a thread scans serially in a chunk (1 to 16);
* grid_x: blocks (grid-strided over the rows);
* cparams.index_type.
The other fields keep their defaults (a SchedulerError names one that does not).
Heuristics: unroll 4 (8 for 2-byte elements); block_x the power of two covering the row in
one chunk, from 32 (a warp a row: short rows, 8 of them a block) to 1024 (long rows scan
chunk after chunk), or 1 for a scan along an outer axis with at least SERIAL_ROWS_PER_SM
rows an SM; block_y filling 256 threads; grid_x the blocks the rows need, at most 32 an SM.
"""

from __future__ import annotations

import math
from typing import Any, cast

from kfuse.codegen.domain import UnsupportedExpr
from kfuse.codegen.layout import output_layout, ref_strides
from kfuse.codegen.scan import WARP, ScanKernelSpec, ScanPlan, emit_scan, plan_scan
from kfuse.errors import SchedulerError
from kfuse.ir.fusion import Fusion
from kfuse.ir.values import TensorView
from kfuse.runtime.info import RuntimeInfo
from kfuse.schedule.types import Rejection, SchedulerType

INT32_MAX = 2**31 - 1
MAX_THREADS = 1024
BLOCK_THREADS = 256
BLOCKS_PER_SM = 32
SERIAL_ROWS_PER_SM = 64
"""A scan along an outer axis takes a row a thread where the rows give each SM this many
threads at least (two warps a scheduler); fewer rows are scanned by warps and blocks."""
_DEFAULTS = {
    "vectorization_factor": 1,
    "unroll_factor_outer": 1,
    "break_point": -1,
    "grid_y": 1,
    "split_grid_y": False,
}


def _plan(fusion: Fusion) -> ScanPlan:
    try:
        return plan_scan(fusion)
    except UnsupportedExpr as exc:
        raise Rejection(str(exc)) from None


def _check_shapes(plan: ScanPlan, info: RuntimeInfo) -> None:
    shape = info.shape(plan.result)
    for out in plan.fusion.outputs:
        assert isinstance(out, TensorView)
        if tuple(info.shape(out)) != tuple(shape):
            raise Rejection(
                f"output {out.name} has shape {tuple(info.shape(out))}, the scan "
                f"{plan.result.name} {tuple(shape)}: the scan kernel writes outputs of the "
                "scan's shape"
            )


class ScanScheduler:
    """Schedules one scan with its prologue and epilogue (see the module docstring)."""

    scheduler_type = SchedulerType.scan
    generates_kernels = True

    def check(self, fusion: Fusion, info: RuntimeInfo | None) -> None:
        plan = _plan(fusion)
        if info is not None:
            _check_shapes(plan, info)

    def heuristics(self, fusion: Fusion, info: RuntimeInfo) -> Any:
        from kfuse._C import PointwiseParams

        plan = _plan(fusion)
        shape = info.shape(plan.result)
        length = shape[plan.dim]
        rows = math.prod(n for a, n in enumerate(shape) if a != plan.dim)
        unroll = 8 if plan.result.dtype.itemsize == 2 else 4
        block_x = WARP
        while block_x < MAX_THREADS and block_x * unroll < length:
            block_x *= 2
        if plan.dim != plan.rank - 1 and rows >= SERIAL_ROWS_PER_SM * info.device.sm_count:
            block_x, unroll = 1, 1  # a row a thread: the rows lie side by side in memory
        block_y = max(1, BLOCK_THREADS // block_x)
        params = PointwiseParams(SchedulerType.scan)
        params.block_x, params.block_y, params.unroll_factor = block_x, block_y, unroll
        blocks = max(1, -(-rows // block_y))
        params.grid_x = min(blocks, info.device.sm_count * BLOCKS_PER_SM)
        params.cparams.index_type = "int64" if _needs_int64(plan, info) else "int32"
        return params

    def kernels(self, fusion: Fusion, info: RuntimeInfo, params: Any) -> list[Any]:
        """The scan kernel for `params` and its launch (a GeneratedKernel; not compiled)."""
        from kfuse.runtime.launch import (
            GeneratedKernel,
            InputOperand,
            OutputOperand,
            ScalarOperand,
        )

        plan = _plan(fusion)
        _check_shapes(plan, info)
        spec = _spec(plan, info, params)
        source, name = emit_scan(plan, spec)
        shape = tuple(info.shape(plan.result))
        positions = {v: i for i, v in enumerate(fusion.inputs)}
        operands: list[Any] = [
            InputOperand(
                positions[u.val],
                shape,
                ref_strides(u.view, info.layouts[cast(TensorView, u.val)].strides, plan.rank),
            )
            for u in plan.input_uses
        ]
        operands += [ScalarOperand(s) for s in plan.scalars]
        for k, out in enumerate(fusion.outputs):
            assert isinstance(out, TensorView)
            # A window's byte offset (a folded cat's part) is added where the operands are
            # mapped back onto the call's outputs (engine.boundary_views), as for pointwise.
            strides = output_layout(info, out)[0]
            view = plan.output_view(out)
            operands.append(OutputOperand(k, shape, ref_strides(view, strides, plan.rank)))
        grid = (int(params.grid_x), 1, 1)
        block = (spec.block_x, spec.block_y, 1)
        return [GeneratedKernel(name, source, grid, block, 0, operands, SchedulerType.scan, spec)]


def _spec(plan: ScanPlan, info: RuntimeInfo, params: Any) -> ScanKernelSpec:
    """The kernel's layout from `params`, each field checked (SchedulerError naming it)."""
    for name, default in _DEFAULTS.items():
        if getattr(params, name) != default:
            raise SchedulerError(
                f"PointwiseParams.{name} is {getattr(params, name)!r}; the scan scheduler "
                f"reads block_x, block_y, unroll_factor and grid_x only (leave it {default!r})"
            )
    bx, by, unroll = int(params.block_x), int(params.block_y), int(params.unroll_factor)
    if bx != 1 and (bx % WARP or not WARP <= bx <= MAX_THREADS):
        raise SchedulerError(
            f"PointwiseParams.block_x is {bx}; the scan kernel needs whole warps (a multiple "
            f"of 32, at most {MAX_THREADS}) or 1 (a row a thread)"
        )
    if by < 1 or bx * by > min(MAX_THREADS, info.device.max_threads_per_block):
        raise SchedulerError(
            f"PointwiseParams.block_y is {by}: block_x * block_y must be 1 to "
            f"{min(MAX_THREADS, info.device.max_threads_per_block)} threads"
        )
    if not 1 <= unroll <= 16:
        raise SchedulerError(f"PointwiseParams.unroll_factor is {unroll}; it must be 1 to 16")
    if int(params.grid_x) < 1:
        raise SchedulerError(f"PointwiseParams.grid_x is {params.grid_x}; it must be >= 1")
    index = "long long" if params.cparams.index_type == "int64" else "int"
    if index == "int" and _needs_int64(plan, info):
        index = "long long"  # an offset past int32: never wrong, whatever was pinned
    return ScanKernelSpec(plan.rank, plan.dim, index, bx, by, unroll)


def _needs_int64(plan: ScanPlan, info: RuntimeInfo) -> bool:
    """Whether an element index (a chunk's may run up to 16 * 1024 past the row's end) or an
    operand's offset can pass int32."""
    if math.prod(info.shape(plan.result)) + 16 * MAX_THREADS > INT32_MAX:
        return True
    inputs = [cast(TensorView, u.val) for u in plan.input_uses]
    spans = [_span(info.shape(v), info.layouts[v].strides) for v in inputs]
    for out in plan.fusion.outputs:
        assert isinstance(out, TensorView)
        spans.append(_span(info.shape(out), output_layout(info, out)[0]))
    return max(spans, default=0) > INT32_MAX


def _span(shape: tuple[int, ...], strides: tuple[int, ...]) -> int:
    """The largest element offset an array of `shape` and `strides` reaches."""
    return sum((n - 1) * abs(s) for n, s in zip(shape, strides) if n > 0)

"""ReductionParams as the reduction-family schedulers (reduction, inner_persistent,
inner_outer_persistent, outer_persistent) share them: the launch limits, reading a field as
an integer, the checks every one of their kernels makes, and the chosen fields mirrored into
the generic launch fields.

Apart from any one scheduler because all four read and check their params through these,
and their heuristics fill the launch fields the same way.
"""

from __future__ import annotations

from typing import Any

from kfuse.codegen.reduction_plan import ReductionPlan
from kfuse.errors import SchedulerError

MAX_GRID_X = 2**31 - 1
MAX_GRID_Y = 65535
STATIC_SMEM_LIMIT = 48 * 1024


def fill_launch_params(params: Any, plan: ReductionPlan) -> None:
    """Mirror the chosen configuration into the generic fields (lparams, cross-grid flags)."""
    parts = int(params.grid_y)
    params.cross_block = parts > 1
    params.cross_grid_count = parts
    if params.fastest_dim_reduction:
        params.cross_block_inner_reduction = int(params.block_x) > 1
    else:
        params.cross_block_outer_reduction = int(params.block_y) > 1
    params.lparams.grid_x, params.lparams.grid_y = int(params.grid_x), parts
    params.lparams.block_x, params.lparams.block_y = int(params.block_x), int(params.block_y)


def _int(params: Any, name: str) -> int:
    value = getattr(params, name)
    try:
        return int(value)
    except (TypeError, ValueError):
        raise SchedulerError(f"ReductionParams.{name} is {value!r}, expected an integer") from None


def validate_common(params: Any, kind: str, vector: int, unroll: int, device: Any) -> None:
    """Raise SchedulerError for parameters no kernel can run with."""
    bx, by = _int(params, "block_x"), _int(params, "block_y")
    if bx < 1 or by < 1 or bx * by > device.max_threads_per_block:
        raise SchedulerError(
            f"ReductionParams block ({bx}, {by}) must have between 1 and "
            f"{device.max_threads_per_block} threads"
        )
    if vector not in (1, 2, 4, 8, 16):
        raise SchedulerError(f"ReductionParams vector width {vector} must be 1, 2, 4, 8 or 16")
    if not 1 <= unroll <= 64:
        raise SchedulerError(f"ReductionParams unroll/batch {unroll} must be between 1 and 64")
    gx, gy = _int(params, "grid_x"), _int(params, "grid_y")
    if not 1 <= gx <= MAX_GRID_X or not 1 <= gy <= MAX_GRID_Y:
        raise SchedulerError(
            f"ReductionParams grid ({gx}, {gy}) is outside the launch limits "
            f"(1..{MAX_GRID_X}, 1..{MAX_GRID_Y})"
        )
    if _int(params, "unroll_iter") != 1:
        raise SchedulerError(
            f"ReductionParams.unroll_iter = {params.unroll_iter}: the {kind} "
            "kernel does not unroll over kept elements (use 1)"
        )

"""Time one model-suite case (benchmarks/models) over a grid of its scheduler's params, on the
GPU, against the heuristics' own choice and torch.compile:

    python3 tools/params_sweep.py bcast_add_strided_dim0 --size 16384x8192 \
        --grid "tile_a=64,128 tile_b=32,64 block_y=4,8 cparams.maxrregcount=0,40"

The case must run as one kernel program of one scheduler (fd.segments() has one segment).
Each grid entry is FIELD=V1,V2,...; every combination is tried. `cparams.maxrregcount=0`
means no cap (None). Fields left out keep the heuristics' values; grid_x follows the tiles
(transpose) or the kept extent (an outer reduction) unless given. Each combination's outputs
are checked against the case's float64 reference first (the model suite's check); timing is
the suite's time_ms (host cost hidden, L2 flushed).
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))


def parse_grid(text: str) -> list[dict[str, int]]:
    """ "a=1,2 b=3" -> [{'a': 1, 'b': 3}, {'a': 2, 'b': 3}]."""
    fields: list[tuple[str, list[int]]] = []
    for entry in text.split():
        name, _, values = entry.partition("=")
        if not name or not values:
            raise ValueError(f"grid entry {entry!r} is not FIELD=V1,V2,...")
        fields.append((name, [int(v) for v in values.split(",")]))
    names = [n for n, _ in fields]
    return [dict(zip(names, combo)) for combo in itertools.product(*(v for _, v in fields))]


def sweep(
    grid: str,
    configure: Callable[[dict[str, int]], Any],
    check: Callable[[Any], str],
    time_us: Callable[[Any], float],
) -> None:
    """Every combination of `grid`: configure(fields) -> params, check(params) -> a verdict
    on its outputs against float64, time_us(params). A combination refused (by the params'
    checks or the scheduler) is reported and skipped; the others are printed fastest first."""
    results = []
    for fields in parse_grid(grid):
        try:
            params = configure(fields)
            verdict = check(params)
            us = time_us(params)
        except Exception as exc:  # noqa: BLE001 - a refused combination is reported, not fatal
            print(f"  refused {fields}: {type(exc).__name__}: {str(exc).splitlines()[0][:100]}")
            continue
        results.append((us, verdict, fields))
    for us, verdict, fields in sorted(results, key=lambda r: r[0]):
        print(f"  {us:7.1f} us  {verdict}  {fields}")


def apply(params: Any, fields: dict[str, int]) -> None:
    for name, value in fields.items():
        if name.startswith("cparams."):
            setattr(params.cparams, name.split(".", 1)[1], value or None)
        elif isinstance(getattr(params, name, None), bool):  # smem_persistent=0,1
            setattr(params, name, bool(value))
        else:
            setattr(params, name, value)


def refill_grid(params: Any, fields: dict[str, int], fd: Any, inputs: list[Any]) -> None:
    """Keep the launch consistent with edited tiles or vectors (as the heuristics would)."""
    if "grid_x" in fields:
        return
    from kfuse.schedule.reduction import _plan
    from kfuse.schedule.reduction_params import fill_launch_params
    from kfuse.schedule.transpose_params import TransposeParams
    from kfuse.schedule.types import SchedulerType

    if isinstance(params, TransposeParams):
        params.grid_x = min(2**31 - 1, transpose_tiles(fd, inputs, params))
        params.lparams.grid_x, params.lparams.block_y = params.grid_x, params.block_y
    elif getattr(params, "scheduler_type", None) in (
        SchedulerType.reduction,
        SchedulerType.inner_persistent,
    ):
        if params.scheduler_type is SchedulerType.inner_persistent and "block_y" not in fields:
            # One block a row where the row takes 128 threads or more (as the heuristics).
            rows = int(params.grid_x) * int(params.block_y)
            params.block_y = max(1, 128 // int(params.block_x))
            params.grid_x = -(-rows // int(params.block_y))
        fill_launch_params(params, _plan(fd.fusion))
    elif getattr(params, "scheduler_type", None) is SchedulerType.outer_persistent:
        refill_outer(params, fields, fd, inputs)
        fill_launch_params(params, _plan(fd.fusion))


def refill_outer(params: Any, fields: dict[str, int], fd: Any, inputs: list[Any]) -> None:
    """An outer_persistent launch as its heuristics size it: rows a thread to cover a column
    (unless the grid gives persistent_batch_size), whole clusters over the column groups of
    the edited vector and block_x."""
    from kfuse.runtime.info import build_runtime_info
    from kfuse.schedule.outer_persistent import MAX_GRID_X, _plan_and_layout, column_groups

    _, layout = _plan_and_layout(fd.fusion, build_runtime_info(fd.fusion, inputs))
    if "persistent_batch_size" not in fields:
        holders = int(params.block_y) * int(params.cluster_size)
        params.persistent_batch_size = -(-layout.red_size // holders)
    cluster = int(params.cluster_size)
    cols = column_groups(layout, int(params.vectorize_iter))
    params.grid_x = max(1, min(MAX_GRID_X // cluster, -(-cols // int(params.block_x)))) * cluster


def transpose_tiles(fd: Any, inputs: list[Any], params: Any) -> int:
    from kfuse.codegen.pointwise import plan_pointwise
    from kfuse.runtime.info import build_runtime_info
    from kfuse.schedule.pointwise import pointwise_layout
    from kfuse.schedule.transpose import _required_axes, _tiles

    layout = pointwise_layout(
        plan_pointwise(fd.fusion), build_runtime_info(fd.fusion, inputs), output_ptrs=None
    )
    return _tiles(layout, _required_axes(layout), params.tile_a, params.tile_b)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("case", help="a model-suite case name, e.g. bcast_add_strided_dim0")
    parser.add_argument("--size", required=True, help="e.g. 16384x8192")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    parser.add_argument("--grid", required=True)
    parser.add_argument("--reps", type=int, default=30)
    args = parser.parse_args()

    import torch
    from models import measure
    from models.case import DTYPES
    from models.registry import case_and_shape
    from models.run import load_suite

    from kfuse.schedule import SchedulerType, compute_heuristics

    suite = load_suite()
    flush, _ = measure.l2_flusher(torch)
    case, shape = case_and_shape(f"{args.case}:{args.size}")
    dtype = getattr(torch, args.dtype)
    inputs = case.make_inputs(torch, shape, dtype, "cuda")
    refs = case.reference(*inputs)
    fd = case.define(DTYPES[args.dtype])
    segments = fd.segments(inputs)
    if len(segments) != 1:
        sys.exit(f"{args.case} runs as {len(segments)} segments: sweep one scheduler's fusion")
    scheduler = SchedulerType(segments[0].scheduler.value)

    def checked(outputs: list[Any]) -> str:
        row = measure.check_outputs(torch, "kfuse", outputs, refs, suite.check)
        return f"{row['check'][:120]} (rel err {row.get('rel_err', 0):.1e})"

    base = compute_heuristics(fd, scheduler, inputs)
    us = suite.time_ms(torch, lambda: fd.execute(inputs), args.reps, before=flush) * 1e3
    print(f"heuristics: {us:.1f} us, {checked(fd.execute(inputs))}: {base}")
    compiled = torch.compile(case.torch_fn)
    compiled(*inputs)
    us = suite.time_ms(torch, lambda: compiled(*inputs), args.reps, before=flush) * 1e3
    print(f"torch.compile: {us:.1f} us")

    def configure(fields: dict[str, int]) -> Any:
        params = compute_heuristics(fd, scheduler, inputs)
        apply(params, fields)
        refill_grid(params, fields, fd, inputs)
        return params

    sweep(
        args.grid,
        configure,
        lambda p: checked(fd.manual_execute(inputs, p)),
        lambda p: (
            suite.time_ms(torch, lambda: fd.manual_execute(inputs, p), args.reps, before=flush)
            * 1e3
        ),
    )


if __name__ == "__main__":
    main()

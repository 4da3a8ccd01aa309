"""In what order a reduction over separate runs of axes reduces them (kfuse.engine.segmenter
split_reductions, kfuse.schedule.welford_split): no kernel reduces non-adjacent axes at once,
so a reduction over dims (0, 2, 3) of an NCHW tensor becomes a chain, one run per step.

The innermost run goes first where it is long: each step is then an inner reduction over
contiguous rows, and the next one reads an intermediate smaller than the input by the run's
extent. Where the innermost run is short (a batch norm over [256, 2048, 7, 7]: rows of 49
elements, 98 bytes, no vector access, a warp's lanes mostly idle) the other runs go first:
over the leading axes that is an outer reduction whose iteration domain (C x H x W) is
contiguous and vectorized, and the short run is then reduced on an intermediate that is the
input divided by the leading runs' extent. On an H200 the inner-first statistics of that
batch norm took 180 us (321 GB/s) for 51 MB.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

SHORT_INNER_RUN = 256
"""An innermost run of fewer elements goes last (the module docstring)."""
MIN_LEADING_EXTENT = 32
"""...provided the other runs reduce the input at least this many times: their float
intermediates (up to three for a Welford, 12 bytes an element) stay under half the bytes of
a bf16 input."""


def axis_runs(dims: Sequence[int]) -> list[tuple[int, ...]]:
    """Sorted dims as maximal runs of consecutive axes: (0, 2, 3) -> [(0,), (2, 3)]."""
    runs: list[list[int]] = []
    for d in sorted(dims):
        if runs and runs[-1][-1] == d - 1:
            runs[-1].append(d)
        else:
            runs.append([d])
    return [tuple(r) for r in runs]


def reduction_order(runs: list[tuple[int, ...]], shape: Sequence[int]) -> list[tuple[int, ...]]:
    """`runs` (axis_runs of a reduction's dims over an input of `shape`) in the order the chain
    reduces them: the innermost first, unless it is short and the others are not (the module
    docstring); then the others first, the longest first (it shrinks what the rest read the
    most), the innermost last."""
    if len(runs) < 2:
        return list(runs)

    def extent(run: tuple[int, ...]) -> int:
        return math.prod(shape[d] for d in run)

    leading = runs[:-1]
    if extent(runs[-1]) < SHORT_INNER_RUN and math.prod(map(extent, leading)) >= MIN_LEADING_EXTENT:
        return [*sorted(reversed(leading), key=extent, reverse=True), runs[-1]]
    return list(reversed(runs))

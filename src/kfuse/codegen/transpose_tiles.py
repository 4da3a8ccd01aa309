"""The shared tiles of the transpose kernel (kfuse.codegen.transpose): each tile's row
padding, the warp shape of each phase and the width of a row access, chosen by simulating
the 32 shared-memory banks over one warp's accesses.

Separate from the kernel's emission because it depends only on element sizes, tile and
vector sizes, not on the fusion: the scheduler (kfuse.schedule.transpose) sizes its tiles'
shared memory with the same functions, and the simulation's rules (no idle lanes, sector-long
runs, fewest wavefronts) read on their own.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

WARP = 32
BANKS = 32
SECTOR = 32
MAX_PAD_BYTES = 32  # row padding tried by tile_layout


@dataclass(frozen=True)
class TileLayout:
    """How the tiles of one kernel are laid out and walked: `pads[n]` elements added to
    each row of the tiles of itemsize n; lanes_a / lanes_b: a warp's slots along the fast
    axis of phase A / phase B."""

    pads: tuple[tuple[int, int], ...]  # (itemsize, pad)
    lanes_a: int
    lanes_b: int

    def pad(self, itemsize: int) -> int:
        return dict(self.pads)[itemsize]


def tile_bytes(itemsize: int, tile_a: int, tile_b: int, pad: int) -> int:
    """Shared memory of one operand's tile, padding included, rounded up to 16 bytes."""
    raw = tile_a * (tile_b + pad) * itemsize
    return -(-raw // 16) * 16


def lane_choices(fast: int) -> list[int]:
    """Powers of two a warp can put along a phase's fast axis of `fast` slots: at most
    `fast` and 32."""
    return [1 << k for k in range(6) if (1 << k) <= min(fast, WARP)]


@functools.cache
def _wavefronts(
    itemsize: int,
    pitch: int,
    tile_a: int,
    tile_b: int,
    vector: int,
    lanes: int,
    along_b: bool,
    width: int = 1,
) -> int:
    """Shared-memory wavefronts of one warp's accesses to its `vector` elements in a phase,
    `width` elements an access (along B only: a row's elements are adjacent): the most
    distinct 4-byte words any bank holds, summed over the accesses."""
    total = 0
    for first in range(0, vector, width):
        words: dict[int, set[int]] = {}
        for lane in range(WARP):
            fast, slow = lane % lanes, lane // lanes
            i, j = (slow, fast * vector + first) if along_b else (fast * vector + first, slow)
            if i >= tile_a or j >= tile_b:
                continue
            start = (i * pitch + j) * itemsize
            for word in range(start // 4, (start + width * itemsize - 1) // 4 + 1):
                words.setdefault(word % BANKS, set()).add(word)
        total += max((len(w) for w in words.values()), default=0)
    return total


def row_access_width(
    itemsize: int, pitch: int, tile_a: int, tile_b: int, vector_b: int, lanes_b: int
) -> int:
    """Elements a thread moves in one shared-memory access along a tile's row in phase B:
    the widest (up to 16 bytes) that the row pitch keeps aligned and that costs no more bank
    wavefronts than element-wise accesses. bf16 tiles of a transpose went through shared
    memory 2 bytes an instruction, 64 of them a thread for each 64 x 64 tile of two inputs
    (as many as all the other instructions of its loop together)."""
    best = 1
    plain = _wavefronts(itemsize, pitch, tile_a, tile_b, vector_b, lanes_b, True)
    width = 2
    while width <= vector_b and width * itemsize <= 16:
        aligned = (pitch * itemsize) % (width * itemsize) == 0
        if aligned and (
            _wavefronts(itemsize, pitch, tile_a, tile_b, vector_b, lanes_b, True, width) <= plain
        ):
            best = width
        width *= 2
    return best


@functools.cache
def tile_layout(
    itemsizes: tuple[int, ...],
    run_itemsizes: tuple[int, int],
    tile_a: int,
    tile_b: int,
    vector_a: int,
    vector_b: int,
) -> TileLayout:
    """Pads and warp shapes for tiles of these element sizes (`itemsizes`, one per tiled
    operand; may be empty) at this tile and vector size. run_itemsizes: the element size
    of the global operands each phase (A, B) walks along its fast axis (0: none), whose
    runs a warp should keep at least a sector long."""
    sizes = sorted(set(itemsizes))
    f_a, s_a = tile_a // vector_a, tile_b
    f_b, s_b = tile_b // vector_b, tile_a
    best: tuple | None = None
    for la in lane_choices(f_a):
        for lb in lane_choices(f_b):
            idle = int(WARP // la > s_a) + int(WARP // lb > s_b)
            short = sum(
                int(0 < n and lanes * vec * n < SECTOR and lanes < fast)
                for n, lanes, vec, fast in (
                    (run_itemsizes[0], la, vector_a, f_a),
                    (run_itemsizes[1], lb, vector_b, f_b),
                )
            )
            cost = 0
            pads = []
            for n in sizes:
                options = []
                for pad in range(0, MAX_PAD_BYTES // n + 1):
                    pitch = tile_b + pad
                    c = _wavefronts(n, pitch, tile_a, tile_b, vector_a, la, False)
                    c += _wavefronts(n, pitch, tile_a, tile_b, vector_b, lb, True)
                    options.append((c, pad))
                c, pad = min(options)
                cost += c * itemsizes.count(n)
                pads.append((n, pad))
            key = (idle, short, cost, -(la + lb))
            if best is None or key < best[0]:
                best = (key, TileLayout(tuple(pads), la, lb))
    assert best is not None
    return best[1]

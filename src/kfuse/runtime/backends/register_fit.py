"""Give ptxas the registers of the occupancy a kernel already has.

A kernel bounded by `__launch_bounds__(threads)` alone leaves ptxas to pick its register count,
and ptxas then keeps registers free that buy no occupancy: the rope outer reduction took 56
registers (4 blocks of 256 an SM, the same as 64 give) and spent the 8 it left over on
issuing its 8 vector loads in four rounds, each waiting for the one before (sm_90 SASS), at
210 us. Compiled again as `__launch_bounds__(256, 4)`, the same 4 blocks an SM, it used 64 and
issued all 8 at once: 174 us (torch.compile 193). The batch norm kernels gained 2-6%.

So the CUDA backend compiles such a kernel twice: once as written, to learn the registers
ptxas gives it, then with the second argument the blocks an SM those registers allow
(`fit_launch_bounds`). That argument caps the registers at the most that keep those blocks
resident, never below the first compile's count: occupancy is what it was, and ptxas may use
what it left on the table. A kernel whose count already fills its occupancy's share, or whose
scheduler chose the second argument itself (a register target), is compiled once.

Measured and not taken (H200, bf16, us): the second compile also where the count already
fills the share. The bound changes ptxas' schedule even at equal registers (a batch norm
backward's outer reduction: 552 -> 536 SASS instructions at 40), but not for the better on
the whole: batch norm backward NCHW [256, 2048, 7, 7] 110.4 -> 104.4, [64, 256, 56, 56] 130.0
-> 137.0, pointwise mul [16384, 8192] 129.6 -> 132.4, six others within 1%; and every kernel
bounded by its block size alone would compile twice.
"""

from __future__ import annotations

import re

REGISTERS_PER_SM = 65536
# Registers are allocated to a warp in units of 256 (8 a thread).
REGISTER_UNIT = 8
WARP = 32
# Resident threads and blocks an SM, by architecture (CUDA's compute-capability table); an
# architecture not listed gets sm_90's. An entry too high is harmless: the second argument only
# ever lets ptxas use more registers than the first compile did, a lower limit lets it use more.
MAX_THREADS_PER_SM = {"sm_75": 1024, "sm_86": 1536, "sm_89": 1536, "sm_120": 1536, "sm_121": 1536}
MAX_BLOCKS_PER_SM = {"sm_75": 16, "sm_86": 16, "sm_89": 24}
DEFAULT_MAX_THREADS_PER_SM = 2048
DEFAULT_MAX_BLOCKS_PER_SM = 32

# The bound a kernel with no second argument has (kfuse.codegen.kernel.kernel_header).
_THREADS_ONLY = re.compile(r"__launch_bounds__\((\d+)\)")


def _warps(threads: int) -> int:
    return -(-threads // WARP)


def fitted_min_blocks(threads: int, registers: int, arch: str) -> int:
    """Blocks of `threads` an SM that `registers` a thread allow (at least 1), within the
    architecture's limits on resident threads and blocks."""
    warps = _warps(threads)
    per_warp = -(-registers // REGISTER_UNIT) * REGISTER_UNIT * WARP
    by_registers = REGISTERS_PER_SM // (warps * per_warp)
    by_threads = MAX_THREADS_PER_SM.get(arch, DEFAULT_MAX_THREADS_PER_SM) // (warps * WARP)
    by_blocks = MAX_BLOCKS_PER_SM.get(arch, DEFAULT_MAX_BLOCKS_PER_SM)
    return max(1, min(by_registers, by_threads, by_blocks))


def fit_launch_bounds(source: str, registers: int, arch: str) -> str | None:
    """`source` with its kernel's `__launch_bounds__(threads)` given the blocks an SM that
    `registers` allow as its second argument, or None where there is nothing to fit: no such
    bound (a second argument already, or none under a register limit), or `registers` already
    the most those blocks allow."""
    bounds = _THREADS_ONLY.findall(source)
    if len(bounds) != 1:
        return None
    threads = int(bounds[0])
    blocks = fitted_min_blocks(threads, registers, arch)
    allowed = REGISTERS_PER_SM // (blocks * _warps(threads) * WARP) // REGISTER_UNIT
    allowed *= REGISTER_UNIT
    if min(allowed, 255) <= registers:
        return None
    return _THREADS_ONLY.sub(f"__launch_bounds__({threads}, {blocks})", source, count=1)

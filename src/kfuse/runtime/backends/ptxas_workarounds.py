"""Compile options that keep ptxas away from a miscompile it makes in some kernels' code.

NVRTC 13.0's ptxas, at its default -O3 (and at -O2), loses a value in sm_90 code where a
64-bit integer is shifted left by a constant of 32 or more and then converted to float: it
lowers each shift to a 32-bit multiply into the high word beside a zero low word shared by
several such values, and of three conversions (I2F.S64) of register pairs that share that
zero, one reads a pair whose high word was meanwhile given to another value. An H100
campaign (seed 6401, 65fe8f6, failure-2843-174) met it in an outer persistent kernel:
`sum(cast(x << 63, Float))` over 5 rows gave, in lane 6 of each vector of 8, one row's lane 4
in place of another's lane 6 (the PTX is right; the SASS writes the shifted high word of one
value and never reads it). At -O1 ptxas keeps every value. Kernels with such a shift are rare
(bit manipulation of int64 data; kfuse's own random numbers shift 32-bit words), so they
alone pay -O1's slower code, and every other kernel keeps -O3.

tests/test_ptxas_workarounds.py compiles the campaign's kernel with the NVRTC kfuse uses and
checks its SASS for the lost value."""

from __future__ import annotations

import re

# kf::shift_left(<a 64-bit operand>, <a constant of 32 or more>): the code generator writes a
# 64-bit constant with the LL suffix (kfuse.codegen's literals), a 32-bit one without.
_WIDE_CONSTANT_SHIFT = re.compile(r"kf::shift_left\([^;]*?,\s*(\d+)LL\)")

LOW_OPTIMIZATION = "--ptxas-options=-O1"


def needs_low_optimization(source: str) -> bool:
    """True when `source` shifts a 64-bit value left by a constant of 32 or more."""
    return any(int(count) >= 32 for count in _WIDE_CONSTANT_SHIFT.findall(source))


def workaround_options(source: str) -> list[str]:
    """The options the module docstring's miscompiles call for in `source` (none for most)."""
    return [LOW_OPTIMIZATION] if needs_low_optimization(source) else []

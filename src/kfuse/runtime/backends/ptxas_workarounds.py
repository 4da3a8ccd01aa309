"""Compile options that keep ptxas away from a miscompile it makes in some kernels' code.

NVRTC 13.0's ptxas mishandles 64-bit integers whose low word it knows to be zero: it lowers
each to a high word beside one zero register shared by all of them, and then confuses the
register pairs that share it where they are converted to floating point (I2F.S64). Two H100
campaigns met it, both with a left shift by 63:

* failure-2843-174 (seed 6401, 65fe8f6), at ptxas -O3: `sum(cast(x << 63, Float))` over 5
  rows in an outer persistent kernel gave, in lane 6 of each vector of 8, one row's lane 4 in
  place of another's lane 6 (the SASS writes one value's shifted high word and never reads
  it).
* failure-3512-996 (seed 3061487043, a6898e1), at -O1 under the fitted launch bounds
  (128, 12) that kfuse.runtime.backends.register_fit gives: the pointwise
  `cast(expm1(cast(x << 63, Float)), Half)` over vectors of 8 converted one lane's value once
  (11 I2F.S64 for the PTX's 19 conversions) and used it for every lane; 13 of 257 halves were
  -inf where 0 was right.

The PTX is right both times; at -O0 ptxas converts every value where the PTX does. A product
with, or a mask by, a constant whose low word is zero gives ptxas the same known-zero low
word, so such kernels take -O0 too (no campaign has shown one wrong yet). Kernels with such
constants are rare (bit manipulation of int64 data; kfuse's own random numbers shift
32-bit words), so they alone pay -O0's slower code, and every other kernel keeps -O3. NVRTC
13.5's ptxas keeps every conversion of the second kernel at every level; the workaround stays
for every NVRTC, since users bring their own.

tests/test_ptxas_workarounds.py compiles both campaigns' kernels with the NVRTC kfuse uses and
reads their SASS for the lost values."""

from __future__ import annotations

import re

# kf::shift_left(<a 64-bit operand>, <a constant of 32 or more>): the code generator writes a
# 64-bit constant with the LL suffix (kfuse.codegen's literals), a 32-bit one without.
_WIDE_CONSTANT_SHIFT = re.compile(r"kf::shift_left\([^;]*?,\s*(\d+)LL\)")

# An integer literal of the generated code (kfuse.codegen.expressions.literal): digits with
# LL, not part of a longer name or number. A double's bits (__longlong_as_double(<bits>LL))
# are no integer the kernel computes with, so they do not count.
_INTEGER_LITERAL = re.compile(r"(?<![\w.])(\d+)LL\b")
_DOUBLE_BITS = re.compile(r"__longlong_as_double\(-?\d+LL\)")
# -2^63, which has no literal, is written (-9223372036854775807LL - 1LL).
_MOST_NEGATIVE = "(-9223372036854775807LL - 1LL)"

LOW_OPTIMIZATION = "--ptxas-options=-O0"


def _has_zero_low_word(value: int) -> bool:
    return value >= 2**32 and value % 2**32 == 0


def needs_low_optimization(source: str) -> bool:
    """True when `source` shifts a 64-bit value left by a constant of 32 or more, or computes
    with a 64-bit integer constant whose low word is zero (2^32 times something: a product
    or a mask that leaves a zero low word)."""
    if any(int(count) >= 32 for count in _WIDE_CONSTANT_SHIFT.findall(source)):
        return True
    if _MOST_NEGATIVE in source:
        return True
    integers = _DOUBLE_BITS.sub("", source)
    return any(_has_zero_low_word(int(v)) for v in _INTEGER_LITERAL.findall(integers))


def workaround_options(source: str) -> list[str]:
    """The options the module docstring's miscompiles call for in `source` (none for most)."""
    return [LOW_OPTIMIZATION] if needs_low_optimization(source) else []

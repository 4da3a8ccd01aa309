"""bf16 loop values passed to the generated element functions as floats converted from the
32-bit words of their vectors (kf::bf16_lane) instead of as 16-bit values that each function
widens: one instruction an element where the 16-bit value costs two in sm_90 SASS (a PRMT
to isolate the half, then a shift). A hand edit of the dropout + layer norm forward [8192,
8192] kernel, whose stage runs three times an element, went from 1968 to 1784 instructions
(PRMT 152 -> 24) at the same 64 registers; that kernel issues an instruction on 86% of its
cycles (ncu).

On since 2026-12-04 (at 270f2c1), after the GPU measured it (tools/kernel_times.py --ab
kfuse.switches.FROM_WORDS=True, whole calls in us, as is -> words, torch.compile):
dropout + layer norm forward [8192, 8192] 141.6 -> 132.4 (125.9), [32768, 1024] 64.5 ->
63.1 (55.9); layer norm backward [8192, 8192] 213.3 -> 199.7 (243.5); dropout + RMS norm
forward [16384, 4096] 114.9 -> 111.7 (111.8); 19 model rows, none slower by more than the
dropout + RMS norm backward [32768, 1024]'s 112.0 -> 113.5. kfuse.switches.FROM_WORDS = False gives
the 16-bit parameters back (the A/B switch).
The element functions compute in
float either way (a bf16 leaf is kf::to_float of its parameter, the identity on a float), and
a float widened from bf16 narrows back to the same bits, NaN payloads included
(kf::bfloat16_from_exact), so the results do not change.
"""

from __future__ import annotations

import re

from kfuse import switches
from kfuse.dtypes import DataType

# An element of a vector (or array) the loops index by their lane variable j: a name with
# subscripts (x0[b], rv1), then [j].
_LANE = re.compile(r"^(?P<vector>[A-Za-z_]\w*(?:\[[^\[\]]*\])*)\[j\]$")


def converted(dtype: DataType) -> bool:
    """Whether loop values of `dtype` reach the element functions as floats."""
    return switches.FROM_WORDS and dtype is DataType.BFloat16


def param_type(dtype: DataType) -> str:
    """The element functions' parameter type for a loop value of `dtype`."""
    return "float" if converted(dtype) else dtype.cuda_type


def argument(expr: str, dtype: DataType) -> str:
    """The argument for a loop value of `dtype` loaded as the storage-typed `expr`: as is, or
    for a converted one its float, from its vector's word where `expr` is a lane of one."""
    if not converted(dtype):
        return expr
    lane = _LANE.match(expr)
    if lane is not None:
        return f"kf::bf16_lane({lane.group('vector')}, j)"
    return f"kf::to_float({expr})"

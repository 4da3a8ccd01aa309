"""sin and cos of one value computed by one call.

An element function that takes both sin(v) and cos(v) of one value `v` (RoPE's tables, a
rotation, nvFuser's many-pointwise-ops benchmark: a = cos(a) + sin(a), n times) gets them from
one `kf::sincos(v)`: CUDA's sincosf reduces the argument once for both, and the reduction
(a Cody-Waite step and, for |x| above about 1e5, Payne-Hanek's) is most of each call. The
values are sinf's and cosf's, bit for bit, so pairing changes no result.

The element functions are written one operation a line (`const float v5 = kf::cos(v4);`,
kfuse.codegen.body), which this pass reads: the first of the two lines becomes the call and
its own value, the second takes the other value from it. Only lines outside every brace
block of the function are paired, where the call's result is in scope for both.
switches.SHARE_SINCOS turns it off for an A/B.
"""

from __future__ import annotations

import re

from kfuse import switches

_LINE = re.compile(r"^const (float|double) (\w+) = kf::(sin|cos)\((\w+)\);$")


def paired(body: list[str]) -> list[str]:
    """`body` with each value's first sin and first cos (of the same type, both at the
    function's top level) taken from one kf::sincos call."""
    if not switches.SHARE_SINCOS:
        return body
    first: dict[tuple[str, str, str], tuple[int, str]] = {}  # (type, argument, fn) -> line
    depth = 0
    for k, line in enumerate(body):
        found = _LINE.match(line)
        if depth == 0 and found is not None:
            ctype, name, fn, arg = found.groups()
            first.setdefault((ctype, arg, fn), (k, name))
        depth += line.count("{") - line.count("}")
    out = list(body)
    for (ctype, arg, fn), (k, name) in first.items():
        if fn != "sin" or (ctype, arg, "cos") not in first:
            continue
        other, other_name = first[(ctype, arg, "cos")]
        both = f"sc_{arg}"
        out[k] = f"const {ctype} {name} = {both}.sin;"
        out[other] = f"const {ctype} {other_name} = {both}.cos;"
        call = min(k, other)
        out[call] = f"const kf::SinCos<{ctype}> {both} = kf::sincos({arg}); " + out[call]
    return out

"""The costliest math functions called out of line where a kernel function holds several.

CUDA's sinf, cosf and tanf carry a second argument reduction (Payne-Hanek, for |x| above about
1e5) and lgammaf several polynomial ranges: inlined, each call is a few hundred instructions
that NVRTC optimizes and schedules again at every place it appears. A kernel inlines its
element function once per vector lane and per loop form (8 lanes, four forms: 32 copies),
so NVRTC 13.0's compile time grew with every such call: nvFuser's many-pointwise-ops host
benchmark (cos(a) + sin(a), 8 times over) took 13.2 s to compile on this project's 2-core
host (36 s at 22 times on an H100 machine's CPUs), 0.2-0.4 s per call site. Where a function
holds OUTLINE_AT or more of them, each is called through a __noinline__ wrapper: one copy of
each function per kernel, 0.6 s for that benchmark; a call passes one value in a register.
A function with one or two such calls keeps them inline (their copies cost about 0.6 s; the
calls' overhead made two iterations of that benchmark 9% slower on an H100).
switches.OUTLINE_HEAVY_MATH turns it off for an A/B of the kernels' speed.

The wrappers are defined in the kernel's source just before the first function that uses
them, each once (a preprocessor guard: several functions of one kernel may use one), and
call kf:: itself, so the value is kf::sin's, bit for bit, on the GPU and on the emulator.
"""

from __future__ import annotations

import re

from kfuse import switches

HEAVY = ("sin", "cos", "tan", "lgamma", "sincos")
"""kf:: math functions whose inlined copies cost NVRTC the most (measured per call site:
sin, cos, tan 0.6 s for four chained calls, lgamma 1.1 s; exp, log, tanh, erf, the inverse
trigonometric and hyperbolic ones 0.2-0.4 s, about what any four calls cost); sincos is sin
and cos of one value (kfuse.codegen.shared_math)."""

OUTLINE_AT = 3
"""Heavy calls in one function from which they are called out of line. Measured on an H100
(nvFuser's many-pointwise-ops fusion over 2^24 fp16 values, sin and cos of each value from one
sincos: codegen.shared_math; kernel us, first call s; inlined / outlined, torch.compile): two
iterations (two sincos calls) 47.5 / 52.1 us, 0.68 / 0.24 s (72.0 us); eight 202.5 / 176.2
us, 4.36 / 0.28 s (227.4 us). Two calls stay inline for their 9% of speed."""

_CALL = re.compile(r"\bkf::(" + "|".join(HEAVY) + r")\(")


def outlined(body: list[str]) -> tuple[list[str], list[str]]:
    """(the wrapper definitions `body` needs, `body` calling them), or ([], `body`) where it
    holds fewer than OUTLINE_AT heavy calls or the switch is off."""
    text = "\n".join(body)
    calls = _CALL.findall(text)
    if not switches.OUTLINE_HEAVY_MATH or len(calls) < OUTLINE_AT:
        return [], body
    wrappers: list[str] = []
    for fn in sorted(set(calls)):
        guard = f"KF_OUTLINED_{fn.upper()}"
        wrappers += [
            f"#ifndef {guard}",
            f"#define {guard}",
            "template <typename T>",
            f"__device__ __noinline__ auto kf_outlined_{fn}(T x) -> decltype(kf::{fn}(x)) {{",
            f"  return kf::{fn}(x);",
            "}",
            "#endif",
        ]
    return wrappers, [_CALL.sub(lambda m: f"kf_outlined_{m.group(1)}(", line) for line in body]

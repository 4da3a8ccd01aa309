"""The device-helper header that every generated kernel's source starts with."""

from __future__ import annotations

import functools
from pathlib import Path

from kfuse import switches
from kfuse.dtypes import DataType

# In this order: each part builds on those before it (kf_base.cuh lists them).
_HEADER_PATHS = [
    Path(__file__).with_name("kf_runtime") / name
    for name in (
        "kf_base.cuh",
        "kf_types.cuh",
        "kf_cast.cuh",
        "kf_math.cuh",
        "kf_memory.cuh",
        "kf_reductions.cuh",
    )
]


_FLOAT8_PATH = Path(__file__).with_name("kf_runtime") / "kf_float8.cuh"
# The C++ names of the float8 storage types, which only the float8 part defines.
_FLOAT8_TYPES = tuple(d.cuda_type for d in DataType if d.is_float8)


@functools.cache
def runtime_header() -> str:
    """The text of the runtime's parts, in order (read once per process)."""
    return "\n".join(path.read_text() for path in _HEADER_PATHS)


_COMPLEX_PATH = Path(__file__).with_name("kf_runtime") / "kf_complex.cuh"
# The names only the complex numbers' part defines.
_COMPLEX_NAMES = ("kf::complex", "kf::make_complex")


@functools.cache
def complex_header() -> str:
    """The complex numbers' part of the runtime (kf_complex.cuh), after runtime_header()."""
    return _COMPLEX_PATH.read_text()


@functools.cache
def float8_header() -> str:
    """The float8 part of the runtime (kf_float8.cuh), which comes after runtime_header()."""
    return _FLOAT8_PATH.read_text()


_READS_PATH = Path(__file__).with_name("kf_runtime") / "kf_reads.cuh"
# The names only the reads' part defines.
_READS_NAMES = ("kf::indexed_position", "kf::indexed_load", "kf::index_fill", "kf::window_")


@functools.cache
def reads_header() -> str:
    """The indexed and padded reads' part of the runtime (kf_reads.cuh), after the float8
    part."""
    return _READS_PATH.read_text()


_PHILOX_PATH = Path(__file__).with_name("kf_runtime") / "kf_philox.cuh"
# The names only the random numbers' part defines (its functions all start so).
_PHILOX_NAMES = ("kf::philox", "kf::Philox", "kf::rng_")


# The line put before the random numbers' part where kfuse.switches.PHILOX_WIDE_PRODUCTS is on
# (kfuse.runtime.backends.cuda.fitted_compile also compiles the source without it, and keeps
# the cheaper).
PHILOX_WIDE_PRODUCTS = "#define KF_PHILOX_WIDE_PRODUCTS 1"


@functools.cache
def philox_header() -> str:
    """The random numbers' part of the runtime (kf_philox.cuh), after the reads' part."""
    return _PHILOX_PATH.read_text()


_GENERATED_PATH = Path(__file__).with_name("kf_runtime") / "kf_generated.cuh"
# The names only the generated reads' part defines.
_GENERATED_NAMES = ("kf::generated", "kf::Generated")


@functools.cache
def generated_header() -> str:
    """The generated reads' part of the runtime (kf_generated.cuh: the reduction kernels' reads
    of generated values), after the random numbers' part."""
    return _GENERATED_PATH.read_text()


_INT_DIV_PATH = Path(__file__).with_name("kf_runtime") / "kf_int_div.cuh"
_INT_DIV_NAMES = ("kf::div_trunc",)


@functools.cache
def int_div_header() -> str:
    """The integer division part of the runtime (kf_int_div.cuh), after the others."""
    return _INT_DIV_PATH.read_text()


_SPECIAL_PATH = Path(__file__).with_name("kf_runtime") / "kf_special.cuh"
# The names only the special functions' part defines.
_SPECIAL_NAMES = (
    "kf::erfinv",
    "kf::erfcinv",
    "kf::lgamma",
    "kf::nextafter",
    "kf::gcd",
    "kf::shift_",
)


@functools.cache
def special_header() -> str:
    """The special functions' and integer ops' part of the runtime (kf_special.cuh), after
    the random numbers' part."""
    return _SPECIAL_PATH.read_text()


_FMA_PATH = Path(__file__).with_name("kf_runtime") / "kf_fma.cuh"
_FMA_NAMES = ("kf::fma(",)


@functools.cache
def fma_header() -> str:
    """The fused multiply-add part of the runtime (kf_fma.cuh), after the others."""
    return _FMA_PATH.read_text()


_WINDOW32_PATH = Path(__file__).with_name("kf_runtime") / "kf_window32.cuh"
_WINDOW32_NAMES = ("kf::window_in32(",)


@functools.cache
def window32_header() -> str:
    """The 32-bit window check's part of the runtime (kf_window32.cuh), after the others."""
    return _WINDOW32_PATH.read_text()


def with_optional_parts(source: str) -> str:
    """A kernel's `source` (runtime_header(), then its own code) with the optional parts put
    between the two where its own code uses them: the complex numbers' part where it names
    kf::complex, the float8 part where it names a float8 type, the reads' part where it
    reads at positions an index tensor holds or inside a pad's window, the random numbers'
    part where it draws random numbers, the generated reads' part where a reduction kernel
    reads a generated value, the integer division part where it divides integers, the
    special functions' part where it calls one of them (erfinv, gcd, a shift, ...), the
    fused multiply-add part where it calls kf::fma, the 32-bit window check's where it
    calls kf::window_in32; else `source` unchanged.

    Only such kernels get a part, so a kernel without float8 values or indexed reads has the
    source it had before those existed (the same cubin, cache entries and source corpus)."""
    header = runtime_header()
    if not source.startswith(header):
        return source
    own = source[len(header) :]
    parts = []
    if any(name in own for name in _COMPLEX_NAMES):
        parts.append(complex_header())
    if any(name in own for name in _FLOAT8_TYPES):
        parts.append(float8_header())
    if any(name in own for name in _READS_NAMES):
        parts.append(reads_header())
    if any(name in own for name in _PHILOX_NAMES):
        if switches.PHILOX_WIDE_PRODUCTS:
            parts.append(PHILOX_WIDE_PRODUCTS)
        parts.append(philox_header())
    if any(name in own for name in _GENERATED_NAMES):
        parts.append(generated_header())
    if any(name in own for name in _INT_DIV_NAMES):
        parts.append(int_div_header())
    if any(name in own for name in _SPECIAL_NAMES):
        parts.append(special_header())
    if any(name in own for name in _FMA_NAMES):
        parts.append(fma_header())
    if any(name in own for name in _WINDOW32_NAMES):
        parts.append(window32_header())
    if not parts:
        return source
    return header + "".join("\n" + part for part in parts) + own


RUNTIME_HEADER_NAME = "kfuse_runtime.cuh"
"""The name a kernel's source #includes the runtime header by, where it is handed to NVRTC
as a header (kfuse.runtime.backends.cuda.nvrtc_program)."""


def with_header_included(source: str) -> tuple[str, str] | None:
    """(`source` with the runtime header it starts with replaced by an #include of
    RUNTIME_HEADER_NAME, the header's text), or None for a source that does not start with
    it. The lines after the header keep their text; each is one line earlier."""
    header = runtime_header()
    if not source.startswith(header):
        return None
    return f'#include "{RUNTIME_HEADER_NAME}"' + source[len(header) :], header

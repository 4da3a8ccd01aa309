"""TensorArg: a tensor kernel argument given by address, sizes and strides.

Generated kernels read their operands through views that no framework array describes (axes
merged, strides re-ordered onto the kernel's iteration domain), so the executor hands both
backends this plain triple instead of an array; it is packed by the same parameter-size rule
as an array (docs/INTERFACES.md, "Kernel ABI").
"""

from __future__ import annotations

from typing import NamedTuple


class TensorArg(NamedTuple):
    """A tensor argument: data pointer, sizes and strides (in elements)."""

    data: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]

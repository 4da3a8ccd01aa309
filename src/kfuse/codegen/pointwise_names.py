"""The names of pointwise kernels: a hash of the fusion and the spec's repr, and a suffix for
each variant whose fields the repr leaves out (so that the names of kernels without them stay
what they were): split rows, rows a thread, indexed reads, windows, reversed rows."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kfuse.codegen.pointwise import PointwiseKernelSpec, PointwisePlan


def kernel_name(plan: PointwisePlan, spec: PointwiseKernelSpec) -> str:
    """A stable name: the scheduler plus a hash of the fusion and the spec, and for SPLIT
    inputs a suffix naming their walked sub-axes and uniform lanes."""
    digest = hashlib.sha1(f"{plan.fusion.structure()!r}|{spec!r}".encode()).hexdigest()[:16]
    suffix = ""
    if any(spec.input_splits):
        walked = "_".join("".join("w" if w else "b" for w in s) or "x" for s in spec.input_splits)
        lanes = "".join(
            "x" if not split else "u" if u else "t" if t else "e"
            for split, u, t in zip(
                spec.input_splits, spec.split_uniform, spec.split_two, strict=True
            )
        )
        suffix = f"_split{walked}_{lanes}"
        if any(j != k for k, j in enumerate(spec.split_sizes_of)):
            suffix += "_sz" + "".join(chr(ord("a") + j % 26) for j in spec.split_sizes_of)
    if spec.rows > 1:
        suffix += f"_rows{spec.rows}_" + "".join("o" if b else "r" for b in spec.row_bcast)
    if spec.indexed_by:
        suffix += "_ix" + "".join("x" if j < 0 else chr(ord("a") + j % 26) for j in spec.indexed_by)
        suffix += "_whole" if spec.whole_rows else ""
    if spec.windows:
        suffix += "_win" + "_".join("".join(str(a) for a in axes) or "x" for axes in spec.windows)
    if spec.reverse_rows:
        suffix += "_rev"
    return f"kfuse_pointwise_{digest}{suffix}"

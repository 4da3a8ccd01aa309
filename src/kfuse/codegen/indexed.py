"""Indexed reads in the pointwise kernel: index_select, gather and take_along_axis of fusion
inputs, read by the kernel that consumes them (kfuse.codegen.domain.IndexedRead).

An indexed read is input k of the kernel: its tensor over the merged domain with stride 0
along the indexed axis, then that axis as one more (`in<k>.size[rank]`, `in<k>.stride[rank]`,
PointwiseKernelSpec.input_rank). Its index is another input, `spec.indexed_by[k]`, loaded
first as any input is; each of its elements is checked against the indexed axis
(kf::indexed_position in kf_reads.cuh) and moves the read that many strides along it.
Where an index's vector holds one position (constant along the inner axis: an embedding's
ids along the hidden axis) the read is a vector (INDEXED_VEC), else an element at a time.

A position outside the axis reads nothing: the element is NaN (0 for integers and Bool) and
the first such read of a call records itself in the kernel's last parameter, host memory that
the program checks without waiting for the GPU (kfuse.runtime.index_checks).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kfuse.codegen.layout import BCAST, INDEXED_VEC

if TYPE_CHECKING:
    from kfuse.codegen.pointwise import PointwiseKernelSpec

FLAGS_PARAM = "kf::Tensor<unsigned long long, 1, {index}> kf_flags"
"""The kernel parameter of the reads' flags (two words an input: kf::indexed_position)."""


def reads(spec: PointwiseKernelSpec) -> list[int]:
    """The inputs of `spec` that are indexed reads."""
    return [k for k, ix in enumerate(spec.indexed_by) if ix >= 0]


def _position(spec: PointwiseKernelSpec, k: int, value: str) -> str:
    """The checked position of read k given its index's element `value`."""
    size = f"(Index)in{k}.size[{spec.rank}]"
    return f"kf::indexed_position({value}, {size}, kf_flags.data, {k})"


def _step(spec: PointwiseKernelSpec, k: int) -> str:
    return f"(Index)in{k}.stride[{spec.rank}]"


def row_position(spec: PointwiseKernelSpec, k: int) -> str | None:
    """The checked position of read k once a row, from its index's element x<ix>[0] where
    that index is constant along the row (BCAST: loaded once a row, kfuse.codegen.
    whole_rows); None where each lane has its own."""
    ix = spec.indexed_by[k]
    return _position(spec, k, f"x{ix}[0]") if spec.input_kinds[ix] == BCAST else None


def vector_load(
    spec: PointwiseKernelSpec, k: int, indent: str, position: str | None = None
) -> list[str]:
    """Load the read k's u-th vector into x<k>[u], at element i0 of the row (after the other
    inputs' loads, its index's among them); `position`: the name of its position checked once
    a row (row_position), where each vector checked its own."""
    vec, kinds = spec.vector, spec.input_kinds
    ix = spec.indexed_by[k]
    if position is not None:
        if kinds[k] == INDEXED_VEC:
            load = f"kf::indexed_load_vec<{vec}>(in{k}, base_in{k} + i0, {position}, "
            return [f"{indent}x{k}[u] = {load}{_step(spec, k)});"]
        return [
            "#pragma unroll",
            f"{indent}for (int j = 0; j < {vec}; ++j) {{",
            f"{indent}  x{k}[u][j] = kf::indexed_load(in{k}, base_in{k} + (i0 + j) * step_in{k}, "
            f"{position}, {_step(spec, k)});",
            f"{indent}}}",
        ]
    if kinds[k] == INDEXED_VEC:  # one position for the vector: its index is BCAST
        return [
            f"{indent}{{",
            f"{indent}  const Index p = {_position(spec, k, f'x{ix}[u]')};",
            f"{indent}  x{k}[u] = kf::indexed_load_vec<{vec}>(in{k}, base_in{k} + i0, p, "
            f"{_step(spec, k)});",
            f"{indent}}}",
        ]
    value = f"x{ix}[u]" if kinds[ix] == BCAST else f"x{ix}[u][j]"  # C++'s lane j
    return [
        "#pragma unroll",
        f"{indent}for (int j = 0; j < {vec}; ++j) {{",
        f"{indent}  const Index p = {_position(spec, k, value)};",
        f"{indent}  x{k}[u][j] = kf::indexed_load(in{k}, base_in{k} + (i0 + j) * step_in{k}, "
        f"p, {_step(spec, k)});",
        f"{indent}}}",
    ]


def element_load(spec: PointwiseKernelSpec, k: int, at: str, loaded: list[str]) -> str:
    """Read k's element at offset `at` (without its indexed axis), where `loaded[ix]` is the
    expression of its index's element there."""
    position = _position(spec, k, loaded[spec.indexed_by[k]])
    return f"kf::indexed_load(in{k}, {at}, {position}, {_step(spec, k)})"

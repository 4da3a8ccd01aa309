"""Slices of inputs at random bounds, steps, dtypes and input layouts, through every kind of
kernel: always right against the reference, and never a vector access the GPU would find
misaligned (the emulator stops at one). The moved pointer's alignment is what decides the
kernels' vectors, so this is where a wrong decision would show."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kfuse.dtypes import DataType, to_numpy_dtype
from kfuse.frontend import FusionDefinition
from kfuse.reference import evaluate
from kfuse.runtime.arrays import numpy_strided
from kfuse.testing import assert_outputs_close

DTYPES = [DataType.BFloat16, DataType.Half, DataType.Float, DataType.Int32, DataType.Bool]
KINDS = ["pointwise", "sum_inner", "sum_outer", "softmax", "transpose"]


@st.composite
def sliced_inputs(draw: st.DrawFn) -> dict:
    """An input array (contiguous, transposed or every other row, from a moved start) and
    a slice of it: per axis a start and end (constants; the end up to 3 past the size), a
    step of 1 to 3."""
    rank = draw(st.integers(1, 3))
    shape = tuple(draw(st.integers(1, 24)) for _ in range(rank))
    bounds = []
    for n in shape:
        start = draw(st.integers(0, n))
        bounds.append((start, draw(st.integers(start, n + 3)), draw(st.sampled_from([1, 1, 2, 3]))))
    return {
        "dtype": draw(st.sampled_from(DTYPES)),
        "shape": shape,
        "bounds": bounds,
        "layout": draw(st.sampled_from(["contiguous", "transposed", "gaps"])),
        "offset": draw(st.sampled_from([0, 1, 3, 8])),
        "kind": draw(st.sampled_from(KINDS)),
        "seed": draw(st.integers(0, 2**16)),
    }


def _array(case: dict) -> np.ndarray:
    shape, dtype = case["shape"], case["dtype"]
    order = (
        list(range(len(shape)))[::-1] if case["layout"] == "transposed" else list(range(len(shape)))
    )
    strides = [0] * len(shape)
    acc = 1
    for ax in reversed(order):
        gap = 2 if case["layout"] == "gaps" and ax == order[0] else 1
        strides[ax] = acc * gap
        acc *= gap * shape[ax]
    values = np.random.default_rng(case["seed"]).standard_normal(case["offset"] + acc)
    base = (values > 0) if dtype is DataType.Bool else values.astype(to_numpy_dtype(dtype))
    return numpy_strided(base[case["offset"] :], shape, [s * base.itemsize for s in strides])


def _fusion(case: dict) -> FusionDefinition:
    rank = len(case["shape"])
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1] * rank, dtype=case["dtype"])
        starts, stops, steps = zip(*case["bounds"])
        s = fd.ops.cast(fd.ops.slice(x, list(starts), list(stops), list(steps)), DataType.Float)
        kind = case["kind"]
        if kind == "pointwise":
            out = fd.ops.add(fd.ops.mul(s, 2.0), 1.0)
        elif kind == "sum_inner":
            out = fd.ops.sum(s, dims=[rank - 1])
        elif kind == "sum_outer":
            out = fd.ops.sum(s, dims=[0])
        elif kind == "softmax":
            out = fd.ops.softmax(s, rank - 1)
        else:
            out = fd.ops.permute(fd.ops.neg(s), list(range(rank))[::-1])
        fd.add_output(out)
    return fd


@settings(deadline=None, suppress_health_check=list(HealthCheck))
@given(sliced_inputs())
def test_slices_of_inputs_at_random_bounds_and_layouts(case: dict) -> None:
    """The profile's examples (30 in the README's command); CI's extended step runs 150."""
    _check_slices(case)


@pytest.mark.extended
@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(sliced_inputs())
def test_slices_of_inputs_at_random_bounds_and_layouts_at_length(case: dict) -> None:
    _check_slices(case)


def _check_slices(case: dict) -> None:
    x = _array(case)
    kept = x[tuple(slice(a, b, c) for a, b, c in case["bounds"])]
    if case["kind"] == "softmax" and kept.shape[-1] == 0:
        return  # a softmax over no elements has no values to compare
    fd = _fusion(case)
    out = fd.execute([x])
    assert_outputs_close(fd, out, evaluate(fd.fusion, [x]), [x])
    assert math.prod(fd.fusion.infer_shapes([x])[fd.fusion.outputs[0]]) == out[0].size

"""Cats of element-wise work at random ranks, axes, part sizes and consumers: element-wise
ops after the cat move into its parts (the other operands' windows sliced off their inputs,
a broadcast operand kept whole), and the cat at the output is written part by part by one
kernel where one takes it, else runs between kernels; always right against the reference."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kfuse.dtypes import DataType
from kfuse.frontend import FusionDefinition
from kfuse.reference import evaluate
from kfuse.testing import assert_outputs_close


@st.composite
def cat_cases(draw: st.DrawFn) -> dict:
    rank = draw(st.integers(1, 3))
    shape = [draw(st.integers(1, 9)) for _ in range(rank)]
    dim = draw(st.integers(0, rank - 1))
    parts = draw(st.integers(2, 3))
    equal = draw(st.booleans())
    sizes = [shape[dim]] * parts if equal else [draw(st.integers(1, 9)) for _ in range(parts)]
    return {
        "shape": shape,
        "dim": dim,
        "sizes": sizes,
        "after": draw(st.sampled_from(["none", "scale", "add_input", "add_broadcast", "chain"])),
        "dtype": draw(st.sampled_from([DataType.Float, DataType.BFloat16])),
        "seed": draw(st.integers(0, 2**16)),
    }


def _fusion(case: dict) -> FusionDefinition:
    rank, dim, dtype = len(case["shape"]), case["dim"], case["dtype"]
    with FusionDefinition() as fd:
        parts_in = [fd.define_tensor(shape=[-1] * rank, dtype=dtype) for _ in case["sizes"]]
        other = fd.define_tensor(shape=[-1] * rank, dtype=dtype)
        row = fd.define_tensor(shape=[-1], dtype=dtype)
        parts = [
            fd.ops.exp(fd.ops.cast(p, DataType.Float))
            if k % 2
            else fd.ops.neg(fd.ops.cast(p, DataType.Float))
            for k, p in enumerate(parts_in)
        ]
        value = fd.ops.cat(parts, dim=dim)
        after = case["after"]
        if after in ("scale", "chain"):
            value = fd.ops.mul(value, 0.5)
        if after in ("add_input", "chain"):
            value = fd.ops.add(value, fd.ops.cast(other, DataType.Float))
        if after in ("add_broadcast", "chain"):
            flags = [i != dim for i in range(rank)]  # row runs along the cat's axis
            value = fd.ops.sub(value, fd.ops.cast(fd.ops.broadcast(row, flags), DataType.Float))
        fd.add_output(fd.ops.cast(value, dtype))
    return fd


@settings(deadline=None, suppress_health_check=list(HealthCheck))
@given(cat_cases())
def test_cats_of_element_wise_work(case: dict) -> None:
    """The profile's examples (30 in the README's command); CI's extended step runs 120."""
    _check_cats(case)


@pytest.mark.extended
@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
@given(cat_cases())
def test_cats_of_element_wise_work_at_length(case: dict) -> None:
    _check_cats(case)


def _check_cats(case: dict) -> None:
    from kfuse.dtypes import to_numpy_dtype

    rng = np.random.default_rng(case["seed"])
    shape, dim, kind = case["shape"], case["dim"], to_numpy_dtype(case["dtype"])
    parts = []
    for n in case["sizes"]:
        part_shape = list(shape)
        part_shape[dim] = n
        parts.append(rng.standard_normal(part_shape).astype(kind))
    total = list(shape)
    total[dim] = sum(case["sizes"])
    other = rng.standard_normal(total).astype(kind)
    row = rng.standard_normal(total[dim]).astype(kind)
    fd = _fusion(case)
    inputs = [*parts, other, row]
    out = fd.execute(inputs)
    assert_outputs_close(fd, out, evaluate(fd.fusion, inputs), inputs)
    assert out[0].shape == tuple(total)

"""The input signature (kfuse.engine.signature): the Program cache key and the fast path's
layout describe the same facts, so they tell the same calls apart."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from gpu_support import requires_gpu
from kfuse import DataType, FusionDefinition
from kfuse.engine.signature import (
    array_spec,
    layout_key,
    program_key,
    replay_key,
    shape_inputs,
    spec_pointer,
)
from kfuse.runtime.info import build_runtime_info


def add_scaled() -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        k = fd.define_scalar(dtype=DataType.Double)
        fd.add_output(fd.ops.add(x, fd.ops.mul(x, k)))
    return fd


def numpy_layouts() -> dict[str, np.ndarray]:
    base = np.arange(4 * 64 * 64, dtype=np.float32)
    grid = base[: 64 * 64].reshape(64, 64)
    return {
        "contiguous": grid,
        "same layout, other values": grid + 1,
        "transposed": grid.T,
        "misaligned": base[1 : 1 + 64 * 64].reshape(64, 64),
        "expanded": np.broadcast_to(base[:64], (64, 64)),
        "strided": base.reshape(256, 64)[::4],
        "other shape": base[: 32 * 128].reshape(32, 128),
    }


def test_the_program_key_tells_layouts_apart_and_ignores_values() -> None:
    fd = add_scaled()
    keys = {
        name: program_key(build_runtime_info(fd.fusion, [a, 2.0], device=None), None)
        for name, a in numpy_layouts().items()
    }
    assert keys["contiguous"] == keys["same layout, other values"]
    others = [k for name, k in keys.items() if name != "same layout, other values"]
    assert len(set(others)) == len(others)
    a = numpy_layouts()["contiguous"]
    as_int = program_key(build_runtime_info(fd.fusion, [a, 2], device=None), None)
    assert as_int != keys["contiguous"]  # a scalar input's type is part of it, not its value


@pytest.mark.gpu
@requires_gpu
def test_the_fast_layout_and_the_program_key_partition_calls_alike() -> None:
    torch = pytest.importorskip("torch")
    fd = add_scaled()
    base = torch.arange(4 * 64 * 64, dtype=torch.float32, device="cuda")
    grid = base[: 64 * 64].view(64, 64)
    arrays = [
        grid,
        grid + 1,
        grid.t(),
        base[1 : 1 + 64 * 64].view(64, 64),
        base[:64].expand(64, 64),
        base.view(256, 64)[::4],
        base[: 32 * 128].view(32, 128),
        torch.arange(64 * 64, dtype=torch.float32, device="cuda").view(64, 64),
    ]
    calls = [[a, k] for a in arrays for k in (2.0, 3.0, 2)]
    described = []
    for inputs in calls:
        info = build_runtime_info(fd.fusion, inputs, device=None)
        described.append((program_key(info, None), layout_key(inputs, info)))
    for (p1, f1), (p2, f2) in itertools.combinations(described, 2):
        assert (p1 == p2) == (f1 == f2)


def test_scalars_that_set_an_extent_are_part_of_the_key() -> None:
    """An expand (or reshape) to a size given as a scalar input: a Program planned for 3
    rows must not run a call asking for 5 (it left 2 rows unwritten)."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[1, -1])
        rows = fd.define_scalar(dtype=DataType.Int)
        scale = fd.define_scalar(dtype=DataType.Float)
        fd.add_output(fd.ops.mul(fd.ops.expand(x, shape=[fd.ops.add(rows, 1), -1]), scale))
        fd.add_output(fd.ops.reshape(fd.ops.expand(x, shape=[rows, -1]), [-1]))
    x = np.arange(4, dtype=np.float32)[None, :] + 1
    infos = [build_runtime_info(fd.fusion, [x, n, s]) for n, s in ((2, 1.5), (4, 1.5), (4, 2.5))]
    keys = [program_key(info, None) for info in infos]
    assert keys[0] != keys[1] and keys[1] == keys[2]  # the extent counts, the factor does not
    for n, s in ((2, 1.5), (4, 2.5), (2, 0.5)):
        wide, flat = fd.execute([x, n, s])
        np.testing.assert_array_equal(wide, np.repeat(x * s, n + 1, axis=0))
        np.testing.assert_array_equal(flat, np.tile(x[0], n))


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_the_replay_key_and_the_program_key_partition_calls_alike(framework: str) -> None:
    """replay_key (a segmented fusion's replays, any framework) tells apart exactly the
    calls program_key tells apart: layouts, alignment, scalar types, and the values of the
    scalar inputs an extent depends on."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[1, -1])
        rows = fd.define_scalar(dtype=DataType.Int)
        scale = fd.define_scalar(dtype=DataType.Double)
        fd.add_output(fd.ops.mul(fd.ops.expand(x, shape=[rows, -1]), scale))
    base = np.arange(4 * 64, dtype=np.float32)
    arrays = [
        base[:64][None, :],
        base[:64][None, :] + 1,
        base[1:65][None, :],
        base[64:128][None, :],
        base.reshape(4, 64)[::2][:1],
        base[:32][None, :],
    ]
    if framework == "torch":
        torch = pytest.importorskip("torch")
        arrays = [torch.from_numpy(np.ascontiguousarray(a)) for a in arrays[:2]] + [
            torch.from_numpy(base)[1:65][None, :],
            torch.from_numpy(base)[:32][None, :],
        ]
    calls = [[a, n, k] for a in arrays for n in (2, 3) for k in (2.0, 3.0, 2)]
    described = []
    sized = shape_inputs(fd.fusion)
    for inputs in calls:
        info = build_runtime_info(fd.fusion, inputs, device=None)
        keyed = replay_key(inputs, fd.fusion.inputs, sized)
        assert keyed is not None
        described.append((program_key(info, None), keyed[0]))
    for (p1, r1), (p2, r2) in itertools.combinations(described, 2):
        assert (p1 == p2) == (r1 == r2)
    assert replay_key([arrays[0], 2, np.float64(2.0)], fd.fusion.inputs, sized) is None
    assert replay_key([arrays[0], 2], fd.fusion.inputs, sized) is None


def test_an_array_matches_a_spec_exactly_where_array_spec_says_so() -> None:
    """spec_pointer (a replayed segment's check of an intermediate, field by field for NumPy
    arrays) accepts an array for a spec exactly where array_spec gives that spec, and gives
    the same data pointer: that of ndarray.ctypes, read-only, strided and empty arrays and
    ml_dtypes' types included."""
    import ml_dtypes

    arrays = list(numpy_layouts().values())
    frozen = np.arange(16, dtype=np.float32)
    frozen.flags.writeable = False
    arrays += [
        frozen,
        np.empty((0, 4), np.float32),
        np.zeros(16, ml_dtypes.bfloat16),
        np.zeros(16, np.float64),
        np.zeros((4, 4), np.float32, order="F"),
    ]
    described = [array_spec(a) for a in arrays]
    specs = [found[0] for found in described if found is not None]
    # All told apart but the two arrays of one layout with other values.
    assert len(specs) == len(arrays) == len(set(specs)) + 1
    for a, found in zip(arrays, described, strict=True):
        assert found is not None and found[1] == a.ctypes.data
        for spec in specs:
            assert spec_pointer(a, spec) == (found[1] if found[0] == spec else None)

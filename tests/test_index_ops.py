"""fd.ops.index_select, gather and take_along_axis: nvFuser's checks where the fusion is
defined, shapes and positions checked per call (a position outside its axis is an
InputError, never a read outside the array), and the values, run between kernels as the
arrays' own indexing or read inside the pointwise kernel that consumes them
(tests/test_indexed_reads.py has those kernels' own tests; host emulator; the GPU test at the
end)."""

from __future__ import annotations

import numpy as np
import pytest

from gpu_support import cuda_torch, requires_gpu
from kfuse.dtypes import DataType
from kfuse.errors import DefinitionError, InputError
from kfuse.frontend import FusionDefinition
from kfuse.reference import evaluate
from kfuse.testing import assert_outputs_close
from reference_checks import check, rand


def test_bad_indexing_is_a_definition_error() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        f = fd.define_tensor(shape=[-1], dtype=DataType.Float)
        i2 = fd.define_tensor(shape=[-1, -1], dtype=DataType.Int)
        i1 = fd.define_tensor(shape=[-1], dtype=DataType.Int32)
        with pytest.raises(DefinitionError, match="is not an integer tensor"):
            fd.ops.index_select(x, f, 0)
        with pytest.raises(DefinitionError, match="must have rank 0 or 1"):
            fd.ops.index_select(x, i2, 0)
        with pytest.raises(DefinitionError, match="differ in rank"):
            fd.ops.gather(x, i1, 0)
        with pytest.raises(DefinitionError, match="dim 2 is out of range"):
            fd.ops.take_along_axis(x, i2, 2)
        fd.add_output(x)


def test_the_printed_definition_rebuilds_the_indexing() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        i1 = fd.define_tensor(shape=[-1], dtype=DataType.Int)
        i2 = fd.define_tensor(shape=[-1, -1], dtype=DataType.Int)
        fd.add_output(fd.ops.index_select(x, i1, 1))
        fd.add_output(fd.ops.gather(x, i2, 0))
        fd.add_output(fd.ops.take_along_axis(x, i2, -1))
    text = repr(fd)
    assert "fd.ops.index_select(T0, T1, dim=1)" in text
    assert "fd.ops.gather(T0, T2, dim=0)" in text
    assert "fd.ops.take_along_axis(T0, T2, dim=1)" in text
    namespace: dict = {"FusionDefinition": FusionDefinition, "DataType": DataType}
    exec(text, namespace)
    assert repr(namespace["fd"]) == text


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_index_select_of_computed_values_then_kernels(dim: int) -> None:
    """An embedding lookup's shape: rows (or columns) of exp(x) picked, repeated and in any
    order, then scaled."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        idx = fd.define_tensor(shape=[-1], dtype=DataType.Int)
        picked = fd.ops.index_select(fd.ops.exp(x), idx, dim)
        fd.add_output(fd.ops.mul(picked, 3.0))
    x = rand((5, 7))
    n = x.shape[dim]
    idx = np.array([n - 1, 0, 2, 2, 1], dtype=np.int64)
    (out,) = check(fd, [x, idx])
    np.testing.assert_allclose(out, 3 * np.take(np.exp(x), idx, axis=dim), rtol=1e-6)


def test_gather_reads_the_index_shape_and_take_along_axis_broadcasts() -> None:
    """torch.gather's smaller index, and take_along_axis broadcasting a one-row index (the
    logits at each row's label, as a cross entropy picks them)."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        small = fd.define_tensor(shape=[-1, -1], dtype=DataType.Int32)
        labels = fd.define_tensor(shape=[-1, 1], dtype=DataType.Int)
        fd.add_output(fd.ops.gather(x, small, 1))
        fd.add_output(fd.ops.take_along_axis(fd.ops.neg(x), labels, 1))
    x = rand((4, 6))
    small = np.array([[5, 0], [1, 1], [2, 3]], dtype=np.int32)
    labels = np.array([[3], [0], [5], [1]], dtype=np.int64)
    gathered, picked = check(fd, [x, small, labels])
    np.testing.assert_array_equal(gathered, np.take_along_axis(x[:3], small, 1))
    np.testing.assert_array_equal(picked, -np.take_along_axis(x, labels, 1))


@pytest.mark.parametrize("bad", [-1, 6, 1 << 40])
def test_a_position_outside_its_axis_is_an_input_error(bad: int) -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        idx = fd.define_tensor(shape=[-1], dtype=DataType.Int)
        fd.add_output(fd.ops.index_select(fd.ops.exp(x), idx, 1))
    idx = np.array([0, bad, 2], dtype=np.int64)
    with pytest.raises(InputError, match=rf"index_select along axis 1: an index holds {bad}"):
        fd.execute([rand((3, 6)), idx])
    check(fd, [rand((3, 6)), np.array([0, 5], dtype=np.int64)])  # still runs


def test_an_index_larger_than_the_tensor_is_an_input_error() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        idx = fd.define_tensor(shape=[-1, -1], dtype=DataType.Int)
        fd.add_output(fd.ops.gather(x, idx, 0))
    with pytest.raises(InputError, match="axis 1 of the index T1 has size 5, more than T0's 4"):
        fd.execute([rand((3, 4)), np.zeros((2, 5), dtype=np.int64)])


@pytest.mark.gpu
def test_a_size_taken_from_the_index_is_named_after_the_index() -> None:
    """An output axis whose size the index gives names the index's input in a shape error
    (take_along_axis's other axes the input of the larger size), not the output."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        idx = fd.define_tensor(shape=[-1, -1], dtype=DataType.Int)
        rows = fd.define_tensor(shape=[-1], dtype=DataType.Int)
        y = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        fd.add_output(fd.ops.add(fd.ops.take_along_axis(x, idx, 1), y))
        fd.add_output(fd.ops.add(fd.ops.index_select(x, rows, 0), y))
    with pytest.raises(InputError, match=r"input 1 \(T1\) axis 1 has size 2 but input 3 \(T3\)"):
        fd.fusion.infer_shapes([(4, 5), (4, 2), (4,), (4, 3)])
    with pytest.raises(InputError, match=r"input 0 \(T0\) axis 0 has size 4 but input 3 \(T3\)"):
        fd.fusion.infer_shapes([(4, 5), (1, 5), (4,), (3, 5)])
    with pytest.raises(InputError, match=r"input 2 \(T2\) axis 0 has size 6 but input 3 \(T3\)"):
        fd.fusion.infer_shapes([(4, 5), (4, 5), (6,), (4, 5)])


@requires_gpu
def test_indexing_on_the_gpu() -> None:
    """Between kernels on the GPU, with torch tensors: right, and a position outside its
    axis an InputError that leaves the CUDA context working."""
    torch = cuda_torch()
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.BFloat16)
        idx = fd.define_tensor(shape=[-1], dtype=DataType.Int)
        labels = fd.define_tensor(shape=[-1, 1], dtype=DataType.Int)
        fd.add_output(fd.ops.index_select(x, idx, 0))
        fd.add_output(fd.ops.take_along_axis(fd.ops.exp(x), labels, 1))
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn((1000, 300), device="cuda", generator=gen).to(torch.bfloat16)
    idx = torch.randint(0, 1000, (4096,), device="cuda", generator=gen)
    labels = torch.randint(0, 300, (1000, 1), device="cuda", generator=gen)
    inputs = [x, idx, labels]
    assert_outputs_close(fd, fd.execute(inputs), evaluate(fd.fusion, inputs), inputs)
    with pytest.raises(InputError, match="index_select along axis 0: an index holds 1000"):
        fd.execute([x, torch.full((3,), 1000, device="cuda"), labels])
    assert_outputs_close(fd, fd.execute(inputs), evaluate(fd.fusion, inputs), inputs)


def test_torch_tensors_take_the_same_paths_on_the_host() -> None:
    """With CPU torch tensors (the emulator runs them), pad, cat, index_select and
    take_along_axis run through torch's own calls, as they do on the GPU: the same values."""
    torch = pytest.importorskip("torch")
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1], dtype=DataType.BFloat16)
        b = fd.define_tensor(shape=[-1, -1], dtype=DataType.BFloat16)
        idx = fd.define_tensor(shape=[-1], dtype=DataType.Int)
        labels = fd.define_tensor(shape=[-1, 1], dtype=DataType.Int32)
        joined = fd.ops.cat([fd.ops.cast(fd.ops.exp(a), DataType.BFloat16), b], dim=1)
        fd.add_output(fd.ops.pad(joined, [3, -2, 1, 0], 0.5))
        fd.add_output(fd.ops.index_select(a, idx, 0))
        fd.add_output(fd.ops.take_along_axis(fd.ops.exp(a), labels, 1))
        fd.add_output(fd.ops.slice(fd.ops.mul(a, 2.0), [1, 3], [20, 50], [2, 1]))
    gen = torch.Generator().manual_seed(0)
    a = torch.randn((30, 20), generator=gen).to(torch.bfloat16)
    b = torch.randn((30, 7), generator=gen).to(torch.bfloat16)
    idx = torch.randint(0, 30, (50,), generator=gen)
    labels = torch.randint(0, 20, (30, 1), generator=gen, dtype=torch.int32)
    inputs = [a, b, idx, labels]
    out = check(fd, inputs)
    assert all(isinstance(o, torch.Tensor) for o in out)
    assert [tuple(o.shape) for o in out] == [(31, 28), (50, 20), (30, 1), (10, 17)]
    with pytest.raises(InputError, match="index_select along axis 0: an index holds 30"):
        fd.execute([a, b, torch.tensor([30]), labels])

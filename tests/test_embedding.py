"""fd.ops.embedding_fwd: nvFuser's embedding forward (tests/python/direct's test_embedding,
ported: every combination of the optional arguments as symbolic scalars), ids of any rank
as one pointwise kernel (the indexed row load, no host synchronisation), max_norm's row
scaling as torch's forward gives it, the definition's checks, an id outside the table as
index_select's InputError, and the printed definition (host emulator; the GPU tests last)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from gpu_support import cuda_torch, requires_gpu
from kfuse.dtypes import DataType
from kfuse.engine.program import KernelProgram
from kfuse.errors import DefinitionError, InputError
from kfuse.frontend import FusionDefinition

OPTIONAL_DTYPES = [DataType.Int, DataType.Float, DataType.Float, DataType.Bool, DataType.Bool]


def reference(ids: np.ndarray, weight: np.ndarray, max_norm=None, norm_type=2.0) -> np.ndarray:
    """torch.nn.functional.embedding's forward in float64: the rows, those whose norm
    exceeds max_norm scaled by max_norm / (norm + 1e-7)."""
    rows = weight.astype(np.float64)[ids]
    if max_norm is not None:
        norm = (np.abs(rows) ** norm_type).sum(-1, keepdims=True) ** (1.0 / norm_type)
        rows = np.where(norm > max_norm, rows * (max_norm / (norm + 1e-7)), rows)
    return rows


def embedding_definition(ids_rank: int, dtype: DataType, given: list[bool]) -> FusionDefinition:
    with FusionDefinition() as fd:
        ids = fd.define_tensor(shape=[-1] * ids_rank, dtype=DataType.Int)
        weight = fd.define_tensor(shape=[-1, -1], dtype=dtype)
        optional = [
            fd.define_scalar(None, dtype=d) if g else None for g, d in zip(given, OPTIONAL_DTYPES)
        ]
        fd.add_output(fd.ops.embedding_fwd(ids, weight, *optional))
    return fd


@pytest.mark.parametrize(
    "padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse",
    list(itertools.product([None, -2], [None, 1e-5], [None, 1.0], [None, True], [None, True])),
)
def test_embedding_with_every_optional_argument(
    padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse
) -> None:
    """nvFuser's test_embedding: the optional arguments as symbolic scalars, their values
    per call; only max_norm (with norm_type) changes the forward."""
    values = [padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse]
    fd = embedding_definition(1, DataType.Float, [v is not None for v in values])
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 10, (3,))
    weight = rng.standard_normal((10, 3)).astype(np.float32)
    (out,) = fd.execute([ids, weight, *(v for v in values if v is not None)])
    expected = reference(ids, weight, max_norm, 2.0 if norm_type is None else norm_type)
    assert out.dtype == np.float32 and out.shape == (3, 3)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-12)


@pytest.mark.parametrize("ids_shape", [(37,), (4, 9), (2, 3, 5), (1, 6)])
def test_ids_of_any_rank_are_one_indexed_kernel(ids_shape: tuple[int, ...]) -> None:
    """ids' shape + [embedding_dim], read by one pointwise kernel: the ids flattened and the
    result reshaped back are views, not framework indexing between kernels."""
    fd = embedding_definition(len(ids_shape), DataType.BFloat16, [False] * 5)
    rng = np.random.default_rng(1)
    weight = rng.standard_normal((50, 64)).astype(np.float32)
    import ml_dtypes

    weight = weight.astype(ml_dtypes.bfloat16)
    ids = rng.integers(0, 50, ids_shape)
    (out,) = fd.execute([ids, weight])
    assert out.shape == (*ids_shape, 64) and out.dtype == weight.dtype
    assert np.array_equal(out, weight[ids])
    program = fd.last_program()
    assert isinstance(program, KernelProgram) and len(program.launches) == 1
    assert fd.last_scheduler().value == "pointwise"


def test_max_norm_scales_long_rows_in_float_and_keeps_the_weight() -> None:
    """Rows whose norm_type-norm exceeds max_norm come back at max_norm; the others and the
    weight itself are unchanged (torch renormalizes the weight in place; kfuse does not)."""
    with FusionDefinition() as fd:
        ids = fd.define_tensor(shape=[-1, -1], dtype=DataType.Int32)
        weight = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        fd.add_output(fd.ops.embedding_fwd(ids, weight, max_norm=1.5, norm_type=3.0))
    weight = np.array([[3.0, 4.0], [0.5, 0.25], [-2.0, 1.0]], dtype=np.float32)
    kept = weight.copy()
    ids = np.array([[0, 1], [2, 0]], dtype=np.int32)
    (out,) = fd.execute([ids, weight])
    np.testing.assert_allclose(out, reference(ids, weight, 1.5, 3.0), rtol=1e-6)
    norms = (np.abs(out.astype(np.float64)) ** 3).sum(-1) ** (1 / 3)
    np.testing.assert_allclose([norms[0, 0], norms[1, 0], norms[1, 1]], [1.5] * 3, rtol=1e-5)
    np.testing.assert_array_equal(out[0, 1], weight[1])
    np.testing.assert_array_equal(weight, kept)


def test_an_id_outside_the_table_is_an_input_error() -> None:
    fd = embedding_definition(2, DataType.Float, [False] * 5)
    weight = np.ones((10, 4), dtype=np.float32)
    with pytest.raises(InputError, match="index_select along axis 0: an index holds 10"):
        fd.execute([np.array([[1, 10]]), weight])
    with pytest.raises(InputError, match="an index holds -11"):
        fd.execute([np.array([[-11, 0]]), weight])
    (out,) = fd.execute([np.array([[1, 9]]), weight])
    assert out.shape == (1, 2, 4)


def test_definition_errors() -> None:
    with FusionDefinition() as fd:
        ids = fd.define_tensor(shape=[-1], dtype=DataType.Int)
        scalar_ids = fd.define_tensor(shape=[], dtype=DataType.Int)
        float_ids = fd.define_tensor(shape=[-1], dtype=DataType.Float)
        weight = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        flat = fd.define_tensor(shape=[-1], dtype=DataType.Float)
        with pytest.raises(DefinitionError, match="is not an integer tensor of ids"):
            fd.ops.embedding_fwd(float_ids, weight)
        with pytest.raises(DefinitionError, match="must have at least one axis"):
            fd.ops.embedding_fwd(scalar_ids, weight)
        with pytest.raises(DefinitionError, match="must have 2 axes"):
            fd.ops.embedding_fwd(ids, flat)
        with pytest.raises(DefinitionError, match="padding_idx must be an integer"):
            fd.ops.embedding_fwd(ids, weight, padding_idx=1.5)
        with pytest.raises(DefinitionError, match="sparse must be a bool"):
            fd.ops.embedding_fwd(ids, weight, sparse=1)
        with pytest.raises(DefinitionError, match="max_norm must be a scalar"):
            fd.ops.embedding_fwd(ids, weight, max_norm=flat)
        with pytest.raises(DefinitionError, match="norm_type must be a number"):
            fd.ops.embedding_fwd(ids, weight, max_norm=1.0, norm_type=True)
        fd.add_output(fd.ops.embedding_fwd(ids, weight, padding_idx=0, sparse=False))


def test_the_printed_definition_rebuilds_it() -> None:
    """embedding_fwd prints as the ops it is built from; the printed text rebuilds them."""
    fd = embedding_definition(2, DataType.Float, [False] * 5)
    text = repr(fd)
    assert "T2 = fd.ops.reshape(T0, new_shape=[-1])" in text
    assert "T3 = fd.ops.index_select(T1, T2, dim=0)" in text
    namespace: dict = {"FusionDefinition": FusionDefinition, "DataType": DataType}
    exec(text, namespace)
    assert repr(namespace["fd"]) == text
    ids = np.array([[3, 1, 2]])
    weight = np.arange(20, dtype=np.float32).reshape(5, 4)
    np.testing.assert_array_equal(namespace["fd"].execute([ids, weight])[0], weight[ids])


@requires_gpu
def test_embedding_on_the_gpu() -> None:
    """nvFuser's test_embedding's call on torch's CUDA tensors, against torch's own embedding;
    an 8192-token lookup of a bf16 table is one kernel; an id outside the table is an
    InputError that leaves the context working."""
    torch = cuda_torch()
    gen = torch.Generator(device="cuda").manual_seed(0)
    for values in itertools.product([None, -2], [None, 1e-5], [None, 1.0], [None, True]):
        padding_idx, max_norm, norm_type, sparse = values
        given = [padding_idx, max_norm, norm_type, None, sparse]
        fd = embedding_definition(1, DataType.BFloat16, [v is not None for v in given])
        ids = torch.randint(10, (3,), device="cuda", generator=gen)
        weight = torch.randn(10, 3, device="cuda", generator=gen).to(torch.bfloat16)
        (out,) = fd.execute([ids, weight, *(v for v in given if v is not None)])
        expected = torch.nn.functional.embedding(
            ids, weight.clone(), padding_idx, max_norm, 2.0 if norm_type is None else norm_type
        )
        torch.testing.assert_close(out, expected)
    fd = embedding_definition(2, DataType.BFloat16, [False] * 5)
    weight = torch.randn(32064, 512, device="cuda", generator=gen).to(torch.bfloat16)
    ids = torch.randint(32064, (2, 4096), device="cuda", generator=gen)
    (out,) = fd.execute([ids, weight])
    assert torch.equal(out, torch.nn.functional.embedding(ids, weight))
    assert len(fd.last_program().launches) == 1
    with pytest.raises(InputError, match="an index holds 32064"):
        fd.execute([torch.full((1, 3), 32064, device="cuda"), weight])
    (out,) = fd.execute([ids, weight])
    assert torch.equal(out, torch.nn.functional.embedding(ids, weight))

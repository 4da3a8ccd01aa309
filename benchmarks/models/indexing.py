"""The model suite's case for indexed reads (`tools/kernel_times.py embedding_fwd --tc`):
an embedding lookup, the rows of a [V, H] table at N token ids, as `fd.ops.embedding_fwd`,
which Thunder writes for nvFuser's embedding benchmark (nv_enable_embedding: the optional
arguments as its defaults, norm_type 2.0 and the two flags False); kfuse builds it as the
indexed row load of `index_select(table, ids, 0)`.

The shape is (V, H, N). Its bytes_moved counts the whole table, of which a call reads only
the N rows (fewer where ids repeat): compare times, not fractions of copy.
"""

from __future__ import annotations

from typing import Any

from kfuse import DataType, FusionDefinition
from models.case import Shape, sweep_case

# Phi-3-mini's vocabulary and width, 8192 tokens: a 196 MiB bf16 table, 48 MiB of rows.
EMBEDDING = ((32064, 3072, 8192),)
TEST_EMBEDDING = (50, 64, 37)
GPU_TEST_EMBEDDING = (32064, 512, 4096)


def embedding_definition(dtype: DataType) -> FusionDefinition:
    with FusionDefinition() as fd:
        table = fd.define_tensor(shape=[-1, -1], contiguity=[True] * 2, dtype=dtype)
        ids = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Int)
        norm_type = fd.define_scalar(2.0, dtype=DataType.Double)
        scale_grad_by_freq = fd.define_scalar(False, dtype=DataType.Bool)
        sparse = fd.define_scalar(False, dtype=DataType.Bool)
        fd.add_output(
            fd.ops.embedding_fwd(ids, table, None, None, norm_type, scale_grad_by_freq, sparse)
        )
    return fd


def embedding_torch(table: Any, ids: Any) -> tuple[Any]:
    import torch

    return (torch.nn.functional.embedding(ids, table),)


def embedding_reference(table: Any, ids: Any) -> tuple[Any]:
    return (table.double()[ids],)


def _inputs(torch: Any, shape: Shape, dtype: Any, device: str) -> list[Any]:
    """A random table and ids drawn uniformly over its rows."""
    vocabulary, width, tokens = shape
    table = torch.randn(vocabulary, width, device=device, dtype=torch.float32).to(dtype)
    ids = torch.randint(0, vocabulary, (tokens,), device=device)
    return [table, ids]


CASES = [
    sweep_case(
        "indexing",
        "embedding_fwd",
        "test_embedding.py::test_embedding_fwd_nvf_benchmark",
        embedding_definition,
        (embedding_torch, embedding_reference, _inputs),
        sweep=(EMBEDDING, EMBEDDING, TEST_EMBEDDING, GPU_TEST_EMBEDDING),
    )
]

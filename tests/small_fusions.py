"""Small fusions several test modules run: one pointwise kernel, two generated-kernel
segments, a library segment before a kernel, index_select read in a kernel and in a library
segment."""

from __future__ import annotations

from kfuse import DataType, FusionDefinition


def scaled_sum(rank: int = 2) -> FusionDefinition:
    """(a + b) * 2 over two inputs of `rank` axes: one pointwise kernel."""
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1] * rank)
        b = fd.define_tensor(shape=[-1] * rank)
        fd.add_output(fd.ops.mul(fd.ops.add(a, b), fd.define_scalar(2.0)))
    return fd


def sums_over_both_axes() -> FusionDefinition:
    """No single scheduler takes it: a reduction and a normalization segment."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        s0 = fd.ops.sum(x, dims=[0])
        fd.add_output(fd.ops.add(x, fd.ops.broadcast(s0, is_broadcast_dim=[True, False])))
        fd.add_output(fd.ops.sum(x, dims=[1]))
    return fd


def relu_of_matmul() -> FusionDefinition:
    """A library segment (matmul), then a pointwise one."""
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1])
        b = fd.define_tensor(shape=[-1, -1])
        fd.add_output(fd.ops.relu(fd.ops.matmul(a, b)))
    return fd


def rows_of() -> FusionDefinition:
    """exp of index_select rows: the read and its bounds flags inside a generated kernel."""
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, -1])
        i = fd.define_tensor(shape=[-1], dtype=DataType.Int)
        fd.add_output(fd.ops.exp(fd.ops.index_select(t, i, 0)))
    return fd


def rows_of_a_product() -> FusionDefinition:
    """index_select of a matmul, both in one library (expr_eval) segment, whose positions
    kfuse checks on the host."""
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, -1])
        i = fd.define_tensor(shape=[-1], dtype=DataType.Int)
        # linear(t, t) = t @ t.T, a library op: the whole fusion is expr_eval's (a matmul
        # with the permute would leave the gather to a generated kernel of its own).
        fd.add_output(fd.ops.index_select(fd.ops.linear(t, t), i, 0))
    return fd


def embedding_sum() -> FusionDefinition:
    """Thunder's embedding region: rows of a bf16 table at 2-D token ids (embedding_fwd:
    ids flattened, rows gathered, reshaped back to the ids' shape), cast, scaled, summed."""
    with FusionDefinition() as fd:
        ids = fd.define_tensor(shape=[-1, -1], dtype=DataType.Int)
        table = fd.define_tensor(shape=[-1, -1], dtype=DataType.BFloat16)
        g = fd.define_tensor(shape=[-1, -1, -1])
        rows = fd.ops.embedding_fwd(ids, table, None, None, None, None, None)
        fd.add_output(fd.ops.sum(fd.ops.mul(fd.ops.cast(rows, DataType.Float), g), dims=[0, 1, 2]))
    return fd


def exp_of_a_scatter() -> FusionDefinition:
    """exp(scatter(t, i, src, 0) * 0.5): a library segment (scatter, whose positions kfuse
    checks on the host) and a pointwise kernel after it."""
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, -1])
        i = fd.define_tensor(shape=[-1, -1], dtype=DataType.Int)
        src = fd.define_tensor(shape=[-1, -1])
        fd.add_output(fd.ops.exp(fd.ops.mul(fd.ops.scatter(t, i, src, 0), 0.5)))
    return fd

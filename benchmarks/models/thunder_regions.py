"""Probe cases for the fusion regions Lightning Thunder's nvFuser executor hands kfuse in a
training step's loss (not in the suite until measured: `registry.PROBE_CASES`, which the
tools take by name, `tools/kernel_times.py thunder_cross_entropy_fwd --tc` say), written as
Thunder 0.2.6 writes them (tools/thunder_segments.py prints them from a Thunder run), over
[rows, vocab] bf16 logits and int64 targets with ignored (-100) positions:

* thunder_cross_entropy_fwd: F.cross_entropy(logits.float(), target): the row max and
  log-sum-exp (saved for the backward) and the mean loss over the kept rows, the target's
  logit gathered from the logits (take_along_axis of the fp32 cast; its index the target,
  0 where ignored);
* thunder_nll_fwd: F.nll_loss(F.log_softmax(logits.float()), target): the fp32
  log-probabilities (saved for the backward) and the mean loss, the gather reading the
  negated log-probabilities padded with a column of zeros that ignored targets index.
"""

from __future__ import annotations

import functools
from typing import Any

from kfuse import DataType, FusionDefinition
from models.case import Shape, sweep_case

# tools/thunder_check.py's full size: batch 4 x seq 1024 rows, a 32768 vocabulary.
LOGITS = ((4096, 32768),)
TEST_LOGITS = (8, 96)
GPU_TEST_LOGITS = (512, 4096)
IGNORED = -100


def _row_stats(fd: FusionDefinition, t2: Any, rows: Any) -> tuple[Any, Any]:
    """(the row max, log(sum(exp(x - max)))) of fp32 logits t2."""
    top = fd.ops.max(t2, dims=[1])
    wide = fd.ops.expand(fd.ops.broadcast(top, [False, True]), shape=[rows, -1])
    return top, fd.ops.log(fd.ops.sum(fd.ops.exp(fd.ops.sub(t2, wide)), dims=[1]))


def cross_entropy_fwd_definition(dtype: DataType) -> FusionDefinition:
    with FusionDefinition() as fd:
        logits = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=dtype)
        target = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Int)
        t2 = fd.ops.cast(logits, DataType.Float)
        keep = fd.ops.ne(target, IGNORED)
        safe = fd.ops.where(keep, fd.ops.cast(target, DataType.Float), 0.0)
        rows = fd.ops.size(target, dim=0)
        index = fd.ops.cast(
            fd.ops.expand(fd.ops.broadcast(safe, [False, True]), shape=[rows, -1]), DataType.Int
        )
        picked = fd.ops.reshape(fd.ops.take_along_axis(t2, index, dim=1), new_shape=[rows])
        top, lse = _row_stats(fd, t2, rows)
        loss = fd.ops.where(keep, fd.ops.neg(fd.ops.sub(fd.ops.sub(picked, top), lse)), 0.0)
        count = fd.ops.cast(fd.ops.sum(fd.ops.cast(keep, DataType.Int), dims=[0]), DataType.Float)
        fd.add_output(fd.ops.div(fd.ops.sum(loss, dims=[0]), count))
        fd.add_output(top)
        fd.add_output(lse)
    return fd


def nll_fwd_definition(dtype: DataType) -> FusionDefinition:
    with FusionDefinition() as fd:
        logits = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=dtype)
        target = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Int)
        rows, vocab = fd.ops.size(logits, dim=0), fd.ops.size(logits, dim=1)
        t2 = fd.ops.cast(logits, DataType.Float)
        top, lse = _row_stats(fd, t2, rows)
        shift = fd.ops.expand(
            fd.ops.broadcast(fd.ops.add(lse, top), [False, True]), shape=[rows, -1]
        )
        logp = fd.ops.sub(t2, shift)
        wide_target = fd.ops.broadcast(target, [False, True])
        keep = fd.ops.ne(wide_target, IGNORED)
        index = fd.ops.where(keep, wide_target, vocab)
        padded = fd.ops.pad(fd.ops.neg(logp), [0, 1, 0, 0], 0.0)
        picked = fd.ops.take_along_axis(padded, index, dim=1)
        count = fd.ops.cast(
            fd.ops.sum(fd.ops.cast(keep, DataType.Int), dims=[0, 1]), DataType.Float
        )
        fd.add_output(logp)
        fd.add_output(fd.ops.div(fd.ops.sum(picked, dims=[0, 1]), count))
    return fd


def _loss_parts(torch: Any, logits: Any, target: Any, dtype: Any) -> tuple[Any, Any, Any]:
    """(log-probabilities, the row max, the row log-sum-exp) in `dtype`."""
    x = logits.to(dtype)
    top = x.amax(dim=1)
    lse = torch.log(torch.exp(x - top[:, None]).sum(dim=1))
    return x - (lse + top)[:, None], top, lse


def _mean_loss(torch: Any, logp: Any, target: Any) -> Any:
    keep = target != IGNORED
    picked = logp.gather(1, torch.where(keep, target, 0)[:, None])[:, 0]
    return -(picked * keep).sum() / keep.sum().to(logp.dtype)


def cross_entropy_fwd_torch(logits: Any, target: Any) -> tuple[Any, ...]:
    import torch

    logp, top, lse = _loss_parts(torch, logits, target, torch.float32)
    return _mean_loss(torch, logp, target), top, lse


def cross_entropy_fwd_reference(logits: Any, target: Any) -> tuple[Any, ...]:
    import torch

    logp, top, lse = _loss_parts(torch, logits, target, torch.float64)
    return _mean_loss(torch, logp, target), top, lse


def nll_fwd_torch(logits: Any, target: Any) -> tuple[Any, ...]:
    import torch

    logp, _, _ = _loss_parts(torch, logits, target, torch.float32)
    return logp, _mean_loss(torch, logp, target)


def nll_fwd_reference(logits: Any, target: Any) -> tuple[Any, ...]:
    import torch

    logp, _, _ = _loss_parts(torch, logits, target, torch.float64)
    return logp, _mean_loss(torch, logp, target)


def _inputs(torch: Any, shape: Shape, dtype: Any, device: str) -> list[Any]:
    """Logits of `dtype` and int64 targets, every seventh ignored (padding)."""
    rows, vocab = shape
    logits = torch.randn(shape, device=device, dtype=torch.float32).to(dtype)
    target = torch.randint(0, vocab, (rows,), device=device)
    target[::7] = IGNORED
    return [logits, target]


_case = functools.partial(
    sweep_case, "thunder", sweep=(LOGITS, LOGITS, TEST_LOGITS, GPU_TEST_LOGITS)
)

PROBE_CASES = [
    _case(
        "thunder_cross_entropy_fwd",
        "Thunder 0.2.6 nvFuser executor: F.cross_entropy's forward region",
        cross_entropy_fwd_definition,
        (cross_entropy_fwd_torch, cross_entropy_fwd_reference, _inputs),
    ),
    _case(
        "thunder_nll_fwd",
        "Thunder 0.2.6 nvFuser executor: F.nll_loss(F.log_softmax(x))'s forward region",
        nll_fwd_definition,
        (nll_fwd_torch, nll_fwd_reference, _inputs),
    ),
]

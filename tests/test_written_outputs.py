"""Every output of a fusion is written, whatever zero-size extents, broadcasts and duplicates
it has (emulator). The emulator fills new outputs and scratch with kfuse's poison pattern, so
an element that no kernel writes fails the comparison instead of reading as stale memory."""

from __future__ import annotations

import re

import numpy as np
import pytest

from kfuse.dtypes import DataType
from kfuse.frontend import FusionDefinition
from kfuse.reference import evaluate
from kfuse.runtime.arrays import POISON_BYTE
from kfuse.schedule import SchedulerType
from kfuse.testing import assert_outputs_close

torch = pytest.importorskip("torch")


def check(fd: FusionDefinition, inputs: list) -> list:
    out = fd.execute(inputs)
    assert_outputs_close(fd, out, evaluate(fd.fusion, inputs), inputs)
    return out


def reduction_and_broadcast_output(kept: int) -> FusionDefinition:
    """sum over the leading two axes next to an output that broadcasts the second one."""
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1, -1])
        b = fd.define_tensor(shape=[-1, 1, -1 if kept else 1])
        fd.add_output(fd.ops.sum(a, [0, 1]))
        fd.add_output(fd.ops.exp(b))
    return fd


@pytest.mark.parametrize("kept", [0, 1])
def test_an_output_broadcasting_an_empty_reduced_axis_is_written(kept: int) -> None:
    """a [7, 0, 6] reduced over (0, 1): exp(b) with b [7, 1, 1] is not empty, but no point of
    the empty reduced domain writes it. It was accepted by inner_persistent (whose check
    against outer reductions skips empty ones) and left unwritten."""
    fd = reduction_and_broadcast_output(kept)
    inputs = [torch.randn(7, 0, 6), torch.randn(7, 1, 6 if kept else 1)]
    segments = fd.segments(inputs)
    assert len(segments) == 2, segments
    check(fd, inputs)
    check(fd, [torch.randn(7, 3, 6), inputs[1]])  # the same definition with a full domain


def test_the_campaigns_multi_reduction_over_an_empty_axis() -> None:
    """The definition a GPU campaign found (issue 19, case 3): output 1 was never written."""
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True, True, True], dtype=DataType.Int)
        t1 = fd.define_tensor(shape=[1, 1, -1], contiguity=[None, None, True])
        t2 = fd.define_tensor(shape=[-1, 1, 1], dtype=DataType.BFloat16)
        t3 = fd.ops.min(t0, dims=[0, 1], keepdim=False, dtype=DataType.Int)
        t7 = fd.ops.cast(t2, dtype=DataType.Float)
        t13 = fd.ops.sinh(fd.ops.cast(fd.ops.lt(t7, t1), dtype=DataType.Float))
        t10 = fd.ops.max(t7, dims=[0, 1], keepdim=False, dtype=DataType.Float)
        t6 = fd.ops.where(fd.ops.lt(t0, t0), t1, fd.ops.cast(t0, dtype=DataType.Float))
        n = fd.ops.cast(
            fd.ops.mul(fd.ops.size(t6, dim=0), fd.ops.size(t6, dim=1)), dtype=DataType.Float
        )
        t15 = fd.ops.div(fd.ops.sum(t6, dims=[0, 1], keepdim=False, dtype=DataType.Float), n)
        fd.add_output(
            fd.ops.cast(
                fd.ops.broadcast(t15, is_broadcast_dim=[True, True, False]), dtype=DataType.BFloat16
            )
        )
        fd.add_output(t13)
        fd.add_output(fd.ops.lt(t7, t1))
        fd.add_output(t3)
        fd.add_output(
            fd.ops.cast(
                fd.ops.broadcast(t10, is_broadcast_dim=[True, True, False]), dtype=DataType.BFloat16
            )
        )
    check(
        fd,
        [
            torch.randint(-8, 9, (1023, 0, 6)),
            torch.randn(1, 1, 6),
            torch.randn(1023, 1, 1).to(torch.bfloat16),
        ],
    )


@pytest.mark.parametrize("twice", ["exp", "sum", "softmax"])
def test_an_output_added_twice_is_written_twice(twice: str) -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        y = {
            "exp": lambda: fd.ops.exp(x),
            "sum": lambda: fd.ops.sum(x, [1]),
            "softmax": lambda: fd.ops.softmax(x, 1),
        }[twice]()
        fd.add_output(y)
        fd.add_output(y)
        fd.add_output(x)
    out = check(fd, [torch.randn(5, 7)])
    assert out[0].data_ptr() != out[1].data_ptr()


def test_a_segmented_fusion_hands_out_copies_of_repeated_outputs() -> None:
    """The campaign's case 2: a no_op segment beside a pointwise one, T8 added twice."""
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(
            shape=[-1, -1, -1], contiguity=[True, True, True], dtype=DataType.Bool
        )
        t1 = fd.define_tensor(shape=[-1], dtype=DataType.Bool)
        t2 = fd.ops.cast(t0, dtype=DataType.Float)
        mean = fd.ops.div(
            fd.ops.sum(t2, dims=[1]), fd.ops.cast(fd.ops.size(t2, dim=1), dtype=DataType.Float)
        )
        t9 = fd.ops.cast(
            fd.ops.sub(t2, fd.ops.broadcast(mean, [False, True, False])), dtype=DataType.BFloat16
        )
        t8 = fd.ops.sign(t1)
        fd.add_output(t8)
        fd.add_output(t8)
        fd.add_output(fd.ops.isfinite(t1))
        fd.add_output(t9)
    inputs = [torch.zeros(0, 0, 0, dtype=torch.bool), torch.rand(129) > 0.5]
    assert len(fd.segments(inputs)) == 2
    out = check(fd, inputs)
    assert out[0].data_ptr() != out[1].data_ptr()


def test_the_emulator_poisons_what_a_kernel_leaves_unwritten(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A planted bug, the kernel's stores of its second output removed: that output holds the
    poison pattern in every byte, and the comparison says so."""
    from kfuse.runtime.backends.emulator import EMULATOR_BACKEND

    compile_kernel = EMULATOR_BACKEND.compile

    def without_second_output(source: str, name: str, device: object) -> object:
        planted = re.sub(r"kf::store(_vec<\d+>)?\(out1, [^;]*;", "", source)
        assert planted != source
        return compile_kernel(planted, name, device)

    monkeypatch.setattr(EMULATOR_BACKEND, "compile", without_second_output)
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1])
        fd.add_output(fd.ops.exp(x))
        fd.add_output(fd.ops.neg(x))
    inputs = [np.linspace(-1, 1, 37, dtype=np.float32)]
    out = fd.execute(inputs)
    assert fd.last_scheduler() is SchedulerType.pointwise
    assert (out[1].view(np.uint8) == POISON_BYTE).all()
    with pytest.raises(AssertionError, match="output 1"):
        assert_outputs_close(fd, out, evaluate(fd.fusion, inputs), inputs)


@pytest.mark.parametrize(
    ("shape", "strides"),
    [((1,), (2,)), ((1,), (0,)), ((3, 1), (1, 0)), ((1, 4), (9, 1)), ((0, 2), (2, 1))],
)
def test_poison_fills_dense_arrays_whose_size_one_axes_have_any_stride(
    shape: tuple, strides: tuple
) -> None:
    """torch.empty_like of a contiguous input keeps its strides, and torch calls a size-1 axis
    of any stride contiguous: the host fast path allocates such outputs (found by the
    campaign: `view(torch.uint8)` refused a (1,) array of stride 2)."""
    from kfuse.runtime.arrays import poison

    for dtype in (torch.float32, torch.float16, torch.int64, torch.bool):
        array = torch.empty_strided(shape, strides, dtype=dtype)
        poison(array)
        assert (
            torch.as_strided(array, (array.numel(),), (1,)).view(torch.uint8) == POISON_BYTE
        ).all()
    host = np.lib.stride_tricks.as_strided(np.empty(4, np.float32), shape, [4 * s for s in strides])
    poison(host)
    assert (
        np.lib.stride_tricks.as_strided(host, (host.size,), (4,)).view(np.uint8) == POISON_BYTE
    ).all()

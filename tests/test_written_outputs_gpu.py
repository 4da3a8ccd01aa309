"""Every output is written and ordered on the GPU: what the framework does for kfuse (output
copies, library segments, allocations of a call on a given stream) runs on the stream of
kfuse's kernels, and KFUSE_POISON shows an element that no kernel writes.

The races are made certain rather than rare: the stream is held back by a long
torch.cuda._sleep before the fusion runs, so a copy made on another stream reads its source
before the kernel that writes it has started.
"""

from __future__ import annotations

import re

import pytest

from gpu_support import requires_gpu
from kfuse.dtypes import DataType
from kfuse.frontend import FusionDefinition
from kfuse.reference import evaluate
from kfuse.runtime.arrays import POISON_BYTE
from kfuse.runtime.launch import workspace_bytes
from kfuse.testing import assert_outputs_close

pytestmark = [pytest.mark.gpu, requires_gpu]
torch = pytest.importorskip("torch")

HOLD = 200_000_000  # cycles of torch.cuda._sleep: about 0.1 s at the H200's clock


def randn(*shape: int, seed: int, dtype: object = None) -> object:
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(*shape, generator=g, device="cuda", dtype=dtype or torch.float32)


def held_then_checked(fd: FusionDefinition, inputs: list) -> list:
    torch.cuda._sleep(HOLD)  # the current stream is busy: a kernel queued now starts late
    out = fd.execute(inputs)
    torch.cuda.synchronize()
    assert_outputs_close(fd, out, evaluate(fd.fusion, inputs), inputs)
    return out


def test_copies_of_repeated_outputs_wait_for_the_kernel_that_wrote_them() -> None:
    """The campaign's case 1: T3 added twice and an input handed out, in two segments. The
    second T3 is a copy; it ran on a stream of torch's pool (torch.cuda.ExternalStream(0)
    is one), which does not wait for the default stream."""
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1, -1, -1])
        t2 = fd.define_tensor(shape=[-1], dtype=DataType.Double)
        t3 = fd.ops.exp(t0)
        fd.add_output(t3)
        fd.add_output(t3)
        fd.add_output(t2)
    for seed in range(3):
        inputs = [randn(1, 127, 5, 127, seed=seed), randn(7, seed=seed + 10, dtype=torch.float64)]
        assert len(fd.segments(inputs)) == 2
        held_then_checked(fd, inputs)


def test_a_library_segment_waits_for_the_kernel_before_it() -> None:
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1])
        b = fd.define_tensor(shape=[-1, -1])
        fd.add_output(fd.ops.exp(fd.ops.matmul(fd.ops.relu(a), b)))
    for seed in range(3):
        inputs = [randn(256, 128, seed=seed), randn(128, 64, seed=seed + 10)]
        assert len(fd.segments(inputs)) == 3
        held_then_checked(fd, inputs)


def test_a_call_on_a_given_stream_allocates_on_that_stream() -> None:
    """A grid reduction's partials live in a scratch buffer freed when the call returns. On a
    given stream still held back, allocating that buffer on the current stream let the next
    allocation there reuse it (and overwrite it) before the kernel ran."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        fd.add_output(fd.ops.sum(x, [1]))
    x = randn(4, 1 << 24, seed=1)
    fd.execute([x])
    assert workspace_bytes(fd._executor_cache.last_compiled.launches), "not a grid reduction"
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    for seed in range(3):
        x = randn(4, 1 << 24, seed=seed)
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            torch.cuda._sleep(HOLD)
        (out,) = fd.execute([x], stream=side.cuda_stream)
        # The current stream runs on meanwhile, allocating and writing.
        scratch = [torch.full((1 << 20,), 7.0, device="cuda") for _ in range(8)]
        side.synchronize()
        del scratch
        torch.testing.assert_close(out, x.double().sum(1).float(), rtol=1e-4, atol=1e-2)


def test_poison_shows_an_output_no_kernel_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    """KFUSE_POISON=1 and a planted bug: the kernel's stores of its second output removed."""
    from kfuse.runtime.backends.cuda import CUDA_BACKEND

    compile_kernel = CUDA_BACKEND.compile

    def without_second_output(source: str, name: str, *args: object) -> object:
        planted = re.sub(r"kf::store(_vec<\d+>)?\(out1, [^;]*;", "", source)
        assert planted != source
        return compile_kernel(planted, name, *args)

    monkeypatch.setenv("KFUSE_POISON", "1")
    monkeypatch.setattr(CUDA_BACKEND, "compile", without_second_output)
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1])
        fd.add_output(fd.ops.exp(x))
        fd.add_output(fd.ops.neg(x))
    for call in range(3):  # the checked path, then the host fast path
        inputs = [randn(1000, seed=call)]
        out = fd.execute(inputs)
        assert (out[1].view(torch.uint8) == POISON_BYTE).all(), f"call {call + 1}"
        with pytest.raises(AssertionError, match="output 1"):
            assert_outputs_close(fd, out, evaluate(fd.fusion, inputs), inputs)


def test_an_output_broadcasting_an_empty_reduced_axis_is_written() -> None:
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1, -1])
        b = fd.define_tensor(shape=[-1, 1, 1])
        fd.add_output(fd.ops.max(a, [0, 1]))
        fd.add_output(fd.ops.exp(b))
    inputs = [randn(1023, 0, 6, seed=0), randn(1023, 1, 1, seed=1)]
    held_then_checked(fd, inputs)


@pytest.mark.parametrize("strides", [(2,), (0,)])
def test_poisoned_outputs_like_a_size_one_input_of_any_stride(
    monkeypatch: pytest.MonkeyPatch, strides: tuple
) -> None:
    """The host fast path allocates an output with torch.empty_like of a same-shape contiguous
    input, which keeps a size-1 axis's stride; KFUSE_POISON must still fill it (the campaign's
    commonest failure: 'self.stride(-1) must be 1 to view Float as Byte')."""
    monkeypatch.setenv("KFUSE_POISON", "1")
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1])
        fd.add_output(fd.ops.exp(x))
    for call in range(3):  # the checked path, then the host fast path
        inputs = [torch.as_strided(randn(2, seed=call), (1,), strides)]
        (out,) = fd.execute(inputs)
        torch.testing.assert_close(out, inputs[0].exp())

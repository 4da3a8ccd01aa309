"""execute's device=: nvFuser's spellings, agreement with the inputs, and fusions without
tensor inputs placed on the device asked for."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from gpu_support import cuda_torch
from kfuse import DataType, FusionDefinition
from kfuse.errors import InputError
from kfuse.runtime.device_arg import device_index


def _causal_mask(with_fill: bool = False) -> FusionDefinition:
    """A [rows, cols] causal mask (row index >= column index) from two iotas sized by Int
    scalar inputs: a fusion whose outputs depend on no input tensor."""
    with FusionDefinition() as fd:
        n_rows = fd.define_scalar(dtype=DataType.Int)
        n_cols = fd.define_scalar(dtype=DataType.Int)
        rows = fd.ops.broadcast(fd.ops.iota(n_rows, dtype=DataType.Int), [False, True])
        cols = fd.ops.broadcast(fd.ops.iota(n_cols, dtype=DataType.Int), [True, False])
        fd.add_output(fd.ops.ge(rows, cols))
        if with_fill:
            fd.add_output(fd.ops.full([n_rows, n_cols], 0.5, DataType.BFloat16))
    return fd


@pytest.mark.parametrize(
    ("device", "index"),
    [(None, None), (0, 0), (3, 3), ("cuda:2", 2), ("cuda:0", 0), (" cuda:1 ", 1)],
)
def test_device_spellings_name_a_cuda_ordinal(device: Any, index: int | None) -> None:
    assert device_index(device) == index


def test_a_torch_device_names_its_ordinal() -> None:
    torch = pytest.importorskip("torch")
    assert device_index(torch.device("cuda", 1)) == 1
    assert device_index(torch.device("cuda:0")) == 0


@pytest.mark.parametrize(
    ("device", "message"),
    [
        (-1, "index >= 0"),
        ("cpu", "must name a CUDA device"),
        ("cuda:x", "must name a CUDA device"),
        (1.0, "got float"),
        (True, "got bool"),
        ([0], "got list"),
    ],
)
def test_a_device_that_is_not_cuda_is_an_input_error(device: Any, message: str) -> None:
    with pytest.raises(InputError, match=message):
        device_index(device)


def test_a_cpu_torch_device_is_an_input_error() -> None:
    torch = pytest.importorskip("torch")
    with pytest.raises(InputError, match="torch.device 'cpu'"):
        device_index(torch.device("cpu"))


def test_without_device_a_fusion_without_tensor_inputs_runs_on_the_emulator() -> None:
    (mask,) = _causal_mask().execute([5, 7])
    assert isinstance(mask, np.ndarray)
    np.testing.assert_array_equal(mask, np.tril(np.ones((5, 7), dtype=bool)))


def test_device_with_host_inputs_is_an_input_error() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], dtype=DataType.Float)
        fd.add_output(fd.ops.neg(x))
    with pytest.raises(InputError, match="host"):
        fd.execute([np.ones(3, np.float32)], device="cuda:0")
    with pytest.raises(InputError, match="must name a CUDA device"):
        fd.execute([np.ones(3, np.float32)], device="gpu")


def test_a_device_the_machine_lacks_is_an_input_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from kfuse import _C

    monkeypatch.setattr(_C, "device_count", lambda: 1)
    with pytest.raises(InputError, match="device=1 was asked for, but this machine has 1 CUDA"):
        _causal_mask().execute([2, 2], device="cuda:1")


def test_device_under_a_forced_emulator_is_an_input_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KFUSE_DEVICE", "emulator")
    with pytest.raises(InputError, match="KFUSE_DEVICE=emulator"):
        _causal_mask().execute([2, 2], device=0)


@pytest.mark.gpu
def test_a_causal_mask_without_inputs_is_made_on_the_device_asked_for() -> None:
    torch = cuda_torch()
    fd = _causal_mask(with_fill=True)
    for device in (0, "cuda:0", torch.device("cuda", 0), torch.device("cuda")):
        mask, half = fd.execute([300, 257], device=device)
        assert isinstance(mask, torch.Tensor) and mask.device == torch.device("cuda", 0)
        assert mask.dtype == torch.bool
        assert torch.equal(mask, torch.ones(300, 257, dtype=torch.bool, device="cuda").tril())
        assert half.dtype == torch.bfloat16 and bool((half == 0.5).all())
    assert fd.last_program() is not None and fd.last_program().launches  # type: ignore[union-attr]


@pytest.mark.gpu
def test_a_fusion_without_inputs_runs_on_the_stream_given() -> None:
    torch = cuda_torch()
    fd = _causal_mask()
    side = torch.cuda.Stream()
    (mask,) = fd.execute([64, 64], device=0, stream=side.cuda_stream)
    side.synchronize()
    assert torch.equal(mask, torch.ones(64, 64, dtype=torch.bool, device="cuda").tril())


@pytest.mark.gpu
def test_device_must_agree_with_gpu_inputs() -> None:
    torch = cuda_torch()
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], dtype=DataType.Float)
        fd.add_output(fd.ops.neg(x))
    x = torch.ones(3, device="cuda:0")
    (out,) = fd.execute([x], device=torch.device("cuda:0"))
    assert torch.equal(out, -x)
    with pytest.raises(InputError, match="inputs are on cuda:0"):
        fd.execute([x], device="cuda:1")


@pytest.mark.gpu
def test_stateful_random_numbers_without_inputs_follow_torch_generator() -> None:
    torch = cuda_torch()
    with FusionDefinition() as stateful:
        n = stateful.define_scalar(dtype=DataType.Int)
        stateful.add_output(stateful.ops.uniform(0.0, 1.0, [n], dtype=DataType.Float))
    with FusionDefinition() as stateless:
        n = stateless.define_scalar(dtype=DataType.Int)
        seed = stateless.define_scalar(dtype=DataType.Int)
        offset = stateless.define_scalar(dtype=DataType.Int)
        stateless.add_output(
            stateless.ops.uniform(
                0.0, 1.0, [n], rng_seed=seed, rng_offset=offset, dtype=DataType.Float
            )
        )
    torch.manual_seed(123)
    drawn = [stateful.execute([1000], device=0)[0] for _ in range(2)]
    for i, values in enumerate(drawn):
        assert values.device == torch.device("cuda", 0)
        (want,) = stateless.execute([1000, 123, i], device="cuda:0")
        assert torch.equal(values, want)


@pytest.mark.gpu
def test_device_naming_the_inputs_device_keeps_the_fast_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Thunder passes device= on every call: a cached layout must still skip the checks.
    torch = cuda_torch()
    import kfuse.engine.executor as executor

    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        fd.add_output(fd.ops.mul(x, 2.0))
    x = torch.randn(300, 257, device="cuda")
    for _ in range(2):  # compiles, then builds the layout's FastCall
        fd.execute([x], device=torch.device("cuda:0"))

    def no_checked_path(*args: object, **kw: object) -> None:
        raise AssertionError("the checked path ran for a cached layout")

    monkeypatch.setattr(executor, "build_runtime_info", no_checked_path)
    (out,) = fd.execute([x], device="cuda:0")
    assert torch.equal(out, x * 2)
    monkeypatch.undo()
    with pytest.raises(InputError, match="inputs are on cuda:0"):
        fd.execute([x], device=1)

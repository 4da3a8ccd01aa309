"""The host fast path: cached GPU calls skip validation and shape inference, and stay right."""

from __future__ import annotations

import numpy as np
import pytest

from kfuse import FusionDefinition
from kfuse.fast_path import layout_key


def add_mul() -> FusionDefinition:
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1])
        b = fd.define_tensor(shape=[-1, -1])
        fd.add_output(fd.ops.mul(fd.ops.add(a, b), 2.0))
    return fd


def test_host_arrays_never_take_the_fast_path() -> None:
    assert layout_key([np.zeros(3, np.float32)]) is None


@pytest.mark.gpu
def test_cached_torch_call_skips_validation_and_is_correct(monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    torch = pytest.importorskip("torch")
    import kfuse.executor as executor

    fd = add_mul()
    a, b = torch.randn(300, 257, device="cuda"), torch.randn(300, 257, device="cuda")
    fd.execute([a, b])

    def no_slow_path(*args: object, **kw: object) -> None:
        raise AssertionError("the slow path ran for a cached layout")

    monkeypatch.setattr(executor, "build_runtime_info", no_slow_path)
    a2, b2 = torch.randn_like(a), torch.randn_like(b)  # same layout, new data
    (out,) = fd.execute([a2, b2])
    torch.testing.assert_close(out, (a2 + b2) * 2)
    monkeypatch.undo()
    # A different layout (a transposed view) is a miss that goes through the checks again.
    (out_t,) = fd.execute([a2.t().contiguous().t(), b2])
    torch.testing.assert_close(out_t, (a2 + b2) * 2)


@pytest.mark.gpu
def test_cached_cupy_call_is_correct_on_a_user_stream() -> None:
    cupy = pytest.importorskip("cupy")
    fd = add_mul()
    a = cupy.random.standard_normal((64, 1000), dtype=cupy.float32)
    b = cupy.random.standard_normal((64, 1000), dtype=cupy.float32)
    stream = cupy.cuda.Stream(non_blocking=True)
    cupy.cuda.Device().synchronize()  # the inputs were written on another stream
    for _ in range(3):  # the first call compiles, the others are fast-path hits
        (out,) = fd.execute([a, b], stream=stream.ptr)
    stream.synchronize()
    cupy.testing.assert_allclose(out, (a + b) * 2, rtol=1e-6)

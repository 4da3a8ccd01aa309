"""What kfuse cannot do under CUDA graph capture is a clear InputError, raised before it would
read device data on the host (kfuse.runtime.capture). On the host emulator, with the capture
question answered "yes" (monkeypatched): the GPU tests in tests/test_cuda_graphs.py ask
torch and CuPy for real.
"""

from __future__ import annotations

import numpy as np
import pytest

from kfuse import FusionDefinition
from kfuse.errors import InputError
from kfuse.runtime import capture
from small_fusions import exp_of_a_scatter, rows_of, rows_of_a_product


@pytest.fixture
def capturing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(capture, "capturing", lambda framework, device: True)


X = np.arange(24, dtype=np.float32).reshape(6, 4) / 24
INDEX = np.array([5, 0, 2], np.int64)


def test_the_capture_question_is_no_for_host_arrays() -> None:
    assert capture.capturing("numpy", -1) is False
    assert capture.capturing("torch", -1) is False


def test_a_library_index_select_is_refused_under_capture(capturing: None) -> None:
    fd = rows_of_a_product()
    with pytest.raises(InputError, match=r"under CUDA graph capture: index_select to T\d+ runs"):
        fd.execute([X, INDEX])


def test_a_library_index_select_runs_outside_capture() -> None:
    (out,) = rows_of_a_product().execute([X, INDEX])
    np.testing.assert_allclose(out, (X @ X.T)[INDEX], rtol=1e-6)


def test_indexed_read_flags_are_not_made_under_capture(capturing: None) -> None:
    with pytest.raises(InputError, match="Run the fusion once on this device before capturing"):
        rows_of().execute([X, INDEX])


def test_a_fusion_run_once_before_capture_keeps_its_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    fd = rows_of()
    fd.execute([X, INDEX])  # the warm-up run makes the flags
    monkeypatch.setattr(capture, "capturing", lambda framework, device: True)
    (out,) = fd.execute([X, np.array([1, 1, 3], np.int64)])
    np.testing.assert_allclose(out, np.exp(X[[1, 1, 3]]), rtol=1e-6)


def test_stateful_random_numbers_of_kfuses_generator_are_refused(capturing: None) -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1])
        fd.add_output(fd.ops.add(x, fd.ops.uniform(0.0, 1.0, fd.ops.shape(x))))
    with pytest.raises(InputError, match="rng_seed and rng_offset"):
        fd.execute([np.zeros(8, np.float32)])


def test_a_replayed_library_scatter_is_refused_under_capture(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A segmented call replayed from its plan (kfuse.engine.segmented_replay) is refused as
    a checked one is where a segment checks positions on the host (scatter), and runs after."""
    from kfuse.engine.program import SegmentedProgram

    fd = exp_of_a_scatter()
    rng = np.random.default_rng(11)
    t = rng.standard_normal((20, 8)).astype(np.float32) / 4
    index = np.array([[4, 19, 0, 7, 3, 11, 2, 5]])
    src = rng.standard_normal((1, 8)).astype(np.float32) / 4
    for _ in range(3):  # compiles; plans; replays
        fd.execute([t, index, src])
    assert isinstance(fd.last_program(), SegmentedProgram)
    assert fd._executor().replays.hits == 1
    monkeypatch.setattr(capture, "capturing", lambda framework, device: True)
    with pytest.raises(InputError, match="under CUDA graph capture: scatter"):
        fd.execute([t, index, src])
    monkeypatch.undo()
    (out,) = fd.execute([t, index, src])
    want = t.copy()
    want[index[0], np.arange(8)] = src[0]
    np.testing.assert_allclose(out, np.exp(want * 0.5), rtol=1e-6)

"""Several Python threads calling the same FusionDefinitions at once (a data loader's threads,
nn.DataParallel's one thread a GPU): every call gets its own inputs' results, whether it
compiles, finds its Program cached, or (on a GPU) takes the host fast path that another
thread's calls built."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest

from gpu_support import requires_gpu
from kfuse import DataType, FusionDefinition
from kfuse.reference import evaluate
from kfuse.testing import assert_outputs_close

THREADS = 4
SHAPES = ((3, 70), (17, 5), (1, 129))


def _softmax() -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        fd.add_output(fd.ops.softmax(x, 1))
    return fd


def _layer_norm() -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        w = fd.define_tensor(shape=[-1], dtype=DataType.Float)
        fd.add_output(fd.ops.layer_norm(x, w, None, normalized_ndim=1))
    return fd


def _transpose_and_sum() -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        y = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        fd.add_output(fd.ops.permute(fd.ops.mul(fd.ops.exp(x), y), dims=[1, 0]))
        fd.add_output(fd.ops.sum(x, [0]))
    return fd


def _inputs(which: int, shape: tuple[int, int], rng: Any, transposed: bool) -> list[np.ndarray]:
    x = rng.standard_normal(shape).astype(np.float32)
    if transposed:
        x = np.asfortranarray(x)
    other = (rng.standard_normal(shape[1]) if which == 1 else rng.standard_normal(shape)).astype(
        np.float32
    )
    return [x] if which == 0 else [x, other]


def _run_threads(to_device: Any, calls: int) -> int:
    definitions = [_softmax(), _layer_norm(), _transpose_and_sum()]

    def thread(seed: int) -> int:
        # Inputs of one of SHAPES in either order: the threads' signatures overlap, and each
        # repeats.
        rng = np.random.default_rng(seed)
        checked = 0
        for _ in range(calls):
            which = int(rng.integers(0, len(definitions)))
            shape = SHAPES[int(rng.integers(0, len(SHAPES)))]
            host = _inputs(which, shape, rng, transposed=bool(rng.integers(0, 2)))
            fd = definitions[which]
            outputs = fd.execute([to_device(a) for a in host])
            expected = evaluate(fd.fusion, host)
            assert_outputs_close(fd, [np.asarray(_to_host(o)) for o in outputs], expected, host)
            checked += 1
        return checked

    with ThreadPoolExecutor(THREADS) as pool:
        return sum(pool.map(thread, range(THREADS * 2)))


def _to_host(a: Any) -> Any:
    return a.cpu().numpy() if hasattr(a, "cpu") else a


def test_threads_share_definitions_on_the_emulator() -> None:
    assert _run_threads(lambda a: a, calls=10) == THREADS * 2 * 10


@pytest.mark.gpu
@requires_gpu
def test_threads_share_definitions_on_the_gpu() -> None:
    torch = pytest.importorskip("torch")

    def to_device(a: np.ndarray) -> Any:
        # Keeps the layout (a transposed input stays transposed on the GPU).
        t = torch.from_numpy(np.ascontiguousarray(a.T) if not a.flags.c_contiguous else a)
        t = t.cuda()
        return t.T if not a.flags.c_contiguous else t

    # Each thread repeats its signatures: the second call of a layout builds a fast call,
    # later ones (of any thread) take it.
    assert _run_threads(to_device, calls=40) == THREADS * 2 * 40
    torch.cuda.synchronize()

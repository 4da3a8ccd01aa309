"""Every Python example of the README and of docs/ runs, so that none goes stale.

The examples of one file run in order in one namespace, as a reader would type them. Blocks
fenced as ``python`` run everywhere: without a GPU on the host emulator, with the examples'
GPU arrays made host arrays (torch's ``device="cuda"`` becomes ``"cpu"``, and CuPy is NumPy,
whose API CuPy follows). Blocks fenced as ``python gpu`` (streams, the profiler, hand-written
kernels) need a GPU: they run, with the others as written, in the ``gpu`` variant of the
test, on a GPU machine. Other fences (bash, text) are not run.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpu_support import requires_gpu

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs" / "guides").glob("*.md"))]
FENCE = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```", re.M | re.S)

# What makes a GPU example a host one (the emulator takes host arrays).
ON_THE_HOST = [
    (re.compile(r"""device=(["'])cuda\1"""), 'device="cpu"'),
    (re.compile(r"^import cupy$", re.M), "import numpy as cupy"),
]


def python_blocks(path: Path) -> list[tuple[int, str, bool]]:
    """(line, code, needs a GPU) of each Python example of `path`, in order."""
    text = path.read_text()
    blocks = []
    for m in FENCE.finditer(text):
        if m.group(1) != "python":
            continue
        line = text.count("\n", 0, m.start(3)) + 1
        blocks.append((line, m.group(3), "gpu" in m.group(2).split()))
    return blocks


def run_examples(path: Path, on_gpu: bool) -> None:
    namespace: dict = {"__name__": f"doc:{path.name}"}
    for line, code, needs_gpu in python_blocks(path):
        if needs_gpu and not on_gpu:
            continue
        if not on_gpu:
            for pattern, replacement in ON_THE_HOST:
                code = pattern.sub(replacement, code)
        # Compiled with the document's line numbers, so a traceback points into the .md.
        compiled = compile("\n" * (line - 1) + code, str(path), "exec")
        exec(compiled, namespace)  # noqa: S102 - the examples are the point


def test_the_documents_have_examples() -> None:
    """The harness finds them (a fence it misreads would silently test nothing)."""
    assert len(DOCUMENTS) >= 6, DOCUMENTS
    for path in DOCUMENTS:
        assert python_blocks(path), f"{path.name} has no Python example"


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: p.name)
def test_examples_run_on_the_host(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    monkeypatch.setenv("KFUSE_DEVICE", "emulator")
    monkeypatch.chdir(path.parent)
    run_examples(path, on_gpu=False)


@pytest.mark.gpu
@requires_gpu
@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: p.name)
def test_examples_run_on_the_gpu(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("cupy")
    monkeypatch.chdir(path.parent)
    run_examples(path, on_gpu=True)

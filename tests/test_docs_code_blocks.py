"""Every ```python block of the README and of docs/ (the documentation site's pages) runs, so
that no example a user copies goes stale.

A file's blocks run in order in one namespace, as a reader would type them. Without a GPU
they run on the host emulator, with the examples' GPU arrays made host arrays (torch's
``device="cuda"`` becomes ``"cpu"``, and CuPy is NumPy, whose API CuPy follows). A block that
needs a GPU (streams, the profiler, CuPy's own API) is preceded by the line
``<!-- test: gpu -->`` (an HTML comment, so the site does not show it; a fence written
``python gpu`` means the same): it runs, with the file's other blocks as written, only in the
``gpu`` variant of the test, on a GPU machine. Other fences (bash, text) are not run.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpu_support import requires_gpu

ROOT = Path(__file__).resolve().parent.parent
GPU_MARK = "<!-- test: gpu -->"
FENCE = re.compile(r"^```(\w*)([^\n]*)\n(.*?)^```[ \t]*$", re.M | re.S)

# What makes a GPU example a host one (the emulator takes host arrays).
ON_THE_HOST = [
    (re.compile(r"""device=(["'])cuda\1"""), 'device="cpu"'),
    (re.compile(r"^import cupy$", re.M), "import numpy as cupy"),
]


def documents() -> list[Path]:
    """The README and every page under docs/, in a fixed order."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def python_blocks(text: str) -> list[tuple[int, str, bool]]:
    """(first line, code, needs a GPU) of each ```python block of a Markdown text, in order."""
    blocks = []
    for m in FENCE.finditer(text):
        if m.group(1) != "python":
            continue
        before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1].strip()
        needs_gpu = before == GPU_MARK or "gpu" in m.group(2).split()
        line = text.count("\n", 0, m.start(3)) + 1
        blocks.append((line, m.group(3), needs_gpu))
    return blocks


def run_blocks(path: Path, on_gpu: bool) -> int:
    """Runs the file's blocks (the GPU ones only `on_gpu`); returns how many ran. What an
    example installs process-wide (kfuse.nvfuser_direct.install() aliases the `nvfuser`
    modules) is undone after it, so that later tests in the process see a clean one."""
    from kfuse import nvfuser_direct

    try:
        return _run_blocks(path, on_gpu)
    finally:
        nvfuser_direct.uninstall()


def _run_blocks(path: Path, on_gpu: bool) -> int:
    namespace: dict = {"__name__": f"doc:{path.name}"}
    ran = 0
    for line, code, needs_gpu in python_blocks(path.read_text()):
        if needs_gpu and not on_gpu:
            continue
        if not on_gpu:
            for pattern, replacement in ON_THE_HOST:
                code = pattern.sub(replacement, code)
        # Compiled with the document's line numbers, so a traceback points into the .md.
        compiled = compile("\n" * (line - 1) + code, str(path), "exec")
        exec(compiled, namespace)  # noqa: S102 - the examples are the point
        ran += 1
    return ran


WITH_BLOCKS = [p for p in documents() if python_blocks(p.read_text())]


def _id(path: Path) -> str:
    return str(path.relative_to(ROOT))


def test_the_harness_finds_the_blocks_and_their_marks() -> None:
    """A fence it misread would silently test nothing."""
    text = "\n".join(
        [
            "```python",
            "a = 1",
            "```",
            GPU_MARK,
            "```python",
            "b = 2",
            "```",
            "```python gpu",
            "c = 3",
            "```",
            "```bash",
            "ls",
            "```",
        ]
    )
    assert python_blocks(text) == [
        (2, "a = 1\n", False),
        (6, "b = 2\n", True),
        (9, "c = 3\n", True),
    ]
    names = {_id(p) for p in WITH_BLOCKS}
    assert {"README.md", "docs/cupy.md", "docs/guides/write-a-fusion.md"} <= names, names


@pytest.mark.parametrize("path", WITH_BLOCKS, ids=_id)
def test_blocks_run_on_the_host(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    monkeypatch.setenv("KFUSE_DEVICE", "emulator")
    monkeypatch.chdir(path.parent)
    run_blocks(path, on_gpu=False)


@pytest.mark.gpu
@requires_gpu
@pytest.mark.parametrize("path", WITH_BLOCKS, ids=_id)
def test_blocks_run_on_the_gpu(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("cupy")
    monkeypatch.chdir(path.parent)
    run_blocks(path, on_gpu=True)

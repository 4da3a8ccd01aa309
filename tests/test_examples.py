"""Every script of examples/ runs as a user would run it (`python examples/x.py`, in a
process of its own, from any folder) and says that its result matches the framework's own
computation. The scripts check themselves and exit non-zero on a mismatch; one whose
framework or GPU is missing prints `skipped: <why>` and exits 0, which skips its test here
with that reason."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "examples").glob("*.py"))


def test_there_are_examples_for_numpy_torch_and_cupy() -> None:
    names = [p.name for p in EXAMPLES]
    for prefix in ("numpy_", "torch_", "cupy_"):
        assert any(n.startswith(prefix) for n in names), (prefix, names)


@pytest.mark.slow
@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.name)
def test_an_example_runs_and_matches(script: Path, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1, done.stdout
    if lines[0].startswith("skipped: "):
        pytest.skip(f"{script.name}: {lines[0].removeprefix('skipped: ')}")
    assert "matches" in lines[0], lines[0]

"""The repro scripts of wrong results that campaigns found (GPU ones and, where the emulator
alone met it, emulator ones), outside the project and in it
(tests/data/repros/<date>-<device>/, as `kfuse campaign` wrote them; a large input saved
again as float32 of the same values, compressed), replayed as their finders ran them: each
must print that kfuse matches the reference on every call, on the host emulator and on the
GPU."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

from gpu_support import requires_gpu
from kfuse.campaign.repro import replay

REPROS = sorted((Path(__file__).parent / "data" / "repros").glob("*/*.py"))


def _replayed(script: Path, device: str) -> int:
    """replay() of the script's fusion on its saved inputs, moved to `device`."""
    fd = runpy.run_path(str(script), run_name="repro")["fd"]
    return replay(fd, script.with_suffix(".npz"), ["--device", device])


def test_the_repros_are_there() -> None:
    assert len(REPROS) >= 3


@pytest.mark.parametrize("script", REPROS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_repro_passes_on_the_emulator(script: Path, capsys: pytest.CaptureFixture) -> None:
    assert _replayed(script, "cpu") == 0, capsys.readouterr().out


@pytest.mark.gpu
@requires_gpu
@pytest.mark.parametrize("script", REPROS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_repro_passes_on_the_gpu(script: Path, capsys: pytest.CaptureFixture) -> None:
    assert _replayed(script, "cuda") == 0, capsys.readouterr().out

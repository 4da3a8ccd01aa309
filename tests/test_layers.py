"""The package tree is the pipeline (tools/layers.py): no package imports one of a higher
layer or closes a cycle with another, and no module or function outgrows a reader."""

from __future__ import annotations

import functools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))

import layers  # noqa: E402


@functools.cache
def _package_report() -> layers.Report:
    """kfuse's own report, measured once for the tests that read it (3 s of parsing each)."""
    return layers.measure()


def test_no_import_climbs_a_layer_or_closes_a_cycle() -> None:
    report = _package_report()
    assert report.upward == []
    assert report.cycles == []


def test_the_pipeline_packages_import_in_layer_order() -> None:
    edges = _package_report().edges
    assert "engine" in edges["frontend"]
    assert "schedule" in edges["engine"]
    assert "codegen" in edges["schedule"]
    assert "runtime" in edges["codegen"]
    assert "ir" in edges["runtime"]
    assert not edges["runtime"] & {"codegen", "schedule", "engine", "frontend"}


def test_an_upward_import_is_reported(tmp_path: Path) -> None:
    package = tmp_path / "kfuse"
    (package / "runtime").mkdir(parents=True)
    (package / "engine").mkdir()
    (package / "__init__.py").write_text("")
    (package / "runtime" / "__init__.py").write_text("")
    (package / "engine" / "__init__.py").write_text("")
    (package / "runtime" / "launch.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from kfuse.engine import program\n"
        "from kfuse.engine.program import Program\n"
    )
    (package / "engine" / "program.py").write_text("from kfuse.runtime import launch\n")
    report = layers.measure(package)
    assert report.upward == ["kfuse.runtime.launch -> kfuse.engine.program (runtime -> engine)"]
    assert report.cycles == [["engine", "runtime"]]


def test_modules_and_functions_stay_short() -> None:
    report = _package_report()
    assert report.long_modules == []
    assert report.long_functions == []

"""kfuse's version is written once, as `kfuse.__version__`: the build reads it there, the
command line and the changelog show the same."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import kfuse

ROOT = Path(__file__).resolve().parent.parent


def test_the_build_reads_the_version_from_the_package() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()  # no tomllib before Python 3.11
    assert not re.search(r"^version\s*=", pyproject, re.M), "a second, static version"
    assert re.search(r'^dynamic = \["version"\]$', pyproject, re.M)
    assert 'metadata.version.provider = "scikit_build_core.metadata.regex"' in pyproject
    assert 'metadata.version.input = "src/kfuse/__init__.py"' in pyproject
    # The regex provider takes the first `__version__ = "..."` line.
    text = (ROOT / "src" / "kfuse" / "__init__.py").read_text()
    assert re.findall(r'^__version__ = "([^"]+)"$', text, re.M) == [kfuse.__version__]


def test_the_command_line_shows_the_version(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "kfuse", "--version"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.stdout.strip() == f"kfuse {kfuse.__version__}"


def test_the_changelog_has_an_entry_for_this_version() -> None:
    headings = re.findall(r"^## (\S+)", (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert headings and headings[0] == kfuse.__version__, headings

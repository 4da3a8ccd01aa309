"""A user's code type-checks under `mypy --strict` against kfuse as installed: the public
names are exported, fd.ops' methods have real signatures (kfuse.frontend.pointwise_ops.pyi
for the ops made from the table), so a misspelt op, a missing operand or a wrong keyword is
a mypy error. tests/user_typing/user_script.py must pass; user_mistakes.py must fail with
exactly the errors its comments name."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import kfuse

HERE = Path(__file__).resolve().parent / "user_typing"
USER_SCRIPT = HERE / "user_script.py"
MISTAKES = HERE / "user_mistakes.py"
ERROR = re.compile(r"^(?P<path>[^:]+):(?P<line>\d+): error: (?P<message>.*)  \[(?P<code>[\w-]+)\]$")


def _mypy_strict(tmp_path: Path, *scripts: Path) -> str:
    """mypy --strict's output for `scripts`, as a user's project sees kfuse: no kfuse
    config file, and errors inside kfuse itself not reported (as for an installed
    package, which the tests of a source checkout are not)."""
    env = dict(os.environ)
    package_root = Path(kfuse.__file__).resolve().parent.parent
    if "site-packages" not in package_root.parts:  # kfuse from a source tree (PYTHONPATH=src)
        env["MYPYPATH"] = str(package_root)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--config-file=",
            "--follow-imports=silent",
            "--no-pretty",
            "--cache-dir",
            str(tmp_path / "mypy-cache"),
            *map(str, scripts),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode in (0, 1), done.stdout + done.stderr  # 2: mypy itself failed
    return done.stdout


def _errors(output: str, script: Path) -> set[tuple[int, str]]:
    found = set()
    for line in output.splitlines():
        m = ERROR.match(line)
        if m and Path(m["path"]).name == script.name:
            found.add((int(m["line"]), m["code"]))
    return found


def _expected(script: Path) -> set[tuple[int, str]]:
    """The (line, code) pairs the script's `# mypy: <code>` comments name."""
    expected = set()
    for number, line in enumerate(script.read_text().splitlines(), 1):
        m = re.search(r"# mypy: ([\w-]+)", line)
        if m:
            expected.add((number, m[1]))
    return expected


@pytest.mark.slow
@pytest.mark.extended  # mypy --strict from a cold cache: half a minute of CPU
def test_user_code_type_checks_and_mistakes_do_not(tmp_path: Path) -> None:
    output = _mypy_strict(tmp_path, USER_SCRIPT, MISTAKES)
    assert _errors(output, USER_SCRIPT) == set(), output
    expected = _expected(MISTAKES)
    assert len(expected) == 14
    assert _errors(output, MISTAKES) == expected, output


@pytest.mark.slow
def test_the_user_script_runs() -> None:
    done = subprocess.run(
        [sys.executable, str(USER_SCRIPT)], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "caught: softmax:" in done.stdout and "Int (int64)" in done.stdout

"""`python -m kfuse demo | bench` from the command line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kfuse", *args], cwd=cwd, capture_output=True, text=True, timeout=600
    )


def test_demo_runs_and_checks_itself_without_a_gpu(tmp_path: Path) -> None:
    result = run("demo", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "matches the eager reference" in result.stdout
    assert "inner_persistent" in result.stdout


def test_bench_outside_a_checkout_says_where_to_run_it(tmp_path: Path) -> None:
    result = run("bench", cwd=tmp_path)
    assert result.returncode == 2
    assert "source checkout" in result.stderr


def test_bench_without_a_gpu_is_one_line_and_status_2() -> None:
    """From a checkout, on a machine whose CUDA driver cannot be loaded (forced here with
    KFUSE_CUDA_LIBRARY, so that the test means the same on a GPU machine)."""
    import os

    checkout = Path(__file__).resolve().parents[1]
    env = {**os.environ, "KFUSE_CUDA_LIBRARY": "/nonexistent/libcuda.so.1"}
    result = subprocess.run(
        [sys.executable, "-m", "kfuse", "bench", "--quick"],
        cwd=checkout,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert "needs an NVIDIA GPU" in result.stderr and "no NVIDIA driver" in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize(
    "args, says",
    [
        (["frobnicate"], "unknown command 'frobnicate'"),
        ([], "no command given"),
        (["info", "--bogus"], "unrecognized arguments"),
        (["demo", "extra"], "unrecognized arguments"),
    ],
)
def test_a_bad_command_line_is_one_line_and_status_2(
    tmp_path: Path, args: list[str], says: str
) -> None:
    result = run(*args, cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.count("\n") == 1 and says in result.stderr
    assert "Traceback" not in result.stderr


def test_help_lists_the_commands_and_each_has_its_own(tmp_path: Path) -> None:
    top = run("--help", cwd=tmp_path)
    assert top.returncode == 0
    for command in ("info", "demo", "bench", "campaign"):
        assert command in top.stdout
    info = run("info", "--help", cwd=tmp_path)
    assert info.returncode == 0 and "--json" in info.stdout
    assert "devices:" not in info.stdout, "--help must not run the report"


def test_info_as_json(tmp_path: Path) -> None:
    import json

    result = run("info", "--json", cwd=tmp_path)
    assert result.returncode == 0
    facts = json.loads(result.stdout)
    assert facts["versions"]["kfuse"] and set(facts) >= {"driver", "nvrtc", "devices"}
    assert isinstance(facts["devices"]["count"], int)


def test_the_benchmark_script_runs_as_a_script() -> None:
    """benchmarks/run.py is what `python -m kfuse bench` runs: it must act when executed."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "run.py"
    done = subprocess.run(
        [sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and "--quick" in done.stdout

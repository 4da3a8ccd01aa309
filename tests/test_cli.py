"""`python -m kfuse demo | bench` from the command line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kfuse", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=600)


def test_demo_runs_and_checks_itself_without_a_gpu(tmp_path: Path) -> None:
    result = run("demo", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "matches the eager reference" in result.stdout
    assert "inner_persistent" in result.stdout


def test_bench_outside_a_checkout_says_where_to_run_it(tmp_path: Path) -> None:
    result = run("bench", cwd=tmp_path)
    assert result.returncode == 2
    assert "source checkout" in result.stdout


def test_unknown_command_prints_usage(tmp_path: Path) -> None:
    result = run("frobnicate", cwd=tmp_path)
    assert result.returncode == 2 and "usage" in result.stdout


def test_the_benchmark_script_runs_as_a_script() -> None:
    """benchmarks/run.py is what `python -m kfuse bench` runs: it must act when executed."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "run.py"
    done = subprocess.run([sys.executable, str(script), "--help"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and "--quick" in done.stdout

"""Lightning Thunder with kfuse as its nvFuser (issue 58's acceptance), on a GPU: runs
tools/thunder_check.py --quick in a subprocess (install() must precede Thunder's import, which
this test process may not control) and asserts that every training step matched eager torch in
float64 and that its fusion regions ran on kfuse. Skipped where Thunder does not import (it is
not a kfuse dependency; tools/device_verify.sh's part "thunder" installs it from carried
wheels)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpu_support import requires_gpu

# One worker runs the module (tools/device_check.sh passes --dist loadgroup): its fixture is
# Thunder's whole quick check, which each worker holding one of these tests would run again.
pytestmark = [pytest.mark.gpu, requires_gpu, pytest.mark.xdist_group("thunder")]

ROOT = Path(__file__).resolve().parent.parent
IMPORT_PROBE = "import kfuse.nvfuser_direct as n; n.install(); import thunder"


def _child_env() -> dict[str, str]:
    # The child sees this process's PYTHONPATH (which may have brought Thunder), then the
    # folder of the kfuse this test imports, in case only sys.path edits found it.
    import kfuse

    kfuse_root = str(Path(kfuse.__file__).resolve().parent.parent)
    path = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": (path + os.pathsep if path else "") + kfuse_root}


@pytest.fixture(scope="module")
def quick_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    probe = subprocess.run(
        [sys.executable, "-c", IMPORT_PROBE],
        env=_child_env(),
        capture_output=True,
        text=True,
        timeout=180,
    )
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["no output"])[-1]
        pytest.skip(f"Lightning Thunder does not import here: {last}")
    out = tmp_path_factory.mktemp("thunder") / "quick.json"
    run = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "thunder_check.py"), "--quick", "--json", str(out)],
        env=_child_env(),
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert out.exists(), (
        f"thunder_check wrote no results:\n{run.stdout[-4000:]}\n{run.stderr[-4000:]}"
    )
    results: dict[str, Any] = json.loads(out.read_text())
    results["log"] = run.stdout[-4000:] + run.stderr[-2000:]
    return results


def test_every_step_matches_eager_float64(quick_results: dict[str, Any]) -> None:
    bad = [
        f"{r['step']} {r.get('dtype', '')}: {r.get('error') or r.get('max_rel_err') or r}"
        for r in quick_results["results"]
        if not r.get("matched")
    ]
    assert not bad, f"steps off eager torch: {bad}\n{quick_results['log']}"


def test_every_step_ran_on_kfuse(quick_results: dict[str, Any]) -> None:
    """Each step's forward (and backward) traces hold nvFusion regions, kfuse executed them,
    and no compute op other than matrix products and views fell back to torch."""
    bad = [
        f"{r['step']} {r.get('dtype', '')}: regions {r.get('forward_regions')}/"
        f"{r.get('backward_regions')}, kfuse executes {r.get('kfuse_executes')}, "
        f"fallbacks {r.get('fallbacks')}"
        for r in quick_results["results"]
        if not r.get("ran_on_kfuse")
    ]
    assert not bad, f"steps not on kfuse: {bad}\n{quick_results['log']}"


def test_dropout_keeps_nine_tenths_and_draws_anew(quick_results: dict[str, Any]) -> None:
    (drop,) = [r for r in quick_results["results"] if r["step"] == "dropout"]
    assert drop.get("matched"), drop
    assert drop["masks_differ"]
    assert abs(drop["keep_rate"] - 0.9) < 0.01

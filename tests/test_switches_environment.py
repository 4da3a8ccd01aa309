"""KFUSE_SWITCHES: kfuse.switches set from the environment at import (a campaign's worker
processes and a tool in a fresh process take the path asked for), refused by name where
malformed, and recorded in a campaign's repro scripts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kfuse import switches
from kfuse.errors import InputError
from kfuse.knobs import switch_settings


def _python(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=120,
    )


def test_the_variable_is_parsed_into_names_and_values() -> None:
    settings = switch_settings({"KFUSE_SWITCHES": " OUTER_CLUSTERS=1, FULL_SLOTS=off ,"})
    assert settings == (("OUTER_CLUSTERS", True), ("FULL_SLOTS", False))
    assert switch_settings({}) == ()
    for bad in ("OUTER_CLUSTERS", "OUTER_CLUSTERS=2", "=1"):
        with pytest.raises(InputError, match="is not NAME=1 or NAME=0"):
            switch_settings({"KFUSE_SWITCHES": bad})


@pytest.mark.slow
def test_a_fresh_process_takes_the_switches_and_refuses_unknown_names() -> None:
    done = _python(
        "from kfuse import switches; print(switches.OUTER_CLUSTERS, switches.changed())",
        KFUSE_SWITCHES="OUTER_CLUSTERS=1",
    )
    assert done.stdout.split("\n")[0] == "True {'OUTER_CLUSTERS': True}", done.stderr
    done = _python("import kfuse", KFUSE_SWITCHES="OUTER_CLUSTER=1")
    assert done.returncode != 0
    assert "names 'OUTER_CLUSTER', which is no switch" in done.stderr
    assert "OUTER_CLUSTERS" in done.stderr  # the message lists the switches there are


def test_changed_lists_only_what_differs_from_the_code(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "OUTER_CLUSTERS" not in switches.changed()
    monkeypatch.setattr(switches, "OUTER_CLUSTERS", not switches.OUTER_CLUSTERS)
    assert switches.changed()["OUTER_CLUSTERS"] == switches.OUTER_CLUSTERS


def test_repro_scripts_set_the_switches_the_campaign_ran_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kfuse import FusionDefinition
    from kfuse.campaign import repro
    from kfuse.campaign.property import Example

    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1])
        fd.add_output(fd.ops.neg(t))
    example = Example("pointwise", fd, [np.ones(3, np.float32)], False)
    plain = repro.write(tmp_path, "plain", example, "mismatch", "m", "cmd", "w").read_text()
    assert "switches" not in plain
    monkeypatch.setattr(switches, "OUTER_CLUSTERS", not switches.OUTER_CLUSTERS)
    script = repro.write(tmp_path, "set", example, "mismatch", "m", "cmd", "w").read_text()
    assert f"switches.OUTER_CLUSTERS = {switches.OUTER_CLUSTERS!r}" in script
    compile(script, "set.py", "exec")  # still a script

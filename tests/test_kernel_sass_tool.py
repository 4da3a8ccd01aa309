"""tools/kernel_sass.py: SASS opcodes counted from nvdisasm's lines, and a model case's kernels
compiled as the backend compiles them and reported with their registers (NVRTC and nvdisasm
from the test wheels; no GPU)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from test_dump_binaries import nvrtc_and_nvdisasm_or_skip
from tools_support import TOOLS, load_tool

TOOL = TOOLS / "kernel_sass.py"

SASS = """
        /*0250*/                   BSSY B0, `(.L_x_0) ;
        /*0260*/              @!P3 BRA `(.L_x_5) ;
        /*0270*/                   LDG.E.128 R16, desc[UR8][R44.64] ;
        /*0280*/               @P0 LDG.E.U16 R3, desc[UR8][R2.64] ;
        /*0290*/              @!UP1 FADD R52, R52, R11 ;
.L_x_5:
        /*02a0*/                   BSYNC B0 ;
"""


def _tool() -> object:
    return load_tool("kernel_sass.py")


def test_opcodes_are_counted_without_predicates_and_modifiers() -> None:
    counts = _tool().opcode_counts(SASS)  # type: ignore[attr-defined]
    assert counts == {"BSSY": 1, "BRA": 1, "LDG": 2, "FADD": 1, "BSYNC": 1}


@pytest.mark.extended  # the tool's process, NVRTC and nvdisasm: CI's extended step
def test_a_model_case_reports_its_kernels_registers_and_opcodes(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    nvrtc_and_nvdisasm_or_skip()
    run = subprocess.run(
        [sys.executable, str(TOOL), "rmsnorm_fwd:256x1024", "--top", "3", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    lines = run.stdout.splitlines()
    assert lines[0].startswith("## rmsnorm_fwd:256x1024 bfloat16 on h200 (sm_90)")
    kernel = next(k for k, line in enumerate(lines) if "[inner_persistent]" in line)
    name = lines[kernel].split()[0]
    as_is, opcodes = lines[kernel + 1], lines[kernel + 2]
    assert as_is.strip().startswith("as is: __launch_bounds__(")
    assert "registers " in as_is and "instructions" in as_is
    assert len(opcodes.split()) == 6  # three opcodes and their counts
    # The executor's fusion: pow(x, 2) canonicalized to x * x, no powf left in the kernel.
    source = (tmp_path / f"{name}.cu").read_text()
    assert source.startswith("// kfuse device runtime") and "kf::pow(" not in source
    assert "LDG" in (tmp_path / f"{name}.sass").read_text()

"""Persistent norm kernels keep their held rows in registers without spilling. A dropout +
RMS norm forward held 40 words of row values a thread under a 64-register launch bound; its
sm_90 SASS had 154 local-memory loads and it ran at 18% of copy bandwidth on an H200 (the RMS
norm alone: 95%). The kernels of these model fusions, compiled by NVRTC and disassembled here
without a GPU, must have no local loads or stores. The same for outer_persistent: a
channels-last instance norm (a Welford of 8 columns a thread) got 1024 threads a block and
spilled 67 values; it is checked at the longest columns outer_persistent still holds."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from kfuse import dump
from kfuse.dtypes import DataType
from test_dump_binaries import compile_as_for_a_gpu, nvrtc_or_skip

torch = pytest.importorskip("torch")

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

from models import registry  # noqa: E402

CASES = {c.name: c for c in registry.CASES}
# Rows of 4096 (the sweeps' middle): what the heuristics hold does not depend on the row count;
# images of 32 x 64: columns of 2048, the longest a block holds a whole sector wide (the
# suite's 56 x 56 are segmented), fewer of them than the suite's 64.
ROWS = (512, 4096)
IMAGES = (8, 256, 32, 64)


@pytest.mark.parametrize(
    "name, shape",
    [
        ("rmsnorm_fwd", ROWS),
        ("dropout_rmsnorm_fwd", ROWS),
        ("layernorm_fwd", ROWS),
        ("softmax_bwd_dim1", ROWS),
        ("instancenorm_fwd_nhwc", IMAGES),
    ],
)
def test_held_rows_do_not_spill(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, shape: tuple[int, ...]
) -> None:
    nvrtc_or_skip()
    if dump.find_disassembler()[0] is None:
        pytest.skip("needs nvdisasm (pip install nvidia-cuda-nvdisasm: kfuse[test] has it)")
    case = CASES[name]
    fd = case.define(DataType.BFloat16)
    inputs = case.make_inputs(torch, shape, torch.bfloat16, "cpu")
    compile_as_for_a_gpu(monkeypatch, "sass", tmp_path, fd, inputs)
    (sass,) = tmp_path.rglob("*.sass")
    text = sass.read_text()
    assert "EXIT" in text  # a real disassembly, not a message
    local = re.findall(r"\b(?:LDL|STL)\b", text)
    assert not local, f"{name}: {len(local)} local-memory accesses (spills) in {sass.name}"

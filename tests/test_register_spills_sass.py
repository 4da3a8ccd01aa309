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

from kfuse import FusionDefinition
from kfuse.dtypes import DataType
from test_dump_binaries import compile_as_for_a_gpu, nvrtc_and_nvdisasm_or_skip

torch = pytest.importorskip("torch")
# Each case compiles a model kernel with NVRTC and reads its SASS (seconds each): a check of
# the kernels' speed, not of their results, so CI's extended step runs it.
pytestmark = pytest.mark.extended

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
        # Rows of 16384 that are exactly their 512 threads' slots: without the row-end tests
        # ptxas kept both held inputs as floats and spilled; the tests are its spill fallback.
        ("softmax_bwd_dim1", (4096, 16384)),
        ("instancenorm_fwd_nhwc", IMAGES),
        # Rows held in shared memory, 256 threads each, under a 64-register bound
        # (column_partials.SMEM_HELD_REGISTER_TARGET).
        ("dropout_rmsnorm_bwd", ROWS),
        ("dropout_layernorm_bwd", ROWS),
        # Rows held in registers under the 3-blocks-of-256 bound (column_partials).
        ("rmsnorm_bwd", ROWS),
        ("layernorm_bwd", ROWS),
    ],
)
def test_held_rows_do_not_spill(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, shape: tuple[int, ...]
) -> None:
    sass_name, text = _sass(tmp_path, monkeypatch, name, shape, kernel="kfuse_")
    if name.endswith("bwd"):  # the inner_outer_persistent kernel, not a finalize
        assert sass_name.startswith("kfuse_persistent")
    local = re.findall(r"\b(?:LDL|STL)\b", text)
    assert not local, f"{name}: {len(local)} local-memory accesses (spills) in {sass_name}"


@pytest.mark.parametrize(
    "name", ["rmsnorm_fwd", "layernorm_fwd", "softmax_bwd_dim1", "rmsnorm_bwd", "layernorm_bwd"]
)
def test_held_rows_are_not_merged_lane_by_lane(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """bf16 rows held in registers are loaded as whole words (kf::load_vec_or_zero). Zeroed
    lane by lane and then loaded under a guard, each pair of lanes cost ptxas a byte permute
    from the zero register (PRMT Rn, RZ, ...) a row: 72 of the RMS norm backward kernel's 880
    instructions, the most issue-bound of the norms (0.63 of copy on an H200)."""
    sass_name, text = _sass(tmp_path, monkeypatch, name, ROWS, kernel="kfuse_persistent")
    merges = re.findall(r"PRMT R\d+, RZ,", text)
    assert not merges, f"{name}: {len(merges)} lane merges with zero in {sass_name}"


def _sass(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    shape: tuple[int, ...],
    kernel: str = "",
) -> tuple[str, str]:
    """(file name, text) of the SASS of the case's kernel (the one whose name starts with
    `kernel` where it has several), bf16, compiled as for an H200 without a GPU."""
    nvrtc_and_nvdisasm_or_skip()
    case = CASES[name]
    fd = case.define(DataType.BFloat16)
    inputs = case.make_inputs(torch, shape, torch.bfloat16, "cpu")
    compile_as_for_a_gpu(monkeypatch, "compile", tmp_path, fd, inputs)
    # The main kernel: an inner_outer_persistent fusion also has its partials' finalize.
    (sass,) = [
        p
        for p in tmp_path.rglob("*.sass")
        if p.name.startswith(kernel) and not re.search(r"_fin\d*\.", p.name)
    ]
    text = sass.read_text()
    assert "EXIT" in text  # a real disassembly, not a message
    return sass.name, text


@pytest.mark.parametrize("shape, dim", [((64 * 56 * 56, 256), 0), ((64, 56 * 56, 256), 1)])
def test_outer_welford_kernels_fit_their_launch_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shape: tuple[int, ...], dim: int
) -> None:
    """The channels-last batch and instance norm statistics (a Welford over leading axes)
    keep to the blocks an SM their __launch_bounds__ states, which their grids are sized
    for (kfuse.schedule.reduction_heuristics.outer_welford_blocks_per_sm), without spilling."""
    nvrtc_and_nvdisasm_or_skip()
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1] * len(shape), dtype=DataType.BFloat16)
        var, mean = fd.ops.var_mean(fd.ops.cast(x, DataType.Float), [dim], correction=0)
        fd.add_output(var)
        fd.add_output(mean)
    inputs = [torch.empty(shape, dtype=torch.bfloat16)]  # not touched: address space only
    compile_as_for_a_gpu(monkeypatch, "kernels,compile", tmp_path, fd, inputs)
    (main,) = [
        p for p in tmp_path.rglob("kfuse_outer_*.sass") if not re.search(r"_fin\d*\.", p.name)
    ]
    text = main.read_text()
    assert "EXIT" in text
    bound = re.search(
        r"__launch_bounds__\((\d+), (\d+)\)", main.with_suffix("").with_suffix(".cu").read_text()
    )
    assert bound, "no blocks-an-SM bound on the kernel"
    threads, blocks = int(bound[1]), int(bound[2])
    registers = max(int(r) for r in re.findall(r"\bR(\d+)\b", text)) + 1
    assert registers * threads * blocks <= 65536, (registers, threads, blocks)
    local = re.findall(r"\b(?:LDL|STL)\b", text)
    assert not local, f"{len(local)} local-memory accesses (spills) in {main.name}"

"""NaN-sensitive comparisons survive ptxas. A comparison of |x| with a constant that every
number satisfies (|x| > -1, |x| >= 0, -|x| <= 0) is false only for NaN; ptxas (CUDA 13.0)
folded it to true when |x| came from fabsf, and a GPU campaign found abs(NaN) > -1.0 reading
True. The kernels' SASS, disassembled here without a GPU, must still compare."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kfuse import FusionDefinition
from kfuse.dtypes import DataType
from test_dump_binaries import compile_as_for_a_gpu, nvrtc_and_nvdisasm_or_skip


def compared_abs(op: str, constant: float, negate: bool, dtype: DataType) -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], dtype=dtype)
        a = fd.ops.abs(x)
        fd.add_output(getattr(fd.ops, op)(fd.ops.neg(a) if negate else a, constant))
    return fd


@pytest.mark.extended  # NVRTC and nvdisasm for each case: CI's extended step
@pytest.mark.parametrize("dtype", [DataType.Float, DataType.Half])
@pytest.mark.parametrize(
    "op, constant, negate",
    [("gt", -1.0, False), ("ge", 0.0, False), ("le", 0.0, True), ("lt", 1.0, True)],
)
def test_a_comparison_that_only_nan_fails_is_still_made(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    op: str,
    constant: float,
    negate: bool,
    dtype: DataType,
) -> None:
    nvrtc_and_nvdisasm_or_skip()
    fd = compared_abs(op, constant, negate, dtype)
    numpy_dtype = np.float32 if dtype is DataType.Float else np.float16
    compile_as_for_a_gpu(monkeypatch, "compile", tmp_path, fd, [np.ones(1000, numpy_dtype)])
    (sass,) = tmp_path.rglob("*.sass")
    text = sass.read_text()
    assert "EXIT" in text  # a real disassembly, not a message
    assert "FSETP" in text, f"ptxas folded {op}(|x|, {constant}) to a constant"

"""Negated Int32 values keep their negation through min and max. ptxas (NVRTC 12.9 to 13.3,
sm_90 and sm_100) merges two chained 32-bit min/max into one VIMNMX3 and drops a negation it
had folded into the inner one's operand: max(max(acc, -a), b) ran as max(acc, a, b). A GPU
campaign met it three times in 138,000 examples, every time as max(neg(x)) over an Int32 axis
(6 where 8 was right). kf::maximum, kf::minimum and kf::where for ints end in a byte permute
that ptxas does not look through (kf_math.cuh, minmax_barrier), so no VIMNMX3 forms from them.
The kernels are compiled by NVRTC for sm_90 and disassembled here, without a GPU; the same
fusions also run, on the emulator and the GPU, against the reference."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gpu_support import requires_gpu
from kfuse import FusionDefinition
from kfuse.dtypes import DataType
from kfuse.reference import evaluate
from test_dump_binaries import compile_as_for_a_gpu, nvrtc_and_nvdisasm_or_skip

torch = pytest.importorskip("torch")

INT32 = DataType.Int32


def reduced(op: str, shape: list[int], dim: int) -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1] * len(shape), dtype=INT32)
        fd.add_output(getattr(fd.ops, op)(fd.ops.neg(x), dims=[dim], keepdim=False, dtype=INT32))
    return fd


def pointwise(combine: Callable[[Any, Any, Any, Any], Any]) -> FusionDefinition:
    with FusionDefinition() as fd:
        a, b, c = (fd.define_tensor(shape=[-1], dtype=INT32) for _ in range(3))
        fd.add_output(combine(fd, a, b, c))
    return fd


def _max_of_negations(fd: Any, a: Any, b: Any, c: Any) -> Any:
    return fd.ops.maximum(fd.ops.maximum(fd.ops.neg(a), b), fd.ops.neg(c))


def _min_of_subtractions_from_zero(fd: Any, a: Any, b: Any, c: Any) -> Any:
    zero = fd.define_scalar(0, dtype=INT32)
    return fd.ops.minimum(fd.ops.minimum(b, fd.ops.sub(zero, a)), fd.ops.sub(zero, c))


def _max_written_as_where(fd: Any, a: Any, b: Any, c: Any) -> Any:
    na = fd.ops.neg(a)
    return fd.ops.maximum(fd.ops.where(fd.ops.gt(na, b), na, b), fd.ops.neg(c))


def _clamp_of_a_negation(fd: Any, a: Any, b: Any, c: Any) -> Any:
    return fd.ops.maximum(fd.ops.clamp(fd.ops.neg(a), -3, 3), fd.ops.relu(fd.ops.neg(b)))


CASES = {
    # the campaign's three: max(neg(x)) over a row, over the middle axis, and a min
    "max_of_neg_inner": (lambda: reduced("max", [4096], 0), [(4096,)]),
    "max_of_neg_outer": (lambda: reduced("max", [1, 13, 31], 1), [(1, 13, 31)]),
    "min_of_neg_rows": (lambda: reduced("min", [64, 1000], 1), [(64, 1000)]),
    "max_of_negations": (lambda: pointwise(_max_of_negations), [(4096,)] * 3),
    "min_of_zero_minus": (lambda: pointwise(_min_of_subtractions_from_zero), [(4096,)] * 3),
    "max_as_where": (lambda: pointwise(_max_written_as_where), [(4096,)] * 3),
    "clamp_and_relu": (lambda: pointwise(_clamp_of_a_negation), [(4096,)] * 3),
}


@pytest.mark.extended  # NVRTC and nvdisasm for each case: CI's extended step
@pytest.mark.parametrize("name", sorted(CASES))
def test_no_three_input_integer_min_max_forms(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    nvrtc_and_nvdisasm_or_skip()
    build, shapes = CASES[name]
    inputs = [np.arange(int(np.prod(s)), dtype=np.int32).reshape(s) for s in shapes]
    compile_as_for_a_gpu(monkeypatch, "compile", tmp_path, build(), inputs)
    (sass,) = tmp_path.rglob("*.sass")
    (ptx,) = tmp_path.rglob("*.ptx")
    text = sass.read_text()
    assert "EXIT" in text  # a real disassembly, not a message
    assert re.search(r"\b(max|min)\.s32\b", ptx.read_text()), "the kernel has no int32 min/max"
    merged = re.findall(r"VIMNMX3[^;]*;", text)
    assert not merged, f"{name}: ptxas merged int32 min/max into {merged[:3]}"


@pytest.mark.parametrize(
    "device", ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, requires_gpu])]
)
@pytest.mark.parametrize("name", sorted(CASES))
def test_min_max_of_negated_ints_match_the_reference(device: str, name: str) -> None:
    build, shapes = CASES[name]
    fd = build()
    generator = torch.Generator().manual_seed(len(name))
    # Small values of both signs, so that a lost negation changes the result.
    host = [torch.randint(-8, 9, s, dtype=torch.int32, generator=generator) for s in shapes]
    (got,) = fd.execute([h.to(device) for h in host])
    (want,) = evaluate(fd, [h.numpy() for h in host])
    np.testing.assert_array_equal(got.cpu().numpy(), want)

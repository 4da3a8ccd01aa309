"""bf16 loop values converted from their vectors' 32-bit words (kfuse.codegen.bf16_words): the
arguments it writes, and bf16 fusions of the pointwise, reduction, persistent, outer
persistent and transpose kernels against the float64 reference on the emulator with it on
and off, their sources compiling for sm_90 (whose path reads the words)."""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest

from kfuse import switches
from kfuse.codegen import bf16_words
from kfuse.dtypes import DataType
from kfuse.frontend import FusionDefinition
from kfuse.reference import evaluate
from kfuse.runtime.backends.cuda import compile_to_cubin, nvrtc_options
from kfuse.testing import assert_outputs_close

BF16 = ml_dtypes.bfloat16


def test_arguments_are_lanes_of_vectors_or_conversions(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(switches, "FROM_WORDS", True)
    bf, fp = DataType.BFloat16, DataType.Float
    assert bf16_words.argument("x0[b][j]", bf) == "kf::bf16_lane(x0[b], j)"
    assert bf16_words.argument("rv1[j]", bf) == "kf::bf16_lane(rv1, j)"
    assert bf16_words.argument("x2[u]", bf) == "kf::to_float(x2[u])"
    assert bf16_words.argument("tile_in0[ti + j][tj]", bf) == "kf::to_float(tile_in0[ti + j][tj])"
    assert bf16_words.argument("a[i] + x0[b][j]", bf) == "kf::to_float(a[i] + x0[b][j])"
    assert bf16_words.argument("x0[b][j]", fp) == "x0[b][j]"
    assert bf16_words.param_type(bf) == "float" and bf16_words.param_type(fp) == "float"
    monkeypatch.setattr(switches, "FROM_WORDS", False)
    assert bf16_words.argument("x0[b][j]", bf) == "x0[b][j]"
    assert bf16_words.param_type(bf) == "kf::bfloat16"


def _layer_norm() -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.BFloat16)
        w = fd.define_tensor(shape=[-1], dtype=DataType.BFloat16)
        xf = fd.ops.cast(x, DataType.Float)
        var, mean = fd.ops.var_mean(xf, dims=[1], correction=0, keepdim=True)
        y = fd.ops.mul(fd.ops.mul(fd.ops.sub(xf, mean), fd.ops.rsqrt(fd.ops.add(var, 1e-5))), w)
        fd.add_output(fd.ops.cast(y, DataType.BFloat16))
    return fd


def _column_sum() -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.BFloat16)
        fd.add_output(
            fd.ops.cast(fd.ops.sum(fd.ops.cast(x, DataType.Float), dims=[0]), DataType.BFloat16)
        )
    return fd


def _add_transposed() -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.BFloat16)
        y = fd.define_tensor(shape=[-1, -1], dtype=DataType.BFloat16)
        fd.add_output(fd.ops.add(x, fd.ops.permute(y, dims=[1, 0])))
    return fd


def _bf16(shape: tuple[int, ...], seed: int) -> np.ndarray:
    values = np.random.default_rng(seed).standard_normal(shape).astype(BF16)
    values.flat[::97] = np.array([np.nan, np.inf, -0.0], dtype=BF16)[
        np.arange(values.size)[::97] % 3
    ]
    return values


CASES = {
    "persistent": (_layer_norm, lambda: [_bf16((6, 384), 1), _bf16((384,), 2)]),
    "outer": (_column_sum, lambda: [_bf16((128, 64), 3)]),
    "transpose": (_add_transposed, lambda: [_bf16((40, 72), 4), _bf16((72, 40), 5)]),
    # y a transposed view, so that permute(y) agrees with x: the pointwise kernel
    "pointwise": (_add_transposed, lambda: [_bf16((40, 72), 6), _bf16((40, 72), 7).T]),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("words", [True, False])
def test_bf16_fusions_match_the_reference(
    case: str, words: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(switches, "FROM_WORDS", words)
    define, make = CASES[case]
    fd, inputs = define(), make()
    out = fd.execute(inputs)
    assert_outputs_close(fd.fusion, out, evaluate(fd.fusion, inputs), inputs)
    sources = fd.last_cuda_source()
    kernels = re.findall(
        r'extern "C" __global__ void (?:__launch_bounds__\([^)]*\) )?(\w+)\(', sources
    )
    assert kernels
    calls = [line for line in sources.splitlines() if re.search(r"_(body|stage\d|full)\(", line)]
    calls = [line for line in calls if "__device__" not in line]
    assert calls and any("kf::bf16_lane(" in line for line in calls) == words
    # One kernel a case: its source is the whole text; NVRTC takes the words' path (sm_90).
    assert len(kernels) == 1
    assert compile_to_cubin(sources, kernels[0], "sm_90", nvrtc_options())[:4] == b"\x7fELF"

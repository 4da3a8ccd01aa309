"""64-bit shifts by 63, converted to float, keep every value. NVRTC 13.0's ptxas lost some
(kfuse.runtime.backends.ptxas_workarounds): in an outer persistent kernel over [5, 2, 16]
int64 it wrote one row's shifted high word and never read it, converting another lane's
instead (an H100 campaign's failure-2843-174: the mean of cast(x << 63) over 5 rows 2 where
4 was right); in a pointwise kernel over vectors of 8 it converted one lane's value and used
it for all eight (failure-3512-996: -inf in a half output where 0 was right). Such kernels
compile at ptxas -O0. The kernels are compiled by NVRTC for sm_90 and their SASS read here,
without a GPU; the fusions also run on the emulator and the GPU against the reference."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from gpu_support import requires_gpu
from kfuse import FusionDefinition
from kfuse.dtypes import DataType
from kfuse.reference import evaluate
from kfuse.runtime.backends import ptxas_workarounds
from test_dump_binaries import compile_as_for_a_gpu, nvrtc_and_nvdisasm_or_skip

torch = pytest.importorskip("torch")


def mean_of_shifted_rows() -> FusionDefinition:
    """The campaign's kernel (one segment of its fusion): beside other outputs of the same
    [5, 2, 16] int64 input, cast(x << 63) averaged over axis 0."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1, -1], dtype=DataType.Int)
        mask = fd.define_tensor(shape=[-1], dtype=DataType.Int32)
        angle = fd.define_tensor(shape=[1, -1, -1], dtype=DataType.Float)
        both = fd.ops.logical_and(
            fd.ops.broadcast(fd.ops.cast(mask, DataType.Bool), [True, True, False]),
            fd.ops.cast(x, DataType.Bool),
        )
        fd.add_output(fd.ops.le(fd.ops.cast(both, DataType.Int), x))
        fd.add_output(fd.ops.cos(angle))
        shifted = fd.ops.cast(fd.ops.bitwise_left_shift(x, 63), dtype=DataType.Float)
        total = fd.ops.sum(shifted, dims=[0], keepdim=False, dtype=DataType.Float)
        fd.add_output(fd.ops.div(total, fd.ops.cast(fd.ops.size(shifted, dim=0), DataType.Float)))
    return fd


def other_inputs(xp: object = np) -> list[np.ndarray]:
    """The segment's other inputs: an Int32 mask of 16 and angles [1, 2, 16]."""
    rng = np.random.default_rng(174)
    return [rng.integers(-2, 2, 16).astype(np.int32), rng.random((1, 2, 16), np.float32)]


def campaign_input() -> np.ndarray:
    """[5, 2, 16] int64, rows 64 elements apart (the campaign's strides), odd and even values."""
    rng = np.random.default_rng(2843)
    storage = rng.integers(-8, 8, 5 * 64, dtype=np.int64)
    return np.lib.stride_tricks.as_strided(storage, (5, 2, 16), (64 * 8, 32 * 8, 8))


def lost_high_words(sass: str) -> list[str]:
    """The shifted high words (IMAD.U32 Rh, Rx, -0x80000000: x << 63's upper half) that the
    listing overwrites before anything reads them."""
    body = [
        re.sub(r"/\*[0-9a-f]*\*/", "", line).split(";")[0].strip()
        for line in sass.splitlines()
        if re.search(r"/\*[0-9a-f]{4}\*/", line)
    ]
    lost = []
    for i, ins in enumerate(body):
        m = re.fullmatch(r"IMAD\.U32 R(\d+), R\d+, -0x80000000, RZ", ins)
        if m is None:
            continue
        high = int(m.group(1))
        for later in body[i + 1 :]:
            operands = later.split(None, 1)[1].split(",") if " " in later else []
            reads = [int(r) for o in operands[1:] for r in re.findall(r"\bR(\d+)\b", o)]
            if high in reads or high - 1 in reads and "I2F.S64" in later:
                break  # a pair's low register names the pair: R(h-1) reads Rh too
            written = re.findall(r"\bR(\d+)\b", operands[0]) if operands else []
            if not later.startswith("@") and written and int(written[0]) == high:
                lost.append(f"{ins} (overwritten by {later})")
                break
    return lost


def conversions_kept(dump: Path) -> int:
    """The int64 -> float conversions (cvt.rn.f32.s64) of the one kernel dumped in `dump`'s
    PTX, after checking that its SASS has an I2F.S64 for each: ptxas may copy one (a loop's
    two paths) but must drop none (at -O3 it dropped one of the first kernel's 24, at -O1
    eight of the second's 19)."""
    (ptx_file,) = dump.rglob("*.ptx")
    (sass_file,) = dump.rglob("*.sass")
    conversions = ptx_file.read_text().count("cvt.rn.f32.s64")
    assert sass_file.read_text().count("I2F.S64") >= conversions
    return conversions


def test_the_campaign_kernel_keeps_every_shifted_value(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    nvrtc_and_nvdisasm_or_skip()
    monkeypatch.setenv("KFUSE_EMULATOR_PROFILE", "h100")
    inputs = [campaign_input(), *other_inputs()]
    compile_as_for_a_gpu(monkeypatch, "compile", tmp_path, mean_of_shifted_rows(), inputs)
    assert conversions_kept(tmp_path) >= 5  # the five rows' values, each converted
    (sass_file,) = tmp_path.rglob("*.sass")
    assert lost_high_words(sass_file.read_text()) == []


def expm1_of_shifted_lanes() -> FusionDefinition:
    """failure-3512-996's pointwise segment: (x << 63) >> -1 and half(expm1(float(x << 63)))
    of one int64 row."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[1, 1, -1], dtype=DataType.Int)
        shifted = fd.ops.bitwise_left_shift(x, 63)
        fd.add_output(fd.ops.bitwise_right_shift(shifted, -1))
        expm1 = fd.ops.expm1(fd.ops.cast(shifted, dtype=DataType.Float))
        fd.add_output(fd.ops.cast(expm1, dtype=DataType.Half))
    return fd


def odd_and_even_row() -> np.ndarray:
    """[1, 1, 257] int64 of odd and even values (x << 63 is 0 or -2^63)."""
    return np.random.default_rng(3512).integers(-9, 9, (1, 1, 257), dtype=np.int64)


def test_every_lane_of_the_pointwise_kernel_is_converted(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    nvrtc_and_nvdisasm_or_skip()
    monkeypatch.setenv("KFUSE_EMULATOR_PROFILE", "h100")
    compile_as_for_a_gpu(
        monkeypatch, "compile", tmp_path, expm1_of_shifted_lanes(), [odd_and_even_row()]
    )
    assert conversions_kept(tmp_path) >= 8  # a vector's 8 lanes, each converted


@pytest.mark.parametrize(
    "device", ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, requires_gpu])]
)
def test_expm1_of_shifted_lanes_matches_the_reference(device: str) -> None:
    row = torch.from_numpy(odd_and_even_row()).to(device)
    actual = expm1_of_shifted_lanes().execute([row])
    expected = evaluate(expm1_of_shifted_lanes(), [row.cpu()])
    for got, want in zip(actual, expected, strict=True):
        np.testing.assert_array_equal(got.cpu().numpy(), np.asarray(want.cpu()))


def test_only_constants_leaving_a_zero_low_word_take_the_low_optimization() -> None:
    needs = ptxas_workarounds.needs_low_optimization
    assert needs("const long long v1 = kf::shift_left(x0, 63LL);")
    assert needs("v = kf::shift_left(kf::cast<long long>(a), 32LL);")
    assert needs("const long long v1 = kf::mul(x0, 4294967296LL);")  # x << 32
    assert needs("const long long v1 = kf::bitwise_and(x0, -8589934592LL);")
    assert needs("const long long v1 = kf::bitwise_and(x0, (-9223372036854775807LL - 1LL));")
    assert not needs("const long long v1 = kf::shift_left(x0, 31LL);")  # no zero low word
    assert not needs("const int v1 = kf::shift_left(x0, 40);")  # a 32-bit shift
    assert not needs("const long long v1 = kf::shift_left(x0, s0);")  # not a constant
    assert not needs("const long long v1 = kf::mul(x0, 4294967297LL);")  # low word 1
    assert not needs("const long long v1 = kf::bitwise_and(x0, 9223372036854775807LL);")
    # a double's bits are no integer the kernel computes with
    assert not needs("const double v1 = ((double)__longlong_as_double(9218868437227405312LL));")


@pytest.mark.parametrize(
    "device", ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, requires_gpu])]
)
def test_the_mean_of_shifted_rows_matches_the_reference(device: str) -> None:
    fd = mean_of_shifted_rows()
    storage = torch.zeros(5 * 64, dtype=torch.int64, device=device)
    x = torch.as_strided(storage, (5, 2, 16), (64, 32, 1))
    x.copy_(torch.from_numpy(np.ascontiguousarray(campaign_input())))
    others = [torch.from_numpy(a).to(device) for a in other_inputs()]
    actual = fd.execute([x, *others])
    expected = evaluate(fd, [x.cpu(), *(a.cpu() for a in others)])
    for got, want in zip(actual, expected, strict=True):
        # the means are multiples of 2^63 / 5: a lost row moves one by 20% or more
        np.testing.assert_allclose(got.cpu().numpy(), np.asarray(want.cpu()), rtol=1e-6)

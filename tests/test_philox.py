"""Random numbers: Philox 4x32-10 and nvFuser's transforms in kf_philox.cuh, their NumPy twin
kfuse.reference.philox (bit for bit on the emulator and the GPU), the numbers' statistics,
and the seed/offset state of kfuse.runtime.rng_state."""

from __future__ import annotations

import math
import threading

import ml_dtypes
import numpy as np
import pytest

import kfuse
from gpu_support import cuda_torch, requires_gpu
from kfuse import switches
from kfuse.dtypes import DataType
from kfuse.errors import InputError
from kfuse.reference import philox as ref
from kfuse.runtime import rng_state
from kfuse.runtime.emulator import EmulatedKernel
from kfuse.runtime.runtime_header import (
    PHILOX_WIDE_PRODUCTS,
    runtime_header,
    with_optional_parts,
)

# Every kernel of this module compiles into a cache of its own (conftest).
pytestmark = pytest.mark.usefixtures("module_private_cache")

# Random123's known-answer vectors for philox4x32-10 (its kat_vectors file: counter words,
# key words, the four output words).
PHILOX_4X32_10_KAT = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    (
        (0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF),
        (0xFFFFFFFF, 0xFFFFFFFF),
        (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD),
    ),
    (
        (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
        (0xA4093822, 0x299F31D0),
        (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
    ),
]


@pytest.mark.parametrize(("counter", "key", "expected"), PHILOX_4X32_10_KAT)
def test_numpy_philox_gives_random123_known_answers(counter, key, expected) -> None:
    words = ref.philox4x32_10(counter, key)
    assert [int(w) for w in words] == list(expected)


def test_counter_is_offset_then_subsequence_and_key_is_the_seed() -> None:
    # nvFuser's layout: counter words (offset lo, offset hi, subsequence lo, subsequence hi).
    seed, offset = 0x299F31D0A4093822, 0x85A308D3243F6A88
    subsequence = 0x0370734413198A2E
    blocks = ref.philox_blocks(seed, offset, 1)
    assert blocks.shape == (1, 4)
    # With subsequence 0 the last two counter words are 0; compare the general case through
    # philox4x32_10 with the words placed by hand.
    direct = ref.philox4x32_10(
        (offset & 0xFFFFFFFF, offset >> 32, 0, 0), (seed & 0xFFFFFFFF, seed >> 32)
    )
    assert blocks[0].tolist() == [int(w) for w in direct]
    words = ref.philox4x32_10(
        (offset & 0xFFFFFFFF, offset >> 32, subsequence & 0xFFFFFFFF, subsequence >> 32),
        (seed & 0xFFFFFFFF, seed >> 32),
    )
    assert [int(w) for w in words] == list(PHILOX_4X32_10_KAT[2][2])


# -- the device code on the emulator ------------------------------------------------------------

DRAW = r"""
extern "C" __global__ void draw(
    kf::Tensor<unsigned int, 1, long long> words, kf::Tensor<float, 1, long long> uf,
    kf::Tensor<double, 1, long long> ud, kf::Tensor<float, 1, long long> nf,
    kf::Tensor<double, 1, long long> nd, kf::Tensor<float, 1, long long> rf,
    kf::Tensor<double, 1, long long> rd, kf::Tensor<kf::half, 1, long long> uh,
    kf::Tensor<kf::bfloat16, 1, long long> rb, kf::Tensor<kf::half, 1, long long> nh,
    kf::Tensor<kf::bfloat16, 1, long long> nb, long long seed_bits, long long offset_bits,
    long long subsequence_base) {
  const long long n = uf.size[0];
  const unsigned long long seed = (unsigned long long)seed_bits;
  const unsigned long long offset = (unsigned long long)offset_bits;
  kf::PhiloxMemo memo;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    const kf::PhiloxBlock& b = memo.get(seed, subsequence_base + i / 4, offset);
    const kf::PhiloxBlock bd = kf::philox(seed, i / 2, offset);
    const int c = (int)(i % 4), cd = (int)(i % 2);
    words.data[i] = b.word[c];
    uf.data[i] = kf::rng_uniform_float(b, c);
    ud.data[i] = kf::rng_uniform_double(bd, cd);
    nf.data[i] = kf::rng_normal_float(b, c);
    nd.data[i] = kf::rng_normal_general_double(bd, cd, -1.5, 3.0);
    rf.data[i] = kf::rng_uniform_range_float(b, c, -3.0f, 5.5f);
    rd.data[i] = kf::rng_uniform_range_double(bd, cd, 0.25, 0.75);
    uh.data[i] = kf::rng_uniform_narrow<kf::half>(b, c);
    rb.data[i] = kf::rng_uniform_range_narrow<kf::bfloat16>(b, c, -1.0f, 1.0f);
    nh.data[i] = kf::rng_normal_general_narrow<kf::half>(b, c, 2.0f, 0.5f);
    nb.data[i] = kf::rng_normal_narrow<kf::bfloat16>(b, c);
  }
}
"""

DRAW_DTYPES = [
    np.uint32,
    np.float32,
    np.float64,
    np.float32,
    np.float64,
    np.float32,
    np.float64,
    np.float16,
    ml_dtypes.bfloat16,
    np.float16,
    ml_dtypes.bfloat16,
]
DRAW_NAMES = ["words", "uf", "ud", "nf", "nd", "rf", "rd", "uh", "rb", "nh", "nb"]


def draw_source() -> str:
    return with_optional_parts(runtime_header() + DRAW)


def expected_draws(seed: int, offset: int, n: int, subsequence_base: int = 0) -> list[np.ndarray]:
    """What DRAW writes, from kfuse.reference.philox."""
    if subsequence_base:
        # Only the words are drawn at shifted subsequences; compute them by hand.
        sub = np.arange(n, dtype=np.uint64) // np.uint64(4) + np.uint64(subsequence_base)
        counter = (
            np.full(n, offset & 0xFFFFFFFF, np.uint32),
            np.full(n, offset >> 32, np.uint32),
            sub.astype(np.uint32),
            (sub >> np.uint64(32)).astype(np.uint32),
        )
        words = np.stack(ref.philox4x32_10(counter, (seed & 0xFFFFFFFF, seed >> 32)), axis=1)
        return [words[np.arange(n), np.arange(n) % 4]]
    shape = (n,)
    return [
        ref.philox_blocks(seed, offset, -(-n // 4)).reshape(-1)[:n],
        ref.uniform(seed, offset, shape, DataType.Float),
        ref.uniform(seed, offset, shape, DataType.Double),
        ref.normal(seed, offset, shape, DataType.Float),
        ref.normal(seed, offset, shape, DataType.Double, -1.5, 3.0),
        ref.uniform(seed, offset, shape, DataType.Float, -3.0, 5.5),
        ref.uniform(seed, offset, shape, DataType.Double, 0.25, 0.75),
        ref.uniform(seed, offset, shape, DataType.Half),
        ref.uniform(seed, offset, shape, DataType.BFloat16, -1.0, 1.0),
        ref.normal(seed, offset, shape, DataType.Half, 2.0, 0.5),
        ref.normal(seed, offset, shape, DataType.BFloat16),
    ]


def as_signed64(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def assert_same_bits(name: str, got: np.ndarray, expected: np.ndarray) -> None:
    assert got.dtype == expected.dtype and got.shape == expected.shape, name
    bits = np.dtype(f"u{got.dtype.itemsize}")
    mismatch = np.flatnonzero(got.view(bits) != expected.view(bits))
    assert mismatch.size == 0, f"{name}: {mismatch.size} elements differ, first at {mismatch[:5]}"


@pytest.mark.parametrize(
    ("seed", "offset"), [(0, 0), (0x1234567890ABCDEF, 77), ((1 << 64) - 1, (1 << 40) + 3)]
)
def test_emulator_draws_the_numpy_numbers_bit_for_bit(seed: int, offset: int) -> None:
    n = 3 * 1024 + 5  # not a multiple of 4: the last subsequence is partly used
    kernel = EmulatedKernel(draw_source(), "draw")
    outs = [np.zeros(n, dtype) for dtype in DRAW_DTYPES]
    kernel.launch((8,), (128, 1, 1), 0, [*outs, as_signed64(seed), as_signed64(offset), 0])
    for name, got, expected in zip(DRAW_NAMES, outs, expected_draws(seed, offset, n)):
        assert_same_bits(name, got, expected)


def test_emulator_subsequences_above_32_bits() -> None:
    n, base, seed, offset = 64, (1 << 32) - 3, 5, 9
    kernel = EmulatedKernel(draw_source(), "draw")
    outs = [np.zeros(n, dtype) for dtype in DRAW_DTYPES]
    kernel.launch((1,), (64, 1, 1), 0, [*outs, seed, offset, base])
    (words,) = expected_draws(seed, offset, n, base)
    np.testing.assert_array_equal(outs[0], words)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_nvrtc_compiles_the_random_numbers_part_without_fma(arch: str) -> None:
    from kfuse.runtime.backends.cuda import compile_to_cubin, compile_to_ptx, nvrtc_options

    # NVRTC is a test dependency (the nvidia-cuda-nvrtc wheel): it compiles without a GPU.
    assert compile_to_cubin(draw_source(), "draw", arch, nvrtc_options())[:4] == b"\x7fELF"
    # The fused multiply-adds written out (rng_unit_float's and rng_unit_double's, whose
    # products are exact) as separate operations, the compiler contracts nothing, and there
    # is no approximate transcendental anywhere: the emulator's rounding.
    written = {
        "::fmaf((float)x, scale, 0.5f * scale)": "(float)x * scale + 0.5f * scale",
        "::fma((double)z, scale, 0.5 * scale)": "(double)z * scale + 0.5 * scale",
    }
    source = draw_source()
    for fused, separate in written.items():
        assert fused in source
        source = source.replace(fused, separate)
    ptx = compile_to_ptx(source, "draw", arch, nvrtc_options())
    assert "fma." not in ptx and "lg2.approx" not in ptx and "sin.approx" not in ptx
    assert "div.rn.f32" in ptx and "sqrt.rn.f32" in ptx


def test_wide_products_take_one_instruction_where_two_were(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kfuse.runtime.backends import cubin_info
    from kfuse.runtime.backends.cuda import compile_to_cubin, nvrtc_options

    narrow = compile_to_cubin(draw_source(), "draw", "sm_90", nvrtc_options())
    monkeypatch.setattr(switches, "PHILOX_WIDE_PRODUCTS", True)
    source = draw_source()
    # defined on a line of its own before the part (the emulator ignores it: no PTX there)
    assert f"\n{PHILOX_WIDE_PRODUCTS}\n" in source
    assert source.index(PHILOX_WIDE_PRODUCTS) < source.index("struct PhiloxBlock")
    wide = compile_to_cubin(source, "draw", "sm_90", nvrtc_options())
    # ten rounds of two products in each of the kernel's Philox calls: 20 fewer a call
    assert cubin_info.instructions(wide) <= cubin_info.instructions(narrow) - 20


def test_a_kernel_with_wide_products_is_compiled_narrow_too_and_the_cheaper_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kfuse.runtime.backends import cuda

    monkeypatch.setattr(switches, "PHILOX_WIDE_PRODUCTS", True)
    compiled: list[str] = []

    def fitted(source: str, name: str, arch: str, options: list[str]) -> tuple[str, bytes]:
        compiled.append(source)
        return source, b"wide" if PHILOX_WIDE_PRODUCTS in source else b"narrow"

    # the dropout + RMS norm forward's figures: 168 bytes of frame and 1400 instructions
    # wide, none and 1896 narrow
    monkeypatch.setattr(cuda, "_register_fitted", fitted)
    monkeypatch.setattr(cuda.cubin_info, "frame_bytes", lambda c: 168 if c == b"wide" else 0)
    monkeypatch.setattr(cuda.cubin_info, "instructions", lambda c: 1400 if c == b"wide" else 1896)
    source, cubin = cuda.fitted_compile(draw_source(), "draw", "sm_90", [])
    assert cubin == b"narrow" and PHILOX_WIDE_PRODUCTS not in source
    assert len(compiled) == 2 and PHILOX_WIDE_PRODUCTS in compiled[0]
    # without the spill, wide is cheaper
    monkeypatch.setattr(cuda.cubin_info, "frame_bytes", lambda c: 0)
    assert cuda.fitted_compile(draw_source(), "draw", "sm_90", [])[1] == b"wide"
    # the dropout + RMS norm forward [32768, 1024]: 912 instructions wide, 728 narrow
    monkeypatch.setattr(cuda.cubin_info, "instructions", lambda c: 912 if c == b"wide" else 728)
    assert cuda.fitted_compile(draw_source(), "draw", "sm_90", [])[1] == b"narrow"


def test_the_part_is_only_in_kernels_that_draw() -> None:
    plain = runtime_header() + 'extern "C" __global__ void k(float* x) { x[0] = kf::exp(x[0]); }'
    assert with_optional_parts(plain) == plain
    assert "PhiloxBlock" in draw_source()


# -- nvFuser's range rules ---------------------------------------------------------------------


def test_float_words_map_to_the_half_open_unit_interval_with_one_folded_to_zero() -> None:
    ends = np.array([0, 1, 2**32 - 129, 2**32 - 128, 2**32 - 1], np.uint32)
    unit = ref.unit_float(ends)
    assert unit[0] == np.float32(2.0**-33) and unit[0] > 0  # (0, 1]: 0 is never a raw value
    assert unit[2] < 1 and (unit[3:] == 1).all()  # the top 128 words round to 1.0
    assert ref.uniform01_float(ends).tolist() == [*unit[:3].tolist(), 0.0, 0.0]


def test_double_words_use_53_bits_and_fold_one_to_zero() -> None:
    # x's bits 21..31 overlap y's lowest: 0x001FFFFF with y all ones is 2^53 - 1, the top.
    x = np.array([0, 0x001FFFFF, 0x12345678], np.uint32)
    y = np.array([0, 0xFFFFFFFF, 0x9ABCDEF0], np.uint32)
    unit = ref.unit_double(x, y)
    assert unit[0] == 2.0**-54
    assert unit[1] == 1.0 and ref.uniform01_double(x, y)[1] == 0.0
    z = 0x12345678 ^ (0x9ABCDEF0 << 21)
    assert unit[2] == z * 2.0**-53 + 2.0**-54


@pytest.mark.parametrize(
    "dtype", [DataType.Float, DataType.Double, DataType.Half, DataType.BFloat16]
)
@pytest.mark.parametrize(("low", "high"), [(0.0, 1.0), (-2.0, 3.0), (0.3, 1.7)])
def test_uniform_stays_in_low_inclusive_high_exclusive(
    dtype: DataType, low: float, high: float
) -> None:
    # nvFuser's test_uniform_range: never above the largest value below `high` in the
    # output's type, never below `low`; the mean at the middle.
    u = ref.uniform(11, 3, (1 << 20,), dtype, low, high).astype(np.float64)
    narrow = np.dtype(kfuse.dtypes.to_numpy_dtype(dtype))
    top = np.array(high, np.float64).astype(narrow)
    below_top = np.nextafter(top, np.array(low).astype(narrow)).astype(np.float64)
    assert u.min() >= np.array(low).astype(narrow).astype(np.float64)
    assert u.max() <= below_top
    # nvFuser's bound: the spacing below `high` stands for rounding's share of the error.
    assert abs(u.mean() - (low + high) / 2) < (high - low) * max(
        high - u.max(), 3 / math.sqrt(12 * u.size)
    )
    if dtype in (DataType.Half, DataType.BFloat16):
        # Reduced precision: both ends are reached in a million draws.
        assert u.min() == np.array(low).astype(narrow).astype(np.float64)
        assert u.max() == below_top


# -- statistics --------------------------------------------------------------------------------

N_STATS = 1 << 22  # about four million draws


def ks_statistic(sample: np.ndarray, cdf) -> float:
    """The Kolmogorov-Smirnov distance between `sample` and the distribution `cdf`."""
    x = np.sort(sample.astype(np.float64))
    f = cdf(x)
    n = x.size
    i = np.arange(1, n + 1)
    return float(max((i / n - f).max(), (f - (i - 1) / n).max()))


def ks_bound(n: int) -> float:
    # The distance's critical value at significance 0.001: sqrt(-ln(0.0005) / 2) / sqrt(n).
    return math.sqrt(-math.log(0.0005) / 2) / math.sqrt(n)


_erfc = np.frompyfunc(math.erfc, 1, 1)


def normal_cdf(x: np.ndarray) -> np.ndarray:
    return 0.5 * _erfc(-x / math.sqrt(2.0)).astype(np.float64)


@pytest.mark.parametrize("dtype", [DataType.Float, DataType.Double])
def test_uniform_statistics(dtype: DataType) -> None:
    u = ref.uniform(2024, 7, (N_STATS,), dtype).astype(np.float64)
    assert abs(u.mean() - 0.5) < 5 * math.sqrt(1 / 12 / u.size)
    assert abs(u.var() - 1 / 12) < 5 * math.sqrt(1 / 180 / u.size)  # Var(u^2 ...) bound
    assert ks_statistic(u, lambda x: x) < ks_bound(u.size)


@pytest.mark.parametrize("dtype", [DataType.Float, DataType.Double])
def test_normal_statistics(dtype: DataType) -> None:
    z = ref.normal(99, 1, (N_STATS,), dtype).astype(np.float64)
    # nvFuser's fold of 1.0 to 0 gives log(0): a float pair whose first word is in the top 128
    # words is infinite (probability 2^-25); none of these draws is.
    assert np.isfinite(z).all()
    assert abs(z.mean()) < 5 / math.sqrt(z.size)
    assert abs(z.var() - 1.0) < 5 * math.sqrt(2 / z.size)
    sub = z[:: 4 if dtype == DataType.Float else 2][: 1 << 20]
    assert ks_statistic(sub, normal_cdf) < ks_bound(sub.size)
    # Both halves of each Box-Muller pair are normal, not only the sines.
    assert ks_statistic(z[1::2][: 1 << 20], normal_cdf) < ks_bound(1 << 20)


def test_normal_float_is_infinite_exactly_where_the_first_word_folds() -> None:
    # nvFuser's rule, kept: u = 0 after the fold, and log(0) = -inf.
    words = np.array([[0xFFFFFFFF, 0x40000000, 5, 0x80000000]], np.uint32)
    z = ref._normal_float(words.reshape(-1), 4)
    assert np.isinf(z[:2]).all() and np.isfinite(z[2:]).all()


def test_log_sin_cos_series_are_accurate() -> None:
    rng = np.random.default_rng(0)
    x = rng.random(1 << 18).astype(np.float32)
    exact = np.log(x.astype(np.float64))
    assert (
        np.abs(ref.log_float(x) - exact) <= 1.5 * np.spacing(np.abs(exact).astype(np.float32))
    ).all()
    v = (rng.random(1 << 18) * 2 * np.pi).astype(np.float32)
    for want_cos, fn in ((False, np.sin), (True, np.cos)):
        got = ref.sin_or_cos_float(v, np.full(v.shape, want_cos))
        assert np.abs(got - fn(v.astype(np.float64))).max() < 2e-7
        vd = v.astype(np.float64)
        assert np.abs(ref.sin_or_cos_double(vd, np.full(v.shape, want_cos)) - fn(vd)).max() < 4e-16
    xd = rng.random(1 << 18)
    assert np.abs(ref.log_double(xd) - np.log(xd)).max() < 4e-16 * np.abs(np.log(xd)).max()


def correlation(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.corrcoef(a.astype(np.float64), b.astype(np.float64))[0, 1])


@pytest.mark.parametrize("op", [ref.uniform, ref.normal])
def test_independence_across_elements_offsets_and_seeds(op) -> None:
    n = 1 << 20
    bound = 5 / math.sqrt(n)
    a = op(7, 100, (n + 8,), DataType.Float)
    for lag in (1, 2, 3, 4, 8):  # within a Philox block, and the next block's same word
        assert abs(correlation(a[:n], a[lag : n + lag])) < bound, lag
    assert abs(correlation(a[:n], op(7, 101, (n,), DataType.Float))) < bound
    assert abs(correlation(a[:n], op(8, 100, (n,), DataType.Float))) < bound
    assert abs(correlation(a[:n], op(7, 100 + (1 << 32), (n,), DataType.Float))) < bound
    d = op(7, 100, (n,), DataType.Double)
    assert abs(correlation(d[:-1], d[1:])) < bound


def test_values_depend_on_the_logical_index_only() -> None:
    # A prefix of a longer draw is the shorter draw, and the shape only matters through the
    # element count in row-major order.
    long = ref.uniform(3, 4, (1000,), DataType.Float)
    np.testing.assert_array_equal(ref.uniform(3, 4, (998,), DataType.Float), long[:998])
    np.testing.assert_array_equal(
        ref.normal(3, 4, (10, 100), DataType.Half).reshape(-1),
        ref.normal(3, 4, (1000,), DataType.Half),
    )


def test_random_dtypes_are_floating() -> None:
    with pytest.raises(ValueError, match="Float, Double, Half or BFloat16"):
        ref.uniform(0, 0, (4,), DataType.Int)


# -- the generator state -----------------------------------------------------------------------


class FakeTorchGenerator:
    """torch.Generator's three methods as a CUDA generator has them (offset in words, set
    only to multiples of 4)."""

    def __init__(self, seed: int) -> None:
        self.seed, self.offset = seed, 0

    def initial_seed(self) -> int:
        return self.seed

    def get_offset(self) -> int:
        return self.offset

    def set_offset(self, offset: int) -> None:
        assert offset % 4 == 0
        self.offset = offset


def test_a_launch_reserves_four_words_per_rng_op() -> None:
    gen = FakeTorchGenerator(1234)
    first = rng_state.reserve(gen, 3)
    second = rng_state.reserve(gen, 3)
    assert first == (1234, 0) and gen.get_offset() == 24
    assert second == (1234, 3)
    assert [second.op_offset(k) for k in range(3)] == [3, 4, 5]


def test_ith_stateful_launch_is_the_stateless_draw_at_offset_i() -> None:
    # After manual_seed(s): the i-th launch of a kernel with one RNG op draws at Philox
    # offset i with seed s (nvFuser's test_deterministic_random); with two ops, op k of
    # launch i draws at 2i + k.
    kfuse.manual_seed(77)
    gen = rng_state.kfuse_generator()
    starts = [rng_state.reserve(gen, 1) for _ in range(4)]
    assert [(s.seed, s.op_offset(0)) for s in starts] == [(77, i) for i in range(4)]
    kfuse.manual_seed(77)
    two = [rng_state.reserve(gen, 2) for _ in range(3)]
    assert [[s.op_offset(k) for k in range(2)] for s in two] == [[0, 1], [2, 3], [4, 5]]
    shape = (6,)
    stateful = ref.uniform(two[1].seed, two[1].op_offset(1), shape, DataType.Float)
    np.testing.assert_array_equal(stateful, ref.uniform(77, 3, shape, DataType.Float))


def test_manual_seed_restarts_the_sequence_and_checks_its_argument() -> None:
    gen = rng_state.kfuse_generator()
    kfuse.manual_seed(-1)  # two's complement, as torch takes it
    assert gen.initial_seed() == (1 << 64) - 1 and gen.get_offset() == 0
    rng_state.reserve(gen, 5)
    assert gen.get_offset() == 20
    kfuse.manual_seed(5)
    assert (gen.initial_seed(), gen.get_offset()) == (5, 0)
    with pytest.raises(InputError, match="a seed is an int"):
        kfuse.manual_seed(1.5)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="64 bits"):
        kfuse.manual_seed(1 << 64)
    with pytest.raises(InputError, match="multiple of 4"):
        gen.set_offset(6)


def test_concurrent_launches_get_distinct_offsets() -> None:
    kfuse.manual_seed(0)
    gen = rng_state.kfuse_generator()
    starts: list[int] = []
    lock = threading.Lock()

    def launch_many() -> None:
        for _ in range(200):
            s = rng_state.reserve(gen, 2).offset
            with lock:
                starts.append(s)

    threads = [threading.Thread(target=launch_many) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(starts) == list(range(0, 1600, 2))


def test_which_generator_a_launch_draws_from() -> None:
    own = rng_state.kfuse_generator()
    assert rng_state.generator_for("numpy", -1) is own
    assert rng_state.generator_for("cupy", 0) is own
    assert rng_state.generator_for("torch", -1) is own  # CPU tensors: torch's has no offset
    assert rng_state.generator_for(None, -1) is own


def test_stateful_draws_under_cuda_graph_capture_are_refused(monkeypatch) -> None:
    # A captured launch would replay the offset it read at capture time: a clear error,
    # raised before torch's CUDA is touched.
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    with pytest.raises(InputError, match="CUDA graph capture") as refused:
        rng_state.generator_for("torch", 0)
    # It says why and what runs instead.
    assert "philox_cuda_state" in str(refused.value)
    assert "give its random ops rng_seed and rng_offset" in str(refused.value)


# -- the GPU -----------------------------------------------------------------------------------


@pytest.mark.gpu
@requires_gpu
@pytest.mark.parametrize("wide", [False, True], ids=["narrow", "wide-products"])
def test_gpu_draws_the_numpy_numbers_bit_for_bit(
    wide: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(switches, "PHILOX_WIDE_PRODUCTS", wide)
    assert (PHILOX_WIDE_PRODUCTS in draw_source()) == wide
    torch = cuda_torch()
    n, seed, offset = 100_003, 0xFEDCBA9876543210, (1 << 33) + 17
    ex = kfuse.KernelExecutor()
    params = kfuse.CompileParams(extra_options=["--fmad=false"])
    ex.compile(draw_source(), "draw", kfuse.LaunchParams(block_x=128), params)
    # The words travel as int32 (torch's uint32 has few operations); bits are compared.
    as_torch = {
        np.dtype(np.uint32): torch.int32,
        np.dtype(np.float32): torch.float32,
        np.dtype(np.float64): torch.float64,
        np.dtype(np.float16): torch.float16,
        np.dtype(ml_dtypes.bfloat16): torch.bfloat16,
    }
    as_bits = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    outs = [torch.zeros(n, dtype=as_torch[np.dtype(d)], device="cuda") for d in DRAW_DTYPES]
    ex.run([*outs, as_signed64(seed), as_signed64(offset), 0], kfuse.LaunchParams(grid_x=132))
    torch.cuda.synchronize()
    for name, got, expected, dtype in zip(
        DRAW_NAMES, outs, expected_draws(seed, offset, n), DRAW_DTYPES
    ):
        host = got.cpu().view(as_bits[np.dtype(dtype).itemsize]).numpy().view(dtype)
        assert_same_bits(name, host, expected)


@pytest.mark.gpu
@requires_gpu
def test_torch_generator_gives_seed_and_offset_after_manual_seed() -> None:
    torch = cuda_torch()
    torch.manual_seed(4242)
    gen = rng_state.generator_for("torch", 0)
    assert rng_state.reserve(gen, 1) == (4242, 0)
    assert rng_state.reserve(gen, 2) == (4242, 1)
    assert torch.cuda.default_generators[0].get_offset() == 12

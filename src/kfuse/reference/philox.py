"""The random numbers of kfuse's RNG ops, computed with NumPy, bit for bit as the device
runtime's kf_philox.cuh computes them (which says why each operation is written as it is):
the reference of a fusion that draws random numbers, such as a dropout's mask, is exact.

    philox4x32_10(counter, key) -> the four output words (Random123's philox4x32-10)
    philox_blocks(seed, offset, count) -> [count, 4] words of subsequences 0 .. count - 1
    uniform(seed, offset, shape, dtype, low=0.0, high=1.0) -> an array of `shape`
    normal(seed, offset, shape, dtype, mean=0.0, std=1.0) -> an array of `shape`

Element i (row-major over `shape`) takes subsequence i // 4 and word i % 4 of it (Double:
i // 2, two words per value). Every float operation is a NumPy float32 (or float64) array
operation in the device code's order; no step may be fused or reordered.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from kfuse.dtypes import DataType, to_numpy_dtype

_MASK32 = 0xFFFFFFFF
# Philox's multipliers and Weyl key increments (Salmon et al., SC'11; Random123).
_MUL = (0xD2511F53, 0xCD9E8D57)
_KEY_STEP = (0x9E3779B9, 0xBB67AE85)
_ROUNDS = 10

_F = np.float32
_D = np.float64


def philox4x32_10(counter: tuple[Any, Any, Any, Any], key: tuple[int, int]) -> list[np.ndarray]:
    """The four output words of Philox 4x32-10 for counters given as four uint32 arrays (or
    numbers) and one key of two 32-bit words."""
    c = [np.asarray(w, dtype=np.uint32) for w in counter]
    k0, k1 = key[0] & _MASK32, key[1] & _MASK32
    for _ in range(_ROUNDS):
        p0 = c[0].astype(np.uint64) * np.uint64(_MUL[0])
        p1 = c[2].astype(np.uint64) * np.uint64(_MUL[1])
        hi0 = (p0 >> np.uint64(32)).astype(np.uint32)
        lo0 = p0.astype(np.uint32)
        hi1 = (p1 >> np.uint64(32)).astype(np.uint32)
        lo1 = p1.astype(np.uint32)
        c = [hi1 ^ c[1] ^ np.uint32(k0), lo1, hi0 ^ c[3] ^ np.uint32(k1), lo0]
        k0 = (k0 + _KEY_STEP[0]) & _MASK32
        k1 = (k1 + _KEY_STEP[1]) & _MASK32
    return c


def philox_blocks(seed: int, offset: int, count: int) -> np.ndarray:
    """[count, 4] uint32: the words of subsequences 0 .. count - 1 at `offset` under `seed`
    (the counter is (offset, subsequence), each 64-bit, low word first)."""
    seed &= (1 << 64) - 1
    offset &= (1 << 64) - 1
    subsequence = np.arange(count, dtype=np.uint64)
    counter = (
        np.full(count, offset & _MASK32, np.uint32),
        np.full(count, offset >> 32, np.uint32),
        subsequence.astype(np.uint32),
        (subsequence >> np.uint64(32)).astype(np.uint32),
    )
    words = philox4x32_10(counter, (seed & _MASK32, seed >> 32))
    return np.stack(words, axis=1)


def _words(seed: int, offset: int, n: int, per_block: int) -> np.ndarray:
    """The flat words of the blocks that n elements of per_block elements a block use."""
    return philox_blocks(seed, offset, -(-n // per_block) + 1).reshape(-1)


# -- words to uniform numbers ------------------------------------------------------------------


def unit_float(x: np.ndarray) -> np.ndarray:
    """(0, 1] float32 from uint32 words (1.0 where x >= 2^32 - 128)."""
    return x.astype(_F) * _F(2.0**-32) + _F(2.0**-33)


def unit_double(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """(0, 1] float64 from 53 bits: x ^ (y << 21)."""
    z = x.astype(np.uint64) ^ (y.astype(np.uint64) << np.uint64(21))
    return z.astype(_D) * _D(2.0**-53) + _D(2.0**-54)


def uniform01_float(x: np.ndarray) -> np.ndarray:
    """[0, 1): unit_float with 1.0 folded to 0."""
    u = unit_float(x)
    return np.where(u == _F(1.0), _F(0.0), u)


def uniform01_double(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    u = unit_double(x, y)
    return np.where(u == 1.0, 0.0, u)


# -- log, sin and cos from basic operations (the device code's series) -------------------------

_LOG_SERIES_F = [
    float.fromhex(h) for h in ("0x1.c71c72p-3", "0x1.24924ap-2", "0x1.99999ap-2", "0x1.555556p-1")
]
_LOG_SERIES_D = [
    float.fromhex(h)
    for h in (
        "0x1.8618618618618p-4",
        "0x1.af286bca1af28p-4",
        "0x1.e1e1e1e1e1e1ep-4",
        "0x1.1111111111111p-3",
        "0x1.3b13b13b13b14p-3",
        "0x1.745d1745d1746p-3",
        "0x1.c71c71c71c71cp-3",
        "0x1.2492492492492p-2",
        "0x1.999999999999ap-2",
        "0x1.5555555555555p-1",
    )
]


def _horner(z: np.ndarray, coefficients: list[float], kind: Any) -> np.ndarray:
    """p = c0; p = p * z + c1; ... in `kind` (signed coefficients, the device's order)."""
    p = np.full_like(z, kind(coefficients[0]))
    for c in coefficients[1:]:
        p = p * z + kind(c)
    return p


def log_float(x: np.ndarray) -> np.ndarray:
    """log(x) for float32 x in [0, 1], as kf::rng_log_float."""
    with np.errstate(divide="ignore", invalid="ignore"):
        bits = x.view(np.uint32)
        e = (bits >> np.uint32(23)).astype(np.int32) - 127
        m = ((bits & np.uint32(0x007FFFFF)) | np.uint32(0x3F800000)).view(_F)
        big = m > _F(float.fromhex("0x1.6a09e6p+0"))
        m = np.where(big, m * _F(0.5), m)
        e = e + big
        f = m - _F(1.0)
        s = f / (_F(2.0) + f)
        z = s * s
        r = _horner(z, _LOG_SERIES_F, _F) * z
        log_m = f - s * (f - r)
        fe = e.astype(_F)
        result = fe * _F(float.fromhex("0x1.62ep-1")) + (
            fe * _F(float.fromhex("0x1.0bfbe8p-15")) + log_m
        )
        return np.where(x == _F(0.0), _F(-np.inf), result)


def log_double(x: np.ndarray) -> np.ndarray:
    """log(x) for float64 x in [0, 1], as kf::rng_log_double."""
    with np.errstate(divide="ignore", invalid="ignore"):
        bits = x.view(np.uint64)
        e = (bits >> np.uint64(52)).astype(np.int64) - 1023
        mantissa = (bits & np.uint64(0x000FFFFFFFFFFFFF)) | np.uint64(0x3FF0000000000000)
        m = mantissa.view(_D)
        big = m > float.fromhex("0x1.6a09e667f3bcdp+0")
        m = np.where(big, m * 0.5, m)
        e = e + big
        f = m - 1.0
        s = f / (2.0 + f)
        z = s * s
        r = _horner(z, _LOG_SERIES_D, _D) * z
        log_m = f - s * (f - r)
        de = e.astype(_D)
        result = de * float.fromhex("0x1.62e42feep-1") + (
            de * float.fromhex("0x1.a39ef35793c76p-33") + log_m
        )
        return np.where(x == 0.0, -np.inf, result)


_SIN_F = [
    float.fromhex(h)
    for h in ("0x1.71de3ap-19", "-0x1.a01a02p-13", "0x1.111112p-7", "-0x1.555556p-3")
]
_COS_F = [
    float.fromhex(h)
    for h in ("-0x1.27e4fcp-22", "0x1.a01a02p-16", "-0x1.6c16c2p-10", "0x1.555556p-5", "-0x1p-1")
]
_SIN_D = [
    float.fromhex(h)
    for h in (
        "0x1.952c77030ad4ap-49",
        "-0x1.ae7f3e733b81fp-41",
        "0x1.6124613a86d09p-33",
        "-0x1.ae64567f544e4p-26",
        "0x1.71de3a556c734p-19",
        "-0x1.a01a01a01a01ap-13",
        "0x1.1111111111111p-7",
        "-0x1.5555555555555p-3",
    )
]
# The device's cos polynomial is 1 - z * p, its coefficients those of p.
_COS_D = [
    float.fromhex(h)
    for h in (
        "0x1.6827863b97d97p-53",
        "-0x1.ae7f3e733b81fp-45",
        "0x1.93974a8c07c9dp-37",
        "-0x1.1eed8eff8d898p-29",
        "0x1.27e4fb7789f5cp-22",
        "-0x1.a01a01a01a01ap-16",
        "0x1.6c16c16c16c17p-10",
        "-0x1.5555555555555p-5",
        "0x1p-1",
    )
]


def _quadrant_pick(
    k: np.ndarray, want_cos: np.ndarray, sin_r: np.ndarray, cos_r: np.ndarray
) -> np.ndarray:
    quadrant = (k + want_cos.astype(k.dtype)) & 3
    magnitude = np.where((quadrant & 1) != 0, cos_r, sin_r)
    return np.where((quadrant & 2) != 0, -magnitude, magnitude)


def sin_or_cos_float(v: np.ndarray, want_cos: np.ndarray) -> np.ndarray:
    """sin(v), or cos(v) where want_cos, for float32 v in [0, 2 pi]."""
    k = (v * _F(float.fromhex("0x1.45f306p-1")) + _F(0.5)).astype(np.int32)
    fk = k.astype(_F)
    r = (v - fk * _F(float.fromhex("0x1.92p+0"))) - fk * _F(float.fromhex("0x1.fb4p-12"))
    r = r - fk * _F(float.fromhex("0x1.4442d2p-24"))
    z = r * r
    sin_r = r + r * (z * _horner(z, _SIN_F, _F))
    cos_r = _F(1.0) + z * _horner(z, _COS_F, _F)
    return _quadrant_pick(k, want_cos, sin_r, cos_r)


def sin_or_cos_double(v: np.ndarray, want_cos: np.ndarray) -> np.ndarray:
    """sin(v), or cos(v) where want_cos, for float64 v in [0, 2 pi]."""
    k = (v * float.fromhex("0x1.45f306dc9c883p-1") + 0.5).astype(np.int32)
    dk = k.astype(_D)
    r = (v - dk * float.fromhex("0x1.921fb544p+0")) - dk * float.fromhex("0x1.0b4611a6p-34")
    r = r - dk * float.fromhex("0x1.3198a2e037073p-69")
    z = r * r
    sin_r = r + r * (z * _horner(z, _SIN_D, _D))
    cos_r = 1.0 - z * _horner(z, _COS_D, _D)
    return _quadrant_pick(k, want_cos, sin_r, cos_r)


# -- an RNG op's output ------------------------------------------------------------------------


def _normal_float(words: np.ndarray, n: int) -> np.ndarray:
    """Box-Muller over word pairs: element i uses words i & ~1 and i | 1, the sine for even i."""
    i = np.arange(n, dtype=np.int64)
    u = uniform01_float(words[i & ~1])
    v = uniform01_float(words[i | 1]) * _F(float.fromhex("0x1.921fb6p+2"))
    with np.errstate(invalid="ignore", over="ignore"):
        return np.sqrt(_F(-2.0) * log_float(u)) * sin_or_cos_float(v, (i & 1) != 0)


def _normal_double(words: np.ndarray, n: int) -> np.ndarray:
    """Element i: block i // 2, all four words; the sine for even i."""
    blocks = words.reshape(-1, 4)[np.arange(n) // 2]
    u = uniform01_double(blocks[:, 0], blocks[:, 1])
    v = uniform01_double(blocks[:, 2], blocks[:, 3]) * float.fromhex("0x1.921fb54442d18p+2")
    with np.errstate(invalid="ignore", over="ignore"):
        return np.sqrt(-2.0 * log_double(u)) * sin_or_cos_double(v, (np.arange(n) & 1) != 0)


def _check_dtype(dtype: DataType) -> None:
    if dtype not in (DataType.Float, DataType.Double, DataType.Half, DataType.BFloat16):
        raise ValueError(f"random numbers are Float, Double, Half or BFloat16, not {dtype!r}")


def _is_standard(a: float, b: float, standard: tuple[float, float]) -> bool:
    return (a, b) == standard


def uniform(
    seed: int,
    offset: int,
    shape: tuple[int, ...],
    dtype: DataType,
    low: float = 0.0,
    high: float = 1.0,
) -> np.ndarray:
    """The values kf::rng_uniform_* give for an output of `shape` (the standard form where
    (low, high) == (0, 1), as nvFuser's uniform picks it)."""
    _check_dtype(dtype)
    n = math.prod(shape)
    standard = _is_standard(low, high, (0.0, 1.0))
    if dtype == DataType.Double:
        words = _words(seed, offset, n, 2)
        u = uniform01_double(words[0 : 2 * n : 2], words[1 : 2 * n : 2])
        out = u if standard else _D(low) + (_D(high) - _D(low)) * u
        return out.reshape(shape)
    words = _words(seed, offset, n, 4)[:n]
    if dtype == DataType.Float:
        u = uniform01_float(words)
        out = u if standard else _F(low) + (_F(high) - _F(low)) * u
        return out.reshape(shape)
    narrow = to_numpy_dtype(dtype)
    if standard:
        result = unit_float(words).astype(narrow)
        return np.where(result.astype(_F) == _F(1.0), _F(0.0).astype(narrow), result).reshape(shape)
    lo, hi = _F(low), _F(high)
    result = (lo + (hi - lo) * unit_float(words)).astype(narrow)
    top = hi.astype(narrow).astype(_F)
    return np.where(result.astype(_F) == top, lo.astype(narrow), result).reshape(shape)


def normal(
    seed: int,
    offset: int,
    shape: tuple[int, ...],
    dtype: DataType,
    mean: float = 0.0,
    std: float = 1.0,
) -> np.ndarray:
    """The values kf::rng_normal_* give for an output of `shape` (the standard form where
    (mean, std) == (0, 1))."""
    _check_dtype(dtype)
    n = math.prod(shape)
    standard = _is_standard(mean, std, (0.0, 1.0))
    if dtype == DataType.Double:
        z = _normal_double(_words(seed, offset, n, 2), n)
        return (z if standard else z * _D(std) + _D(mean)).reshape(shape)
    z = _normal_float(_words(seed, offset, n, 4), n)
    out = z if standard else z * _F(std) + _F(mean)
    if dtype != DataType.Float:
        out = out.astype(to_numpy_dtype(dtype))
    return out.reshape(shape)


def generated_values(
    op: str, shape: tuple[int, ...], params: list[Any], dtype: DataType
) -> np.ndarray:
    """The output of random generator `op` ("uniform" or "normal", kfuse.ir.random_ops) of
    `shape` with params [a, b, seed, offset]: what its generated read computes in a kernel,
    in `dtype`'s NumPy type."""
    a, b, seed, offset = params
    draw = {"uniform": uniform, "normal": normal}[op]
    return draw(int(seed), int(offset), tuple(shape), dtype, float(a), float(b))

"""kfuse.codegen.shared_math: sin and cos of one value come from one kf::sincos call, in
pointwise bodies and in reductions' stage functions, and change no result on the emulator
(tests/test_shared_math_gpu.py checks the GPU's sincosf bit for bit)."""

from __future__ import annotations

import numpy as np
import pytest

from kfuse import DataType, switches
from kfuse.codegen.shared_math import paired
from shared_math_cases import angles, chain, rotation_sum
from source_corpus import recorded_sources


def test_the_first_sin_and_cos_of_a_value_come_from_one_call() -> None:
    body = [
        "const float v1 = kf::cos(v0);",
        "const float v2 = kf::exp(v0);",
        "const float v3 = kf::sin(v0);",
        "const float v4 = kf::sin(v2);",  # no cos of v2: stays
        "const double v5 = kf::cos(v6);",  # sin of v6 in float only: no pair
        "const float v7 = kf::sin(v6);",
    ]
    assert paired(body) == [
        "const kf::SinCos<float> sc_v0 = kf::sincos(v0); const float v1 = sc_v0.cos;",
        "const float v2 = kf::exp(v0);",
        "const float v3 = sc_v0.sin;",
        *body[3:],
    ]


def test_values_in_a_brace_block_are_not_paired(monkeypatch: pytest.MonkeyPatch) -> None:
    """A call inside a block would leave the pair's result out of the other line's scope."""
    body = [
        "const float v1 = kf::sin(v0);",
        "if (part0 == 1) {",
        "  const float v2 = kf::cos(v0);",
        "}",
        "const float v3 = kf::cos(v0);",
    ]
    out = paired(body)
    assert out[0].startswith("const kf::SinCos<float> sc_v0 = kf::sincos(v0);")
    assert out[2] == body[2] and out[4] == "const float v3 = sc_v0.cos;"
    monkeypatch.setattr(switches, "SHARE_SINCOS", False)
    assert paired(body) == body


def _sources(fd: object, args: list[np.ndarray]) -> list[str]:
    found: list[tuple[str, str]] = []
    with recorded_sources(found):
        fd.execute(args)  # type: ignore[attr-defined]
    return [source for _, source in found]


@pytest.mark.parametrize("dtype", [DataType.Float, DataType.Double, DataType.Half])
def test_a_chain_of_cos_plus_sin_is_the_same_either_way(
    dtype: DataType, monkeypatch: pytest.MonkeyPatch
) -> None:
    np_dtype = {DataType.Float: np.float32, DataType.Double: np.float64}.get(dtype, np.float16)
    x = angles(3000, np_dtype)
    assert all("kf::sincos(" in s for s in _sources(chain(dtype), [x]))
    (shared,) = chain(dtype).execute([x])
    monkeypatch.setattr(switches, "SHARE_SINCOS", False)
    assert not any("kf::sincos(" in s for s in _sources(chain(dtype), [x]))
    (apart,) = chain(dtype).execute([x])
    np.testing.assert_array_equal(shared, apart)
    with np.errstate(invalid="ignore"):
        want = x.astype(np.float64)
        for _ in range(2):
            want = np.cos(want) + np.sin(want)
    tolerance = 4e-3 if dtype is DataType.Half else 1e-5
    np.testing.assert_allclose(shared, want, rtol=tolerance, atol=tolerance, equal_nan=True)


def test_a_reduction_stage_pairs_them_and_keeps_its_results(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    t = angles(64 * 200, np.float32).reshape(64, 200)
    t[~np.isfinite(t)] = 1.0
    x = angles(64 * 200, np.float32, seed=1).reshape(64, 200) / 1e30
    x[~np.isfinite(x)] = 0.5
    assert any("kf::sincos(" in s for s in _sources(rotation_sum(DataType.Float), [t, x]))
    shared = rotation_sum(DataType.Float).execute([t, x])
    monkeypatch.setattr(switches, "SHARE_SINCOS", False)
    apart = rotation_sum(DataType.Float).execute([t, x])
    for a, b in zip(shared, apart, strict=True):
        np.testing.assert_array_equal(a, b)

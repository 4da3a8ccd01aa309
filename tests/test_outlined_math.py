"""sin, cos, tan, lgamma (and sincos, sin and cos of one value) called out of line where a
kernel function holds two or more (kfuse.codegen.outlined_math): nvFuser's many-pointwise-ops
host benchmark compiled in 13.2 s with them inlined (8 iterations; 36 s at 22 on an H100
machine), 0.6 s outlined. The values are kf::'s own, so results do not change: checked here on
the emulator and the GPU against the reference, and the source's shape (which calls go out of
line) without a GPU."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from gpu_support import requires_gpu
from kfuse import DataType, FusionDefinition, switches
from kfuse.codegen.outlined_math import outlined
from kfuse.reference import evaluate
from source_corpus import recorded_sources

torch = pytest.importorskip("torch")


def chained(iterations: int, ops: tuple[str, str] = ("cos", "sin")) -> FusionDefinition:
    """nvFuser's many-pointwise-ops fusion: a = f(a) + g(a), `iterations` times, in float."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Half)
        y = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Half)
        a = fd.ops.add(fd.ops.cast(x, DataType.Float), fd.ops.cast(y, DataType.Float))
        for _ in range(iterations):
            a = fd.ops.add(getattr(fd.ops, ops[0])(a), getattr(fd.ops, ops[1])(a))
        fd.add_output(fd.ops.cast(a, DataType.Half))
    return fd


def kernel_source(fd: FusionDefinition, inputs: list[Any]) -> str:
    found: list[tuple[str, str]] = []
    with recorded_sources(found):
        try:
            fd.execute(inputs)
        except Exception:  # noqa: BLE001, S110 - the kernel is not loaded; only its source matters
            pass
    ((_, source),) = found
    return source


def halves(n: int, device: str = "cpu") -> list[Any]:
    rng = np.random.default_rng(n)
    # Large arguments too: the reduction sinf and cosf take past 1e5 is in what is outlined.
    values = [rng.uniform(-3e5, 3e5, n), rng.uniform(-4, 4, n)]
    return [torch.from_numpy(v).half().to(device) for v in values]


def test_two_heavy_calls_go_out_of_line_once_each(monkeypatch: pytest.MonkeyPatch) -> None:
    source = kernel_source(chained(3), halves(64))  # sin and cos of one value: one sincos
    body = source[source.index("_body(") :]
    assert "kf::sincos(" not in body and body.count("kf_outlined_sincos(") == 3
    assert source.count("auto kf_outlined_sincos(") == 1  # defined once
    monkeypatch.setattr(switches, "SHARE_SINCOS", False)
    source = kernel_source(chained(3), halves(64))
    body = source[source.index("_body(") :]
    assert "kf::cos(" not in body and "kf::sin(" not in body
    assert body.count("kf_outlined_cos(") == 3 and body.count("kf_outlined_sin(") == 3
    assert source.count("auto kf_outlined_cos(") == 1


def test_one_heavy_call_stays_inline() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], dtype=DataType.Float)
        fd.add_output(fd.ops.exp(fd.ops.sin(x)))
    source = kernel_source(fd, [np.ones(64, np.float32)])
    assert "kf_outlined" not in source and "kf::sin(" in source


def test_the_switch_keeps_them_inline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(switches, "OUTLINE_HEAVY_MATH", False)
    assert "kf_outlined" not in kernel_source(chained(2), halves(64))


def test_every_heavy_function_and_a_reduction_stage() -> None:
    wrappers, body = outlined(["a = kf::tan(x);", "b = kf::lgamma(a) + kf::tan(a);"])
    assert body == ["a = kf_outlined_tan(x);", "b = kf_outlined_lgamma(a) + kf_outlined_tan(a);"]
    assert sum("__noinline__" in w for w in wrappers) == 2
    with FusionDefinition() as fd:  # a sum of cos(x) + sin(x) per row: the stage function
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        both = fd.ops.add(fd.ops.cos(x), fd.ops.sin(x))
        fd.add_output(fd.ops.sum(both, dims=[1]))
    x = np.random.default_rng(3).uniform(-10, 10, (8, 300)).astype(np.float32)
    (actual,) = fd.execute([x])
    (expected,) = evaluate(fd, [x])
    np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize(
    "device", ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, requires_gpu])]
)
@pytest.mark.parametrize("ops", [("cos", "sin"), ("tan", "lgamma")], ids=["cos-sin", "tan-lgamma"])
def test_outlined_results_match_the_reference(device: str, ops: tuple[str, str]) -> None:
    fd = chained(4, ops)
    inputs = halves(1000, device)
    if ops[0] == "tan":  # keep lgamma's argument away from its poles' overflow
        inputs = [(v.float().remainder(1.0) + 0.5).half() for v in inputs]
    (actual,) = fd.execute(inputs)
    (expected,) = evaluate(fd, [v.cpu() for v in inputs])
    np.testing.assert_allclose(
        actual.cpu().float().numpy(), np.asarray(expected.cpu().float()), rtol=2e-2, atol=2e-2
    )

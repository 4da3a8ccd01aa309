"""The fusions of benchmarks/host_benchmarks.py (nvFuser's host benchmarks, ported) compute
what their eager definitions compute, on the host emulator, at each size the benchmark
runs (the layer norm's rows cut as the emulator's run cuts them)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kfuse import FusionDefinition

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "host_benchmarks.py"


def load() -> Any:
    spec = importlib.util.spec_from_file_location("host_benchmarks", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


BENCH = load()
CASES = BENCH.cases(small=True)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_a_host_benchmark_fusion_matches_its_eager_definition(case: Any) -> None:
    with FusionDefinition() as fd:
        case.define(fd)
    rng = np.random.default_rng(0)
    for shapes in (case.steady, case.dynamic[-1]):
        inputs = [
            (rng.standard_normal(s) / 4).astype(d) for s, d in zip(shapes, case.dtypes, strict=True)
        ]
        outputs = fd.execute(inputs)
        expected = case.eager(np, *inputs)
        assert len(outputs) == len(expected)
        for out, ref in zip(outputs, expected, strict=True):
            np.testing.assert_allclose(
                np.asarray(out, np.float32).reshape(ref.shape),
                ref.astype(np.float32),
                rtol=case.tolerance,
                atol=case.tolerance,
            )


def test_the_many_segments_benchmark_runs_as_segments_in_turn() -> None:
    (case,) = [c for c in CASES if c.name == "many_segments"]
    with FusionDefinition() as fd:
        case.define(fd)
    inputs = [np.ones(s, np.float32) for s in case.steady]
    assert len(fd.segments(inputs)) >= 11

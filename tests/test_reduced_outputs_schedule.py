"""An extra output of reduced shape (the rms, the mean, the inverse std of nvFuser's norm
forwards, benchmarks/models) keeps a normalization on the schedule it has without it: one
inner persistent kernel with the same parameters, at the model suite's sizes on an H200."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from kfuse import DataType, FusionDefinition
from kfuse.engine.compiler import choose_scheduler
from kfuse.ir.canonicalize import canonical_fusion
from kfuse.runtime.info import CUDA, build_runtime_info
from kfuse.schedule.types import SchedulerType

torch = pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from models import registry  # noqa: E402
from models.case import DTYPES  # noqa: E402

FORWARDS = ["rmsnorm_fwd", "layernorm_fwd"]


def _without_extra_outputs(fd: FusionDefinition) -> FusionDefinition:
    """The same definition with only its first (full-shape) output."""
    namespace: dict = {"DataType": DataType, "FusionDefinition": FusionDefinition}
    exec(repr(fd), namespace)  # noqa: S102 - kfuse's own printed definition
    with FusionDefinition() as only_y:
        namespace["kfuse_fusion"](only_y)
    only_y.fusion.outputs = only_y.fusion.outputs[:1]
    only_y.fusion.finalize()
    return only_y


def _schedule(fd: FusionDefinition, inputs: list) -> tuple:
    fusion = canonical_fusion(fd.fusion)
    info = dataclasses.replace(build_runtime_info(fusion, inputs, device=None), backend=CUDA)
    scheduler, reasons = choose_scheduler(fusion, info)
    assert scheduler is not None, reasons
    return scheduler.scheduler_type, str(scheduler.heuristics(fusion, info))


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("name", FORWARDS)
def test_reduced_outputs_keep_the_persistent_schedule(
    name: str, dtype: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KFUSE_EMULATOR_PROFILE", "h200")
    (case,) = [c for c in registry.CASES if c.name == name]
    fd = case.define(DTYPES[dtype])
    assert len(fd.fusion.outputs) > 1
    assert all(o.ndim < 2 or o.axes[1].is_broadcast for o in fd.fusion.outputs[1:])
    only_y = _without_extra_outputs(fd)
    for rows, hidden in case.sizes:
        # Layouts only: the values never reach the scheduler.
        inputs = [
            torch.empty((rows, hidden)[-v.ndim :], dtype=getattr(torch, dtype))
            for v in fd.fusion.tensor_inputs
        ]
        full = _schedule(fd, inputs)
        assert full[0] is SchedulerType.inner_persistent, (rows, hidden)
        assert full == _schedule(only_y, inputs), (rows, hidden)

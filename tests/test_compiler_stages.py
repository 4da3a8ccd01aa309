"""The compiler's stages (kfuse.engine.compiler) as a user sees them: fd.last_program() and
KFUSE_DUMP. Runs on the host emulator."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kfuse import DataType, FusionDefinition
from kfuse.engine.program import (
    KernelProgram,
    LibraryProgram,
    SegmentedProgram,
    SegmentKernelsProgram,
)
from kfuse.errors import InputError


def softmax() -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        m = fd.ops.broadcast(fd.ops.max(x, dims=[1]), is_broadcast_dim=[False, True])
        e = fd.ops.exp(fd.ops.sub(x, m))
        s = fd.ops.broadcast(fd.ops.sum(e, dims=[1]), is_broadcast_dim=[False, True])
        fd.add_output(fd.ops.div(e, s))
    return fd


def sums_over_both_axes() -> FusionDefinition:
    """No single scheduler takes it: a reduction and a normalization segment."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        s0 = fd.ops.sum(x, dims=[0])
        fd.add_output(fd.ops.add(x, fd.ops.broadcast(s0, is_broadcast_dim=[True, False])))
        fd.add_output(fd.ops.sum(x, dims=[1]))
    return fd


def test_last_program_shows_the_scheduler_params_and_kernels() -> None:
    fd = softmax()
    assert fd.last_program() is None
    x = np.random.default_rng(0).standard_normal((64, 300)).astype(np.float32)
    fd.execute([x])
    program = fd.last_program()
    assert isinstance(program, KernelProgram)
    assert program.scheduler.value == "inner_persistent"
    (launch,) = program.launches
    text = str(program)
    assert "inner_persistent" in text and f"kernel {launch.name}: grid {launch.grid}" in text
    assert launch.name in program.cuda_source()


def test_a_segmented_program_shows_each_segment_once_it_ran() -> None:
    fd = sums_over_both_axes()
    x = np.ones((30, 50), np.float32)
    fd.execute([x])
    program = fd.last_program()
    assert isinstance(program, SegmentKernelsProgram)  # its segments are all kernels
    schedulers = [s.scheduler.value for s in program.segments()]
    text = str(program)
    assert f"{len(schedulers)} segments as one program" in text
    for k, name in enumerate(schedulers):
        assert f"segment {k}: {name}" in text
    for launch in program.launches:
        assert f"kernel {launch.name}: grid {launch.grid}" in text


def test_a_program_with_a_library_segment_runs_its_segments_in_turn() -> None:
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1])
        b = fd.define_tensor(shape=[-1, -1])
        fd.add_output(fd.ops.relu(fd.ops.matmul(a, b)))
    a = np.ones((4, 5), np.float32)
    fd.execute([a, a.T.copy()])
    program = fd.last_program()
    assert isinstance(program, SegmentedProgram)
    schedulers = [s.scheduler.value for s in program.segments()]
    text = str(program)
    assert schedulers == ["expr_eval", "pointwise"]
    assert "SegmentedProgram: 2 segments" in text and "LibraryProgram" in text
    assert text.count("KernelProgram") == 1


def test_a_library_op_is_a_library_program() -> None:
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1])
        b = fd.define_tensor(shape=[-1, -1])
        fd.add_output(fd.ops.matmul(a, b))
    a = np.ones((4, 5), np.float32)
    fd.execute([a, a.T.copy()])
    program = fd.last_program()
    assert isinstance(program, LibraryProgram) and program.cuda_source() is None


def test_kfuse_dump_writes_every_stage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KFUSE_DUMP", "segments,params,spec,cuda")
    monkeypatch.setenv("KFUSE_DUMP_DIR", str(tmp_path))
    fd = sums_over_both_axes()
    fd.execute([np.ones((30, 50), np.float32)])
    folders = sorted(p for p in tmp_path.iterdir() if p.is_dir())
    segments = [p / "segments.txt" for p in folders if (p / "segments.txt").exists()]
    assert len(segments) == 1 and "reduction" in segments[0].read_text()
    kernels = sorted(tmp_path.rglob("*.cu"))
    assert kernels and all("__global__" in k.read_text() for k in kernels)
    specs = "".join(p.read_text() for p in tmp_path.rglob("spec.txt"))
    assert all(f"{k.stem}: ReductionKernelSpec(" in specs for k in kernels)
    params = "".join(p.read_text() for p in tmp_path.rglob("params.txt"))
    assert "reduction: " in params


def test_kfuse_dump_is_silent_when_unset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KFUSE_DUMP", raising=False)
    monkeypatch.setenv("KFUSE_DUMP_DIR", str(tmp_path / "dump"))
    softmax().execute([np.ones((8, 16), np.float32)])
    assert not (tmp_path / "dump").exists()


def test_an_unknown_dump_stage_is_an_input_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KFUSE_DUMP", "cuda,sass2")
    with pytest.raises(InputError, match="KFUSE_DUMP: unknown stage 'sass2'"):
        softmax().execute([np.ones((8, 16), np.float32)])


def test_a_pinned_scheduler_that_declines_says_why() -> None:
    from kfuse._C import PointwiseParams
    from kfuse.errors import SchedulerError

    with pytest.raises(SchedulerError, match="manual_execute with PointwiseParams"):
        softmax().manual_execute([np.ones((8, 16), np.float32)], PointwiseParams())


def test_dtypes_reach_the_program() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], dtype=DataType.Int32)
        fd.add_output(fd.ops.add(x, x))
    (out,) = fd.execute([np.arange(10, dtype=np.int32)])
    assert (out == 2 * np.arange(10)).all()
    assert "kf::Tensor<int, 1" in fd.last_program().cuda_source()

"""The compiler's stages (kfuse.engine.compiler): each stage function's output, and the
stages as a user sees them, fd.last_program() and KFUSE_DUMP. Runs on the host emulator."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kfuse import DataType, FusionDefinition
from kfuse.engine import compiler, dump
from kfuse.engine.program import (
    KernelProgram,
    LibraryProgram,
    SegmentedProgram,
    SegmentKernelsProgram,
)
from kfuse.errors import InputError, SchedulerError
from kfuse.ir.exprs import BinaryOp
from kfuse.runtime.info import build_runtime_info
from kfuse.runtime.launch import GeneratedKernel
from kfuse.schedule import SchedulerType
from small_fusions import sums_over_both_axes


def softmax() -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        m = fd.ops.broadcast(fd.ops.max(x, dims=[1]), is_broadcast_dim=[False, True])
        e = fd.ops.exp(fd.ops.sub(x, m))
        s = fd.ops.broadcast(fd.ops.sum(e, dims=[1]), is_broadcast_dim=[False, True])
        fd.add_output(fd.ops.div(e, s))
    return fd


def test_last_program_shows_the_scheduler_params_and_kernels() -> None:
    fd = softmax()
    assert fd.last_program() is None
    x = np.random.default_rng(0).standard_normal((64, 300)).astype(np.float32)
    fd.execute([x])
    program = fd.last_program()
    assert isinstance(program, KernelProgram)
    assert program.scheduler is SchedulerType.inner_persistent
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
    schedulers = [s.scheduler for s in program.segments()]
    text = str(program)
    assert f"{len(schedulers)} segments as one program" in text
    for k, scheduler in enumerate(schedulers):
        assert f"segment {k}: {scheduler.value}" in text
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
    schedulers = [s.scheduler for s in program.segments()]
    text = str(program)
    assert schedulers == [SchedulerType.expr_eval, SchedulerType.pointwise]
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


def canonical_call(fd: FusionDefinition, inputs: list) -> tuple:
    """(the canonicalize stage's fusion, the RuntimeInfo of a call with `inputs` on it)."""
    fusion = compiler.stage_canonicalize(fd.fusion)
    return fusion, build_runtime_info(fusion, inputs)


def test_the_stages_are_functions_named_as_the_dump_labels() -> None:
    stages = [name for name in compiler.__all__ if name.startswith("stage_")]
    assert sorted(stages) == sorted(f"stage_{label}" for label in dump.STAGES)
    assert dump.STAGES == ("canonicalize", "partition", "params", "kernels", "compile", "program")


def test_canonicalize_gives_the_fusion_every_stage_sees_once_per_definition() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1])
        fd.add_output(fd.ops.pow(x, 2.0))
    fusion = compiler.stage_canonicalize(fd.fusion)
    assert fusion is not fd.fusion and compiler.stage_canonicalize(fd.fusion) is fusion
    (square,) = fusion.exprs
    assert isinstance(square, BinaryOp) and square.inputs[0] is square.inputs[1]
    assert "pow" in repr(fd)  # the definition itself is not rewritten


def test_one_scheduler_runs_through_every_stage() -> None:
    fd = softmax()
    x = np.random.default_rng(0).standard_normal((64, 300)).astype(np.float32)
    fusion, info = canonical_call(fd, [x])
    partition = compiler.stage_partition(fusion, info, None, segment=True)
    assert partition.scheduler is not None and partition.segmented is None
    assert partition.scheduler.scheduler_type is SchedulerType.inner_persistent
    assert partition.folded is None and partition.scheduled == (fusion, info)
    params = compiler.stage_params(partition, None)
    assert params.scheduler_type is SchedulerType.inner_persistent and params.persistent
    (kernel,) = compiler.stage_kernels(partition, params)
    assert isinstance(kernel, GeneratedKernel) and kernel.name in kernel.source
    assert kernel.scheduler is SchedulerType.inner_persistent
    (launch,) = compiler.stage_compile(partition, params, [kernel])
    assert (launch.name, launch.grid, launch.block) == (kernel.name, kernel.grid, kernel.block)
    program = compiler.stage_program(partition, params, [launch])
    assert isinstance(program, KernelProgram) and program.params is params
    assert program.launches == [launch] and program.folded == ()
    (out,) = program.run(info, None)
    assert np.allclose(out, np.exp(x) / np.exp(x).sum(axis=1, keepdims=True), rtol=1e-5)
    whole = compiler.compile_fusion(fusion, info, None, segment=True)
    assert whole.cuda_source() == program.cuda_source()


def test_partition_folds_a_boundary_reshape_that_is_a_view() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        xr = fd.ops.reshape(x, new_shape=[fd.ops.size(x, 0), 2, 3])
        fd.add_output(fd.ops.sum(fd.ops.exp(xr), dims=[2]))
    x = np.ones((4, 6), np.float32)
    fusion, info = canonical_call(fd, [x])
    partition = compiler.stage_partition(fusion, info, None, segment=True)
    assert partition.scheduler is not None and partition.segmented is None
    assert partition.scheduler.scheduler_type is SchedulerType.reduction
    assert partition.folded is not None and partition.folded.reshapes == ("T1",)
    assert partition.scheduled[0] is partition.folded.fusion
    program = compiler.compile_fusion(fusion, info, None, segment=True)
    assert isinstance(program, KernelProgram) and program.folded == ("T1",)
    (out,) = program.run(info, None)
    assert np.allclose(out, 3 * np.e)


def test_partition_splits_what_no_scheduler_takes_and_program_merges_the_segments() -> None:
    x = np.ones((30, 50), np.float32)
    fusion, info = canonical_call(sums_over_both_axes(), [x])
    partition = compiler.stage_partition(fusion, info, None, segment=True)
    assert partition.scheduler is None and partition.segmented is not None
    assert len(partition.segmented.plans) == 2
    program = compiler.stage_program(partition, None, [])
    assert isinstance(program, SegmentKernelsProgram)
    assert {s.scheduler for s in program.segments()} >= {SchedulerType.reduction}
    with pytest.raises(SchedulerError, match="no scheduler takes the whole fusion"):
        compiler.stage_partition(fusion, info, None, segment=False)


def test_a_library_op_generates_and_compiles_no_kernel() -> None:
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1])
        b = fd.define_tensor(shape=[-1, -1])
        fd.add_output(fd.ops.matmul(a, b))
    a = np.ones((4, 5), np.float32)
    fusion, info = canonical_call(fd, [a, a.T.copy()])
    partition = compiler.stage_partition(fusion, info, None, segment=True)
    assert partition.scheduler is not None
    assert partition.scheduler.scheduler_type is SchedulerType.expr_eval
    params = compiler.stage_params(partition, None)
    assert compiler.stage_kernels(partition, params) == []
    assert compiler.stage_compile(partition, params, []) == []
    program = compiler.stage_program(partition, params, [])
    assert isinstance(program, LibraryProgram)
    (out,) = program.run(info, None)
    assert (out == 5).all()


def test_pinned_params_pick_the_scheduler_and_are_the_params() -> None:
    from kfuse._C import PointwiseParams

    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1])
        fd.add_output(fd.ops.exp(x))
    fusion, info = canonical_call(fd, [np.zeros(64, np.float32)])
    pinned = PointwiseParams(vectorization_factor=2)
    partition = compiler.stage_partition(fusion, info, pinned, segment=True)
    assert partition.scheduler is not None
    assert partition.scheduler.scheduler_type is SchedulerType.pointwise
    assert compiler.stage_params(partition, pinned) is pinned
    fusion, info = canonical_call(softmax(), [np.ones((8, 16), np.float32)])
    with pytest.raises(SchedulerError, match="manual_execute with PointwiseParams"):
        compiler.stage_partition(fusion, info, pinned, segment=True)


def dump_files(root: Path, name: str) -> str:
    return "".join(p.read_text() for p in sorted(root.rglob(name)))


def test_kfuse_dump_writes_every_stage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KFUSE_DUMP", ",".join(dump.STAGES))
    monkeypatch.setenv("KFUSE_DUMP_DIR", str(tmp_path))
    fd = sums_over_both_axes()
    fd.execute([np.ones((30, 50), np.float32)])
    assert "fd.ops.sum(" in dump_files(tmp_path, "canonicalize.txt")
    partitions = dump_files(tmp_path, "partition.txt")
    assert "2 segments" in partitions and "reduction: the whole fusion" in partitions
    kernels = sorted(tmp_path.rglob("*.cu"))
    assert kernels and all("__global__" in k.read_text() for k in kernels)
    specs = dump_files(tmp_path, "kernels.txt")
    assert all(f"{k.stem}: ReductionKernelSpec(" in specs for k in kernels)
    assert "reduction: " in dump_files(tmp_path, "params.txt")
    for k in kernels:  # the emulator compiles with the host's C++ compiler
        for suffix in ("ptx", "sass"):
            (binary,) = tmp_path.rglob(f"{k.stem}.{suffix}")
            assert "does not apply" in binary.read_text()
    programs = dump_files(tmp_path, "program.txt")
    assert "segments as one program" in programs
    assert all(f"kernel {k.stem}: grid" in programs for k in kernels)


def test_kfuse_dump_writes_only_the_stages_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KFUSE_DUMP", "Params, program")
    monkeypatch.setenv("KFUSE_DUMP_DIR", str(tmp_path))
    softmax().execute([np.ones((8, 16), np.float32)])
    names = {p.name for p in tmp_path.rglob("*") if p.is_file()}
    assert names == {"params.txt", "program.txt"}
    assert "inner_persistent: " in dump_files(tmp_path, "params.txt")


def test_kfuse_dump_is_silent_when_unset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KFUSE_DUMP", raising=False)
    monkeypatch.setenv("KFUSE_DUMP_DIR", str(tmp_path / "dump"))
    softmax().execute([np.ones((8, 16), np.float32)])
    assert not (tmp_path / "dump").exists()


def test_an_unknown_dump_stage_is_an_input_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KFUSE_DUMP", "kernels,cuda")
    with pytest.raises(InputError, match="KFUSE_DUMP: unknown stage 'cuda' \\(stages: canon"):
        softmax().execute([np.ones((8, 16), np.float32)])


def test_a_pinned_scheduler_that_declines_says_why() -> None:
    from kfuse._C import PointwiseParams

    with pytest.raises(SchedulerError, match="manual_execute with PointwiseParams"):
        softmax().manual_execute([np.ones((8, 16), np.float32)], PointwiseParams())


def test_dtypes_reach_the_program() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], dtype=DataType.Int32)
        fd.add_output(fd.ops.add(x, x))
    (out,) = fd.execute([np.arange(10, dtype=np.int32)])
    assert (out == 2 * np.arange(10)).all()
    assert "kf::Tensor<int, 1" in fd.last_program().cuda_source()

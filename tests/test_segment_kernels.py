"""Segments that are all generated kernels run as one KernelProgram (kfuse.engine.segment_kernels),
on the host emulator: the same results and segments as SegmentedRunner gives, the values
segments pass on in workspaces (the call allocates its outputs alone), boundary reshapes
folded first (no expr_eval segment copying them), and the runner kept for library segments."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from kfuse.dtypes import DataType
from kfuse.engine import compiler
from kfuse.engine import program as program_module
from kfuse.engine.program import SegmentedProgram, SegmentKernelsProgram
from kfuse.frontend import FusionDefinition
from kfuse.reference import evaluate
from kfuse.runtime.launch import WorkspaceOperand
from kfuse.testing import assert_outputs_close
from test_segment_runtime import (
    matmul_bias,
    scalars_and_sizes,
    split_sum,
    split_var_mean,
    sums_over_both_axes,
    two_axis_sum,
)

ALL_KERNELS = [two_axis_sum, sums_over_both_axes, split_sum, split_var_mean, scalars_and_sizes]


def check(fd: FusionDefinition, inputs: list[Any]) -> list[Any]:
    out = fd.execute(inputs)
    assert_outputs_close(fd, out, evaluate(fd.fusion, inputs), inputs)
    return out


@pytest.mark.parametrize("make", ALL_KERNELS, ids=lambda f: f.__name__)
def test_all_kernel_segments_are_one_program_with_the_runners_segments(
    make: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    fd, inputs = make()
    check(fd, inputs(0))
    program = fd.last_program()
    assert isinstance(program, SegmentKernelsProgram)
    check(fd, inputs(1))  # a cached call
    assert fd.last_program() is program
    # (values the segmenter adds are named by a counter: two definitions name them apart)
    segments = [(s.scheduler, len(s.inputs), len(s.outputs)) for s in program.segments()]
    assert len(segments) >= 2
    assert len(program.groups) == len(segments)
    assert sum(count for _, count, _ in program.groups) == len(program.launches)

    monkeypatch.setattr(compiler, "merge_segments", lambda *args: None)
    runner_fd, _ = make()
    check(runner_fd, inputs(0))
    assert isinstance(runner_fd.last_program(), SegmentedProgram)
    runner_segments = runner_fd.segments(inputs(0))
    assert [(s.scheduler, len(s.inputs), len(s.outputs)) for s in runner_segments] == segments


def test_values_passed_between_segments_are_workspaces(monkeypatch: pytest.MonkeyPatch) -> None:
    fd, inputs = two_axis_sum()  # the row sums go from the first segment to the second
    check(fd, inputs(0))
    program = fd.last_program()
    assert isinstance(program, SegmentKernelsProgram)
    workspaces = {
        op.index
        for ka in program.launches
        for op in ka.operands
        if isinstance(op, WorkspaceOperand)
    }
    assert workspaces
    allocated: list[str] = []
    real = program_module._allocate

    def counted(info: Any, out: Any) -> Any:
        allocated.append(out.name)
        return real(info, out)

    monkeypatch.setattr(program_module, "_allocate", counted)
    check(fd, inputs(1))
    assert allocated == [o.name for o in fd.fusion.outputs]


def grouped_norm_and_column_sum() -> FusionDefinition:
    """A group norm whose input and output reshapes are views, and a sum over another axis:
    no single scheduler takes both reductions, so the fusion is segmented."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True] * 3)
        n, c, hw = fd.ops.size(x, 0), fd.ops.size(x, 1), fd.ops.size(x, 2)
        groups = 2
        xg = fd.ops.reshape(x, new_shape=[n, groups, fd.ops.div(c, groups), hw])
        var, mean = fd.ops.var_mean(xg, dims=[2, 3], correction=0, keepdim=True)
        eps = fd.define_scalar(1e-5, dtype=DataType.Double)
        y = fd.ops.mul(fd.ops.sub(xg, mean), fd.ops.rsqrt(fd.ops.add(var, eps)))
        fd.add_output(fd.ops.reshape(y, new_shape=[n, c, hw]))
        fd.add_output(fd.ops.sum(xg, dims=[0]))
    return fd


def test_boundary_reshapes_fold_before_segmenting() -> None:
    fd = grouped_norm_and_column_sum()
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal((3, 4, 5)).astype(np.float32)]
    check(fd, inputs)
    program = fd.last_program()
    assert isinstance(program, SegmentKernelsProgram)
    assert program.folded  # the reshapes are views of the call's input and output
    schedulers = [s.scheduler.value for s in fd.segments(inputs)]
    assert len(schedulers) >= 2 and "expr_eval" not in schedulers
    inputs = [rng.standard_normal((3, 4, 5)).astype(np.float32)]
    check(fd, inputs)  # a cached call
    assert fd.last_program() is program


def test_a_library_segment_keeps_the_runner() -> None:
    fd, inputs = matmul_bias()
    check(fd, inputs(0))
    assert isinstance(fd.last_program(), SegmentedProgram)


@pytest.mark.gpu
def test_a_segmented_fusion_takes_the_fast_path_and_stays_right(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    torch = pytest.importorskip("torch")
    import kfuse.engine.executor as executor

    fd = grouped_norm_and_column_sum()

    def inputs() -> list[Any]:
        return [torch.randn(8, 64, 300, device="cuda")]

    def check_cuda(args: list[Any]) -> None:
        out = fd.execute(args)
        host = [a.cpu().numpy() for a in args]
        assert_outputs_close(fd, [o.cpu().numpy() for o in out], evaluate(fd.fusion, host), host)

    check_cuda(inputs())
    assert isinstance(fd.last_program(), SegmentKernelsProgram)
    check_cuda(inputs())  # the second call of a layout builds its FastCall

    def no_slow_path(*args: object, **kw: object) -> None:
        raise AssertionError("the slow path ran for a cached layout")

    monkeypatch.setattr(executor, "build_runtime_info", no_slow_path)
    for _ in range(3):  # new data each call: workspaces and outputs from the fast path
        check_cuda(inputs())


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_a_folded_fusion_with_a_library_segment_runs_on_views(framework: str) -> None:
    """An input reshape that is a view, then a matmul: the runner runs the folded fusion on
    a view of the call's input (no expr_eval segment copies it) and hands the output back in
    the user's shape."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True] * 3)
        w = fd.define_tensor(shape=[-1, -1], contiguity=[True] * 2)
        n, m, k = fd.ops.size(x, 0), fd.ops.size(x, 1), fd.ops.size(x, 2)
        rows = fd.ops.reshape(x, new_shape=[fd.ops.mul(n, m), k])
        y = fd.ops.relu(fd.ops.matmul(rows, w))
        fd.add_output(fd.ops.reshape(y, new_shape=[n, m, fd.ops.size(w, 1)]))
    rng = np.random.default_rng(0)
    for _ in range(2):  # compiles; cached
        inputs = [
            rng.standard_normal((2, 3, 4)).astype(np.float32),
            rng.standard_normal((4, 5)).astype(np.float32),
        ]
        if framework == "torch":
            torch = pytest.importorskip("torch")
            inputs = [torch.from_numpy(a) for a in inputs]
        (out,) = check(fd, inputs)
        assert out.shape == (2, 3, 5)
    program = fd.last_program()
    assert isinstance(program, SegmentedProgram) and program.folded is not None
    assert [s.scheduler.value for s in program.segments()] == ["expr_eval", "pointwise"]


def test_a_calls_workspaces_are_one_allocation(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every workspace of a call is a part of one allocation, each at a 256-byte boundary
    (kfuse.runtime.launch.pooled_workspaces): each framework allocation costs a cached call
    about 1.5 us of host time. The results stay right with the parts packed together."""
    from kfuse.runtime.launch import pooled_workspaces, workspace_bytes

    fd, inputs = split_var_mean()
    check(fd, inputs(0))
    program = fd.last_program()
    sizes = workspace_bytes(program.launches)
    assert len(sizes) == 3
    size, offsets = pooled_workspaces(program.launches)
    assert offsets == [0, 256, 512] and size == 768
    assert all(a + n <= b for a, n, b in zip(offsets, sizes, offsets[1:]))
    made: list[tuple] = []
    real = program_module.empty_like_framework

    def counted(framework: str, shape: tuple, *args: Any, **kwargs: Any) -> Any:
        made.append((kwargs.get("what"), shape))
        return real(framework, shape, *args, **kwargs)

    monkeypatch.setattr(program_module, "empty_like_framework", counted)
    for seed in (1, 2):
        check(fd, inputs(seed))
    # outputs aside, one allocation a call where each workspace had its own
    assert [m for m in made if "workspace" in str(m[0])] == [("workspaces", (96,))] * 2

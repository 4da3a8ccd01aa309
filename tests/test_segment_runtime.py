"""A segmented fusion's segments run from its program (kfuse.engine.segments), on the host
emulator: each segment's RuntimeInfo is derived from the call's, never built again by
build_runtime_info, and keys its Programs exactly as build_runtime_info would for the same
arrays; an intermediate of another alignment class gets a Program of its own.

SegmentedRunner runs the fusions with a library segment (matmul, linear, a reshape that is
not a view); segments that are all generated kernels are one KernelProgram instead
(kfuse.engine.segment_kernels, tests/test_segment_kernels.py). The tests of the runner here run it
on both kinds (`runner_only`): the small all-kernel fusions exercise it as well."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import kfuse.engine.executor as executor
from kfuse import _C
from kfuse.dtypes import DataType, to_numpy_dtype
from kfuse.engine import compiler
from kfuse.engine import program as program_module
from kfuse.engine.program import SegmentedProgram
from kfuse.engine.segments import SegmentStep
from kfuse.engine.signature import program_key
from kfuse.frontend import FusionDefinition
from kfuse.ir.fusion import Fusion
from kfuse.profiler import _Recorder
from kfuse.reference import evaluate
from kfuse.runtime import profiling_hooks
from kfuse.runtime.info import build_runtime_info
from kfuse.testing import assert_outputs_close


def rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def two_axis_sum() -> tuple[FusionDefinition, Callable[[int], list[Any]]]:
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1])
        b = fd.define_tensor(shape=[-1, -1])
        fd.add_output(fd.ops.sum(fd.ops.sum(a + b, -1), -1))
    return fd, lambda seed: [rand(3, 5, seed=seed), rand(3, 5, seed=seed + 1)]


def sums_over_both_axes() -> tuple[FusionDefinition, Callable[[int], list[Any]]]:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        s0 = fd.ops.sum(x, dims=[0])
        fd.add_output(fd.ops.add(x, fd.ops.broadcast(s0, is_broadcast_dim=[True, False])))
        fd.add_output(fd.ops.sum(x, dims=[1]))
    return fd, lambda seed: [rand(6, 7, seed=seed)]


def split_sum() -> tuple[FusionDefinition, Callable[[int], list[Any]]]:
    """A sum over axes 0 and 2 is two reductions, the first into a value the segmenter adds."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1, -1])
        fd.add_output(fd.ops.sum(fd.ops.exp(x), dims=[0, 2]))
        fd.add_output(x * 2.0)
    return fd, lambda seed: [rand(3, 4, 5, seed=seed)]


def split_sum_short_inner() -> tuple[FusionDefinition, Callable[[int], list[Any]]]:
    """The same over [40, 4, 3]: axis 2 is short, so axis 0 goes first (an outer reduction),
    then axis 2 of its [4, 3] partial sums (kfuse.schedule.axis_runs)."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1, -1])
        fd.add_output(fd.ops.sum(fd.ops.exp(x), dims=[0, 2]))
        fd.add_output(fd.ops.max(x, dims=[0, 2]))
    return fd, lambda seed: [rand(40, 4, 3, seed=seed)]


def split_var_mean() -> tuple[FusionDefinition, Callable[[int], list[Any]]]:
    """A Welford over axes 0 and 2 reads a permuted copy the segmenter adds."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1, -1])
        var, mean = fd.ops.var_mean(x, [0, 2], correction=0)
        fd.add_output(var)
        fd.add_output(mean)
    return fd, lambda seed: [rand(3, 4, 5, seed=seed)]


def scalars_and_sizes() -> tuple[FusionDefinition, Callable[[int], list[Any]]]:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        s = fd.define_scalar(dtype=DataType.Double)
        m = fd.ops.mean(x * s, [1])
        fd.add_output(fd.ops.mean(m, [0]))
        fd.add_output(fd.ops.broadcast_in_dim(m, [fd.ops.size(x, 0), 3], [0]))
    return fd, lambda seed: [rand(4, 10, seed=seed), 1.5 + seed]


def matmul_bias() -> tuple[FusionDefinition, Callable[[int], list[Any]]]:
    """A library segment (matmul) feeding a pointwise one."""
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1])
        b = fd.define_tensor(shape=[-1, -1])
        bias = fd.define_tensor(shape=[-1])
        fd.add_output(fd.ops.relu(fd.ops.matmul(a, b) + bias))
    return fd, lambda seed: [rand(4, 6, seed=seed), rand(6, 5, seed=seed + 1), rand(5)]


def repeated_outputs() -> tuple[FusionDefinition, Callable[[int], list[Any]]]:
    """An input and an intermediate that are outputs twice each: every output is new."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        s = fd.ops.sum(fd.ops.sum(x, dims=[1]), dims=[0])
        fd.add_output(x)
        fd.add_output(s)
        fd.add_output(s)
        fd.add_output(x)
    return fd, lambda seed: [rand(3, 4, seed=seed)]


FUSIONS = [
    two_axis_sum,
    sums_over_both_axes,
    split_sum,
    split_sum_short_inner,
    split_var_mean,
    scalars_and_sizes,
    matmul_bias,
    repeated_outputs,
]


@pytest.fixture
def runner_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every segmented fusion runs through SegmentedRunner (none is merged)."""
    monkeypatch.setattr(compiler, "merge_segments", lambda *args: None)


def check(fd: FusionDefinition, inputs: list[Any]) -> list[Any]:
    out = fd.execute(inputs)
    assert_outputs_close(fd, out, evaluate(fd.fusion, inputs), inputs)
    return out


@pytest.mark.usefixtures("runner_only")
@pytest.mark.parametrize("make", FUSIONS, ids=lambda f: f.__name__)
def test_a_cached_call_infers_and_checks_once(make: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    fd, inputs = make()
    check(fd, inputs(0))
    program = fd.last_program()
    assert isinstance(program, SegmentedProgram) and len(program.segments()) >= 2
    built: list[Fusion] = []
    inferred: list[Fusion] = []
    real_build, real_infer = executor.build_runtime_info, Fusion.infer_shapes

    def counted_build(fusion: Fusion, *args: Any, **kwargs: Any) -> Any:
        built.append(fusion)
        return real_build(fusion, *args, **kwargs)

    def counted_infer(fusion: Fusion, args: list[Any]) -> Any:
        inferred.append(fusion)
        return real_infer(fusion, args)

    monkeypatch.setattr(executor, "build_runtime_info", counted_build)
    monkeypatch.setattr(Fusion, "infer_shapes", counted_infer)
    out = fd.execute(inputs(1))
    monkeypatch.undo()
    assert [f is fd.fusion for f in built] == [True]
    assert [f is fd.fusion for f in inferred] == [True]
    assert fd.last_program() is program
    assert_outputs_close(fd, out, evaluate(fd.fusion, inputs(1)), inputs(1))
    handed_out = [id(a) for a in out]
    assert len(set(handed_out)) == len(out)  # repeated outputs are copies
    assert not {id(a) for a in inputs(1)} & set(handed_out)


def test_a_program_with_copied_outputs_prints_every_segment() -> None:
    fd, inputs = repeated_outputs()
    check(fd, inputs(0))
    text = str(fd.last_program())
    segments = fd.last_program().segments()
    assert f"SegmentedProgram: {len(segments)} segments" in text
    assert text.count("KernelProgram") == len(segments) - 1
    assert f"segment {len(segments) - 1}: expr_eval" in text and "copied by the framework" in text


def derived_infos(monkeypatch: pytest.MonkeyPatch) -> list[tuple[SegmentStep, Any, dict]]:
    """Every (step, derived RuntimeInfo, all its extents) SegmentStep.derive makes from now."""
    seen: list[tuple[SegmentStep, Any, dict]] = []
    real = SegmentStep.derive

    def spy(self: SegmentStep, parent: Any, extents: dict, env: dict) -> Any:
        info = real(self, parent, extents, env)
        seen.append((self, info, self.all_extents(extents)))
        return info

    monkeypatch.setattr(SegmentStep, "derive", spy)
    return seen


@pytest.mark.usefixtures("runner_only")
@pytest.mark.parametrize("framework", ["numpy", "torch"])
@pytest.mark.parametrize("make", FUSIONS, ids=lambda f: f.__name__)
def test_a_derived_info_keys_as_build_runtime_info_would(
    make: Any, framework: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    fd, inputs = make()
    args = inputs(0)
    if framework == "torch":
        torch = pytest.importorskip("torch")
        args = [torch.from_numpy(a) if isinstance(a, np.ndarray) else a for a in args]
    seen = derived_infos(monkeypatch)
    fd.execute(args)  # compiles each segment
    fd.execute(args)  # runs them cached
    assert len(seen) == 2 * len(fd.last_program().runner.steps)
    for step, info, extents in seen:
        checked = build_runtime_info(step.plan.fusion, info.inputs)
        assert program_key(info, None) == program_key(checked, None)
        assert info.layouts == checked.layouts
        assert extents == checked.extents
        assert info.framework == framework
        # What the cached run was given is what the segment's own shape inference says.
        assert all(checked.extents[v] == n for v, n in info.extents.items())


def offset_allocator(residue: int) -> Callable[[Any, Any], np.ndarray]:
    """_allocate giving NumPy arrays whose data pointer is `residue` modulo 16."""

    def allocate(info: Any, out: Any) -> np.ndarray:
        dtype = to_numpy_dtype(out.dtype)
        shape = info.shape(out)
        nbytes = math.prod(shape) * dtype.itemsize
        raw = np.empty(nbytes + 32, np.uint8)
        start = (residue - raw.ctypes.data) % 16
        return raw[start : start + nbytes].view(dtype).reshape(shape)

    return allocate


@pytest.mark.usefixtures("runner_only")
def test_an_intermediate_of_another_alignment_gets_its_own_program(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fd, inputs = two_axis_sum()
    monkeypatch.setattr(program_module, "_allocate", offset_allocator(0))
    check(fd, inputs(0))
    step = fd.last_program().runner.steps[1]  # reads the first segment's output
    (aligned,) = step.programs.values()
    monkeypatch.setattr(program_module, "_allocate", offset_allocator(4))
    check(fd, inputs(1))
    assert len(step.programs) == 2 and step.last is not aligned[0]
    assert sorted(key[-1][-1] for key in step.programs) == [0, 4]  # pointer mod 16
    monkeypatch.setattr(program_module, "_allocate", offset_allocator(0))
    check(fd, inputs(2))
    assert len(step.programs) == 2 and step.last is aligned[0]


@pytest.mark.parametrize("merged", [True, False], ids=["one_program", "runner"])
def test_each_segment_of_a_cached_call_is_tagged(
    merged: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not merged:
        monkeypatch.setattr(compiler, "merge_segments", lambda *args: None)
    monkeypatch.setattr(_C, "profiler_push_external_id", lambda i: None)
    monkeypatch.setattr(_C, "profiler_pop_external_id", lambda: None)
    recorder = _Recorder()
    monkeypatch.setattr(profiling_hooks, "active", recorder)
    fd, inputs = sums_over_both_axes()
    fd.execute(inputs(0))
    fd.execute(inputs(1))
    n = len(fd.last_program().segments())
    assert [f.fusion_id for f in recorder.fusions] == [0, 1]
    assert [(t.fusion_id, t.segment_id) for t in recorder.tags] == [
        (f, k) for f in (0, 1) for k in range(n)
    ]
    first, cached = recorder.tags[:n], recorder.tags[n:]
    assert all(t.compile_time_ms > 0 for t in first)
    assert all(t.compile_time_ms == 0 and not t.kernel_compile_ms for t in cached)
    assert recorder.fusions[1].compile_time_ms == 0
    assert [(t.input_bytes, t.output_bytes) for t in first] == [
        (t.input_bytes, t.output_bytes) for t in cached
    ]

"""The kernels of a fusion merged from segments compile together in threads
(kfuse.engine.compile_batch), on the host emulator: the same program and outputs as compiling
them one after another (KFUSE_PARALLEL_COMPILE=0), the same error, and threads only where the
knob allows them."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest

from kfuse import knobs
from kfuse.engine import compile_batch
from kfuse.engine.compiler import KernelCompiler
from kfuse.engine.program import SegmentKernelsProgram
from kfuse.errors import EmulatorError
from test_segment_kernels import ALL_KERNELS


def compiled(make: Any, monkeypatch: pytest.MonkeyPatch, parallel: bool) -> tuple[Any, list, set]:
    """(the program, the outputs, the threads kernels were compiled on) of make's fusion."""
    monkeypatch.setenv("KFUSE_PARALLEL_COMPILE", "1" if parallel else "0")
    threads: set[int] = set()
    real = KernelCompiler._compile_now

    def recorded(self: KernelCompiler, source: str, name: str, info: Any) -> Any:
        threads.add(threading.get_ident())
        return real(self, source, name, info)

    monkeypatch.setattr(KernelCompiler, "_compile_now", recorded)
    fd, inputs = make()
    out = fd.execute(inputs(0))
    monkeypatch.undo()
    return fd.last_program(), out, threads


def launches(program: SegmentKernelsProgram) -> list[tuple]:
    """Each launch as it reads (two definitions' Scalars are equal by name, not identity)."""
    return [
        (k.name, k.source, k.grid, k.block, k.shared_mem, repr(k.operands))
        for k in program.launches
    ]


@pytest.mark.parametrize("make", ALL_KERNELS, ids=lambda f: f.__name__)
def test_parallel_compile_gives_the_serial_program_and_outputs(
    make: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    serial, serial_out, serial_threads = compiled(make, monkeypatch, parallel=False)
    parallel, parallel_out, parallel_threads = compiled(make, monkeypatch, parallel=True)
    assert isinstance(serial, SegmentKernelsProgram)
    assert isinstance(parallel, SegmentKernelsProgram)
    assert launches(parallel) == launches(serial)
    assert all(not isinstance(k.kernel, compile_batch.PendingKernel) for k in parallel.launches)
    for a, b in zip(parallel_out, serial_out):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert serial_threads == {threading.get_ident()}
    if len({k.source for k in serial.launches}) > 1:
        assert threading.get_ident() not in parallel_threads


def failing(self: KernelCompiler, source: str, name: str, info: Any) -> Any:
    raise EmulatorError(f"cannot build {name}")


def test_a_compile_error_is_the_serial_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every kernel fails: the error is the first kernel's (in generation order), parallel
    or not."""
    make = ALL_KERNELS[0]
    fd, inputs = make()
    fd.execute(inputs(0))
    first = fd.last_program().launches[0].name
    for parallel in ("0", "1"):
        monkeypatch.setenv("KFUSE_PARALLEL_COMPILE", parallel)
        monkeypatch.setattr(KernelCompiler, "_compile_now", failing)
        fd, inputs = make()
        with pytest.raises(EmulatorError) as raised:
            fd.execute(inputs(0))
        assert str(raised.value) == f"cannot build {first}"
        monkeypatch.undo()


def test_a_pending_compile_error_comes_before_a_later_generation_error() -> None:
    def fails() -> Any:
        raise EmulatorError("kernel 1 does not build")

    with pytest.raises(EmulatorError, match="kernel 1 does not build"):
        with compile_batch.deferred() as batch:
            batch.defer(("k1",), "k1", fails)
            raise ValueError("generating segment 2 failed")
    assert compile_batch.current() is None


def test_a_kernel_deferred_twice_compiles_once() -> None:
    calls: list[str] = []
    with compile_batch.deferred() as batch:
        first = batch.defer(("same",), "k", lambda: calls.append("k") or "kernel")
        again = batch.defer(("same",), "k", lambda: calls.append("k") or "kernel")
    assert first is again
    assert calls == ["k"]
    assert compile_batch.loaded(first) == "kernel"


def test_the_knob_turns_threads_off() -> None:
    assert knobs.Knobs.from_environ({}).parallel_compile is True
    for off in ("0", "off", "no", "false"):
        assert knobs.Knobs.from_environ({"KFUSE_PARALLEL_COMPILE": off}).parallel_compile is False
    assert knobs.Knobs.from_environ({"KFUSE_PARALLEL_COMPILE": "1"}).parallel_compile is True

"""Compiles of a segmented fusion's kernels, run together in threads once every segment's
kernels are generated.

A fusion merged into one program (kfuse.engine.segment_kernels) generates its segments'
kernels one segment after the other, which is Python work and cheap; compiling each (NVRTC,
or the emulator's host compiler) is the expensive part, and runs outside the GIL
(kfuse._C.compile_to_cubin releases it; the host compiler is another process). Inside
`deferred()`, KernelCompiler.compile hands its work to the batch and gets a PendingKernel
back; when the block ends the batch compiles every distinct kernel, in a thread pool where
more than one is pending and KFUSE_PARALLEL_COMPILE allows it, and `loaded` swaps each
launch's PendingKernel for its kernel.

The outcome is the serial one: the same kernels, and the same error. Serially the first
kernel that fails to compile stops the fusion; here every pending compile runs, then the
first failure in generation order is raised, also in place of an error that generating a
later segment raised (serially, generation would not have got that far).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kfuse import knobs
from kfuse.runtime import profiling_hooks

MAX_THREADS = 8
"""The most compiles run at once (each NVRTC compile of a large kernel holds ~100 MB)."""


class PendingKernel:
    """A kernel whose compile the batch runs later; `loaded` gives the kernel."""

    def __init__(self, name: str, compile_now: Callable[[], Any]) -> None:
        self.name = name
        self.compile_now = compile_now
        self.kernel: Any = None
        self.error: BaseException | None = None
        self.seconds = 0.0

    def run(self) -> None:
        started = profiling_hooks.clock()
        try:
            self.kernel = self.compile_now()
        except Exception as exc:  # noqa: BLE001 - kept, and raised in generation order
            self.error = exc
        self.seconds = profiling_hooks.clock() - started


class CompileBatch:
    """The compiles deferred inside one `deferred()` block, one per distinct kernel."""

    def __init__(self) -> None:
        self.pending: dict[tuple, PendingKernel] = {}

    def defer(self, key: tuple, name: str, compile_now: Callable[[], Any]) -> PendingKernel:
        """The PendingKernel for `key` (the same one for a kernel deferred twice)."""
        found = self.pending.get(key)
        if found is None:
            found = self.pending[key] = PendingKernel(name, compile_now)
        return found

    def run(self) -> None:
        """Compile every pending kernel, in threads where there are several; then report
        each to the profiler in generation order and raise the first failure."""
        work = list(self.pending.values())
        if len(work) > 1 and knobs.get().parallel_compile:
            with ThreadPoolExecutor(max_workers=min(len(work), MAX_THREADS)) as pool:
                list(pool.map(PendingKernel.run, work))
        else:
            for pending in work:
                pending.run()
        for pending in work:
            if pending.error is None:
                profiling_hooks.kernel_compiled(pending.name, pending.seconds)
        for pending in work:
            if pending.error is not None:
                raise pending.error


_active = threading.local()


def current() -> CompileBatch | None:
    """The batch compiles are deferred to on this thread, or None (compile now)."""
    return getattr(_active, "batch", None)


@contextlib.contextmanager
def deferred() -> Iterator[CompileBatch]:
    """Within: KernelCompiler.compile defers to the returned batch, which compiles when the
    block ends (also when it raises: a pending compile's error comes first, as serially)."""
    outer = current()
    batch = CompileBatch()
    _active.batch = batch
    try:
        yield batch
    except BaseException:
        _active.batch = outer
        batch.run()  # a compile that failed before this error is the error serially
        raise
    _active.batch = outer
    batch.run()


def loaded(kernel: Any) -> Any:
    """The compiled kernel where `kernel` is a PendingKernel its batch has run."""
    if isinstance(kernel, PendingKernel):
        assert kernel.error is None and kernel.kernel is not None, "the batch has not run"
        return kernel.kernel
    return kernel

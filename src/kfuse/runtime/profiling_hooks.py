"""Where the executors tell a recording :class:`kfuse.PythonProfiler` what they run.

``active`` is the recorder of the profiler whose ``with`` block is open, or None. Every hook
is a module-level function that returns at once when it is None, so the executors call them
unconditionally at a cost of an attribute read (and a no-op ``with``) per execute.
"""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kfuse.schedule.types import SchedulerType

# The open PythonProfiler's recorder (kfuse.profiler._Recorder), or None.
active: Any = None

_NOTHING = contextlib.nullcontext()


def clock() -> float:
    """Seconds on the clock the hooks use (time.perf_counter)."""
    return time.perf_counter()


def execution() -> Any:
    """Around one FusionExecutorCache.execute: the outermost one is a fusion for the profile;
    the ones nested in it (each segment of a segmented fusion, kfuse.engine.segments) are
    not, and keep their own compile times."""
    recorder = active
    return _NOTHING if recorder is None else recorder.execution()


def compiled(seconds: float) -> None:
    """The execute in progress spent `seconds` scheduling and compiling."""
    recorder = active
    if recorder is not None:
        recorder.compiled(seconds)


def kernel_compiled(name: str, seconds: float) -> None:
    """Kernel `name` was compiled (NVRTC + load, or a cache lookup) in `seconds`."""
    recorder = active
    if recorder is not None:
        recorder.kernel_compiled(name, seconds)


def segment(scheduler: SchedulerType, info: Any) -> Any:
    """Around one segment's launches (`scheduler`: a SchedulerType; SchedulerType.none, a
    segmented fusion, is not a segment: each of its segments is tagged when it runs)."""
    recorder = active
    return _NOTHING if recorder is None else recorder.segment(scheduler, info)


def user_kernel(args: Any, compile_seconds: float) -> Any:
    """Around one KernelExecutor.run (a fusion of one 'user' segment)."""
    recorder = active
    return _NOTHING if recorder is None else recorder.user_kernel(args, compile_seconds)

"""PythonProfiler: every kernel the fusions in a ``with`` block ran, measured by CUPTI.

::

    with kfuse.PythonProfiler() as prof:
        fd.execute(inputs)
    print(prof.profile)            # a FusionProfile: kernels, times, bandwidth

How it works: entering takes CUPTI (``_C.profiler_start``) and installs a recorder in
:mod:`kfuse.runtime.profiling_hooks`, which the executors call. Each segment's launches are tagged
with a fresh external correlation id (pushed before them, popped after), so CUPTI's kernel
records, including those of libraries such as cuBLAS run by an expr_eval segment, map back to
the segment. Leaving waits for the GPU, flushes CUPTI, releases it, and joins the records with
the recorder's segment tags (``_C.join_profiles``, pure C++).
"""

from __future__ import annotations

import contextlib
import itertools
import math
import sys
import threading
from dataclasses import dataclass, field
from typing import Any

from kfuse import _C, knobs
from kfuse.errors import ProfilerError
from kfuse.runtime import profiling_hooks
from kfuse.schedule.types import SchedulerType

FusionProfile = _C.FusionProfile
KernelProfile = _C.KernelProfile

# External correlation ids, unique in the process so that a record left over from an earlier
# profiler can never match a later one's segment.
_external_ids = itertools.count(1)


def cupti_library_path() -> str | None:
    """The libcupti kfuse will load: KFUSE_CUPTI_LIBRARY, else cuda.pathfinder's (the
    nvidia-cuda-cupti wheel, then the system's CUDA); None leaves it to the dynamic linker."""
    override = knobs.get().cupti_library
    if override:
        return override
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib

        loaded = load_nvidia_dynamic_lib("cupti")
    except Exception:  # noqa: BLE001 - not found: _C's dlopen then says how to install it
        return None
    return str(loaded.abs_path) if loaded.abs_path else None


def _refuse_under_torch_profiler() -> None:
    # torch.profiler drives CUPTI's activity API without always subscribing to callbacks,
    # so CUPTI alone may not say it is busy; taking it would steal torch's records.
    torch = sys.modules.get("torch")
    if torch is None:
        return
    try:
        enabled = bool(torch._C._autograd._profiler_enabled())
    except Exception:  # noqa: BLE001 - an older or stripped torch: rely on CUPTI's check
        enabled = bool(
            getattr(getattr(torch.autograd, "profiler", None), "_is_profiler_enabled", False)
        )
    if enabled:
        raise ProfilerError(
            "torch.profiler is recording and holds CUPTI; kfuse.PythonProfiler "
            "cannot run inside it (leave the torch.profiler block first)"
        )


class PythonProfiler:
    """Records every fusion execute (``fd.execute``, ``fd.manual_execute``) and
    ``KernelExecutor.run`` inside its ``with`` block, on any thread.

    After the block, ``profiles`` is one :class:`FusionProfile` per execute, in order, and
    ``profile`` the last. Entering raises :class:`kfuse.ProfilerError` where there is no GPU,
    no CUPTI, or another profiler (torch.profiler, Nsight) holds CUPTI.
    """

    def __init__(self) -> None:
        self.profiles: list[FusionProfile] = []
        self._recorder: _Recorder | None = None

    @property
    def profile(self) -> FusionProfile:
        """The last execute's profile."""
        if self._recorder is not None:
            raise ProfilerError("the profile is ready when the PythonProfiler block ends")
        if not self.profiles:
            raise ProfilerError("no fusion or kernel ran inside the PythonProfiler block")
        return self.profiles[-1]

    def __enter__(self) -> PythonProfiler:
        if self._recorder is not None:
            raise ProfilerError("this PythonProfiler is already recording")
        _refuse_under_torch_profiler()
        if not _C.cupti_library():
            path = cupti_library_path()
            if path:
                _C.set_cupti_library(path)
        _C.profiler_start()
        self.profiles = []
        self._recorder = _Recorder()
        profiling_hooks.active = self._recorder
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        recorder, self._recorder = self._recorder, None
        profiling_hooks.active = None
        if recorder is None:
            return
        try:
            activities = _C.profiler_stop(sorted(recorder.devices))
        except ProfilerError:
            if exc_type is None:
                raise
            return  # the block's own exception is the one to see
        devices = recorder.devices | {int(k.device) for k in activities.kernels}
        self.profiles = list(
            _C.join_profiles(recorder.fusions, recorder.tags, activities, _peak_bandwidths(devices))
        )


def _peak_bandwidths(devices: set[int]) -> dict[int, float]:
    peaks = {}
    for device in devices:
        try:
            peaks[device] = float(_C.get_device_properties(device).peak_bandwidth_gbs)
        except _C.CudaError:
            continue  # a device CUPTI numbers differently: its kernels report no % of peak
    return peaks


@dataclass
class _Fusion:
    """One outermost execute in progress."""

    record: Any  # _C.FusionRecord
    started: float
    compile_s: float = 0.0
    next_segment: int = 0
    tags: list[Any] = field(default_factory=list)


@dataclass
class _Frame:
    """One execute in progress (nested ones are a segmented fusion's segments)."""

    fusion: _Fusion
    compile_s: float = 0.0
    kernel_compile_ms: list[tuple[str, float]] = field(default_factory=list)


class _Recorder:
    """What the executors report while a PythonProfiler is open (via
    kfuse.runtime.profiling_hooks)."""

    def __init__(self) -> None:
        self.fusions: list[Any] = []  # _C.FusionRecord, in completion order
        self.tags: list[Any] = []  # _C.SegmentTag
        self.devices: set[int] = set()
        self._lock = threading.Lock()
        self._local = threading.local()

    def _frames(self) -> list[_Frame]:
        frames = getattr(self._local, "frames", None)
        if frames is None:
            frames = self._local.frames = []
        return frames

    @contextlib.contextmanager
    def execution(self) -> Any:
        frames = self._frames()
        if frames:  # a segment of the fusion in progress
            frames.append(_Frame(frames[0].fusion))
            try:
                yield
            finally:
                frames.pop()
            return
        fusion = _Fusion(_C.FusionRecord(), profiling_hooks.clock())
        frames.append(_Frame(fusion))
        try:
            yield
        finally:
            frames.pop()
        # Only executes that finished are profiled.
        record = fusion.record
        record.host_time_ms = (profiling_hooks.clock() - fusion.started) * 1e3
        record.compile_time_ms = fusion.compile_s * 1e3
        record.device = fusion.tags[0].device if fusion.tags else _current_device()
        with self._lock:
            record.fusion_id = len(self.fusions)
            for tag in fusion.tags:
                tag.fusion_id = record.fusion_id
            self.fusions.append(record)
            self.tags.extend(fusion.tags)

    def compiled(self, seconds: float) -> None:
        frames = self._frames()
        if frames:
            frames[-1].compile_s += seconds
            frames[-1].fusion.compile_s += seconds

    def kernel_compiled(self, name: str, seconds: float) -> None:
        frames = self._frames()
        if frames:
            frames[-1].kernel_compile_ms.append((name, seconds * 1e3))

    def segment(self, scheduler: SchedulerType, info: Any) -> Any:
        frames = self._frames()
        if scheduler is SchedulerType.none or not frames:
            return contextlib.nullcontext()  # a segmented fusion: its segments are tagged
        inputs, outputs = segment_bytes(info)
        # (a SegmentTag holds the scheduler by name: the profile is read as plain data)
        return self._tagged(frames[-1], scheduler.value, info.device_index, inputs, outputs)

    @contextlib.contextmanager
    def user_kernel(self, args: Any, compile_seconds: float) -> Any:
        with self.execution():
            frame = self._frames()[-1]
            frame.compile_s += compile_seconds
            frame.fusion.compile_s += compile_seconds
            with self._tagged(frame, "user", _device_of(args), _bytes_of(args), 0):
                yield

    @contextlib.contextmanager
    def _tagged(
        self, frame: _Frame, scheduler: str, device: int, input_bytes: int, output_bytes: int
    ) -> Any:
        tag = _C.SegmentTag()
        tag.external_id = next(_external_ids)
        tag.segment_id = frame.fusion.next_segment
        frame.fusion.next_segment += 1
        tag.scheduler = scheduler
        tag.device = device
        tag.input_bytes = input_bytes
        tag.output_bytes = output_bytes
        tag.compile_time_ms = frame.compile_s * 1e3
        tag.kernel_compile_ms = frame.kernel_compile_ms
        frame.fusion.tags.append(tag)
        if device >= 0:
            with self._lock:
                self.devices.add(device)
        _C.profiler_push_external_id(tag.external_id)
        try:
            yield
        finally:
            _C.profiler_pop_external_id()


def footprint_bytes(shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> int:
    """Bytes an array of `shape`/`strides` (elements) spans: broadcast (stride 0) axes count
    once, so an expanded input is charged for the memory it actually has."""
    if any(s == 0 for s in shape):
        return 0
    return (1 + sum((s - 1) * abs(st) for s, st in zip(shape, strides, strict=True))) * itemsize


def segment_bytes(info: Any) -> tuple[int, int]:
    """(input bytes, output bytes) of one call of a fusion (RuntimeInfo `info`)."""
    inputs = sum(
        footprint_bytes(lay.shape, lay.strides, lay.dtype.itemsize) for lay in info.layouts.values()
    )
    outputs = 0
    for out in info.fusion.outputs:
        shape = info.extents.get(out)
        if isinstance(shape, tuple):
            outputs += math.prod(shape) * out.dtype.itemsize
    return inputs, outputs


def _device_of(args: Any) -> int:
    for arg in args:
        dlpack_device = getattr(arg, "__dlpack_device__", None)
        if dlpack_device is not None:
            kind, index = dlpack_device()
            if int(kind) in (2, 13):  # CUDA, CUDA managed
                return int(index)
    return _current_device()


def _bytes_of(args: Any) -> int:
    # A hand-written kernel does not say which arrays it writes: all of them count as input.
    return sum(
        int(arg.nbytes)
        for arg in args
        if hasattr(arg, "__dlpack_device__") and isinstance(getattr(arg, "nbytes", None), int)
    )


def _current_device() -> int:
    try:
        return int(_C.current_device())
    except _C.CudaError:
        return -1

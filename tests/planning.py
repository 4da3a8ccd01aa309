"""Planning a call on an emulated GPU without its arrays: the RuntimeInfo of inputs with given
shapes and strides on a device profile, and each kernel the automatic heuristics would give
it (generated, which validates the params against the layout and the device; nothing is
compiled). For tests that walk sizes no host could hold."""

from __future__ import annotations

from collections.abc import Sequence

from kfuse.codegen.layout import contiguous_strides
from kfuse.engine.compiler import choose_scheduler
from kfuse.engine.segmenter import segment_fusion
from kfuse.frontend import FusionDefinition
from kfuse.ir.values import TensorView
from kfuse.runtime import device as devices
from kfuse.runtime.arrays import ArrayLayout
from kfuse.runtime.info import CUDA, RuntimeInfo
from kfuse.schedule.sub_fusion import synthetic_info


def gpu_info(
    fd: FusionDefinition,
    shapes: Sequence[tuple[int, ...]],
    profile: str,
    strides: Sequence[tuple[int, ...] | None] | None = None,
) -> RuntimeInfo:
    """A GPU call's RuntimeInfo for inputs of these shapes (contiguous unless `strides` gives
    an input's strides), 256-byte aligned, on the device profile `profile`."""
    strides = strides or [None] * len(shapes)
    layouts = {
        v: ArrayLayout("torch", v.dtype, shape, st or contiguous_strides(shape), 256, 0)
        for v, shape, st in zip(fd.fusion.inputs, shapes, strides, strict=True)
        if isinstance(v, TensorView)
    }
    extents = fd.fusion.infer_shapes(list(shapes))
    return RuntimeInfo(
        fd.fusion, list(shapes), layouts, extents, "torch", CUDA, 0, devices.get_profile(profile)
    )


def kernels_for(fusion: object, info: RuntimeInfo, *, segment: bool = True) -> None:
    """The chosen scheduler's heuristics turned into kernels (SchedulerError if it rejects
    its own params), or each segment's when the fusion is segmented (`segment` False: a
    segment, which no scheduler may take but with its boundary reshapes folded, as the
    compiler compiles it)."""
    scheduler, reasons = choose_scheduler(fusion, info)  # type: ignore[arg-type]
    if scheduler is None and not segment:
        from kfuse.engine.boundary_views import folded_for_a_kernel
        from kfuse.schedule import resolve_scheduler

        found = folded_for_a_kernel(fusion, info)  # type: ignore[arg-type]
        assert found is not None, reasons
        fusion, info = found[0].fusion, found[0].info
        scheduler = resolve_scheduler(found[1])
    if scheduler is not None:
        if scheduler.generates_kernels:
            scheduler.kernels(fusion, info, scheduler.heuristics(fusion, info))
        return
    segmented = segment_fusion(fusion, info, "\n".join(reasons))  # type: ignore[arg-type]
    for plan in segmented.plans:
        kernels_for(plan.fusion, synthetic_info(plan.fusion, plan.inputs, info), segment=False)


def schedulers_for(fusion: object, info: RuntimeInfo) -> list[object]:
    """The scheduler of each segment the call would run (one where one scheduler takes the
    whole fusion), without compiling."""
    scheduler, reasons = choose_scheduler(fusion, info)  # type: ignore[arg-type]
    if scheduler is not None:
        return [scheduler.scheduler_type]
    segmented = segment_fusion(fusion, info, "\n".join(reasons))  # type: ignore[arg-type]
    return [plan.scheduler for plan in segmented.plans]

"""Running a segmented fusion: its segments in dependency order, on one stream.

Each segment runs through its own FusionExecutorCache (so its kernels are cached per
signature like any fusion's), which allocates the segment's outputs with the inputs'
framework. Intermediates are dropped as soon as the last segment reading them has been
launched (the framework's stream-ordered allocators make that safe on the GPU).
"""

from __future__ import annotations

from typing import Any

from kfuse.ir.values import TensorView
from kfuse.runtime.arrays import stream_context
from kfuse.runtime.info import RuntimeInfo
from kfuse.schedule.segmenter import SegmentedFusion, segment_arguments


class SegmentedRunner:
    """The compiled form of a segmented fusion for one input signature."""

    def __init__(self, segmented: SegmentedFusion) -> None:
        from kfuse.runtime.executor import FusionExecutorCache

        self.segmented = segmented
        fusion = segmented.fusion
        self.caches = [FusionExecutorCache(p.fusion, segment=False) for p in segmented.plans]
        keep = {id(v) for v in fusion.outputs} | {id(v) for v in fusion.inputs}
        last_use: dict[int, int] = {}
        for k, plan in enumerate(segmented.plans):
            for v in plan.inputs:
                last_use[id(v)] = k
        self.release: list[list[int]] = [[] for _ in segmented.plans]
        for k, plan in enumerate(segmented.plans):
            for v in plan.outputs:
                if id(v) not in keep:
                    self.release[last_use.get(id(v), k)].append(id(v))

    def __call__(self, info: RuntimeInfo, stream: int | None) -> list[Any]:
        fusion = self.segmented.fusion
        env: dict[int, Any] = {
            id(v): a
            for v, a in zip(fusion.inputs, info.inputs, strict=True)
            if isinstance(v, TensorView)
        }
        for plan, cache, release in zip(
            self.segmented.plans, self.caches, self.release, strict=True
        ):
            outs = cache.execute(segment_arguments(plan, env, info), stream=stream)
            for v, a in zip(plan.outputs, outs, strict=True):
                env[id(v)] = a
            for key in release:
                del env[key]
        inputs = {id(v) for v in fusion.inputs}
        results: list[Any] = []
        handed_out: set[int] = set()
        for out in fusion.outputs:
            value = env[id(out)]
            if id(out) in inputs or id(out) in handed_out:
                value = copy_array(info, value, stream)
            handed_out.add(id(out))
            results.append(value)
        return results

    def cuda_source(self) -> str | None:
        """The kernels' sources of every segment's last run, in order."""
        sources = [c.last_cuda_source() for c in self.caches]
        joined = "\n".join(s for s in sources if s)
        return joined or None


def copy_array(info: RuntimeInfo, a: Any, stream: int | None) -> Any:
    """A new contiguous copy of `a` with its framework, on `stream` (None: the framework's
    current stream) for GPU arrays."""
    with stream_context(info.framework, info.device_index, stream):
        if info.framework == "torch":
            import torch

            return a.clone(memory_format=torch.contiguous_format)
        if info.framework == "cupy":
            import cupy

            return cupy.array(a, copy=True, order="C")
    import numpy

    return numpy.array(a, copy=True, order="C")

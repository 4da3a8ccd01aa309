"""The inputs a segment's kernel reads again after the segment before it (RuntimeInfo.
warm_inputs, switches.REREAD_REVERSED): which pointwise kernels take their rows from the
last."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kfuse.codegen.pointwise import PointwiseKernelSpec, PointwisePlan
    from kfuse.runtime.info import RuntimeInfo


def rereads_warm_input(plan: PointwisePlan, info: RuntimeInfo) -> bool:
    """Whether the kernel reads along its rows an input the kernels before it in this call
    read last (RuntimeInfo.warm_inputs: switches.REREAD_REVERSED): a normalization's second
    pass over x after its statistics' reduction. Taking the rows from the end then reads
    first what L2 may still hold of x, the part the reduction read last."""
    if not info.warm_inputs:
        return False
    return any(u.val in info.warm_inputs for u in plan.domain.input_uses)


def for_rereads(
    spec: PointwiseKernelSpec, plan: PointwisePlan, info: RuntimeInfo
) -> PointwiseKernelSpec:
    """`spec` taking its rows from the last where the kernel rereads a warm input (and its
    launch is not whole rows); `spec` itself otherwise."""
    if spec.whole_rows or not rereads_warm_input(plan, info):
        return spec
    return dataclasses.replace(spec, reverse_rows=True)

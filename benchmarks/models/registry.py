"""Every case of the model suite, in the order they run and are reported."""

from __future__ import annotations

import re

from models import (
    attention,
    batchnorm,
    dropout_rng,
    groupnorm,
    indexing,
    layouts,
    mask_traffic,
    norms,
    optimizer,
    pointwise,
    resize,
    rope,
    softmax,
    thunder_regions,
    transpose,
)
from models.case import Case

CASES: list[Case] = [
    *norms.CASES,
    *dropout_rng.NORM_CASES,
    *softmax.CASES,
    *groupnorm.CASES,
    *batchnorm.CASES,
    *transpose.CASES,
    *pointwise.CASES,
    *attention.CASES,
    *dropout_rng.ATTENTION_CASES,
    *rope.CASES,
    *indexing.CASES,
    *optimizer.CASES,
]

FAMILIES = list(dict.fromkeys(c.family for c in CASES))

PROBE_CASES: list[Case] = [
    *resize.PROBE_CASES,
    *thunder_regions.PROBE_CASES,
    *layouts.PROBE_CASES,
    *mask_traffic.PROBE_CASES,
]
"""Cases the tools take by name (kernel_times, peer_kernels, params_sweep) that are not in
the suite until they have been measured on a GPU: slices and cats around RoPE, the loss
regions Thunder hands kfuse, a channels-last activation's pointwise ops, and a dropout's
mask read, written and drawn."""


def select(pattern: str) -> list[Case]:
    """The cases whose family or name matches the regular expression (all for '')."""
    if not pattern:
        return list(CASES)
    rx = re.compile(pattern)
    return [c for c in CASES if rx.search(c.name) or rx.search(c.family)]


def case_and_shape(spec: str) -> tuple[Case, tuple[int, ...]]:
    """ "rmsnorm_fwd:8192x8192" -> (that case, (8192, 8192)); "rmsnorm_fwd" takes the case's
    quick size. The suite's cases and the PROBE_CASES. ValueError naming the case or size
    that is not one."""
    name, _, size = spec.partition(":")
    case = next((c for c in [*CASES, *PROBE_CASES] if c.name == name), None)
    if case is None:
        raise ValueError(f"no model-suite case {name!r}")
    if not size:
        return case, case.quick_sizes[0]
    try:
        shape = tuple(int(n) for n in size.split("x"))
    except ValueError:
        raise ValueError(f"{spec!r}: the size must be integers joined by 'x'") from None
    return case, shape

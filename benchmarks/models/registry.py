"""Every case of the model suite, in the order they run and are reported."""

from __future__ import annotations

import re

from models import attention, batchnorm, groupnorm, norms, pointwise, rope, softmax, transpose
from models.case import Case

CASES: list[Case] = [
    *norms.CASES,
    *softmax.CASES,
    *groupnorm.CASES,
    *batchnorm.CASES,
    *transpose.CASES,
    *pointwise.CASES,
    *attention.CASES,
    *rope.CASES,
]

FAMILIES = list(dict.fromkeys(c.family for c in CASES))


def select(pattern: str) -> list[Case]:
    """The cases whose family or name matches the regular expression (all for '')."""
    if not pattern:
        return list(CASES)
    rx = re.compile(pattern)
    return [c for c in CASES if rx.search(c.name) or rx.search(c.family)]

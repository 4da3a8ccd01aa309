"""Testing helpers for kfuse and its users: Hypothesis strategies of fusions and inputs, and
tolerance-aware comparison.

The comparison needs only NumPy; the strategies (`fusions`, `inputs_for`, `KINDS`) need
Hypothesis (`pip install "kfuse[test]"`) and are imported when first used, so that a bare
install (`kfuse demo`) can compare without it.
"""

from typing import Any

from kfuse.testing.compare import (
    TOLERANCES,
    assert_close,
    assert_outputs_close,
    output_reduction_size,
    output_tolerance_dtype,
    tolerance,
)

_LAZY = {
    "fusions": "kfuse.testing.strategies",
    "KINDS": "kfuse.testing.strategies",
    "inputs_for": "kfuse.testing.inputs",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'kfuse.testing' has no attribute {name!r}")


__all__ = [
    "fusions",
    "inputs_for",
    "assert_close",
    "assert_outputs_close",
    "tolerance",
    "TOLERANCES",
    "output_tolerance_dtype",
    "output_reduction_size",
    "KINDS",
]

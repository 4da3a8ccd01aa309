"""Testing helpers for kfuse and its users: Hypothesis strategies of fusions and inputs, and
tolerance-aware comparison."""

from kfuse.testing.compare import (
                                   TOLERANCES,
                                   assert_close,
                                   assert_outputs_close,
                                   output_reduction_size,
                                   output_tolerance_dtype,
                                   tolerance,
)
from kfuse.testing.inputs import inputs_for
from kfuse.testing.strategies import KINDS, fusions

__all__ = ["fusions", "inputs_for", "assert_close", "assert_outputs_close", "tolerance",
           "TOLERANCES", "output_tolerance_dtype", "output_reduction_size", "KINDS"]

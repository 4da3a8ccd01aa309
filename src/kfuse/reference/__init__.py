"""The eager float64 reference that kfuse's results are judged against (evaluator), the
array functions it computes with (backends) and what it tracks of each value's conditioning
(conditions).

    evaluate(fusion, inputs, accumulate="float64" | "same") -> list of output arrays
    conditioning(fusion, inputs) -> per output, what float64 cannot judge alone
    sum_magnitudes(fusion, inputs) -> the magnitudes of the terms each output's sums added
"""

from kfuse.reference.evaluator import Conditioning, conditioning, evaluate, sum_magnitudes

__all__ = ["Conditioning", "conditioning", "evaluate", "sum_magnitudes"]

"""Outputs that are views of other outputs: stored once, returned as views of that array.

nvFuser returns an output that is a reshape of another output as an alias of the other
output's tensor (its AliasTest.OutputAliasesAnotherOutput test): the value is stored once.
kfuse does so where the reshape's shape is numbers (a shape of run-time sizes is left as it
is) and both outputs are stored row major (no fd.ops.stride_order), so that the reshape of
the other's array is a view. The compiler then sees the fusion without those outputs
(`plan`'s core fusion). Thunder's transformer block returns values with their 2-D reshapes
from four of its backward regions: each was written twice (168 MB more at its check's
size). With the reshape gone, a cat that only it read is no longer read: one kernel writes
its parts in place (kfuse.engine.boundary_views folds a cat no expression reads).

Not taken: fusions with outputs written into inputs (fd.add_output(..., alias_input=)),
whose returned positions kfuse.engine.aliasing decides, and outputs added more than once
(each is an array of its own, as kfuse has always returned them). Calls given outputs= (each
given array is written by the kernels, as execute promises) and calls with pinned params
(made for the whole fusion) run the whole fusion (FusionExecutorCache.whole).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kfuse.ir.canonical_terms import constant_value
from kfuse.ir.exprs import ReshapeOp
from kfuse.ir.fusion import Fusion
from kfuse.ir.layout_ops import allocation_order
from kfuse.ir.values import TensorView


@dataclass(frozen=True)
class OutputView:
    """Output `position` returned as the array of output `source` (positions in the whole
    fusion's outputs) reshaped to `shape`."""

    position: int
    source: int
    shape: tuple[int, ...]


@dataclass(frozen=True)
class OutputViews:
    """A fusion's outputs made as views (`views`) and the position in the whole fusion's
    outputs of each output of the core fusion, in order (`core_positions`)."""

    views: tuple[OutputView, ...]
    core_positions: tuple[int, ...]

    def assembled(self, core_results: list[Any]) -> list[Any]:
        """The whole fusion's outputs from the core fusion's: each view made of its source's
        array (a view of it: the source is a row-major array of its own)."""
        results: list[Any] = [None] * (len(self.core_positions) + len(self.views))
        for position, array in zip(self.core_positions, core_results, strict=True):
            results[position] = array
        for view in self.views:
            results[view.position] = results[view.source].reshape(view.shape)
        return results


def plan(fusion: Fusion) -> tuple[Fusion, OutputViews] | None:
    """(the core fusion: `fusion` without the outputs made as views, sharing its Vals; the
    views), or None where no output is one."""
    if fusion.output_aliases or fusion.hidden_outputs:
        return None
    first: dict[int, int] = {}  # id of an output's value -> the position it is stored at
    views: list[OutputView] = []
    for k, out in enumerate(fusion.outputs):
        view = _view_of(out, k, first, sum(o is out for o in fusion.outputs) > 1)
        if view is None:
            first.setdefault(id(out), k)
        else:
            views.append(view)
    if not views:
        return None
    taken = {v.position for v in views}
    positions = tuple(k for k in range(len(fusion.outputs)) if k not in taken)
    core = fusion.with_outputs([fusion.outputs[k] for k in positions])
    return core, OutputViews(tuple(views), positions)


def _view_of(out: TensorView, k: int, first: dict[int, int], repeated: bool) -> OutputView | None:
    """Output k (`out`, `repeated` where added more than once) as a view of an output
    stored before it (`first`), or None."""
    if allocation_order(out) is not None:
        return None  # stored in a stride order: an array of its own in that order
    if id(out) in first or repeated:
        return None  # a value added twice is two arrays, as kfuse has always returned it
    e = out.definition
    if not isinstance(e, ReshapeOp):
        return None
    source = e.inputs[0]
    if id(source) not in first or not isinstance(source, TensorView) or source.is_input:
        return None
    if allocation_order(source) is not None:
        return None  # stored in a stride order: its reshape is no view of it
    shape = [constant_value(v) for v in e.shape]
    if any(not isinstance(n, int) or isinstance(n, bool) or n < 0 for n in shape):
        return None  # run-time sizes, or an extent inferred (-1)
    return OutputView(k, first[id(source)], tuple(shape))  # type: ignore[arg-type]


__all__ = ["OutputView", "OutputViews", "plan"]

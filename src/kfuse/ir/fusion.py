"""Fusion: the container of a fusion's IR (inputs, outputs, topologically ordered exprs)."""

from __future__ import annotations

import math
from typing import Any

from kfuse.ir.exprs import Expr
from kfuse.ir.values import Scalar, TensorView, Val


class Fusion:
    """A fusion's IR.

    inputs: TensorViews and symbolic Scalars in definition order. outputs: TensorViews.
    exprs: the exprs the outputs need, in topological (definition) order. all_exprs: every
    expr defined, including dead ones. vals: every non-constant Val of `exprs` and `inputs`.
    Equality is structural (same inputs, exprs and outputs up to naming), and hashing agrees.
    """

    def __init__(self) -> None:
        self.inputs: list[Val] = []
        self.outputs: list[TensorView] = []
        self.all_exprs: list[Expr] = []
        self.exprs: list[Expr] = []
        self._counters = {"T": 0, "S": 0, "C": 0}
        self._serial = 0
        # Positions of the outputs whose values a parent fusion only rounds into its own
        # BFloat16 outputs through arithmetic (a segment's, kfuse.engine.segmenter): the
        # fast-math choices (kfuse.codegen.precision) treat them as BFloat16 outputs.
        self.rounded_outputs: tuple[int, ...] = ()
        # Products a parent fusion reads elsewhere besides the one sum of them a segment
        # holds: the segment keeps them rounded, not fused into that sum, as the whole fusion
        # does (kfuse.codegen.contraction).
        self.rounded_products: frozenset[Val] = frozenset()
        # fd.add_output(out, alias_input=inp): (output position, input position) pairs, the
        # output written into the input's storage (kfuse.engine.aliasing); hidden_outputs:
        # the positions of those outputs that execute does not return (not also added as
        # ordinary outputs).
        self.output_aliases: tuple[tuple[int, int], ...] = ()
        self.hidden_outputs: tuple[int, ...] = ()
        # True while a FusionDefinition is still adding to it (until finalize()): `exprs`
        # is empty and the names are not final until then (see as_defined_so_far).
        self.in_definition = False

    # ---- construction (used by the frontend) ----
    def next_name(self, kind: str) -> tuple[str, int]:
        """A fresh name with prefix kind ('T', 'S' or 'C') and the next creation serial."""
        name = f"{kind}{self._counters[kind]}"
        self._counters[kind] += 1
        self._serial += 1
        return name, self._serial

    def register_expr(self, expr: Expr) -> Expr:
        """Record `expr` and make it the definition of its outputs."""
        for out in expr.outputs:
            out.definition = expr
        self.all_exprs.append(expr)
        return expr

    def finalize(self) -> None:
        """Prune dead exprs and renumber Vals canonically (T0.., S0.. in definition order), so
        that printing a fusion and re-running the printout gives the same names."""
        live = self._live_expr_ids()
        self.exprs = [e for e in self.all_exprs if id(e) in live]
        self.in_definition = False
        counters = {"T": 0, "S": 0}
        statements: list[Any] = sorted(
            [(v.serial, [v]) for v in self.inputs]
            + [(e.outputs[0].serial, list(e.outputs)) for e in self.exprs],
            key=lambda item: item[0],
        )
        renamed: set[int] = set()
        for _, outs in statements:
            for v in outs:
                if id(v) in renamed:
                    continue
                kind = "T" if isinstance(v, TensorView) else "S"
                v.name = f"{kind}{counters[kind]}"
                counters[kind] += 1
                renamed.add(id(v))
        # Dead vals keep distinct names after the live ones.
        for e in self.all_exprs:
            if id(e) not in live:
                for dead in e.outputs:
                    kind = "T" if isinstance(dead, TensorView) else "S"
                    dead.name = f"{kind}{counters[kind]}"
                    counters[kind] += 1

    def as_defined_so_far(self) -> Fusion:
        """A finished Fusion of what a definition still open holds (for questions asked
        inside its `with` block, as nvFuser's scheduling tutorials ask them): the inputs and
        outputs added so far and the exprs those outputs need, sharing this fusion's Vals
        under the names they have now. A new object each time, so that nothing computed
        from it (the canonical form, cached on the Fusion it is asked for) outlives the
        exprs and outputs added after it."""
        snapshot = self.with_outputs(self.outputs)
        snapshot.rounded_outputs = self.rounded_outputs
        snapshot.output_aliases = self.output_aliases
        snapshot.hidden_outputs = self.hidden_outputs
        return snapshot

    def with_outputs(self, outputs: list[TensorView]) -> Fusion:
        """A finished Fusion of this one's inputs, `outputs` (Vals of this fusion) and the
        exprs they need, in this fusion's order, sharing its Vals under their names."""
        kept = Fusion()
        kept.inputs = list(self.inputs)
        kept.outputs = list(outputs)
        kept.all_exprs = list(self.all_exprs)
        live = kept._live_expr_ids()
        kept.exprs = [e for e in self.all_exprs if id(e) in live]
        return kept

    def _live_expr_ids(self) -> set[int]:
        """The ids of the exprs that the outputs need."""
        live: set[int] = set()
        needed: list[Val] = list(self.outputs)
        seen: set[int] = set()
        while needed:
            v = needed.pop()
            if id(v) in seen:
                continue
            seen.add(id(v))
            if v.definition is not None:
                live.add(id(v.definition))
                needed.extend(v.definition.inputs)
        return live

    # ---- queries ----
    @property
    def vals(self) -> list[Val]:
        """Inputs, then the outputs of `exprs`, in order (constants are not listed)."""
        out: list[Val] = list(self.inputs)
        for e in self.exprs:
            out.extend(e.outputs)
        return out

    @property
    def tensor_inputs(self) -> list[TensorView]:
        """The TensorView inputs, in order."""
        return [v for v in self.inputs if isinstance(v, TensorView)]

    def uses(self, val: Val) -> list[Expr]:
        """The live exprs that read `val`."""
        return [e for e in self.exprs if any(v is val for v in e.inputs)]

    def infer_shapes(self, inputs: list[Any]) -> dict[Val, Any]:
        """Concrete extents of every TensorView (tuple of ints) and the value of every computed
        integer Scalar, from the inputs (arrays, shapes, or numbers for scalar inputs).

        Raises kfuse.errors.InputError naming the input when sizes do not fit the definition.
        """
        from kfuse.ir.shapes import infer_shapes

        return infer_shapes(self, inputs)

    # ---- structural equality ----
    def structure(self) -> tuple:
        """A hashable description of the fusion that ignores names."""
        index: dict[int, tuple] = {}

        def ref(v: Val) -> tuple:
            if type(v) is Scalar and v.is_constant:
                value = v.value
                if isinstance(value, float) and math.isnan(value):
                    value = "nan"
                return ("const", v.dtype.value, type(v.value).__name__, value)
            return index[id(v)]

        def attr(x: Any) -> Any:
            if isinstance(x, tuple):
                return tuple([attr(y) for y in x])
            if isinstance(x, Val):
                return ref(x)
            return x

        parts: list[Any] = []
        for i, v in enumerate(self.inputs):
            index[id(v)] = ("in", i)
            if isinstance(v, TensorView):
                parts.append(("tensor", v.dtype.value, v.axes, v.contiguity, v.stride_order))
            else:
                parts.append(("scalar", v.dtype.value))
        # (written for speed: a warm first call builds the structure of its canonical fusion)
        for j, e in enumerate(self.exprs):
            outputs = e.outputs
            parts.append(
                (
                    type(e).__name__,
                    tuple([ref(v) for v in e.inputs]),
                    tuple([attr(getattr(e, name)) for name in e.ATTRS]),
                    tuple(
                        [
                            (type(o).__name__, o.dtype.value, getattr(o, "axes", None))
                            for o in outputs
                        ]
                    ),
                )
            )
            for k, o in enumerate(outputs):
                index[id(o)] = ("expr", j, k)
        parts.append(("outputs", tuple(ref(v) for v in self.outputs)))
        if self.rounded_outputs:  # kernels differ (fast math), so must cache keys
            parts.append(("rounded", self.rounded_outputs))
        if self.rounded_products:  # kernels differ (contraction), so must cache keys
            kept = sorted(index[id(v)] for v in self.rounded_products if id(v) in index)
            parts.append(("rounded products", tuple(kept)))
        if self.output_aliases:  # what execute writes and returns differs
            parts.append(("aliases", self.output_aliases, self.hidden_outputs))
        return tuple(parts)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Fusion):
            return NotImplemented
        return self.structure() == other.structure()

    def __hash__(self) -> int:
        return hash(self.structure())

    # ---- printing ----
    def __str__(self) -> str:
        lines = ["Inputs:"]
        lines += [f"  {v}" for v in self.inputs]
        lines.append("Exprs:")
        lines += [f"  {e}" for e in self.exprs]
        lines.append("Outputs:")
        lines += [f"  {v}" for v in self.outputs]
        for out, inp in self.output_aliases:
            lines.append(f"  {self.outputs[out].name} written into {self.inputs[inp].name}")
        return "\n".join(lines)

    def print(self) -> None:
        """Print the fusion's IR (str(fusion): its inputs, exprs and outputs, kfuse's own form
        of it), as nvFuser's `fd.fusion.print()` prints nvFuser's."""
        print(str(self))  # noqa: T201 - printing is what nvFuser's method does

    def print_math(self, from_outputs_only: bool = True) -> str:
        """The fusion's exprs as text (nvFuser's print_math returns its IR's; this is kfuse's
        form). from_outputs_only is accepted for nvFuser's signature: a kfuse fusion holds
        the exprs its outputs need, and a definition's other exprs are dropped when it is
        built."""
        del from_outputs_only
        return str(self)

    def __repr__(self) -> str:
        return (
            f"<Fusion {len(self.inputs)} inputs, {len(self.exprs)} exprs, "
            f"{len(self.outputs)} outputs>"
        )

"""The canonical form of a Fusion: what the schedulers see, whatever the spelling.

    canonical_fusion(fusion) -> Fusion

Two definitions of the same computation should get the same kernels. The canonical form is
a new Fusion, built expr by expr from the definition's (which stays as the user wrote it:
printing, repr and the reference read the definition):

* the algebraic rules of kfuse.ir.canonical_rules (pow by small constants as products or
  sqrt, reciprocal(sqrt(x)) as rsqrt(x), division by a power of two as a product, casts
  whose round trip is exact, a reshape of element-wise ops of an input as those ops of the
  reshaped input),
  each of which keeps every value the definition computes;
* common subexpressions merged: an expr of the same kind, attributes and operands as an
  earlier one is that one (every IR op is pure: no op reads state or draws random numbers);
* dead code dropped: only exprs an output needs are kept.

Vals keep the names of the definition's Vals they stand for (a segment listing names what
the user printed); a Val a rule adds gets a fresh name after all of the definition's.
Inputs are new Vals of the same names, order, dtypes and layouts, so a call's arguments and
the program key (kfuse.engine.signature) are the definition's. The form depends on the
definition only, so it is computed once per Fusion (cached on it) and the executor's
per-signature Program cache stays keyed by signature alone.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from kfuse.dtypes import DataType
from kfuse.ir.canonical_rules import rewrite
from kfuse.ir.exprs import Expr, with_attribute_vals
from kfuse.ir.fusion import Fusion
from kfuse.ir.values import Axis, Scalar, TensorView, Val

_CACHE_KEY = "_canonical_form"
STRUCTURE_KEY = "_canonical_structure"
"""Where a canonical fusion keeps its Fusion.structure(), computed as it was built."""


def canonical_fusion(fusion: Fusion) -> Fusion:
    """The canonical form of a finalized `fusion`: `fusion` itself when no rule, merge or
    pruning changes it, else a new Fusion computing the same outputs (see the module
    docstring). Computed once per fusion."""
    cached = fusion.__dict__.get(_CACHE_KEY)
    if cached is None:
        cached = Canonicalizer(fusion).run()
        fusion.__dict__[_CACHE_KEY] = cached
    return cached


def known_canonical_form(definition: Fusion) -> Fusion | None:
    """The canonical form of `definition` if this process has it already, else None."""
    return definition.__dict__.get(_CACHE_KEY)


def adopt_canonical_form(definition: Fusion, canonical: Fusion) -> None:
    """Make `canonical` the canonical form canonical_fusion gives for `definition` (one
    kfuse.engine.canonical_store read back from disk instead of building it)."""
    definition.__dict__[_CACHE_KEY] = canonical


class Canonicalizer:
    """Builds the canonical form of one fusion; the rules call back into it (`emit`,
    `new_val`, `constant`) to add exprs."""

    def __init__(self, original: Fusion) -> None:
        self.original = original
        self.fusion = Fusion()
        # id(a Val of the original) -> the canonical Val standing for it.
        self._env: dict[int, Val] = {}
        # Common-subexpression key -> the canonical expr first emitted with it.
        self._known: dict[tuple, Expr] = {}
        # The next free name numbers and serial, found on a rule's first new Val (most
        # fusions need none: the walk over every Val is then saved).
        self._fresh: dict[str, int] = {}
        self._serial = -1

    def run(self) -> Fusion:
        """The canonical Fusion (or the original when nothing changed)."""
        for v in self.original.inputs:
            clone = self._clone(v)
            clone.is_input = True
            if isinstance(v, TensorView):
                assert isinstance(clone, TensorView)
                clone.contiguity, clone.stride_order = v.contiguity, v.stride_order
            self._env[id(v)] = clone
            self.fusion.inputs.append(clone)
        for e in self.original.exprs:
            self._visit(e)
        outputs = [self.val(o) for o in self.original.outputs]
        self.fusion.outputs = outputs  # type: ignore[assignment]
        self.fusion.rounded_outputs = self.original.rounded_outputs
        self.fusion.output_aliases = self.original.output_aliases
        self.fusion.hidden_outputs = self.original.hidden_outputs
        live = _live_exprs(self.fusion.all_exprs, outputs)
        self.fusion.all_exprs = live
        self.fusion.exprs = list(live)
        structure = self.fusion.structure()
        canonical = self.original if structure == self.original.structure() else self.fusion
        # Kept for what names the canonical fusion by its structure (the program store's
        # key): a canonical fusion is never changed once built.
        canonical.__dict__[STRUCTURE_KEY] = structure
        return canonical

    # ---- what the rules use ----
    def val(self, v: Val) -> Val:
        """The canonical Val of an original Val (constants are shared: they have no
        definition and are never changed)."""
        if isinstance(v, Scalar) and v.is_constant:
            return v
        return self._env[id(v)]

    def constant(self, value: Any, dtype: DataType) -> Scalar:
        """A new constant Scalar of `dtype` (value already of the dtype's Python kind)."""
        serial = self._next_serial()
        return Scalar(f"C{serial}", dtype, value, serial=serial)

    def new_val(self, dtype: DataType, axes: tuple[Axis, ...] | None) -> Val:
        """A fresh Val for an intermediate a rule adds: a TensorView of `axes`, or a
        Scalar when axes is None."""
        kind = "S" if axes is None else "T"
        if not self._fresh:
            self._fresh = {k: _first_free(self.original, k) for k in ("T", "S")}
        name = f"{kind}{self._fresh[kind]}"
        self._fresh[kind] += 1
        serial = self._next_serial()
        if axes is None:
            return Scalar(name, dtype, None, serial=serial)
        return TensorView(name, dtype, axes, serial=serial)

    def _next_serial(self) -> int:
        """A serial after every Val of the original and every one made so far."""
        if self._serial < 0:
            self._serial = 1 + max((v.serial for v in _all_vals(self.original)), default=0)
        self._serial += 1
        return self._serial

    def emit(
        self, cls: type[Expr], inputs: Sequence[Val], attrs: dict[str, Any], like: Sequence[Val]
    ) -> tuple[Val, ...]:
        """The outputs of expr `cls(inputs, **attrs)`, whose outputs have the dtypes and
        shapes of `like`: an earlier identical expr's outputs, else a new expr's. `like`
        are original Vals (the new outputs take their names) or fresh ones from new_val."""
        key = (
            cls.__name__,
            tuple(_operand_key(v) for v in inputs),
            tuple(sorted((k, _attr_key(x)) for k, x in attrs.items())),
            tuple((type(o).__name__, o.dtype, getattr(o, "axes", None)) for o in like),
        )
        known = self._known.get(key)
        if known is not None:
            return known.outputs
        # An original Val has its definition; a fresh one gets it here.
        outputs = tuple(self._clone(o) if o.definition is not None else o for o in like)
        expr = cls(inputs=tuple(inputs), outputs=outputs, **attrs)
        self.fusion.register_expr(expr)
        self._known[key] = expr
        return outputs

    # ---- the walk ----
    def _visit(self, e: Expr) -> None:
        inputs = tuple(self.val(v) for v in e.inputs)
        attrs = {**e.attributes(), **with_attribute_vals(e, self.val)}
        result = rewrite(self, e, inputs)
        if result is None:
            result = self.emit(type(e), inputs, attrs, e.outputs)
        for o, r in zip(e.outputs, result, strict=True):
            self._env[id(o)] = r

    def _clone(self, v: Val) -> Val:
        if isinstance(v, TensorView):
            return TensorView(v.name, v.dtype, v.axes, owner=v.owner, serial=v.serial)
        return Scalar(v.name, v.dtype, None, owner=v.owner, serial=v.serial)


def _operand_key(v: Val) -> tuple:
    """Constants by dtype and exact value (-0.0 is not 0.0; NaN equals NaN), others by
    identity."""
    if isinstance(v, Scalar) and v.is_constant:
        return ("const", v.dtype, type(v.value).__name__, repr(v.value))
    return ("val", id(v))


def _attr_key(x: Any) -> Any:
    if isinstance(x, tuple):
        return tuple(_attr_key(y) for y in x)
    if isinstance(x, Val):
        return _operand_key(x)
    return x


def _live_exprs(exprs: list[Expr], outputs: Sequence[Val]) -> list[Expr]:
    """The exprs (in their order) that some output needs."""
    needed: set[int] = set()
    pending = list(outputs)
    while pending:
        v = pending.pop()
        if v.definition is None or id(v.definition) in needed:
            continue
        needed.add(id(v.definition))
        pending.extend(v.definition.inputs)
    return [e for e in exprs if id(e) in needed]


def _all_vals(fusion: Fusion) -> list[Val]:
    vals: list[Val] = list(fusion.inputs)
    for e in fusion.all_exprs:
        vals.extend(e.outputs)
        vals.extend(v for v in e.inputs if isinstance(v, Scalar) and v.is_constant)
    return vals


def _first_free(fusion: Fusion, kind: str) -> int:
    """1 + the largest number among the fusion's names of this kind ('T' or 'S')."""
    pattern = re.compile(rf"{kind}(\d+)$")
    numbers = [int(m.group(1)) for v in _all_vals(fusion) if (m := pattern.match(v.name))]
    return 1 + max(numbers, default=-1)


__all__ = ["Canonicalizer", "canonical_fusion"]

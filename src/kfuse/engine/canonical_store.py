"""Canonical forms kept on disk beside the program store's programs: a definition's canonical
Fusion (kfuse.ir.canonicalize), so that a fusion's first call in a new process skips the
canonicalize stage as the program store (kfuse.engine.program_store) lets it skip the others.
On and off with the program store (KFUSE_PROGRAM_CACHE, the disk cache, KFUSE_DUMP).

A canonical form is a function of the definition and the code alone. Its key is over the
definition's structure (Fusion.structure), the names and serials of its Vals (the canonical
fusion keeps the definition's names, and numbers a rule's new Vals after them) and the
package's fingerprint (program_store.package_fingerprint).

An entry holds the canonical fusion (its inputs, outputs, exprs, the fields Fusion keeps of
them, its structure and its program-store digest) as a pickle, in which the Vals it shares
with the definition (constants, which canonicalization never copies) and the definition's
owner (its FusionDefinition) are named, not copied: on load they are the new definition's.
Nothing else outside the IR is pickled (a fusion holding anything else is not kept). A
definition that is its own canonical form is recorded as that alone (with its digest). A
loaded form must match the definition (inputs in number, kind, dtype, axes and contiguity;
outputs in number and dtype); an entry that does not, or does not load, is removed with a
warning and the definition is canonicalized again.
"""

from __future__ import annotations

import hashlib
import io
import pickle
from typing import Any

from kfuse.engine.program_store import DIGEST_KEY, folder, fusion_digest, package_fingerprint
from kfuse.engine.signature import SHAPE_INPUTS_KEY, shape_inputs
from kfuse.ir.canonicalize import STRUCTURE_KEY, adopt_canonical_form, known_canonical_form
from kfuse.ir.fusion import Fusion
from kfuse.ir.values import Scalar, TensorView, Val
from kfuse.runtime import disk_cache, kernel_cache

FORMAT = "kfuse-canonical 1"

_FIELDS = (
    "inputs",
    "outputs",
    "all_exprs",
    "exprs",
    "_counters",
    "_serial",
    "rounded_outputs",
    "rounded_products",
    "output_aliases",
    "hidden_outputs",
    "in_definition",
    STRUCTURE_KEY,
    DIGEST_KEY,
    SHAPE_INPUTS_KEY,
)
"""What a canonical fusion's entry keeps of its __dict__: its IR, and the caches a first call
reads that name no object of this process (kfuse.engine.signature.shape_inputs' positions);
other caches modules attach to a fusion are left out."""

_KEY = "_canonical_store_key"  # a definition's entry key and structure, computed once
_VALS = "_canonical_store_vals"  # its Vals, as _definition_vals lists them


class _NotStorable(Exception):
    """A canonical fusion holding something outside the IR."""


def _definition_vals(definition: Fusion) -> list[Val]:
    """Every Val of the definition a canonical fusion may share or be named after, in
    definition order (kept on the definition: a closed definition does not change): its
    inputs, each expr's outputs and the constants among its operands (one an attribute alone
    holds is copied into the entry, not shared: a constant is its value)."""
    vals: list[Val] | None = definition.__dict__.get(_VALS)
    if vals is None:
        vals = list(definition.inputs)
        for e in definition.all_exprs:
            vals.extend(e.outputs)
            vals.extend(v for v in e.inputs if isinstance(v, Scalar) and v.is_constant)
        definition.__dict__[_VALS] = vals
    return vals


def _key(definition: Fusion) -> str | None:
    """The entry key of `definition` (kept on it, with its structure: a definition that is
    its own canonical form takes that as its canonical structure), or None where its
    structure does not pickle."""
    if _KEY in definition.__dict__:
        return definition.__dict__[_KEY][0]
    structure = definition.structure()
    named = [(v.name, v.serial) for v in _definition_vals(definition)]
    try:
        described = pickle.dumps((structure, named), protocol=5)
    except (pickle.PicklingError, TypeError, AttributeError):
        key = None
    else:
        digest = hashlib.sha256(described).hexdigest()
        key = kernel_cache.cache_key(FORMAT, package_fingerprint(), digest)
    definition.__dict__[_KEY] = (key, structure)
    return key


def _identity() -> dict[str, str]:
    return {"format": FORMAT}


def _owner(definition: Fusion) -> Any:
    """The FusionDefinition the definition's Vals belong to (None for a bare Fusion)."""
    vals = (*definition.inputs, *definition.outputs)
    return next((v.owner for v in vals if v.owner is not None), None)


class _Pickler(pickle.Pickler):
    def __init__(self, file: io.BytesIO, shared: dict[int, int], owner: Any) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self._shared = shared
        self._owner = owner

    def persistent_id(self, obj: Any) -> Any:
        if isinstance(obj, Val):
            position = self._shared.get(id(obj))
            return None if position is None else ("definition_val", position)
        if self._owner is not None and obj is self._owner:
            return ("owner",)
        if isinstance(obj, type):
            return None  # a class, pickled by its name
        module = type(obj).__module__
        if module != "builtins" and not module.startswith(("kfuse.ir", "kfuse.dtypes")):
            raise _NotStorable(f"it holds a {type(obj).__name__}")
        return None


class _Unpickler(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, shared: list[Val], owner: Any) -> None:
        super().__init__(file)
        self._shared = shared
        self._owner = owner

    def persistent_load(self, pid: Any) -> Any:
        if pid == ("owner",):
            return self._owner
        kind, position = pid
        if kind != "definition_val":
            raise pickle.UnpicklingError(f"unknown persistent id {kind!r}")
        return self._shared[position]


def load(definition: Fusion) -> Fusion | None:
    """The stored canonical form of `definition` (also made the one canonical_fusion gives
    for it), or None: nothing stored, the store off, or a bad entry (removed). One this
    process has already is that one."""
    known = known_canonical_form(definition)
    if known is not None:
        return known
    place = folder("canonical")
    if place is None:
        return None
    key = _key(definition)
    if key is None:
        return None
    canonical = disk_cache.load_entry(
        place,
        key,
        _identity(),
        lambda payload: _checked(_from_payload(payload, definition), definition),
    )
    if canonical is not None:
        adopt_canonical_form(definition, canonical)
    return canonical


def _from_payload(payload: bytes, definition: Fusion) -> Fusion:
    """The canonical fusion an entry's payload holds: ("same", (its digest, its
    shape_inputs)) for a definition that is its own canonical form, else ("fusion", its
    fields)."""
    shared = _definition_vals(definition)
    kind, value = _Unpickler(io.BytesIO(payload), shared, _owner(definition)).load()
    if kind == "same" and isinstance(value, tuple) and len(value) == 2:
        definition.__dict__.setdefault(STRUCTURE_KEY, definition.__dict__[_KEY][1])
        definition.__dict__.setdefault(DIGEST_KEY, value[0])
        definition.__dict__.setdefault(SHAPE_INPUTS_KEY, value[1])
        return definition
    if kind != "fusion" or not isinstance(value, dict) or set(value) - set(_FIELDS):
        raise pickle.UnpicklingError("it holds no canonical fusion")
    canonical = Fusion.__new__(Fusion)
    canonical.__dict__.update(value)
    return canonical


def _checked(canonical: Fusion, definition: Fusion) -> Fusion:
    """`canonical`, once _check_matches has passed it."""
    _check_matches(canonical, definition)
    return canonical


def _check_matches(canonical: Fusion, definition: Fusion) -> None:
    """ValueError unless `canonical` takes the definition's inputs and gives its outputs."""
    if len(canonical.inputs) != len(definition.inputs) or len(canonical.outputs) != len(
        definition.outputs
    ):
        raise ValueError("its inputs or outputs are not the definition's")
    for got, want in zip(canonical.inputs, definition.inputs, strict=True):
        if type(got) is not type(want) or got.dtype is not want.dtype:
            raise ValueError(f"its input {got.name} is not the definition's {want.name}")
        if not isinstance(got, TensorView) or not isinstance(want, TensorView):
            continue
        if got.axes != want.axes or got.contiguity != want.contiguity:
            raise ValueError(f"its input {got.name} is not the definition's {want.name}")
    for got, want in zip(canonical.outputs, definition.outputs, strict=True):
        if got.dtype is not want.dtype:
            raise ValueError(f"its output {got.name} is not the definition's {want.name}")


def save(definition: Fusion, canonical: Fusion) -> None:
    """Keep `canonical`, the canonical form of `definition`; one the store cannot keep, or a
    cache it cannot write, is skipped."""
    place = folder("canonical")
    if place is None:
        return
    key = _key(definition)
    if key is None:
        return
    digest = fusion_digest(canonical)  # kept with it: the program store's key needs it
    inputs_of_shape = shape_inputs(canonical)  # kept with it: every call's signature needs it
    content: tuple[str, Any]
    if canonical is definition:
        content = ("same", (digest, inputs_of_shape))
    else:
        content = ("fusion", {k: canonical.__dict__[k] for k in _FIELDS if k in canonical.__dict__})
    shared = {id(v): k for k, v in enumerate(_definition_vals(definition))}
    buffer = io.BytesIO()
    try:
        _Pickler(buffer, shared, _owner(definition)).dump(content)
    except (_NotStorable, pickle.PicklingError, TypeError, AttributeError, RecursionError):
        return
    disk_cache.write_entry(place, key, _identity(), buffer.getvalue())


__all__ = ["FORMAT", "load", "save"]

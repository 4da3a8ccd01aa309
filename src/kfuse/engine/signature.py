"""The input signature of a call: what a compiled fusion depends on, defined here once.

A call's Program (kfuse.engine.executor) depends on the target and, for every array input,
on its dtype, shape, strides and 16-byte alignment class; for a scalar input on its type
(values are kernel arguments), and on its value too where an extent depends on it (an
expand or reshape to a size given as a scalar input, a slice's bounds, a pad's widths:
shape_inputs). Two descriptions of those same facts exist, for two speeds of matching:

* program_key: from the RuntimeInfo of a checked call (kfuse's dtypes, strides in elements),
  the key of the executor's Program cache;
* input_layouts / layout_key: from the arrays themselves, in the framework's own terms (the
  array type, the framework's dtype object, shape, strides as the framework reports them,
  pointer & 15, device), which kfuse._C.FastCall compares field by field against a new
  call's arrays in C++ (cpp/bindings/fast_call.cpp, FastCall::matches) without converting
  anything;
* replay_key / array_spec: the same facts in the framework's terms for every framework,
  NumPy included, with the values of the scalar inputs an extent depends on: the key of a
  segmented fusion's replays (kfuse.engine.segmented_replay), matched in Python (an
  intermediate against its planned array_spec by spec_pointer).

Adding a fact means adding it to all of them, in this module; tests/test_signature.py checks
that they tell the same calls apart.
"""

from __future__ import annotations

from typing import Any

from kfuse.ir.exprs import GeneratedOp, attribute_vals
from kfuse.ir.fusion import Fusion
from kfuse.ir.values import Scalar, TensorView, Val
from kfuse.runtime.arrays import framework_of, numpy_data_ptr
from kfuse.runtime.info import RuntimeInfo
from kfuse.schedule.types import SchedulerParams

SHAPE_INPUTS_KEY = "_shape_inputs"
"""Where a fusion keeps shape_inputs' answer (kept with a stored canonical form too:
kfuse.engine.canonical_store)."""

SCALAR_TYPES = (bool, int, float, complex)
"""The Python types a scalar input may have on the fast path (arrays, NumPy scalars and
anything else take the checked path)."""


def scalar_spec(value: Any) -> tuple | None:
    """What a later call's value for a scalar input must match: (type,) for a Python number
    (any value of that type matches), None for anything else."""
    return (type(value),) if type(value) in SCALAR_TYPES else None


def shape_inputs(fusion: Fusion) -> frozenset[int]:
    """Positions of the scalar inputs some extent depends on (an expand's extents, a
    reshape's shape, a slice's bounds, a pad's widths, through scalar arithmetic): a
    Program's launches are planned for the shapes, so those values are part of the
    signature. Computed once per fusion."""
    cached = fusion.__dict__.get(SHAPE_INPUTS_KEY)
    if cached is not None:
        return cached
    pending: list[Any] = []
    for e in fusion.exprs:
        # Every Scalar an attribute holds is a size or a bound, but a generated value's
        # parameters (a fill value, a seed): kernel parameters, set by each call's values
        # (a run-time complex scalar reaches kernels as such fill values, its parts).
        pending += list(e.shape) if isinstance(e, GeneratedOp) else attribute_vals(e)
    inputs = {id(v): k for k, v in enumerate(fusion.inputs)}
    found: set[int] = set()
    seen: set[int] = set()
    while pending:
        v = pending.pop()
        if id(v) in seen or not isinstance(v, Scalar):
            continue
        seen.add(id(v))
        if id(v) in inputs:
            found.add(inputs[id(v)])
        elif v.definition is not None:
            pending += list(v.definition.inputs)  # SizeOp's tensor input stops the walk
    fusion.__dict__[SHAPE_INPUTS_KEY] = result = frozenset(found)
    return result


def program_key(info: RuntimeInfo, params: SchedulerParams | None) -> tuple:
    """The signature a compiled Program is cached under: the target (backend, device,
    framework), per array input its dtype, shape, strides (elements) and data pointer modulo
    16, per scalar input its Python type (and its value where an extent depends on it), and
    the pinned params if any."""
    parts: list[Any] = [info.backend, info.device_index, info.framework]
    sized = shape_inputs(info.fusion)
    for k, (val, arg) in enumerate(zip(info.fusion.inputs, info.inputs)):
        if isinstance(val, TensorView):
            lay = info.layouts[val]
            parts.append((lay.dtype, lay.shape, lay.strides, lay.data_ptr % 16))
        elif k in sized:
            parts.append((type(arg), arg.item() if hasattr(arg, "item") else arg))
        else:
            parts.append(type(arg))
    if params is not None:
        parts.append(("params", type(params).__name__, hash(params)))
    return tuple(parts)


def input_layouts(inputs: list[Any], fusion_inputs: list[Any] | None = None) -> list[tuple] | None:
    """What a later call's inputs must match, one (type, dtype, shape, strides, pointer mod
    16, device) per array input in the framework's own terms and (type,) per scalar input
    (`fusion_inputs` says which inputs are scalars), or None when these inputs cannot take
    the fast path."""
    specs = []
    for k, t in enumerate(inputs):
        if fusion_inputs is not None and isinstance(fusion_inputs[k], Scalar):
            spec = scalar_spec(t)
            if spec is None:
                return None
            specs.append(spec)
            continue
        framework = framework_of(t)
        if framework == "torch" and t.device.type == "cuda":
            specs.append(
                (
                    type(t),
                    t.dtype,
                    tuple(t.shape),
                    tuple(t.stride()),
                    t.data_ptr() & 15,
                    t.get_device(),
                )
            )
        elif framework == "cupy":
            specs.append((type(t), t.dtype, t.shape, t.strides, t.data.ptr & 15, t.data.device_id))
        else:
            return None
    return specs


def layout_key(inputs: list[Any], info: Any) -> tuple | None:
    """What a FastCall for `inputs` would match (input_layouts, hashable), or None when they
    cannot take the fast path."""
    if info.framework not in ("torch", "cupy") or info.device_index < 0:
        return None
    specs = input_layouts(inputs, info.fusion.inputs)
    return None if specs is None else tuple(specs)


def array_spec(array: Any) -> tuple[tuple, int] | None:
    """(what a later array must match: type, dtype, shape, strides as the framework reports
    them, data pointer & 15, device; the data pointer), or None for a non-array."""
    framework = framework_of(array)
    if framework == "numpy":
        ptr = numpy_data_ptr(array)
        return (type(array), array.dtype, array.shape, array.strides, ptr & 15, None), ptr
    if framework == "torch":
        ptr = array.data_ptr()
        shape, strides = tuple(array.shape), array.stride()
        return (type(array), array.dtype, shape, strides, ptr & 15, array.device), ptr
    if framework == "cupy":
        ptr = array.data.ptr
        spec = (type(array), array.dtype, array.shape, array.strides, ptr & 15, array.device.id)
        return spec, ptr
    return None


def spec_pointer(array: Any, spec: tuple) -> int | None:
    """The data pointer of `array` where array_spec(array) is (`spec`, pointer), else None.
    A NumPy array (the only framework whose spec holds no device) is compared field by
    field, without building its spec: a replayed segment checks every intermediate it reads
    this way, and array_spec costs 4 us of a NumPy array on a slow host."""
    if spec[5] is None and type(array) is spec[0]:
        if array.dtype != spec[1] or array.shape != spec[2] or array.strides != spec[3]:
            return None
        ptr = numpy_data_ptr(array)
        return ptr if ptr & 15 == spec[4] else None
    found = array_spec(array)
    return found[1] if found is not None and found[0] == spec else None


def replay_key(inputs: Any, fusion_inputs: list[Val], sized: frozenset[int]) -> Any:
    """(the call's signature as SegmentedReplays keys it, the array inputs' data pointers by
    position), or None when the inputs cannot take the fast path (not a list or tuple, a
    scalar given as anything but a Python number, something that is not an array)."""
    if type(inputs) not in (list, tuple) or len(inputs) != len(fusion_inputs):
        return None
    key: list[Any] = []
    ptrs: list[int] = []
    for k, (val, arg) in enumerate(zip(fusion_inputs, inputs)):
        if isinstance(val, Scalar):
            if type(arg) not in SCALAR_TYPES:
                return None
            key.append((type(arg), arg) if k in sized else type(arg))
            ptrs.append(0)
            continue
        spec = array_spec(arg)
        if spec is None:
            return None
        key.append(spec[0])
        ptrs.append(spec[1])
    return tuple(key), ptrs

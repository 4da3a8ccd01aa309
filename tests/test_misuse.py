"""Misuse gets a kfuse error, never another exception: every fd.ops method called with drawn
arguments, most of them wrong (tensors of any dtype and rank, numbers, None, lists, strings,
DataTypes, scalars of the definition), and drawn campaign fusions executed with one input
made wrong (its dtype, rank, sizes, layout, or not an array at all). A call either works or
raises kfuse.errors' DefinitionError or InputError (or another KfuseError); a TypeError,
KeyError, IndexError... from inside kfuse is a crash a user meets with no word on what they
did wrong. The quick draws run with the README's tests, the long ones in `-m extended`."""

from __future__ import annotations

import inspect
import warnings
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kfuse import DataType, FusionDefinition
from kfuse._errors_base import KfuseError
from kfuse.campaign.property import ExampleSpace, examples

OPS = sorted(n for n in dir(FusionDefinition().ops) if not n.startswith("_"))
DTYPES = list(DataType)


@st.composite
def tensors(draw: Any, fd: FusionDefinition) -> Any:
    rank = draw(st.integers(0, 3))
    shape = [draw(st.sampled_from([-1, 1, 3])) for _ in range(rank)]
    try:
        return fd.define_tensor(shape=shape, dtype=draw(st.sampled_from(DTYPES)))
    except KfuseError:  # a dtype define_tensor refuses
        return fd.define_tensor(shape=shape)


@st.composite
def arguments(draw: Any, fd: FusionDefinition, ts: list[Any]) -> Any:
    """One argument, of any kind a caller might pass."""
    kind = draw(st.integers(0, 12))
    if kind < 4:
        return draw(st.sampled_from(ts))
    if kind == 4:
        return draw(st.sampled_from([0.5, -1.0, float("nan"), float("inf"), 1e300, 1j]))
    if kind == 5:
        return draw(st.sampled_from([0, 1, -1, 2, 3, -3, 7, 10**20, True, False]))
    if kind == 6:
        return None
    if kind == 7:
        return draw(st.lists(st.integers(-3, 5), max_size=4))
    if kind == 8:
        return draw(st.lists(st.sampled_from(ts), min_size=1, max_size=3))
    if kind == 9:
        return draw(st.sampled_from(["tanh", "none", "", "x"]))
    if kind == 10:
        return draw(st.sampled_from(DTYPES))
    if kind == 11:
        try:
            return fd.define_scalar(draw(st.sampled_from(DTYPES)))
        except KfuseError:
            return 1.0
    return (draw(st.integers(0, 2)),)


@st.composite
def op_calls(draw: Any) -> tuple[str, FusionDefinition, Any]:
    """(op name, its FusionDefinition, a thunk making the call inside the definition)."""
    fd = FusionDefinition()
    name = draw(st.sampled_from(OPS))

    def call() -> None:
        ts = [draw(tensors(fd)) for _ in range(draw(st.integers(1, 3)))]
        method = getattr(fd.ops, name)
        args, kwargs = [], {}
        for p in inspect.signature(method).parameters.values():
            if p.kind == p.VAR_POSITIONAL:
                args += [draw(arguments(fd, ts)) for _ in range(draw(st.integers(0, 2)))]
            elif p.kind == p.VAR_KEYWORD:
                continue
            elif p.default is inspect.Parameter.empty and p.kind != p.KEYWORD_ONLY:
                args.append(draw(arguments(fd, ts)))
            elif p.default is inspect.Parameter.empty or draw(st.booleans()):
                kwargs[p.name] = draw(arguments(fd, ts))
        out = method(*args, **kwargs)
        for o in out if isinstance(out, (tuple, list)) else [out]:
            if hasattr(o, "ndim"):
                fd.add_output(o)

    return name, fd, call


def _ops_misuse(data: Any) -> None:
    name, fd, call = data.draw(op_calls())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            with fd:
                call()
        except KfuseError:
            pass


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_fd_ops_misuse_raises_kfuse_errors(data: Any) -> None:
    _ops_misuse(data)


@pytest.mark.extended
@settings(max_examples=5000, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_fd_ops_misuse_raises_kfuse_errors_long(data: Any) -> None:
    _ops_misuse(data)


def _spoiled(draw: Any, inputs: list[Any]) -> list[Any]:
    """`inputs` with one made wrong (or one left out)."""
    arrays = [i for i, a in enumerate(inputs) if hasattr(a, "shape")]
    way = draw(st.integers(0, 10))
    if not arrays or way == 0:
        return inputs[:-1]
    i = draw(st.sampled_from(arrays))
    a, out = np.asarray(inputs[i]), list(inputs)
    if way == 1:
        kinds = [np.float16, np.float64, np.int32, np.int64, np.bool_, np.complex64, np.uint8]
        out[i] = a.astype(draw(st.sampled_from(kinds)))
    elif way == 2:
        out[i] = a.reshape(-1) if a.ndim != 1 else a.reshape(1, -1)
    elif way == 3:
        out[i] = np.concatenate([a, a]) if a.ndim else a
    elif way == 4:
        out[i] = a[..., :0] if a.ndim else a
    elif way == 5:
        out[i] = a.T if a.ndim > 1 else a[::-1]
    elif way == 6:
        out[i] = draw(st.sampled_from([1.5, 2, None, "x"]))
    elif way == 7:
        out[i] = a.tolist()
    elif way == 8:
        out[i] = np.broadcast_to(a.reshape(-1)[:1], a.shape) if a.size else a
    elif way == 9 and a.size:
        shifted = np.zeros(a.size * a.itemsize + 1, np.uint8)[1:].view(a.dtype)  # misaligned
        shifted[...] = a.reshape(-1)
        out[i] = shifted.reshape(a.shape)
    else:
        out[i] = np.asfortranarray(a) if a.ndim > 1 else (a[::2] if a.ndim else a)
    return out


def _inputs_misuse(data: Any) -> None:
    ex = data.draw(examples(ExampleSpace(framework="numpy", device="cpu")))
    inputs = _spoiled(data.draw, ex.inputs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            ex.fd.execute(inputs)
        except KfuseError:
            pass


@pytest.mark.slow
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_wrong_inputs_raise_kfuse_errors(data: Any) -> None:
    _inputs_misuse(data)


@pytest.mark.extended
@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_wrong_inputs_raise_kfuse_errors_long(data: Any) -> None:
    _inputs_misuse(data)

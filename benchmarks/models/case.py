"""Case: one fusion of nvFuser's Python benchmarks, ported to kfuse, with its torch peer.

A case knows how to build its kfuse FusionDefinition for a dtype, compute the same outputs
with torch (the function torch eager runs and torch.compile compiles), compute a float64
reference from the same inputs, and make those inputs for a shape (random, never zeros). The
bytes a case must move are its inputs read once plus its outputs written once
(`bytes_moved`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kfuse import DataType, FusionDefinition

Shape = tuple[int, ...]

# The dtypes nvFuser's benchmarks run (global_params.FLOAT_DTYPES on sm_80 and newer): kfuse
# names, keyed by torch's.
DTYPES = {"bfloat16": DataType.BFloat16, "float32": DataType.Float}

# nvFuser's PROMOTE_DTYPES: inputs of these dtypes are cast to Float inside the fusion.
PROMOTE = (DataType.BFloat16, DataType.Half)


@dataclass(frozen=True)
class Case:
    """One benchmark fusion.

    define(dtype) -> the kfuse FusionDefinition (dtype: a kfuse DataType).
    torch_fn(*inputs) -> a tuple of outputs, the same math in torch (float32 compute, outputs
    in the dtypes the fusion gives them).
    reference(*inputs) -> the same outputs in float64.
    make_inputs(torch, shape, dtype, device) -> the inputs in the fusion's order (dtype: a
    torch dtype).
    sizes / quick_sizes: the shapes swept by default and by --quick.
    skip: why the case cannot run (kfuse lacks an op it needs); empty when it can.
    dtypes: the dtypes (names of DTYPES) a run without --dtype measures: bf16, and float32
    too for the transpose family (issue 24 sweeps its dtypes).
    updates: the positions of the inputs the fusion writes in place (an optimizer step):
    each peer's first call then runs on copies of the inputs, and what is checked against
    the reference are those copies after it, in this order (the calls write no outputs).
    workaround: (define, note) for a definition kfuse cannot build as nvFuser writes it
    (define raises DefinitionError): the closest definition kfuse can build, and what it
    changes. The runner uses it only when `define` fails, and says so in the results.
    peer_reference(inputs, outputs) -> the float64 reference of a torch peer's outputs, for a
    case whose fusion draws random numbers (a dropout's keep mask, which every peer returns):
    a torch peer draws its own with torch.rand, as a model does, so its reference is
    computed from the mask it returned; kfuse's outputs are checked against `reference`,
    which draws kfuse's own numbers (kfuse.reference.philox). None: `reference` for all.
    """

    family: str
    name: str
    source: str  # nvFuser's file::function the definition is ported from
    define: Callable[[DataType], FusionDefinition]
    torch_fn: Callable[..., tuple[Any, ...]]
    reference: Callable[..., tuple[Any, ...]]
    make_inputs: Callable[[Any, Shape, Any, str], list[Any]]
    sizes: tuple[Shape, ...]
    quick_sizes: tuple[Shape, ...]
    test_size: Shape  # tiny: the host emulator test
    gpu_test_size: Shape  # mid: the GPU test
    skip: str = ""
    workaround: tuple[Callable[[DataType], FusionDefinition], str] | None = None
    dtypes: tuple[str, ...] = ("bfloat16",)  # what the suite runs unless --dtype says
    updates: tuple[int, ...] = ()
    peer_reference: Callable[[Sequence[Any], Sequence[Any]], tuple[Any, ...]] | None = None

    def reference_for(
        self, peer: str, inputs: Sequence[Any], outputs: Sequence[Any], reference: Any
    ) -> Any:
        """What `peer`'s `outputs` are checked against: `reference` (the case's, computed once
        for all peers), or for a torch peer of a random case its own (peer_reference)."""
        if peer == "kfuse" or self.peer_reference is None:
            return reference
        return self.peer_reference(inputs, outputs)


def sweep_case(
    family: str,
    name: str,
    source: str,
    define: Callable[[DataType], FusionDefinition],
    fns: tuple[Callable[..., Any], Callable[..., Any], Callable[..., Any]],
    *,
    sweep: tuple[tuple[Shape, ...], tuple[Shape, ...], Shape, Shape],
) -> Case:
    """A Case from its family's sweep (sizes, quick_sizes, test_size, gpu_test_size) and
    `fns` = (torch_fn, reference, make_inputs); family modules bind family and sweep with
    functools.partial."""
    torch_fn, reference, make_inputs = fns
    return Case(family, name, source, define, torch_fn, reference, make_inputs, *sweep)


def matrix(fd: FusionDefinition, dtype: DataType) -> Any:
    """A contiguous [rows, columns] input of `dtype` (symbolic sizes)."""
    return fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=dtype)


def vector(fd: FusionDefinition, dtype: DataType) -> Any:
    """A contiguous [n] input of `dtype` (a weight, a bias)."""
    return fd.define_tensor(shape=[-1], contiguity=[True], dtype=dtype)


def promote(fd: FusionDefinition, t: Any, dtype: DataType) -> Any:
    """`t` cast to Float when `dtype` is promoted (nvFuser's `if dtype in PROMOTE_DTYPES`)."""
    return fd.ops.cast(t, dtype=DataType.Float) if dtype in PROMOTE else t


def demote(fd: FusionDefinition, t: Any, dtype: DataType) -> Any:
    """`t` cast back to `dtype` when `dtype` is promoted."""
    return fd.ops.cast(t, dtype=dtype) if dtype in PROMOTE else t


def randn(torch: Any, shape: Sequence[int], dtype: Any, device: str) -> Any:
    """Standard normal values in `dtype` (drawn in float32, then rounded)."""
    return torch.randn(tuple(shape), device=device, dtype=torch.float32).to(dtype)


def dropout_mask(torch: Any, shape: Sequence[int], p: float, device: str) -> Any:
    """A Bool keep-mask as nvFuser's dropout tests draw it: rand < 1 - p."""
    return torch.rand(tuple(shape), device=device) < 1 - p


def nbytes(t: Any) -> int:
    return int(t.numel()) * int(t.element_size())


def first_call(
    case: Case, fn: Callable[..., Any], inputs: Sequence[Any], *, as_list: bool = False
) -> tuple[Any, Any]:
    """(the call of `fn` a peer is timed with, what its first call gives to check); fn takes
    the inputs as one list where `as_list` (FusionDefinition.execute), else one by one. A
    case that updates inputs in place runs on copies of them, so that every peer starts from
    the inputs the reference sees; its checked outputs are the updated copies."""
    copies = [t.clone() if hasattr(t, "clone") else t for t in inputs] if case.updates else inputs
    call = functools.partial(fn, list(copies)) if as_list else functools.partial(fn, *copies)
    outputs = call()
    if not case.updates:
        return call, outputs
    return call, tuple(copies[k] for k in case.updates)


def bytes_moved(inputs: Sequence[Any], outputs: Sequence[Any]) -> int:
    """Every tensor input read once plus every output written once."""
    return sum(nbytes(t) for t in inputs if hasattr(t, "numel")) + sum(nbytes(t) for t in outputs)

"""Consecutive kernel segments of a replayed segmented call, run by one C++ call.

A replayed call (kfuse.engine.segmented_replay) runs its segments as steps planned once per
input signature (kfuse.engine.replay_steps). Where kernel segments follow one another (or
stand alone between library segments), the Python work of each (allocating its outputs and
workspaces, reading their data pointers, patching each launch's arguments, the launch call)
is done instead by one kfuse._C.ReplayRun, a "replay program" built from the steps' packed
launches (kfuse.engine.packed_kernel) when the signature is planned:

* the slots the run reads from outside (the call's inputs, earlier segments' outputs) give
  their data pointers; an array a library segment returned is matched to the layout planned
  for it first, as a KernelStep matches it (torch and CuPy arrays in C++, as a FastCall
  matches its inputs; NumPy arrays by kfuse.engine.signature.spec_pointer);
* what the run makes and something after it reads (a library segment, the call's results)
  is each its own framework array, allocated as the step's PackedKernel allocates it: no
  array a caller or a library call holds is a view of memory that a later call reuses
  (where a later kernel of the run also reads one, it must be at the alignment class that
  kernel was planned on, else the run's steps run one by one);
* what only the run's own kernels read (intermediates between them, their workspaces) is
  one pooled allocation of the summed sizes, each buffer at a 256-byte boundary (the
  alignment class 0 that a fresh allocation has, which the later kernels were planned on),
  released when the run returns, as the checked path releases intermediates: the caching
  allocators of torch and CuPy reuse a freed block only after the work queued on its stream;
* on a GPU each launch is a kfuse._C.PackedLaunch; on the emulator the run calls each
  kernel's own `launch` (the emulator's implementation) with the arguments packed once and
  the call's TensorArgs and changing scalars patched in.

Poisoning (the emulator, KFUSE_POISON) covers the exported arrays and the pool. Index bounds
checks are read after the run's launches (an out-of-range index raises the same InputError
on the same call; later kernels of the run have been launched by then, as on a GPU, where
the flags are read without waiting). A run whose scalar values do not fit their parameters,
or whose arrays from outside are off their planned layouts, runs its steps one by one, each
of which takes its checked path where it must. Segments that a run cannot take (stateful
random ops, in-place stores, library calls, copied intermediates) are the steps between runs.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any

from kfuse.dtypes import DataType
from kfuse.engine.packed_kernel import PackedKernel
from kfuse.engine.replay_steps import KernelStep, ReplayStep
from kfuse.engine.signature import spec_pointer
from kfuse.runtime.arrays import empty_like_framework, numpy_data_ptr, poison
from kfuse.runtime.index_checks import raise_for
from kfuse.runtime.launch import scalar_argument

POOL_ALIGN = 256
"""Bytes each pooled buffer's offset is a multiple of (the pool's start is rounded up to one
in C++: a NumPy allocation may start at a 16-byte boundary only)."""


class KernelRun:
    """Consecutive KernelSteps `steps` of one replay plan (a SegmentedReplay, `plan`), whose
    outputs in `read_after` (slots) are read after the run."""

    launches = True

    def __init__(self, steps: list[KernelStep], plan: Any, read_after: set[int]) -> None:
        from kfuse._C import ReplayRun

        self.steps = steps
        self.packed = [step.packed for step in steps if step.packed is not None]
        assert len(self.packed) == len(steps)
        framework, _, device, _ = plan.target
        made = {slot for step in steps for slot in step.outputs}
        # Intermediates from outside the run, matched to their planned layouts per call.
        self.checked: list[tuple[int, tuple]] = []
        outside: set[int] = set()
        for step in steps:
            for _, slot, spec in step.arrays:
                if slot not in made:
                    outside.add(slot)
                    if spec is not None and (slot, spec) not in self.checked:
                        self.checked.append((slot, spec))
        self.table = plan.width  # the pointer table's length: the slots, then workspaces
        self.inputs = plan.input_layouts  # (slot, Val, planned layout) per array input
        self.exports: list[tuple] = []
        self.pooled: list[tuple[int, int]] = []  # (table entry, bytes)
        self.scalars: list[tuple[Any, Any]] = []  # (segment Val, the runner's Val) per index
        self.checks: list[Any] = []
        launches: list[Any] = []
        # Arrays the run makes that its own later kernels read: planned at class 0 (takes).
        read_inside = {slot for step in steps for _, slot, _ in step.arrays if slot in made}
        for step, packed in zip(steps, self.packed, strict=True):
            workspaces = self._buffers(step, packed, read_after, read_inside)
            launches += self._launches(step, packed, workspaces, device)
            self.checks += packed.checks
        pool = None
        if self.pooled:
            pool = (*_allocation(self._pool(framework, device)), self._offsets())
        # Poisoning (the emulator, KFUSE_POISON) is decided when packed, as a PackedKernel's.
        poisoned = any(packed.poisoned for packed in self.packed)
        pointer_of, matched = None, []
        if framework == "numpy":  # matched here (spec_pointer), its pointer read by a callable
            pointer_of = numpy_data_ptr
        else:  # matched in C++, as a FastCall matches its inputs
            matched = [(slot, _device_index(spec)) for slot, spec in self.checked]
            self.checked = []
        self.run = ReplayRun(
            framework,
            pointer_of,
            self.table,
            sorted(outside),
            matched,
            self.exports,
            pool,
            launches,
            len(self.scalars),
            poison if poisoned else None,
        )

    def _buffers(
        self, step: KernelStep, packed: PackedKernel, read_after: set[int], read_inside: set[int]
    ) -> list[int]:
        """Add the step's outputs (exported or pooled) and workspaces (pooled); return the
        workspaces' table entries."""
        for slot, allocate in zip(step.outputs, packed.outputs, strict=True):
            if slot in read_after:
                align = 0 if slot in read_inside else -1
                like = _like(allocate, self.inputs)
                if like >= 0:
                    import torch

                    self.exports.append((slot, torch.empty_like, (), None, align, like))
                else:
                    self.exports.append((slot, *_allocation(allocate), align, -1))
            else:
                self.pooled.append((slot, _bytes(allocate)))
        entries = []
        for size in packed.workspace_sizes:
            entries.append(self.table)
            self.pooled.append((self.table, size))
            self.table += 1
        return entries

    def _launches(
        self, step: KernelStep, packed: PackedKernel, workspaces: list[int], device: int
    ) -> list[Any]:
        """The step's launches, their array slots indexing the run's table (`workspaces`:
        its workspaces' entries) and their changing scalars numbered in the run."""
        # By PackedKernel's source numbers: its inputs, outputs and workspaces.
        where = ([slot for slot, _ in step.sources], step.outputs, workspaces)
        olds = dict(step.changing)
        launches = []
        for kernel, geometry, args, slots, scalars in packed.launches:
            tensors = [(p, where[source][index], off) for p, source, index, off, _, _ in slots]
            numbered = []
            for p, val in scalars:
                numbered.append((p, len(self.scalars)))
                self.scalars.append((val, olds[val]))
            launches.append(_launch(kernel, geometry, args, tensors, numbered, device))
        return launches

    def _pool(self, framework: str, device: int) -> partial:
        """The pooled buffers' allocation: 8-byte elements, room to round its start up."""
        total = sum(-(-size // POOL_ALIGN) * POOL_ALIGN for _, size in self.pooled)
        doubles = -(-(total + POOL_ALIGN) // 8)
        what = "a replayed call's pooled intermediates"
        return partial(
            empty_like_framework, framework, (doubles,), DataType.Double, device, what=what
        )

    def _offsets(self) -> list[tuple[int, int]]:
        """Each pooled buffer's (table entry, byte offset from the rounded-up start)."""
        offsets, total = [], 0
        for entry, size in self.pooled:
            offsets.append((entry, total))
            total += -(-size // POOL_ALIGN) * POOL_ALIGN
        return offsets

    @staticmethod
    def takes(step: ReplayStep, made: set[int]) -> bool:
        """Whether a run can take `step`, after steps that made the slots `made`: a packed
        kernel segment whose intermediates from those were planned at alignment class 0 (a
        fresh allocation's, which the run's own allocations keep)."""
        if type(step) is not KernelStep or step.packed is None:
            return False
        return all(
            spec is None or slot not in made or spec[4] == 0 for _, slot, spec in step.arrays
        )

    def __call__(self, values: list[Any], pointers: list[Any], extents: dict, stream: Any) -> bool:
        """Run the steps on the call's slots (`values`, `pointers`); False, before anything
        runs, where the steps must run one by one instead."""
        for slot, spec in self.checked:
            ptr = pointers[slot]
            if ptr is None:
                ptr = spec_pointer(values[slot], spec)
                if ptr is None:
                    return False
                pointers[slot] = ptr
            elif ptr & 15 != spec[4]:
                return False
        scalars = None
        if self.scalars:
            scalars = [scalar_argument(val, extents[old]) for val, old in self.scalars]
        if not self.run(values, pointers, scalars, stream or 0):
            return False
        for step in self.steps:
            step.step.last = step.program
        if self.checks:
            raise_for(self.checks)
        return True


def _like(allocate: partial, inputs: list[tuple[int, Any, Any]]) -> int:
    """The slot of a torch input whose torch.empty_like is what `allocate` makes (a
    row-major array of its shape and dtype: an input planned row-major of that shape and
    dtype, whose layout the replay key holds per call), else -1. empty_like skips
    torch.empty's argument parsing (about 2 us of an allocation, kfuse.engine.fast_path)."""
    framework, shape, dtype, _ = allocate.args
    if framework != "torch" or allocate.keywords.get("order") is not None:
        return -1
    row_major = tuple(math.prod(shape[k + 1 :]) for k in range(len(shape)))
    for slot, _, layout in inputs:
        if layout.dtype == dtype and layout.shape == tuple(shape) and layout.strides == row_major:
            return slot
    return -1


def _device_index(spec: tuple) -> tuple:
    """A torch or CuPy array_spec with its device as an index, as torch's get_device()
    and CuPy's device id give it (what ReplayRun matches): -1 for a CPU tensor."""
    device = spec[5]
    if not isinstance(device, int):  # a torch.device
        device = -1 if device.index is None else device.index
    return (*spec[:5], device)


def _bytes(allocate: partial) -> int:
    """The bytes of the dense array `allocate` (an empty_like_framework partial) makes."""
    _, shape, dtype, _ = allocate.args
    return int(math.prod(shape)) * dtype.itemsize


def _allocation(allocate: partial) -> tuple[Any, tuple, dict | None]:
    """(callable, args, kwargs) that make what `allocate` (an empty_like_framework partial)
    makes: the framework's own constructor where that is the same array (a row-major one of
    torch on a GPU or of NumPy: two Python frames fewer an allocation)."""
    framework, shape, dtype, device = allocate.args
    if allocate.keywords.get("order") is None:
        if framework == "torch" and device >= 0:
            import torch

            from kfuse.dtypes import to_torch_dtype

            where = {"dtype": to_torch_dtype(dtype), "device": torch.device("cuda", device)}
            return torch.empty, (shape,), where
        if framework == "numpy":
            import numpy

            from kfuse.dtypes import to_numpy_dtype

            return numpy.empty, (shape, numpy.dtype(to_numpy_dtype(dtype))), None
    return allocate, (), None


def _launch(
    kernel: Any,
    geometry: tuple,
    args: list[Any],
    tensors: list[tuple[int, int, int]],
    scalars: list[tuple[int, int]],
    device: int,
) -> Any:
    """One launch of a run: a PackedLaunch on a GPU (its pointer slots index the run's
    table), else the emulated kernel's launch with its slots."""
    grid, block, shared_mem = geometry
    if device < 0:
        return (kernel, grid, block, shared_mem, list(args), tensors, scalars)
    from kfuse._C import PackedLaunch

    slots = [(p, "input", entry, off) for p, entry, off in tensors]
    slots += [(p, "scalar", k, 0) for p, k in scalars]
    return PackedLaunch(kernel, list(grid), list(block), shared_mem, list(args), slots)


def grouped(
    steps: list[ReplayStep], release: list[list[int]], results: list[int], plan: Any
) -> tuple[list[Any], list[list[int]]]:
    """The replay's units in order, each a KernelRun of consecutive steps that a run takes or
    a single step, and per unit the slots dropped after it. `results`: the slots of the
    call's outputs."""
    later: list[set[int]] = []  # per step: the slots read after it
    seen = set(results)
    for step in reversed(steps):
        later.append(set(seen))
        seen.update(slot for slot, _ in step.sources if slot >= 0)
    later.reverse()
    units: list[Any] = []
    released: list[list[int]] = []
    k = 0
    while k < len(steps):
        made: set[int] = set()
        end = k
        while end < len(steps) and KernelRun.takes(steps[end], made):
            made.update(steps[end].outputs)
            end += 1
        if end == k:
            units.append(steps[k])
            released.append(list(release[k]))
            k += 1
            continue
        run = [step for step in steps[k:end] if isinstance(step, KernelStep)]
        units.append(KernelRun(run, plan, later[end - 1]))
        released.append([slot for r in release[k:end] for slot in r])
        k = end
    return units, released


__all__ = ["KernelRun", "grouped"]

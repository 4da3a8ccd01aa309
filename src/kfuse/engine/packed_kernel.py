"""A kernel segment's call packed once for one signature, in Python: what KernelProgram.run
does on every call, less everything that depends only on the signature.

A replayed segmented call (kfuse.engine.segmented_replay) runs a kernel segment through its
kfuse._C.FastCall on a GPU. Where it has none (on the emulator; a segment whose scalar
inputs are not Python numbers) this does the same work in Python: the outputs' and
workspaces' allocation arguments, each launch's arguments with null pointers and the values
of the scalars no scalar input changes (KernelLaunch.arguments, once), and the slots where
a call's pointers and changing scalars go, as kfuse._C.PackedLaunch packs them. Poisoning is
decided when it is packed (KFUSE_POISON then, or the emulator), as a FastCall's buffers are.
Kernels with stateful random ops are not packed (each launch reserves its seed and offset:
KernelProgram.run does), nor programs that store into an input.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from kfuse import knobs
from kfuse.dtypes import DataType
from kfuse.engine.program import KernelProgram
from kfuse.ir.layout_ops import allocation_order
from kfuse.ir.values import Scalar, Val
from kfuse.runtime.arrays import (
    current_stream,
    empty_like_framework,
    numpy_data_ptr,
    poison,
)
from kfuse.runtime.index_checks import raise_for
from kfuse.runtime.info import EMULATOR, RuntimeInfo
from kfuse.runtime.kernel_args import TensorArg
from kfuse.runtime.launch import (
    InputOperand,
    OutputOperand,
    ScalarOperand,
    WorkspaceOperand,
    has_rng_state,
    index_checks_of,
    pooled_workspaces,
    scalar_argument,
    workspace_bytes,
)

_INPUT, _OUTPUT, _WORKSPACE = 0, 1, 2


class PackedKernel:
    """KernelProgram.run of `program` for the signature `info` describes (its extents all the
    segment's), whose scalar Vals in `changing` take this call's values."""

    def __init__(self, program: KernelProgram, info: RuntimeInfo, changing: set[Val]) -> None:
        fusion = info.fusion
        framework, device = info.framework, info.device_index
        self.framework, self.device = framework, device
        self.pointer = _POINTERS[framework]
        # Each buffer's allocation as a call of no arguments.
        self.outputs = [
            partial(
                empty_like_framework,
                framework,
                tuple(info.shape(o)),
                o.dtype,
                device,
                what=f"output {o.name}",
                order=allocation_order(o),
            )
            for o in fusion.outputs
        ]
        # The workspaces, one allocation (kfuse.runtime.launch.pooled_workspaces); a replay
        # run pools them with its intermediates by their sizes.
        self.workspace_sizes = workspace_bytes(program.launches)
        size, self.workspace_offsets = pooled_workspaces(program.launches)
        self.workspaces = (
            partial(
                empty_like_framework,
                framework,
                (size // 8,),
                DataType.Double,
                device,
                what="workspaces",
            )
            if self.workspace_offsets
            else None
        )
        self.poisoned = info.backend == EMULATOR or knobs.get().poison
        target = (info.framework, info.device_index)
        counts = (
            [0] * len(fusion.inputs),
            [0] * len(fusion.outputs),
            [0] * len(self.workspace_offsets),
        )
        self.launches = []
        for launch in program.launches:
            args = launch.arguments(*counts[:2], info.extents, counts[2], target)
            slots: list[tuple] = []
            scalars: list[tuple[int, Scalar]] = []
            for p, op in enumerate(launch.operands):
                if isinstance(op, InputOperand):
                    slots.append((p, _INPUT, op.position, op.byte_offset, op.shape, op.strides))
                elif isinstance(op, OutputOperand):
                    slots.append((p, _OUTPUT, op.index, op.byte_offset, op.shape, op.strides))
                elif isinstance(op, WorkspaceOperand):
                    slots.append((p, _WORKSPACE, op.index, op.offset, op.shape, op.strides))
                elif isinstance(op, ScalarOperand) and op.val in changing:
                    scalars.append((p, op.val))
            geometry = (launch.grid, launch.block, launch.shared_mem)
            self.launches.append((launch.kernel, geometry, args, slots, scalars))
        self.checks = index_checks_of(program.launches)

    @staticmethod
    def packs(program: Any) -> bool:
        """Whether `program` can be packed: generated kernels, none with stateful random
        ops, storing into no input."""
        return (
            type(program) is KernelProgram
            and not program.in_place
            and not has_rng_state(program.launches)
        )

    def __call__(
        self, input_ptrs: list[int], extents: dict[Val, Any], stream: Any
    ) -> tuple[list[Any], list[Any]]:
        """The segment's outputs, new arrays, and their data pointers (None where it launches
        nothing), after launching its kernels on `stream` (None: the framework's current
        one). `extents`: the segment's, this call's scalar values."""
        outputs = [allocate() for allocate in self.outputs]
        pool = None if self.workspaces is None else self.workspaces()
        if self.poisoned:
            for array in (*outputs, *([] if pool is None else [pool])):
                poison(array)
        if not self.launches:
            return outputs, [None] * len(outputs)
        pointer = self.pointer
        output_ptrs = [pointer(a) for a in outputs]
        base = 0 if pool is None else pointer(pool)
        workspace_ptrs = [base + offset for offset in self.workspace_offsets]
        pointers = (input_ptrs, output_ptrs, workspace_ptrs)
        if stream is None:
            device = self.device
            stream = current_stream(self.framework, device) if device >= 0 else 0
        for kernel, (grid, block, shared_mem), packed, slots, scalars in self.launches:
            args = list(packed)
            for p, source, index, offset, shape, strides in slots:
                # TensorArg's fields as tuple.__new__ takes them: its generated __new__ is
                # a Python frame more, for every array argument of every launch.
                fields = (pointers[source][index] + offset, shape, strides)
                args[p] = _new_tuple(TensorArg, fields)
            for p, val in scalars:
                args[p] = scalar_argument(val, extents[val])
            kernel.launch(grid, block, shared_mem, stream, args)
        if self.checks:
            raise_for(self.checks)
        return outputs, output_ptrs


_new_tuple = tuple.__new__

_POINTERS: dict[str, Callable[[Any], int]] = {
    "numpy": numpy_data_ptr,
    "torch": lambda array: int(array.data_ptr()),
    "cupy": lambda array: int(array.data.ptr),
}
"""The data pointer of an array a PackedKernel allocated, by its framework."""


__all__ = ["PackedKernel"]

"""The host fast path: a cached GPU call that skips validation and shape inference.

A call whose inputs have exactly the layout of an earlier call (array type, dtype, shape,
strides, device, 16-byte alignment class) would pass the same checks and infer the same
shapes. So after a checked call the executor hands that call's layout and compiled launches
to kfuse._C.FastCall, which matches later calls' inputs, allocates outputs through their
framework, queries the framework's current stream and launches arguments packed once
(kfuse._C.PackedLaunch), all in C++. Inputs of any other layout fall through to the checked
path.

Only plain GPU calls take it: no pinned params or device, single-scheduler fusions
(library runs keep their own caches; segmented ones replay). Scalar inputs given as Python numbers
match by type; the values of the scalar parameters they set are computed again on every
call (ScalarProgram), a generated value's parameters too (a random op's rng_seed and
rng_offset given as scalar inputs). Fusions whose scalar inputs reach a shape or an output
stay on the checked path. Outputs written into inputs (kfuse.engine.aliasing) take it only
where the kernel stores all of them in place: their buffer is then the input itself. Kernels
with stateful random ops (no rng_seed) stay on the checked path: each launch reserves a new seed
and offset from the generator (kfuse.runtime.launch.RngStateOperand). Outputs a caller gives
(execute's outputs=) take it where each has exactly the layout the call would allocate and
shares no memory with an input or another output (FastCall.call_into, given_outputs).
"""

from __future__ import annotations

import math
from typing import Any

from kfuse.codegen.layout import allocated_strides
from kfuse.dtypes import DataType
from kfuse.ir.exprs import BinaryOp, CastOp, GeneratedOp, TernaryOp, UnaryOp
from kfuse.ir.layout_ops import allocation_order
from kfuse.ir.shapes import infer_scalar
from kfuse.ir.values import Scalar, TensorView
from kfuse.runtime.arrays import empty_like_framework
from kfuse.runtime.launch import (
    InputOperand,
    OutputOperand,
    ScalarOperand,
    WorkspaceOperand,
    has_rng_state,
    pooled_workspaces,
    workspace_bytes,
)


def packed_launch(
    launch: Any,
    extents: dict[Any, Any],
    n_inputs: int,
    n_outputs: int,
    n_workspaces: int,
    program: ScalarProgram | None = None,
    target: tuple[str, int] = ("numpy", -1),
    workspace_offsets: list[int] | None = None,
) -> Any:
    """launch's arguments packed once (KernelLaunch.arguments with null pointers, and this
    call's scalar values), with a slot for every array operand and for every scalar operand
    that `program` computes from the scalar inputs. The flags of indexed reads are the same
    on every call on `target` (framework, device): packed as they are. workspace_offsets:
    each workspace's byte offset in the call's one workspace buffer (pooled_workspaces);
    None: a buffer each."""
    from kfuse._C import PackedLaunch

    args = launch.arguments([0] * n_inputs, [0] * n_outputs, extents, [0] * n_workspaces, target)
    slots = launch_slots(launch, program, workspace_offsets)
    return PackedLaunch(
        launch.kernel, list(launch.grid), list(launch.block), launch.shared_mem, args, slots
    )


def launch_slots(
    launch: Any, program: ScalarProgram | None, workspace_offsets: list[int] | None = None
) -> list[tuple[int, str, int, int]]:
    """PackedLaunch's slots: (parameter, kind, index, byte offset) for each array operand,
    and for each scalar operand that `program` computes from the scalar inputs. Operands of
    neither kind (the flags of indexed reads) have no slot: they are packed as they are.
    With `workspace_offsets`, every workspace is a part of workspace buffer 0."""
    slots = []
    for p, op in enumerate(launch.operands):
        if isinstance(op, InputOperand):
            slots.append((p, "input", op.position, op.byte_offset))
        elif isinstance(op, OutputOperand):
            slots.append((p, "output", op.index, op.byte_offset))
        elif isinstance(op, WorkspaceOperand):
            if workspace_offsets is None:
                slots.append((p, "workspace", op.index, op.offset))
            else:
                slots.append((p, "workspace", 0, workspace_offsets[op.index] + op.offset))
        elif isinstance(op, ScalarOperand) and program is not None:
            if (k := program.slot(op.val)) is not None:
                slots.append((p, "scalar", k, 0))
    return slots


class NotReplayable(Exception):
    """A scalar input reaches something other than element-wise math."""


class ScalarProgram:
    """How a cached call gets the values of its scalar parameters from its inputs.

    Scalar inputs may change every call. Where they feed element-wise math, directly or
    through scalar expressions (the casts the frontend inserts, arithmetic on scalars), the
    kernel reads them (or the scalars computed from them) as parameters, and a later call
    needs only the new values: calling the program computes them with the checked path's
    own evaluation (kfuse.ir.shapes.infer_scalar). A scalar input that reaches anything else
    (a shape, an output) makes the constructor raise NotReplayable, unless its position is
    in `fixed_inputs`: inputs whose value the caller's cache key holds (a segmented fusion's
    replays key the values of kfuse.engine.signature.shape_inputs), read from `extents` like
    the sizes."""

    def __init__(
        self, fusion: Any, extents: dict[Any, Any], fixed_inputs: frozenset[int] = frozenset()
    ) -> None:
        self.inputs = [
            (k, v)
            for k, v in enumerate(fusion.inputs)
            if isinstance(v, Scalar) and k not in fixed_inputs
        ]
        self._dependent = {id(v) for _, v in self.inputs}
        self.exprs = []  # the scalar expressions that read a scalar input, in order
        for expr in fusion.exprs:
            if not any(id(v) in self._dependent for v in expr.inputs):
                continue
            if isinstance(expr, GeneratedOp):
                # Its params (a fill value, a random op's seed and offset) are the kernel's
                # scalar parameters; a size is not.
                if any(id(v) in self._dependent for v in expr.shape):
                    raise NotReplayable("a generated value's shape")
                continue
            if not isinstance(expr, (UnaryOp, BinaryOp, TernaryOp, CastOp)):
                raise NotReplayable(type(expr).__name__)
            if all(isinstance(o, Scalar) for o in expr.outputs):
                self.exprs.append(expr)
                self._dependent.update(id(o) for o in expr.outputs)
            elif not all(isinstance(o, TensorView) for o in expr.outputs):
                raise NotReplayable(type(expr).__name__)
        if any(id(v) in self._dependent for v in fusion.outputs):
            raise NotReplayable("output")
        # Scalars those expressions also read that no scalar input changes (sizes): fixed
        # for the layout a FastCall matches.
        self.fixed = {
            v: extents[v]
            for e in self.exprs
            for v in e.inputs
            if isinstance(v, Scalar) and not v.is_constant and id(v) not in self._dependent
        }
        self.operands: list[Any] = []  # the scalar slots' values, by slot index

    @classmethod
    def of(
        cls, fusion: Any, extents: dict[Any, Any], fixed_inputs: frozenset[int] = frozenset()
    ) -> ScalarProgram | None:
        """The program of `fusion`, or None when a later call cannot replay it."""
        try:
            return cls(fusion, extents, fixed_inputs)
        except NotReplayable:
            return None

    def slot(self, val: Any) -> int | None:
        """The slot index of scalar operand `val`, or None when no scalar input changes it."""
        if id(val) not in self._dependent:
            return None
        for k, v in enumerate(self.operands):
            if v is val:
                return k
        self.operands.append(val)
        return len(self.operands) - 1

    def direct(self, types: dict[int, type]) -> list[tuple[int, int]] | None:
        """FastCall's direct_scalars: (input position, kind) per slot where every slot's
        value is a scalar input's as given (kind 0) or a Python float input cast to Float
        (kind 1: rounded to float32 in C++), so that a call computes none in Python; None
        where one needs this program. `types`: each scalar input's Python type, by position
        (the FastCall matches it)."""
        positions = {id(v): k for k, v in self.inputs}
        casts = {id(e.outputs[0]): e for e in self.exprs if isinstance(e, CastOp)}
        slots = []
        for val in self.operands:
            if id(val) in positions:
                slots.append((positions[id(val)], 0))
                continue
            cast = casts.get(id(val))
            if cast is None or id(cast.inputs[0]) not in positions:
                return None
            k = positions[id(cast.inputs[0])]
            if types.get(k) is not float or cast.dtype not in (DataType.Float, DataType.Double):
                return None
            slots.append((k, 1 if cast.dtype is DataType.Float else 0))
        return slots

    def __call__(self, inputs: Any) -> tuple:
        values: dict[Any, Any] = dict(self.fixed)
        for position, val in self.inputs:
            values[val] = inputs[position]
        for expr in self.exprs:
            infer_scalar(expr, values)
        return tuple(values[v] for v in self.operands)


def _poisoning(allocate: Any) -> Any:
    """`allocate`, followed by kfuse.runtime.arrays.poison on what it returns (KFUSE_POISON)."""
    from kfuse.runtime.arrays import poison

    def allocate_poisoned(*args: Any, **kwargs: Any) -> Any:
        array = allocate(*args, **kwargs)
        poison(array)
        return array

    return allocate_poisoned


def _buffer_specs(specs: list[tuple]) -> list[tuple]:
    """FastCall's (callable, args, kwargs, like) buffer specs, poisoning when KFUSE_POISON
    is set where the FastCall is built (never an input an output is stored into)."""
    from kfuse import knobs

    if not knobs.get().poison:
        return specs
    return [spec if spec[0] is _the_input else (_poisoning(spec[0]), *spec[1:]) for spec in specs]


def _the_input(array: Any) -> Any:
    """The buffer of an output stored in place: the input itself (called with inputs[like])."""
    return array


def _in_place_specs(compiled: Any, specs: list[tuple]) -> list[tuple]:
    """`specs` with the outputs the kernel stores into an input (KernelProgram.in_place)
    given that input's array."""
    for out_pos, in_pos in compiled.in_place:
        specs[out_pos] = (_the_input, (), None, in_pos)
    return specs


def given_outputs(compiled: Any, info: Any) -> tuple | None:
    """FastCall's `given` (what call_into checks the caller's outputs against): each output's
    layout spec as the inputs' are made (the dense layout its kernels store, 16-byte
    aligned), its size in bytes, and each input's memory span around its data pointer; None
    where some outputs are not returned (written into inputs), which execute's checked path
    handles."""
    fusion = info.fusion
    if compiled.in_place or fusion.hidden_outputs:
        return None
    layouts: list[tuple] = []
    sizes: list[int] = []
    for o in fusion.outputs:
        shape = tuple(info.shape(o))
        strides = allocated_strides(o, shape)
        sizes.append(o.dtype.itemsize * math.prod(shape))
        if info.framework == "torch":
            import torch

            from kfuse.dtypes import to_torch_dtype

            dtype, size = to_torch_dtype(o.dtype), torch.Size(shape)
            layouts.append((torch.Tensor, dtype, size, strides, 0, info.device_index))
        else:
            import cupy
            import numpy

            from kfuse.dtypes import to_numpy_dtype

            dtype = numpy.dtype(to_numpy_dtype(o.dtype))
            byte_strides = tuple(s * dtype.itemsize for s in strides)
            layouts.append((cupy.ndarray, dtype, shape, byte_strides, 0, info.device_index))
    spans = [_span(info.layouts.get(v)) for v in fusion.inputs]
    return (layouts, sizes, spans)


def _span(layout: Any) -> tuple[int, int]:
    """(bytes below, bytes from) an input's data pointer that its elements occupy; (0, 0)
    for a scalar input or an empty array."""
    if layout is None or 0 in layout.shape:
        return (0, 0)
    size = layout.dtype.itemsize
    steps = [(n - 1) * s for n, s in zip(layout.shape, layout.strides, strict=True)]
    return (-size * sum(x for x in steps if x < 0), size * (1 + sum(x for x in steps if x > 0)))


def _packed_launches(compiled: Any, info: Any, program: ScalarProgram) -> list[Any]:
    counts = (
        len(info.fusion.inputs),
        len(info.fusion.outputs),
        len(workspace_bytes(compiled.launches)),
    )
    target = (info.framework, info.device_index)
    _, offsets = pooled_workspaces(compiled.launches)
    return [
        packed_launch(launch, info.extents, *counts, program, target, offsets)
        for launch in compiled.launches
    ]


def _workspace_doubles(compiled: Any) -> list[int]:
    """The FastCall's workspace buffers, in 8-byte elements: none, or the one that holds
    every workspace (pooled_workspaces)."""
    size, offsets = pooled_workspaces(compiled.launches)
    return [size // 8] if offsets else []


def _torch_call(
    inputs: list[Any], specs: list[tuple], compiled: Any, info: Any, program: ScalarProgram
) -> Any:
    import torch

    from kfuse._C import FastCall
    from kfuse.dtypes import to_torch_dtype

    device = torch.device("cuda", info.device_index)
    outputs = []
    for o in info.fusion.outputs:
        shape, dtype = tuple(info.shape(o)), to_torch_dtype(o.dtype)
        # fd.ops.stride_order's output is stored in its order, as its kernels write it.
        order, strides = allocation_order(o), allocated_strides(o, shape)
        # empty_like skips torch.empty's argument parsing (about 2 us of the call): it gives a
        # contiguous array when the input it copies is one of the same shape and dtype.
        like = next(
            (
                k
                for k, (t, v) in enumerate(zip(inputs, info.fusion.inputs))
                if isinstance(v, TensorView)
                and t.dtype == dtype
                and tuple(t.shape) == shape
                and t.is_contiguous()
                and order is None
            ),
            -1,
        )
        outputs.append(
            (torch.empty_like, (), None, like)
            if like >= 0
            else (
                torch.empty_strided,
                (shape, strides),
                {"dtype": dtype, "device": device},
                -1,
            )
        )
    workspaces = [
        (torch.empty_strided, ((n,), (1,)), {"dtype": torch.float64, "device": device}, -1)
        for n in _workspace_doubles(compiled)
    ]
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    stream_args: tuple[Any, ...]
    if raw is not None:
        stream, stream_args = raw, (info.device_index,)
    else:  # torch builds without the raw query
        stream, stream_args = (lambda: torch.cuda.current_stream(device).cuda_stream), ()
    launches = _packed_launches(compiled, info, program)
    return FastCall(
        "torch",
        info.device_index,
        specs,
        _buffer_specs(_in_place_specs(compiled, outputs)),
        _buffer_specs(workspaces),
        launches,
        stream,
        stream_args,
        None,
        compiled,
        program,
        given_outputs(compiled, info),
        _direct_scalars(program, specs),
    )


def _direct_scalars(program: ScalarProgram, specs: list[tuple]) -> list[tuple[int, int]] | None:
    """FastCall's direct_scalars for `program` on inputs of these specs (None: none)."""
    if not program.operands:
        return None
    return program.direct({k: spec[0] for k, spec in enumerate(specs) if len(spec) == 1})


def _cupy_call(specs: list[tuple], compiled: Any, info: Any, program: ScalarProgram) -> Any:
    import cupy

    from kfuse._C import FastCall
    from kfuse.dtypes import to_numpy_dtype

    # The ndarray constructor is what cupy.empty calls, less a Python frame (0.4 us a call).
    outputs = [
        (cupy.ndarray, (tuple(info.shape(o)), to_numpy_dtype(o.dtype)), None, -1)
        if allocation_order(o) is None
        else (
            empty_like_framework,
            ("cupy", tuple(info.shape(o)), o.dtype, info.device_index),
            {"order": allocation_order(o)},
            -1,
        )
        for o in info.fusion.outputs
    ]
    workspaces = [(cupy.ndarray, ((n,), "float64"), None, -1) for n in _workspace_doubles(compiled)]
    launches = _packed_launches(compiled, info, program)
    # cupy allocates on, and reports the stream of, the current device: the call only takes
    # the fast path while that is the inputs' device.
    return FastCall(
        "cupy",
        info.device_index,
        specs,
        _buffer_specs(_in_place_specs(compiled, outputs)),
        _buffer_specs(workspaces),
        launches,
        cupy.cuda.get_current_stream,
        (),
        cupy.cuda.runtime.getDevice,
        compiled,
        program,
        given_outputs(compiled, info),
        _direct_scalars(program, specs),
    )


def fast_call_for(inputs: list[Any], compiled: Any, info: Any, layout: tuple) -> Any | None:
    """A kfuse._C.FastCall replaying `compiled` (a KernelProgram) for inputs laid out as
    `inputs` are (`layout`, their layout_key), or None when such a call cannot take the fast
    path."""
    if not compiled.launches:
        return None
    if set(info.fusion.output_aliases) != set(compiled.in_place):
        return None  # a staged write copies after the launches: the checked path's
    if has_rng_state(compiled.launches):
        return None  # each launch reserves its seed and offset (KernelLaunch.arguments)
    specs = list(layout)
    program = ScalarProgram.of(info.fusion, info.extents)
    if program is None:
        return None
    if info.framework == "torch":
        return _torch_call(inputs, specs, compiled, info, program)
    return _cupy_call(specs, compiled, info, program)

"""The host fast path: a cached GPU call that skips validation and shape inference.

A call whose inputs have exactly the layout of an earlier call (array type, dtype, shape,
strides, device, 16-byte alignment class) would pass the same checks and infer the same
shapes. So after a checked call the executor hands that call's layout and compiled launches
to kfuse._C.FastCall, which matches later calls' inputs, allocates outputs through their
framework, queries the framework's current stream and launches arguments packed once
(kfuse._C.PackedLaunch), all in C++. Inputs of any other layout fall through to the checked
path.

Only plain GPU calls take it: tensor inputs only (a scalar input's value can change every
call), no pinned params or device, single-scheduler fusions (segmented and library runs keep
their own caches).
"""

from __future__ import annotations

from typing import Any

from kfuse.arrays import framework_of
from kfuse.ir.values import TensorView
from kfuse.launch import InputOperand, OutputOperand, WorkspaceOperand, workspace_bytes


def input_layouts(inputs: list[Any]) -> list[tuple] | None:
    """What a later call's inputs must match, one (type, dtype, shape, strides, pointer mod
    16, device) per input in the framework's own terms, or None when these inputs cannot take
    the fast path."""
    specs = []
    for t in inputs:
        framework = framework_of(t)
        if framework == "torch" and t.device.type == "cuda":
            specs.append((type(t), t.dtype, tuple(t.shape), tuple(t.stride()),
                          t.data_ptr() & 15, t.get_device()))
        elif framework == "cupy":
            specs.append((type(t), t.dtype, t.shape, t.strides, t.data.ptr & 15,
                          t.data.device_id))
        else:
            return None
    return specs


def _contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def packed_launch(launch: Any, extents: dict[Any, Any], n_inputs: int, n_outputs: int,
                  n_workspaces: int) -> Any:
    """launch's arguments packed once (KernelLaunch.arguments with null pointers), with a
    pointer slot for every array operand."""
    from kfuse._C import PackedLaunch

    args = launch.arguments([0] * n_inputs, [0] * n_outputs, extents, [0] * n_workspaces)
    slots = []
    for p, op in enumerate(launch.operands):
        if isinstance(op, InputOperand):
            slots.append((p, "input", op.position, 0))
        elif isinstance(op, OutputOperand):
            slots.append((p, "output", op.index, 0))
        elif isinstance(op, WorkspaceOperand):
            slots.append((p, "workspace", op.index, op.offset))
    return PackedLaunch(launch.kernel, list(launch.grid), list(launch.block), launch.shared_mem,
                        args, slots)


def _packed_launches(compiled: Any, info: Any) -> list[Any]:
    counts = (len(info.fusion.inputs), len(info.fusion.outputs),
              len(workspace_bytes(compiled.launches)))
    return [packed_launch(launch, info.extents, *counts) for launch in compiled.launches]


def _torch_call(inputs: list[Any], specs: list[tuple], compiled: Any, info: Any) -> Any:
    import torch

    from kfuse._C import FastCall
    from kfuse.dtypes import to_torch_dtype

    device = torch.device("cuda", info.device_index)
    outputs = []
    for o in info.fusion.outputs:
        shape, dtype = tuple(info.shape(o)), to_torch_dtype(o.dtype)
        # empty_like skips torch.empty's argument parsing (about 2 us of the call): it gives a
        # contiguous array when the input it copies is one of the same shape and dtype.
        like = next((k for k, t in enumerate(inputs) if t.dtype == dtype
                     and tuple(t.shape) == shape and t.is_contiguous()), -1)
        outputs.append((torch.empty_like, (), None, like) if like >= 0 else
                       (torch.empty_strided, (shape, _contiguous_strides(shape)),
                        {"dtype": dtype, "device": device}, -1))
    workspaces = [(torch.empty_strided, ((-(-n // 8),), (1,)),
                   {"dtype": torch.float64, "device": device}, -1)
                  for n in workspace_bytes(compiled.launches)]
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        stream, stream_args = raw, (info.device_index,)
    else:  # torch builds without the raw query
        stream, stream_args = (lambda: torch.cuda.current_stream(device).cuda_stream), ()
    launches = _packed_launches(compiled, info)
    return FastCall("torch", info.device_index, specs, outputs, workspaces, launches, stream,
                    stream_args, None, compiled)


def _cupy_call(specs: list[tuple], compiled: Any, info: Any) -> Any:
    import cupy

    from kfuse._C import FastCall
    from kfuse.dtypes import to_numpy_dtype

    # The ndarray constructor is what cupy.empty calls, less a Python frame (0.4 us a call).
    outputs = [(cupy.ndarray, (tuple(info.shape(o)), to_numpy_dtype(o.dtype)), None, -1)
               for o in info.fusion.outputs]
    workspaces = [(cupy.ndarray, ((-(-n // 8),), "float64"), None, -1)
                  for n in workspace_bytes(compiled.launches)]
    launches = _packed_launches(compiled, info)
    # cupy allocates on, and reports the stream of, the current device: the call only takes
    # the fast path while that is the inputs' device.
    return FastCall("cupy", info.device_index, specs, outputs, workspaces, launches,
                    cupy.cuda.get_current_stream, (), cupy.cuda.runtime.getDevice, compiled)


def fast_call_for(inputs: list[Any], compiled: Any, info: Any) -> Any | None:
    """A kfuse._C.FastCall replaying `compiled` for inputs laid out as `inputs` are, or None
    when such a call cannot take the fast path."""
    if compiled.runner is not None or not compiled.launches:
        return None
    if any(not isinstance(v, TensorView) for v in info.fusion.inputs):
        return None
    if info.framework not in ("torch", "cupy") or info.device_index < 0:
        return None
    specs = input_layouts(inputs)
    if specs is None:
        return None
    if info.framework == "torch":
        return _torch_call(inputs, specs, compiled, info)
    return _cupy_call(specs, compiled, info)

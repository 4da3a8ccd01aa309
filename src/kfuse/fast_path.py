"""The host fast path: a cached GPU call that skips validation and shape inference.

A call whose inputs have exactly the layout of an earlier call (framework, dtype, shape,
strides, device, 16-byte alignment class) would pass the same checks and infer the same
shapes, so the executor remembers, per such key, the compiled launches and everything the
checks produced. A hit then only reads pointers, allocates outputs, packs and launches.

Only plain GPU calls take it: tensor inputs only (a scalar input's value can change every
call), no pinned params or device, single-scheduler fusions (segmented and library runs keep
their own caches).
"""

from __future__ import annotations

from typing import Any

from kfuse.ir.values import TensorView


def layout_key(inputs: list[Any]) -> tuple | None:
    """The exact layout of GPU tensor inputs, or None when the fast path does not apply."""
    key: list[Any] = []
    for t in inputs:
        module = type(t).__module__
        if module.startswith("torch"):
            device = t.device
            if device.type != "cuda":
                return None
            key.append((t.dtype, t.shape, t.stride(), t.data_ptr() & 15, device))
        elif module.startswith("cupy"):
            key.append((t.dtype, t.shape, t.strides, t.data.ptr & 15, t.device.id))
        else:
            return None
    return tuple(key)


def _data_ptr(t: Any) -> int:
    return t.data_ptr() if type(t).__module__.startswith("torch") else t.data.ptr


class FastCall:
    """What one input layout compiled to, ready to launch."""

    def __init__(self, compiled: Any, info: Any) -> None:
        from kfuse.dtypes import to_numpy_dtype, to_torch_dtype
        from kfuse.launch import workspace_bytes

        self.compiled = compiled
        self.launches = compiled.launches
        self.extents = info.extents
        self.framework = info.framework
        self.device_index = info.device_index
        fusion = info.fusion
        self.tensor_positions = [i for i, v in enumerate(fusion.inputs)
                                 if isinstance(v, TensorView)]
        self.n_inputs = len(fusion.inputs)
        if self.framework == "torch":
            import torch

            device = torch.device("cuda", self.device_index)
            self.outputs = [(info.shape(o), to_torch_dtype(o.dtype), device)
                            for o in fusion.outputs]
            self.workspaces = [((-(-n // 8),), torch.float64, device)
                               for n in workspace_bytes(self.launches)]
            self._empty = torch.empty
            # torch's raw current-stream query skips building a Stream object per call; the
            # public call is the fallback for torch builds without it.
            raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
            index = self.device_index
            self._stream = ((lambda: raw(index)) if raw is not None
                            else (lambda: torch.cuda.current_stream(device).cuda_stream))
        else:
            import cupy

            self.outputs = [(info.shape(o), to_numpy_dtype(o.dtype)) for o in fusion.outputs]
            self.workspaces = [((-(-n // 8),), "float64") for n in workspace_bytes(self.launches)]
            cupy_device = cupy.cuda.Device(self.device_index)

            def empty(shape: Any, dtype: Any, _dev: Any = cupy_device) -> Any:
                with _dev:
                    return cupy.empty(shape, dtype=dtype)

            def stream(_dev: Any = cupy_device) -> int:
                with _dev:
                    return cupy.cuda.get_current_stream().ptr

            self._empty = empty
            self._stream = stream

    def run(self, inputs: list[Any], stream: int | None) -> list[Any]:
        """Launch on `inputs` (whose layout matches this entry's key)."""
        if self.framework == "torch":
            outputs = [self._empty(shape, dtype=dtype, device=dev)
                       for shape, dtype, dev in self.outputs]
            workspaces = [self._empty(shape, dtype=dtype, device=dev)
                          for shape, dtype, dev in self.workspaces]
        else:
            outputs = [self._empty(shape, dtype) for shape, dtype in self.outputs]
            workspaces = [self._empty(shape, dtype) for shape, dtype in self.workspaces]
        input_ptrs = [0] * self.n_inputs
        for pos in self.tensor_positions:
            input_ptrs[pos] = _data_ptr(inputs[pos])
        output_ptrs = [_data_ptr(o) for o in outputs]
        workspace_ptrs = [_data_ptr(w) for w in workspaces]
        if stream is None:
            stream = self._stream()
        for launch in self.launches:
            args = launch.arguments(input_ptrs, output_ptrs, self.extents, workspace_ptrs)
            launch.kernel.launch(launch.grid, launch.block, launch.shared_mem, stream, args)
        return outputs


class FastPathCache:
    """Layout key -> FastCall, for one fusion."""

    def __init__(self) -> None:
        self._calls: dict[tuple, FastCall] = {}

    def lookup(self, inputs: list[Any]) -> tuple[tuple | None, FastCall | None]:
        """(key, cached call); key None when the inputs cannot take the fast path."""
        key = layout_key(inputs)
        return key, (self._calls.get(key) if key is not None else None)

    def remember(self, key: tuple | None, compiled: Any, info: Any) -> None:
        """Keep `compiled` for `key` when such a call can take the fast path."""
        if key is None or compiled.runner is not None or not compiled.launches:
            return
        if any(not isinstance(v, TensorView) for v in info.fusion.inputs):
            return
        if info.framework not in ("torch", "cupy") or info.device_index < 0:
            return
        self._calls[key] = FastCall(compiled, info)

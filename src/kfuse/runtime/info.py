"""RuntimeInfo: what the schedulers know about one call's inputs, checked against the fusion.

Built once per call from the actual arrays: their layouts, the concrete extent of every
TensorView (shape inference), the target (a CUDA device or the host emulator) and that
target's DeviceDescription. Every mismatch with the definition is an InputError naming the
input, raised here, before anything is compiled or launched.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

from kfuse import knobs
from kfuse.dtypes import INTEGER_RANGE, ML_DTYPES_NAME, DataType
from kfuse.errors import InputError
from kfuse.ir.attention_ops import used_only_as_philox_state
from kfuse.ir.fusion import Fusion
from kfuse.ir.values import TensorView, Val
from kfuse.runtime.arrays import ArrayLayout, framework_of, layout_of
from kfuse.runtime.autograd_note import note_requires_grad
from kfuse.runtime.device_arg import check_device_exists, device_index, generated_framework

EMULATOR = "emulator"
CUDA = "cuda"


@dataclass
class RuntimeInfo:
    """One call's inputs, as the compiler sees them."""

    fusion: Fusion
    inputs: list[Any]
    layouts: dict[TensorView, ArrayLayout]
    extents: dict[Val, Any]  # TensorView -> shape tuple, Scalar -> value
    framework: str
    backend: str  # CUDA or EMULATOR
    device_index: int  # CUDA ordinal; -1 for the emulator
    device: Any  # kfuse.runtime.device.DeviceDescription
    # Outputs written into part of a larger array (a cat's parts, folded: kfuse.schedule.
    # boundary_views): output -> (its strides, bytes from the array's start). Others are
    # contiguous arrays of their own.
    output_views: dict[TensorView, tuple[tuple[int, ...], int]] = field(default_factory=dict)
    # Inputs the kernels run just before this segment's read last (kfuse.engine.
    # segment_kernels, with switches.REREAD_REVERSED): their tail is likely still in L2, so a
    # kernel that reads them again may start from their end (kfuse.schedule.pointwise).
    warm_inputs: frozenset[TensorView] = frozenset()

    def shape(self, tv: TensorView) -> tuple[int, ...]:
        """The concrete shape of any TensorView of the fusion."""
        return self.extents[tv]


def input_list(inputs: Any) -> list[Any]:
    """A call's inputs as a new list; InputError unless they are a list or tuple."""
    if not isinstance(inputs, (list, tuple)):
        raise InputError(
            f"inputs must be a list of arrays and numbers, got {type(inputs).__name__}"
        )
    return list(inputs)


def build_runtime_info(fusion: Fusion, inputs: list[Any], *, device: Any = None) -> RuntimeInfo:
    """Check `inputs` against `fusion` and describe them; `device`: execute's device=
    (kfuse.runtime.device_arg). Raises InputError."""
    inputs = input_list(inputs)
    device = device_index(device)
    if len(inputs) != len(fusion.inputs):
        raise InputError(
            f"the fusion takes {len(fusion.inputs)} inputs "
            f"({', '.join(v.name for v in fusion.inputs)}), got {len(inputs)}"
        )
    layouts: dict[TensorView, ArrayLayout] = {}
    frameworks: set[str] = set()
    for pos, (val, arg) in enumerate(zip(fusion.inputs, inputs)):
        what = f"input {pos} ({val.name})"
        if isinstance(val, TensorView):
            layout = layout_of(arg, what)
            _check_dtype(val, layout, what, fusion)
            if layout.framework == "torch":
                note_requires_grad(arg, what)
            layouts[val] = layout
            frameworks.add(layout.framework)
        else:
            check_scalar(val, arg, what)
    if len(frameworks) > 1:
        raise InputError(
            f"inputs mix array frameworks ({', '.join(sorted(frameworks))}); "
            "pass arrays of one framework"
        )
    framework = frameworks.pop() if frameworks else "numpy"
    if not layouts and device is not None:
        # No tensor input to say where: the outputs go to the device asked for (nvFuser's
        # meaning of device=), so a causal mask or a `full` is made on the GPU.
        framework, backend, index = _placed_by_device(device)
    else:
        backend, index = _target(layouts, device)
    extents = fusion.infer_shapes(inputs)
    return RuntimeInfo(
        fusion,
        inputs,
        layouts,
        extents,
        framework,
        backend,
        index,
        _device_description(backend, index),
    )


def _target(layouts: dict[TensorView, ArrayLayout], device: int | None) -> tuple[str, int]:
    """(backend, device index) of a call on tensor inputs with these `layouts`: their one
    device, which `device` (device=) must name."""
    devices = {lay.device for lay in layouts.values()}
    if len(devices) > 1:
        where = ", ".join(
            f"{tv.name} on {'cpu' if lay.device < 0 else f'cuda:{lay.device}'}"
            for tv, lay in layouts.items()
        )
        raise InputError(
            f"inputs are on different devices ({where}); kfuse runs a fusion on one device"
        )
    on_device = devices.pop() if devices else -1
    if on_device < 0:
        if device is not None:
            raise InputError(
                f"device={device} was asked for, but the inputs are host (CPU) "
                "arrays; move them to the GPU or leave device unset to use the "
                "host emulator"
            )
        return EMULATOR, -1
    if knobs.get().device == EMULATOR:
        raise InputError(
            "KFUSE_DEVICE=emulator runs fusions on host arrays, but the inputs "
            f"are on cuda:{on_device}"
        )
    if device is not None and device != on_device:
        raise InputError(f"device={device} was asked for, but the inputs are on cuda:{on_device}")
    return CUDA, on_device


def _placed_by_device(device: int) -> tuple[str, str, int]:
    """(framework, backend, index) of a call without tensor inputs given device=`device`."""
    if knobs.get().device == EMULATOR:
        raise InputError(
            f"device={device} was asked for, but KFUSE_DEVICE=emulator runs every fusion on "
            "the host emulator; leave device unset there"
        )
    check_device_exists(device)
    return generated_framework(), CUDA, device


def _check_dtype(val: TensorView, layout: ArrayLayout, what: str, fusion: Fusion) -> None:
    if layout.dtype is val.dtype:
        return
    if (
        layout.dtype is DataType.UInt64
        and val.dtype is DataType.Int
        and used_only_as_philox_state(fusion, val)
    ):
        return  # torch's flash-attention state as torch gives it: the same 64-bit words
    hint = ""
    if val.dtype in ML_DTYPES_NAME and layout.framework == "numpy":
        name = ML_DTYPES_NAME[val.dtype]
        hint = f" (NumPy's {name} arrays are ml_dtypes.{name}: x.astype(ml_dtypes.{name}))"
    raise InputError(
        f"{what} was defined as {val.dtype.label} but the array is {layout.dtype.label}{hint}"
    )


def check_scalar(val: Val, arg: Any, what: str) -> None:
    """A scalar input's value must be of its dtype's kind: a bool for Bool, an integer for
    Int and Int32, a real number for a floating dtype, any number for a complex one (a 0-d
    array of such a value too). Nothing is converted silently: 2.7 for an Int would have
    been truncated to 2, 1j for a Double would have lost its imaginary part."""
    if framework_of(arg) is not None and getattr(arg, "ndim", 0) != 0:
        raise InputError(f"{what} is a scalar input; got an array of shape {tuple(arg.shape)}")
    value = arg.item() if hasattr(arg, "item") else arg
    if val.dtype is DataType.Bool:
        ok = isinstance(value, bool)
    elif val.dtype.is_integral:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif val.dtype.is_complex:  # a real number is a complex one of imaginary part 0
        ok = isinstance(value, (int, float, complex)) and not isinstance(value, bool)
    else:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok:
        raise InputError(
            f"{what} is a scalar input of dtype {val.dtype.label}; got {value!r} "
            f"({type(arg).__name__})"
        )
    # Nor wrapped: 2**63 for an Int would have been -2**63 in the kernel.
    if val.dtype in INTEGER_RANGE:
        lowest, highest = INTEGER_RANGE[val.dtype]
        if not lowest <= value <= highest:
            raise InputError(
                f"{what} is a scalar input of dtype {val.dtype.label}; {value} is outside its "
                f"range ({lowest} to {highest})"
            )
    elif isinstance(value, int) and not isinstance(value, bool):
        try:
            float(value)
        except OverflowError:
            raise InputError(
                f"{what} is a scalar input of dtype {val.dtype.label}; {value} is too large "
                "for a floating-point value"
            ) from None


def _device_description(backend: str, index: int) -> Any:
    from kfuse.runtime import device as devices

    if backend == EMULATOR:
        try:
            return devices.get_profile(knobs.get().emulator_profile)
        except ValueError as exc:
            raise InputError(f"KFUSE_EMULATOR_PROFILE: {exc}") from None
    return _cuda_device(index)


@functools.cache
def _cuda_device(index: int) -> Any:
    """The DeviceDescription of CUDA device `index` (queried once per process)."""
    from kfuse import _C
    from kfuse.runtime.device import from_properties

    return from_properties(_C.get_device_properties(index))

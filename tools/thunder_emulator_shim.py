"""Let Thunder's nvFuser executor run fusion regions of CPU tensors on kfuse's host emulator.

A test-only aid for a machine without a GPU: Thunder (0.2.6) turns its nvFuser executor off
when torch sees no CUDA, and its checks accept only CUDA tensors. These patches lift exactly
those gates, nothing in the translation itself, so a dry run shows every fd.ops call Thunder
makes and every error kfuse raises, with kfuse computing on the CPU (slow but exact):

    import thunder_emulator_shim
    thunder = thunder_emulator_shim.import_thunder_on_emulator()

kfuse must be installed as nvfuser_direct before Thunder's import; this function does both.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any


def import_thunder_on_emulator() -> ModuleType:
    """Install kfuse as nvfuser_direct, import Thunder with its nvFuser executor on, and make
    that executor take CPU tensors. Returns the thunder module."""
    import torch
    from looseversion import LooseVersion

    import kfuse.nvfuser_direct as nvfuser_direct

    nvfuser_direct.install()
    # Thunder asks torch.cuda.is_available() once while importing, to decide whether nvFuser
    # exists at all; answer yes only for that import.
    real_is_available = torch.cuda.is_available
    torch.cuda.is_available = lambda: True  # type: ignore[assignment]
    try:
        import thunder
        import thunder.executors.nvfuserex as nvfuserex
        import thunder.executors.nvfuserex_impl as impl
    finally:
        torch.cuda.is_available = real_is_available  # type: ignore[assignment]

    def kfuse_version() -> Any:
        return LooseVersion(nvfuser_direct.version())

    # The executor gates features on nvfuser_version() at trace time, which asks torch again.
    nvfuserex.nvfuser_version = kfuse_version
    impl.nvfuser_version = kfuse_version
    _accept_cpu_tensors(impl)
    _cpu_philox_state(torch)
    return thunder


def _accept_cpu_tensors(impl: ModuleType) -> None:
    """The executor's device checks, widened from CUDA to CUDA or CPU."""
    from thunder.core import utils
    from thunder.core.devices import DeviceType

    ok_devices = (DeviceType.CUDA, DeviceType.CPU)

    def is_supported_device(device: Any) -> bool:
        return device.devicetype in ok_devices

    def is_supported_devicetype(devicetype: Any) -> bool:
        return devicetype in ok_devices

    def is_supported_tensor(a: Any, *, allow_low_precision_floats: bool = True) -> bool:
        if not allow_low_precision_floats and a.dtype in impl._low_precision_floats:
            return False
        return (
            a.device.devicetype in ok_devices and impl.is_supported_dtype(a.dtype) and a.ndim <= 8
        )

    def has_cuda_input_or_output(self: Any, bsym: Any) -> bool:
        return any(
            isinstance(p, impl.TensorProxy) for p in (*bsym.flat_proxy_args, *bsym.flat_proxy_outs)
        )

    def select_device(fd: Any, device: Any) -> None:
        # A factory's device is CPU here; kfuse runs where the inputs are.
        if device is not None:
            utils.check(device.devicetype in ok_devices, lambda: f"unexpected device {device}")

    impl.is_supported_device = is_supported_device
    impl.is_supported_devicetype = is_supported_devicetype
    impl.is_supported_tensor = is_supported_tensor
    impl._select_device = select_device
    impl.ex.__class__.has_cuda_input_or_output = has_cuda_input_or_output

    class EmulatorFusionDefinition(impl.FusionDefinition):  # type: ignore[misc,name-defined]
        # Thunder passes is_cpu=(device is CPU), which nvFuser reads as "a CPU scalar tensor";
        # here every tensor is on the CPU, and only the 0-dim ones are such scalars.
        def define_tensor(self, *args: Any, **kwargs: Any) -> Any:
            # (Flash attention's UInt64 philox offset is 0-dim but a GPU tensor on a GPU.)
            shape = kwargs.get("shape", args[0] if args else None)
            uint64 = kwargs.get("dtype") is impl.DataType.UInt64
            if kwargs.get("is_cpu") and (uint64 or (shape is not None and len(shape) > 0)):
                kwargs["is_cpu"] = False
            return super().define_tensor(*args, **kwargs)

    impl.FusionDefinition = EmulatorFusionDefinition

    # Thunder asks torch which fused attention a CUDA GPU would pick (flash, for nvFuser's
    # sdpfa_fwd/bwd); torch answers differently for CPU tensors, so answer as a GPU would.
    real_sdp_choice = impl._fused_sdp_choice

    def fused_sdp_choice(query: Any, *args: Any, **kwargs: Any) -> Any:
        if query.device.devicetype is DeviceType.CPU:
            return impl.SpdaBackend.FLASH_ATTENTION
        return real_sdp_choice(query, *args, **kwargs)

    impl._fused_sdp_choice = fused_sdp_choice


def _cpu_philox_state(torch: Any) -> None:
    """Thunder's dropout draws through nvFuser's philox with a (seed, offset) it takes from, and
    advances in, torch's CUDA generator (prims.get_and_update_rng_state, CUDA only). Here that
    prim takes CPU devices too, and the generator's state is a CPU tensor of the same layout
    (seed, then offset, as int64 bytes), so the backward's replay and successive draws behave
    as on a GPU."""
    from thunder.core import devices, prims
    from thunder.executors import torchex

    real_meta = prims.get_and_update_rng_state.meta
    cuda0 = devices.Device(devices.DeviceType.CUDA, 0)

    def meta(seed: Any, offset: Any, device: Any) -> Any:
        return real_meta(
            seed, offset, cuda0 if device.devicetype is devices.DeviceType.CPU else device
        )

    for sym in (prims.get_and_update_rng_state, torchex.get_and_update_rng_state_impl):
        object.__setattr__(sym, "meta", meta)  # Symbol is a frozen dataclass
    state = {"bytes": torch.tensor([1234, 0], dtype=torch.int64).view(torch.uint8)}

    def get_rng_state(device: Any = None) -> Any:
        return state["bytes"].clone()

    def set_rng_state(new_state: Any, device: Any = None) -> None:
        state["bytes"] = new_state.clone()

    torch.cuda.get_rng_state = get_rng_state
    torch.cuda.set_rng_state = set_rng_state

"""The launch limits the emulator enforces, so that a launch a GPU would reject fails here too."""

from __future__ import annotations

from dataclasses import dataclass

from kfuse import knobs
from kfuse.errors import EmulatorError
from kfuse.runtime import device as _device


@dataclass(frozen=True)
class EmulatedDeviceLimits:
    """What a launch may ask for on the emulated device."""

    name: str
    shared_mem_per_block_optin: int
    max_threads_per_block: int = 1024
    warp_size: int = 32
    max_block_dim: tuple[int, int, int] = (1024, 1024, 64)
    max_grid_dim: tuple[int, int, int] = (2**31 - 1, 65535, 65535)


def _from_description(desc: object) -> EmulatedDeviceLimits:
    try:
        return EmulatedDeviceLimits(
            name=str(getattr(desc, "name", type(desc).__name__)),
            shared_mem_per_block_optin=int(desc.shared_mem_per_block_optin),  # type: ignore[attr-defined]
            max_threads_per_block=int(desc.max_threads_per_block),  # type: ignore[attr-defined]
        )
    except AttributeError as e:
        raise EmulatorError(
            f"cannot take launch limits from {desc!r}: it needs max_threads_per_block and "
            "shared_mem_per_block_optin"
        ) from e


EMULATED_DEVICE_PROFILES: dict[str, EmulatedDeviceLimits] = {
    key: _from_description(desc) for key, desc in _device.PROFILES.items()
}
"""The launch limits of kfuse.runtime.device's named profiles (h100, h200, a100)."""


def resolve_limits(device: object) -> EmulatedDeviceLimits:
    """Limits for `device`: None (the KFUSE_EMULATOR_PROFILE profile, default h100), a profile
    name, EmulatedDeviceLimits, or any object with `max_threads_per_block` and
    `shared_mem_per_block_optin` (a DeviceDescription or the properties _C reports)."""
    if device is None:
        device = knobs.get().emulator_profile
    if isinstance(device, EmulatedDeviceLimits):
        return device
    if isinstance(device, str):
        profile = EMULATED_DEVICE_PROFILES.get(device.strip().lower())
        if profile is None:
            names = ", ".join(sorted(EMULATED_DEVICE_PROFILES))
            raise EmulatorError(f"unknown device profile {device!r}; known: {names}")
        return profile
    return _from_description(device)

"""DeviceDescription: the properties of a GPU that schedulers and heuristics read.

A description comes either from a live device (``from_properties`` on the object that
``kfuse._C.get_device_properties`` returns) or from a named profile (``get_profile("h100")``),
so that scheduling decisions can be made, tested and reproduced on a machine with no GPU.
This module never imports or calls CUDA.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields
from typing import Any

__all__ = ["DeviceDescription", "PROFILES", "get_profile", "from_properties"]


@dataclass(frozen=True)
class DeviceDescription:
    """What kfuse knows about one GPU. Sizes in bytes, clocks in kHz, bus width in bits."""

    name: str
    major: int
    minor: int
    sm_count: int
    max_threads_per_block: int
    max_threads_per_sm: int
    max_blocks_per_sm: int
    warp_size: int
    shared_mem_per_block: int
    shared_mem_per_block_optin: int
    shared_mem_per_sm: int
    regs_per_block: int
    regs_per_sm: int
    l2_cache_bytes: int
    total_memory: int
    memory_clock_khz: int
    memory_bus_width: int

    @property
    def arch(self) -> str:
        """The NVRTC architecture name, e.g. ``"sm_90"``."""
        return f"sm_{self.major}{self.minor}"

    @property
    def compute_capability(self) -> tuple[int, int]:
        """(major, minor)."""
        return (self.major, self.minor)

    @property
    def peak_bandwidth_gbs(self) -> float:
        """Theoretical DRAM bandwidth in GB/s (10^9 bytes): double data rate times bus width.

        The same formula as ``_C.DeviceProperties.peak_bandwidth_gbs``.
        """
        return 2.0 * self.memory_clock_khz * 1e3 * (self.memory_bus_width / 8) / 1e9


# Figures as the CUDA driver reports them (cuDeviceGetAttribute / cudaGetDeviceProperties) for
# the SXM parts. The H200 row was read from a live H200; memory clock and bus width are the
# driver's, whose product gives the published bandwidth (H100 3.35 TB/s, H200 ~4.8 TB/s,
# A100 80GB 2039 GB/s).
_H100 = DeviceDescription(
    name="NVIDIA H100 80GB HBM3",
    major=9,
    minor=0,
    sm_count=132,
    max_threads_per_block=1024,
    max_threads_per_sm=2048,
    max_blocks_per_sm=32,
    warp_size=32,
    shared_mem_per_block=48 * 1024,
    shared_mem_per_block_optin=227 * 1024,
    shared_mem_per_sm=228 * 1024,
    regs_per_block=65536,
    regs_per_sm=65536,
    l2_cache_bytes=50 * 1024 * 1024,
    total_memory=85_520_809_984,  # 81559 MiB
    memory_clock_khz=2_619_000,
    memory_bus_width=5120,
)

PROFILES: dict[str, DeviceDescription] = {
    "h100": _H100,
    # The same SMs as the H100, with more L2 and HBM3e.
    "h200": dataclasses.replace(
        _H100,
        name="NVIDIA H200",
        l2_cache_bytes=60 * 1024 * 1024,
        total_memory=150_109_880_320,  # 143771 MiB ("141 GB")
        memory_clock_khz=3_201_000,
        memory_bus_width=6016,
    ),
    "a100": DeviceDescription(
        name="NVIDIA A100-SXM4-80GB",
        major=8,
        minor=0,
        sm_count=108,
        max_threads_per_block=1024,
        max_threads_per_sm=2048,
        max_blocks_per_sm=32,
        warp_size=32,
        shared_mem_per_block=48 * 1024,
        shared_mem_per_block_optin=163 * 1024,
        shared_mem_per_sm=164 * 1024,
        regs_per_block=65536,
        regs_per_sm=65536,
        l2_cache_bytes=40 * 1024 * 1024,
        total_memory=85_198_045_184,  # 81251 MiB
        memory_clock_khz=1_593_000,
        memory_bus_width=5120,
    ),
}


def get_profile(name: str) -> DeviceDescription:
    """The named profile (case-insensitive): one of ``PROFILES``' keys."""
    profile = PROFILES.get(name.strip().lower()) if isinstance(name, str) else None
    if profile is None:
        raise ValueError(
            f"unknown device profile {name!r}; known profiles: {', '.join(sorted(PROFILES))}"
        )
    return profile


def from_properties(props: Any) -> DeviceDescription:
    """A description built from any object with DeviceDescription's attribute names.

    ``kfuse._C.DeviceProperties`` has exactly those names; a missing one is reported by name.
    Extra attributes (such as the object's own ``peak_bandwidth_gbs``) are ignored.
    """
    values: dict[str, Any] = {}
    missing = []
    for field in fields(DeviceDescription):
        if not hasattr(props, field.name):
            missing.append(field.name)
            continue
        value = getattr(props, field.name)
        values[field.name] = str(value) if field.name == "name" else int(value)
    if missing:
        raise ValueError(
            f"cannot build a DeviceDescription from {type(props).__name__}: "
            f"missing attribute(s) {', '.join(missing)}"
        )
    return DeviceDescription(**values)

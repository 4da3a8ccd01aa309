"""kfuse.runtime.emulator: run kfuse's CUDA C++ kernels on the CPU.

The kernel source is compiled by the host C++ compiler (g++) against an emulation header
(cuda_emu.h) that defines the CUDA built-ins kfuse uses; the threads of a block run as fibers,
so barriers, warp shuffles and votes behave as on a GPU, and blocks run one after another.
"""

from kfuse.runtime.emulator.build import cache_dir, clear_memory_cache, compiler_invocations
from kfuse.runtime.emulator.kernel import (
    DEFAULT_SPIN_LIMIT,
    DEFAULT_STACK_BYTES,
    DEFAULT_WATCHDOG_SECONDS,
    EmulatedKernel,
)
from kfuse.runtime.emulator.limits import EMULATED_DEVICE_PROFILES, EmulatedDeviceLimits

__all__ = [
    "DEFAULT_SPIN_LIMIT",
    "DEFAULT_STACK_BYTES",
    "DEFAULT_WATCHDOG_SECONDS",
    "EMULATED_DEVICE_PROFILES",
    "EmulatedDeviceLimits",
    "EmulatedKernel",
    "cache_dir",
    "clear_memory_cache",
    "compiler_invocations",
]

// emu_prelude.h: what every emulated kernel's translation unit includes before the kernel
// source: the CUDA emulation (cuda_emu.h) and, from emu_launch.h, the runtime's entry points,
// the marker wrappers and the launch shim's templates (the runtime itself only where
// KF_EMU_RUNTIME is defined: the runtime object). emu_launch.h uses nothing the kernel
// defines; the shim's KF_EMU_KERNEL_ENTRY(name) after the kernel instantiates it. One header,
// so that g++ can precompile both (prebuilt.py).
#pragma once
#include "cuda_emu.h"
#include "emu_launch.h"

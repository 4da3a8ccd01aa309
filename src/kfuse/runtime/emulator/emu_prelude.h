// emu_prelude.h: what every emulated kernel's translation unit includes before the kernel
// source: the CUDA emulation (cuda_emu.h) and the block scheduler and launch entry point
// (emu_launch.h, which uses nothing the kernel defines: the shim's KF_EMU_KERNEL_ENTRY(name)
// after the kernel instantiates it). One header, so that g++ can precompile both (pch.py).
#pragma once
#include "cuda_emu.h"
#include "emu_launch.h"

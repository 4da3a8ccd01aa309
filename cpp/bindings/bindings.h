// bindings/bindings.h: the registration functions module.cpp calls, one per binding file.
#pragma once

#include <nanobind/nanobind.h>

#include <array>
#include <cstdint>
#include <vector>

#include "../kfuse/kernel.h"

namespace kfuse {
namespace bindings {

// Shared by the binding files (defined in runtime.cpp): Python launch arguments -> KernelArg
// (bool, int, float, a (data, shape, strides) descriptor, or a DLPack array), and a 1- to
// 3-element grid or block -> three dimensions.
std::vector<KernelArg> convert_args(nanobind::handle args);
std::array<int64_t, 3> to_dim3(const std::vector<int64_t> &v, const char *what);

// Exception types and translators (CudaError, CompileError); must run before the others.
void register_errors(nanobind::module_ &m);
// LaunchParams, CompileParams, HeuristicParams and its subclasses.
void register_params(nanobind::module_ &m);
// Driver and NVRTC functions, DeviceProperties, Kernel, KernelExecutor.
void register_runtime(nanobind::module_ &m);
// PackedLaunch, FastCall, FastCallCache: the host fast path of cached calls.
void register_fast_call(nanobind::module_ &m);
// ReplayRun: a replayed segmented call's consecutive kernel segments in one call.
void register_replay_run(nanobind::module_ &m);
// ProfilerError, the CUPTI profiling session, the record join, KernelProfile, FusionProfile.
void register_profile(nanobind::module_ &m);

}  // namespace bindings
}  // namespace kfuse

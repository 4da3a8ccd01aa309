// bindings/bindings.h: the registration functions module.cpp calls, one per binding file.
#pragma once

#include <nanobind/nanobind.h>

namespace kfuse {
namespace bindings {

// Exception types and translators (CudaError, CompileError); must run before the others.
void register_errors(nanobind::module_ &m);
// LaunchParams, CompileParams, HeuristicParams and its subclasses.
void register_params(nanobind::module_ &m);
// Driver and NVRTC functions, DeviceProperties, Kernel, KernelExecutor.
void register_runtime(nanobind::module_ &m);
// ProfilerError, the CUPTI profiling session, the record join, KernelProfile, FusionProfile.
void register_profile(nanobind::module_ &m);

}  // namespace bindings
}  // namespace kfuse

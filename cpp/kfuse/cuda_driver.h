// kfuse/cuda_driver.h: the lazily loaded CUDA driver API (libcuda), device queries, contexts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>

namespace kfuse {

// The few driver types kfuse needs, declared here so that no CUDA toolkit is needed to build.
using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = struct CUctx_st *;
using CUmodule = struct CUmod_st *;
using CUfunction = struct CUfunc_st *;
using CUstream = struct CUstream_st *;

namespace cu {
// Values from the CUDA driver API (cuda.h); stable across CUDA releases.
constexpr CUresult SUCCESS = 0;
constexpr CUresult ERROR_INVALID_VALUE = 1;
constexpr CUresult ERROR_STUB_LIBRARY = 34;
constexpr CUresult ERROR_INSUFFICIENT_DRIVER = 35;
constexpr CUresult ERROR_NO_DEVICE = 100;
constexpr CUresult ERROR_INVALID_DEVICE = 101;
constexpr CUresult ERROR_NOT_FOUND = 500;

constexpr int DEV_MAX_THREADS_PER_BLOCK = 1;
constexpr int DEV_MAX_BLOCK_DIM_X = 2;
constexpr int DEV_MAX_BLOCK_DIM_Y = 3;
constexpr int DEV_MAX_BLOCK_DIM_Z = 4;
constexpr int DEV_MAX_GRID_DIM_X = 5;
constexpr int DEV_MAX_GRID_DIM_Y = 6;
constexpr int DEV_MAX_GRID_DIM_Z = 7;
constexpr int DEV_MAX_SHARED_MEMORY_PER_BLOCK = 8;
constexpr int DEV_WARP_SIZE = 10;
constexpr int DEV_MAX_REGISTERS_PER_BLOCK = 12;
constexpr int DEV_CLOCK_RATE = 13;
constexpr int DEV_MULTIPROCESSOR_COUNT = 16;
constexpr int DEV_MEMORY_CLOCK_RATE = 36;
constexpr int DEV_GLOBAL_MEMORY_BUS_WIDTH = 37;
constexpr int DEV_L2_CACHE_SIZE = 38;
constexpr int DEV_MAX_THREADS_PER_MULTIPROCESSOR = 39;
constexpr int DEV_COMPUTE_CAPABILITY_MAJOR = 75;
constexpr int DEV_COMPUTE_CAPABILITY_MINOR = 76;
constexpr int DEV_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR = 81;
constexpr int DEV_MAX_REGISTERS_PER_MULTIPROCESSOR = 82;
constexpr int DEV_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97;
constexpr int DEV_MAX_BLOCKS_PER_MULTIPROCESSOR = 106;

constexpr int FUNC_MAX_THREADS_PER_BLOCK = 0;
constexpr int FUNC_SHARED_SIZE_BYTES = 1;
constexpr int FUNC_LOCAL_SIZE_BYTES = 3;
constexpr int FUNC_NUM_REGS = 4;
constexpr int FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8;
}  // namespace cu

// Every driver entry point kfuse calls: X(name, exported symbol, parameter list).
// Each is looked up with dlsym the first time it is called, so a driver that lacks one
// only fails the feature that needs it.
#define KFUSE_CUDA_DRIVER_API(X)                                                              \
    X(cuInit, "cuInit", (unsigned int))                                                       \
    X(cuDriverGetVersion, "cuDriverGetVersion", (int *))                                      \
    X(cuGetErrorName, "cuGetErrorName", (CUresult, const char **))                            \
    X(cuGetErrorString, "cuGetErrorString", (CUresult, const char **))                        \
    X(cuDeviceGetCount, "cuDeviceGetCount", (int *))                                          \
    X(cuDeviceGet, "cuDeviceGet", (CUdevice *, int))                                          \
    X(cuDeviceGetName, "cuDeviceGetName", (char *, int, CUdevice))                            \
    X(cuDeviceGetAttribute, "cuDeviceGetAttribute", (int *, int, CUdevice))                   \
    X(cuDeviceTotalMem, "cuDeviceTotalMem_v2", (size_t *, CUdevice))                          \
    X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", (CUcontext *, CUdevice))          \
    X(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", (CUdevice))                  \
    X(cuCtxGetCurrent, "cuCtxGetCurrent", (CUcontext *))                                      \
    X(cuCtxSetCurrent, "cuCtxSetCurrent", (CUcontext))                                        \
    X(cuCtxGetDevice, "cuCtxGetDevice", (CUdevice *))                                         \
    X(cuCtxSynchronize, "cuCtxSynchronize", ())                                               \
    X(cuModuleLoadData, "cuModuleLoadData", (CUmodule *, const void *))                       \
    X(cuModuleUnload, "cuModuleUnload", (CUmodule))                                           \
    X(cuModuleGetFunction, "cuModuleGetFunction", (CUfunction *, CUmodule, const char *))     \
    X(cuFuncGetAttribute, "cuFuncGetAttribute", (int *, int, CUfunction))                     \
    X(cuFuncSetAttribute, "cuFuncSetAttribute", (CUfunction, int, int))                       \
    X(cuFuncGetParamInfo, "cuFuncGetParamInfo", (CUfunction, size_t, size_t *, size_t *))    \
    X(cuLaunchKernel, "cuLaunchKernel",                                                       \
      (CUfunction, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int,      \
       unsigned int, unsigned int, CUstream, void **, void **))

// A failed driver call (or a driver that cannot be used). `call` names what kfuse was doing.
class CudaError : public std::runtime_error {
public:
    CudaError(CUresult code, std::string name, std::string text, const std::string &message)
        : std::runtime_error(message), code_(code), name_(std::move(name)),
          text_(std::move(text)) {}
    CUresult code() const { return code_; }
    const std::string &name() const { return name_; }
    const std::string &text() const { return text_; }

private:
    CUresult code_;
    std::string name_;
    std::string text_;
};

namespace driver {

// Where libcuda is found. The resolver (installed by the bindings: it asks kfuse.knobs for
// KFUSE_CUDA_LIBRARY) is called once, on the first driver call; without one, or when it
// returns "", the loader asks the dynamic linker for "libcuda.so.1".
void set_library_resolver(std::function<std::string()> resolver);
// The path (or soname) actually loaded, or "" before the first driver call.
std::string loaded_library();

#define KFUSE_DECLARE_DRIVER_FN(name, symbol, params) \
    using name##_fn = CUresult(*) params;             \
    name##_fn name();
namespace sym {
KFUSE_CUDA_DRIVER_API(KFUSE_DECLARE_DRIVER_FN)
}
#undef KFUSE_DECLARE_DRIVER_FN

// Throws CudaError for a failed result; `call` says which call failed.
void check(CUresult result, const char *call);

// Make a CudaError from a result without a driver call (for kfuse's own launch checks).
CudaError make_error(CUresult code, const std::string &message);

// cuInit(0), once per process; a failure is remembered and raised again on every call.
void ensure_initialized();

int driver_version();  // e.g. 13000 for CUDA 13.0
int device_count();    // 0 when the driver reports no device

struct DeviceProperties {
    int index = 0;
    std::string name;
    int major = 0, minor = 0;
    int sm_count = 0;
    int max_threads_per_block = 0, max_threads_per_sm = 0, max_blocks_per_sm = 0;
    int warp_size = 0;
    int max_block_dim[3] = {0, 0, 0};
    int max_grid_dim[3] = {0, 0, 0};
    int64_t shared_mem_per_block = 0, shared_mem_per_block_optin = 0, shared_mem_per_sm = 0;
    int regs_per_block = 0, regs_per_sm = 0;
    int64_t l2_cache_bytes = 0;
    int64_t total_memory = 0;
    int64_t clock_khz = 0;  // the SMs' peak clock (0 where the driver hides it)
    int64_t memory_clock_khz = 0;
    int memory_bus_width = 0;
    double peak_bandwidth_gbs() const;  // 2 (DDR) * clock * bus width / 8, in GB/s
    std::string repr() const;
};

// Properties of device `index`, queried once and cached.
const DeviceProperties &device_properties(int index);

// Retains the primary context of device `index` (once) and makes it current on this thread.
void make_current(int index);

// The device of the context current on this thread, or 0 when there is none.
int current_device();

// cuCtxSynchronize on the device's primary context.
void synchronize(int index);

// A retained primary context; released when destroyed.
class PrimaryContext {
public:
    explicit PrimaryContext(int index);
    ~PrimaryContext();
    PrimaryContext(const PrimaryContext &) = delete;
    PrimaryContext &operator=(const PrimaryContext &) = delete;
    CUcontext get() const { return ctx_; }

private:
    CUdevice device_ = 0;
    CUcontext ctx_ = nullptr;
};

}  // namespace driver
}  // namespace kfuse

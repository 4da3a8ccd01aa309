// kfuse/cuda_driver.cpp: dlopen of libcuda on first use, symbol table, errors, devices, contexts.
#include "cuda_driver.h"

#include <dlfcn.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <cstdio>
#include <vector>

namespace kfuse {
namespace driver {
namespace {

constexpr const char *kDefaultLibrary = "libcuda.so.1";
constexpr const char *kNeedDriver =
    "kfuse needs an NVIDIA driver for CUDA 12.4 or newer";

std::mutex g_library_mutex;
std::function<std::string()> g_resolver;
std::atomic<void *> g_handle{nullptr};
std::string g_loaded_path;

// Names for the results kfuse itself raises, used when cuGetErrorName is unavailable
// (no library, or a driver too broken to answer).
const char *fallback_name(CUresult code) {
    switch (code) {
        case cu::SUCCESS: return "CUDA_SUCCESS";
        case cu::ERROR_INVALID_VALUE: return "CUDA_ERROR_INVALID_VALUE";
        case 3: return "CUDA_ERROR_NOT_INITIALIZED";
        case 4: return "CUDA_ERROR_DEINITIALIZED";
        case cu::ERROR_STUB_LIBRARY: return "CUDA_ERROR_STUB_LIBRARY";
        case cu::ERROR_INSUFFICIENT_DRIVER: return "CUDA_ERROR_INSUFFICIENT_DRIVER";
        case cu::ERROR_NO_DEVICE: return "CUDA_ERROR_NO_DEVICE";
        case cu::ERROR_INVALID_DEVICE: return "CUDA_ERROR_INVALID_DEVICE";
        case cu::ERROR_NOT_FOUND: return "CUDA_ERROR_NOT_FOUND";
        default: return "CUDA_ERROR_UNKNOWN";
    }
}

std::string library_path_to_load() {
    std::function<std::string()> resolver;
    {
        std::lock_guard<std::mutex> lock(g_library_mutex);
        resolver = g_resolver;
    }
    // Called without the lock held: the resolver may run Python code (and release the GIL).
    std::string path = resolver ? resolver() : std::string();
    return path.empty() ? std::string(kDefaultLibrary) : path;
}

void *library_handle() {
    void *handle = g_handle.load(std::memory_order_acquire);
    if (handle)
        return handle;
    std::string path = library_path_to_load();
    std::lock_guard<std::mutex> lock(g_library_mutex);
    handle = g_handle.load(std::memory_order_acquire);
    if (handle)
        return handle;
    handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        const char *why = dlerror();
        std::string text = why ? why : "unknown dlopen error";
        throw CudaError(
            cu::ERROR_INSUFFICIENT_DRIVER, "CUDA_ERROR_INSUFFICIENT_DRIVER", text,
            "cannot load the CUDA driver library '" + path + "' (" + text +
                "): no NVIDIA driver is installed or it is not on the library path. Install "
                "the NVIDIA driver, or set KFUSE_CUDA_LIBRARY to the full path of libcuda.so.1.");
    }
    // Report the file actually loaded, not just the soname the linker was asked for.
    Dl_info info{};
    void *init = dlsym(handle, "cuInit");
    g_loaded_path = init && dladdr(init, &info) && info.dli_fname ? info.dli_fname : path;
    g_handle.store(handle, std::memory_order_release);
    return handle;
}

void *resolve(const char *symbol) {
    void *handle = library_handle();
    void *fn = dlsym(handle, symbol);
    if (fn)
        return fn;
    std::string version = "unknown";
    if (auto get_version = reinterpret_cast<sym::cuDriverGetVersion_fn>(
            dlsym(handle, "cuDriverGetVersion"))) {
        int v = 0;
        if (get_version(&v) == cu::SUCCESS)
            version = std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
    }
    std::string text = std::string("symbol ") + symbol + " not found in " + loaded_library();
    throw CudaError(cu::ERROR_INSUFFICIENT_DRIVER, "CUDA_ERROR_INSUFFICIENT_DRIVER", text,
                    "the CUDA driver is too old: " + text + " (driver supports CUDA " +
                        version + "); " + kNeedDriver + ". Update the NVIDIA driver.");
}

std::string advice(CUresult code) {
    switch (code) {
        case cu::ERROR_INSUFFICIENT_DRIVER:
            return std::string(" The installed NVIDIA driver is too old for this CUDA "
                               "program; ") + kNeedDriver + ". Update the NVIDIA driver.";
        case cu::ERROR_STUB_LIBRARY:
            return " The loaded libcuda is the CUDA toolkit's stub, not a real driver; install "
                   "the NVIDIA driver or point KFUSE_CUDA_LIBRARY at the real libcuda.so.1.";
        case cu::ERROR_NO_DEVICE:
            return " No CUDA device is visible (check the driver with nvidia-smi, and "
                   "CUDA_VISIBLE_DEVICES).";
        default: return "";
    }
}

}  // namespace

void set_library_resolver(std::function<std::string()> resolver) {
    std::lock_guard<std::mutex> lock(g_library_mutex);
    g_resolver = std::move(resolver);
}

std::string loaded_library() {
    std::lock_guard<std::mutex> lock(g_library_mutex);
    return g_loaded_path;
}

namespace sym {
#define KFUSE_DEFINE_DRIVER_FN(name, symbol, params)                                  \
    name##_fn name() {                                                                \
        static std::atomic<void *> fn{nullptr};                                       \
        void *p = fn.load(std::memory_order_acquire);                                 \
        if (!p) {                                                                     \
            p = resolve(symbol);                                                      \
            fn.store(p, std::memory_order_release);                                   \
        }                                                                             \
        return reinterpret_cast<name##_fn>(p);                                        \
    }
KFUSE_CUDA_DRIVER_API(KFUSE_DEFINE_DRIVER_FN)
#undef KFUSE_DEFINE_DRIVER_FN
}  // namespace sym

CudaError make_error(CUresult code, const std::string &message) {
    std::string name = fallback_name(code), text = "unknown error";
    // Asking the driver for names needs the library; a failure here must not hide `code`.
    try {
        const char *s = nullptr;
        if (sym::cuGetErrorName()(code, &s) == cu::SUCCESS && s)
            name = s;
        s = nullptr;
        if (sym::cuGetErrorString()(code, &s) == cu::SUCCESS && s)
            text = s;
    } catch (const CudaError &) {
    }
    return CudaError(code, name, text, message);
}

void check(CUresult result, const char *call) {
    if (result == cu::SUCCESS)
        return;
    CudaError probe = make_error(result, "");
    throw CudaError(result, probe.name(), probe.text(),
                    std::string(call) + " failed: " + probe.name() + " (" + probe.text() + ")." +
                        advice(result));
}

namespace {
std::mutex g_init_mutex;
std::atomic<bool> g_initialized{false};
bool g_init_attempted = false;
CUresult g_init_result = cu::SUCCESS;
}  // namespace

void ensure_initialized() {
    if (g_initialized.load(std::memory_order_acquire))
        return;
    auto init = sym::cuInit();  // loads the library (may throw), outside the lock
    std::lock_guard<std::mutex> lock(g_init_mutex);
    if (!g_init_attempted) {
        g_init_result = init(0);
        g_init_attempted = true;
    }
    check(g_init_result, "cuInit");
    g_initialized.store(true, std::memory_order_release);
}

int driver_version() {
    int v = 0;
    check(sym::cuDriverGetVersion()(&v), "cuDriverGetVersion");
    return v;
}

int device_count() {
    try {
        ensure_initialized();
    } catch (const CudaError &e) {
        if (e.code() == cu::ERROR_NO_DEVICE)
            return 0;
        throw;
    }
    int n = 0;
    check(sym::cuDeviceGetCount()(&n), "cuDeviceGetCount");
    return n;
}

double DeviceProperties::peak_bandwidth_gbs() const {
    return 2.0 * double(memory_clock_khz) * 1e3 * double(memory_bus_width) / 8.0 / 1e9;
}

std::string DeviceProperties::repr() const {
    char bandwidth[32];
    std::snprintf(bandwidth, sizeof(bandwidth), "%.1f", peak_bandwidth_gbs());
    return "DeviceProperties(index=" + std::to_string(index) + ", name='" + name +
           "', cc=" + std::to_string(major) + "." + std::to_string(minor) +
           ", sm_count=" + std::to_string(sm_count) +
           ", total_memory=" + std::to_string(total_memory) +
           ", shared_mem_per_block_optin=" + std::to_string(shared_mem_per_block_optin) +
           ", peak_bandwidth_gbs=" + bandwidth + ")";
}

namespace {

CUdevice device_handle(int index) {
    ensure_initialized();
    int n = 0;
    check(sym::cuDeviceGetCount()(&n), "cuDeviceGetCount");
    if (index < 0 || index >= n)
        throw make_error(cu::ERROR_INVALID_DEVICE,
                         "device index " + std::to_string(index) + " is out of range: " +
                             std::to_string(n) + " CUDA device(s) visible");
    CUdevice dev = 0;
    check(sym::cuDeviceGet()(&dev, index), "cuDeviceGet");
    return dev;
}

int attribute(CUdevice dev, int attr, const char *what) {
    int value = 0;
    CUresult r = sym::cuDeviceGetAttribute()(&value, attr, dev);
    if (r != cu::SUCCESS)
        check(r, (std::string("cuDeviceGetAttribute(") + what + ")").c_str());
    return value;
}

// Attributes that newer drivers may retire; 0 means "unknown".
int attribute_or_zero(CUdevice dev, int attr) {
    int value = 0;
    return sym::cuDeviceGetAttribute()(&value, attr, dev) == cu::SUCCESS ? value : 0;
}

DeviceProperties query_properties(int index) {
    CUdevice dev = device_handle(index);
    DeviceProperties p;
    p.index = index;
    char name[256] = {0};
    check(sym::cuDeviceGetName()(name, sizeof(name) - 1, dev), "cuDeviceGetName");
    p.name = name;
    p.major = attribute(dev, cu::DEV_COMPUTE_CAPABILITY_MAJOR, "COMPUTE_CAPABILITY_MAJOR");
    p.minor = attribute(dev, cu::DEV_COMPUTE_CAPABILITY_MINOR, "COMPUTE_CAPABILITY_MINOR");
    p.sm_count = attribute(dev, cu::DEV_MULTIPROCESSOR_COUNT, "MULTIPROCESSOR_COUNT");
    p.max_threads_per_block =
        attribute(dev, cu::DEV_MAX_THREADS_PER_BLOCK, "MAX_THREADS_PER_BLOCK");
    p.max_threads_per_sm =
        attribute(dev, cu::DEV_MAX_THREADS_PER_MULTIPROCESSOR, "MAX_THREADS_PER_MULTIPROCESSOR");
    p.max_blocks_per_sm =
        attribute(dev, cu::DEV_MAX_BLOCKS_PER_MULTIPROCESSOR, "MAX_BLOCKS_PER_MULTIPROCESSOR");
    p.warp_size = attribute(dev, cu::DEV_WARP_SIZE, "WARP_SIZE");
    const int block_attrs[3] = {cu::DEV_MAX_BLOCK_DIM_X, cu::DEV_MAX_BLOCK_DIM_Y,
                                cu::DEV_MAX_BLOCK_DIM_Z};
    const int grid_attrs[3] = {cu::DEV_MAX_GRID_DIM_X, cu::DEV_MAX_GRID_DIM_Y,
                               cu::DEV_MAX_GRID_DIM_Z};
    for (int i = 0; i < 3; ++i) {
        p.max_block_dim[i] = attribute(dev, block_attrs[i], "MAX_BLOCK_DIM");
        p.max_grid_dim[i] = attribute(dev, grid_attrs[i], "MAX_GRID_DIM");
    }
    p.shared_mem_per_block =
        attribute(dev, cu::DEV_MAX_SHARED_MEMORY_PER_BLOCK, "MAX_SHARED_MEMORY_PER_BLOCK");
    p.shared_mem_per_block_optin = attribute(dev, cu::DEV_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                                             "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN");
    p.shared_mem_per_sm = attribute(dev, cu::DEV_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR,
                                    "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR");
    p.regs_per_block =
        attribute(dev, cu::DEV_MAX_REGISTERS_PER_BLOCK, "MAX_REGISTERS_PER_BLOCK");
    p.regs_per_sm =
        attribute(dev, cu::DEV_MAX_REGISTERS_PER_MULTIPROCESSOR, "MAX_REGISTERS_PER_MULTIPROCESSOR");
    p.l2_cache_bytes = attribute(dev, cu::DEV_L2_CACHE_SIZE, "L2_CACHE_SIZE");
    p.clock_khz = attribute_or_zero(dev, cu::DEV_CLOCK_RATE);
    p.memory_clock_khz = attribute_or_zero(dev, cu::DEV_MEMORY_CLOCK_RATE);
    p.memory_bus_width = attribute_or_zero(dev, cu::DEV_GLOBAL_MEMORY_BUS_WIDTH);
    size_t total = 0;
    check(sym::cuDeviceTotalMem()(&total, dev), "cuDeviceTotalMem");
    p.total_memory = int64_t(total);
    return p;
}

std::mutex g_devices_mutex;
// Leaked on purpose: contexts and cached properties live until the process exits, because
// releasing a primary context during static destruction races the driver's own teardown.
auto *g_properties = new std::map<int, std::unique_ptr<DeviceProperties>>();
auto *g_contexts = new std::map<int, std::unique_ptr<PrimaryContext>>();

}  // namespace

const DeviceProperties &device_properties(int index) {
    {
        std::lock_guard<std::mutex> lock(g_devices_mutex);
        auto it = g_properties->find(index);
        if (it != g_properties->end())
            return *it->second;
    }
    auto props = std::make_unique<DeviceProperties>(query_properties(index));
    std::lock_guard<std::mutex> lock(g_devices_mutex);
    auto &slot = (*g_properties)[index];
    if (!slot)
        slot = std::move(props);
    return *slot;
}

PrimaryContext::PrimaryContext(int index) : device_(device_handle(index)) {
    check(sym::cuDevicePrimaryCtxRetain()(&ctx_, device_), "cuDevicePrimaryCtxRetain");
}

PrimaryContext::~PrimaryContext() {
    if (ctx_)
        sym::cuDevicePrimaryCtxRelease()(device_);  // nothing useful to do with a failure here
}

void make_current(int index) {
    CUcontext ctx = nullptr;
    {
        std::lock_guard<std::mutex> lock(g_devices_mutex);
        auto it = g_contexts->find(index);
        if (it != g_contexts->end())
            ctx = it->second->get();
    }
    if (!ctx) {
        auto retained = std::make_unique<PrimaryContext>(index);
        std::lock_guard<std::mutex> lock(g_devices_mutex);
        auto &slot = (*g_contexts)[index];
        if (!slot)
            slot = std::move(retained);
        ctx = slot->get();
    }
    CUcontext current = nullptr;
    check(sym::cuCtxGetCurrent()(&current), "cuCtxGetCurrent");
    if (current != ctx)
        check(sym::cuCtxSetCurrent()(ctx), "cuCtxSetCurrent");
}

int current_device() {
    ensure_initialized();
    CUcontext current = nullptr;
    check(sym::cuCtxGetCurrent()(&current), "cuCtxGetCurrent");
    if (!current)
        return 0;
    CUdevice dev = 0;
    check(sym::cuCtxGetDevice()(&dev), "cuCtxGetDevice");
    return int(dev);
}

void synchronize(int index) {
    make_current(index);
    check(sym::cuCtxSynchronize()(), "cuCtxSynchronize");
}

}  // namespace driver
}  // namespace kfuse

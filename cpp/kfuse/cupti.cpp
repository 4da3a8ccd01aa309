// kfuse/cupti.cpp: dlopen of libcupti on first use, its symbol table, and CUPTI error text.
#include "cupti.h"

#include <dlfcn.h>

#include <atomic>
#include <mutex>

namespace kfuse {
namespace cupti {
namespace {

constexpr const char *kDefaultLibrary = "libcupti.so";
constexpr const char *kHowToInstall =
    "Install CUPTI (pip install 'nvidia-cuda-cupti==13.0.*', or a CUDA toolkit), or set "
    "KFUSE_CUPTI_LIBRARY to the full path of libcupti.so.";

std::mutex g_mutex;
std::string g_requested_path;
std::string g_loaded_path;
std::atomic<void *> g_handle{nullptr};

void *library_handle() {
    void *handle = g_handle.load(std::memory_order_acquire);
    if (handle)
        return handle;
    std::lock_guard<std::mutex> lock(g_mutex);
    handle = g_handle.load(std::memory_order_acquire);
    if (handle)
        return handle;
    std::string path = g_requested_path.empty() ? kDefaultLibrary : g_requested_path;
    handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        const char *why = dlerror();
        throw ProfilerError("cannot load CUPTI from '" + path + "' (" +
                            (why ? why : "unknown dlopen error") + "). " + kHowToInstall);
    }
    g_loaded_path = path;
    g_handle.store(handle, std::memory_order_release);
    return handle;
}

void *resolve(const char *symbol) {
    void *fn = dlsym(library_handle(), symbol);
    if (!fn)
        throw ProfilerError(std::string("the CUPTI library '") + loaded_library() + "' lacks " +
                            symbol + "; it is too old or not CUPTI. " + kHowToInstall);
    return fn;
}

const char *fallback_name(CUptiResult result) {
    switch (result) {
        case SUCCESS: return "CUPTI_SUCCESS";
        case ERROR_NOT_INITIALIZED: return "CUPTI_ERROR_NOT_INITIALIZED";
        case ERROR_INSUFFICIENT_PRIVILEGES: return "CUPTI_ERROR_INSUFFICIENT_PRIVILEGES";
        case ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED:
            return "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED";
        default: return "CUPTI error";
    }
}

}  // namespace

void set_library(const std::string &path) {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (g_handle.load(std::memory_order_acquire)) {
        if (path != g_loaded_path)
            throw ProfilerError("CUPTI is already loaded from '" + g_loaded_path +
                                "'; cannot switch to '" + path + "'");
        return;
    }
    g_requested_path = path;
}

std::string loaded_library() {
    std::lock_guard<std::mutex> lock(g_mutex);
    return g_loaded_path;
}

void ensure_loaded() { library_handle(); }

namespace sym {
#define KFUSE_DEFINE_CUPTI_FN(name, params)                                           \
    name##_fn name() {                                                                \
        static std::atomic<void *> fn{nullptr};                                       \
        void *p = fn.load(std::memory_order_acquire);                                 \
        if (!p) {                                                                     \
            p = resolve(#name);                                                       \
            fn.store(p, std::memory_order_release);                                   \
        }                                                                             \
        return reinterpret_cast<name##_fn>(p);                                        \
    }
KFUSE_CUPTI_API(KFUSE_DEFINE_CUPTI_FN)
#undef KFUSE_DEFINE_CUPTI_FN
}  // namespace sym

std::string result_text(CUptiResult result) {
    std::string text = fallback_name(result);
    try {
        const char *s = nullptr;
        if (sym::cuptiGetResultString()(result, &s) == SUCCESS && s)
            text = s;
    } catch (const ProfilerError &) {
        // no library: the fallback name is all there is
    }
    return text + " (" + std::to_string(result) + ")";
}

void check(CUptiResult result, const char *call) {
    if (result != SUCCESS)
        throw ProfilerError(std::string(call) + " failed: " + result_text(result));
}

}  // namespace cupti
}  // namespace kfuse

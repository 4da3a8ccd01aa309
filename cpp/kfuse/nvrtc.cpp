// kfuse/nvrtc.cpp: dlopen of libnvrtc on first use, compilation, and readable compile errors.
#include "nvrtc.h"

#include <dlfcn.h>

#include <atomic>
#include <mutex>

namespace kfuse {
namespace nvrtc {
namespace {

struct Api {
#define KFUSE_NVRTC_MEMBER(ret, name, params) ret(*name) params = nullptr;
    KFUSE_NVRTC_API(KFUSE_NVRTC_MEMBER)
#undef KFUSE_NVRTC_MEMBER
};

std::mutex g_mutex;
std::function<std::string()> g_resolver;
std::string g_requested_path;  // from set_library
std::string g_loaded_path;
Api g_api;
std::atomic<bool> g_loaded{false};

const char *kHowToInstall =
    "Install the NVRTC wheel (pip install 'nvidia-cuda-nvrtc==13.0.*') or a CUDA toolkit, or "
    "set KFUSE_NVRTC_LIBRARY to the full path of libnvrtc.so.";

void load_locked(const std::string &path) {
    void *handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        const char *why = dlerror();
        throw CompileError("cannot load NVRTC from '" + path + "' (" +
                               (why ? why : "unknown dlopen error") + "). " + kHowToInstall,
                           "", "");
    }
    Api api;
#define KFUSE_NVRTC_RESOLVE(ret, name, params)                                               \
    api.name = reinterpret_cast<ret(*) params>(dlsym(handle, #name));                         \
    if (!api.name) {                                                                          \
        dlclose(handle);                                                                      \
        throw CompileError("the NVRTC library '" + path + "' lacks " #name                   \
                           "; it is too old or not NVRTC. " + kHowToInstall, "", "");         \
    }
    KFUSE_NVRTC_API(KFUSE_NVRTC_RESOLVE)
#undef KFUSE_NVRTC_RESOLVE
    g_api = api;
    g_loaded_path = path;
    g_loaded.store(true, std::memory_order_release);
}

const Api &api() {
    ensure_loaded();
    return g_api;
}

std::string result_text(nvrtcResult r) {
    const char *s = g_api.nvrtcGetErrorString ? g_api.nvrtcGetErrorString(r) : nullptr;
    return s ? std::string(s) : "NVRTC error " + std::to_string(r);
}

void check(nvrtcResult r, const char *call) {
    if (r != 0)
        throw CompileError(std::string(call) + " failed: " + result_text(r), "", "");
}

// Destroys the program on every path out of compile_to_cubin.
struct Program {
    nvrtcProgram handle = nullptr;
    ~Program() {
        if (handle)
            g_api.nvrtcDestroyProgram(&handle);
    }
};

}  // namespace

void set_library(const std::string &path) {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (g_loaded.load(std::memory_order_acquire)) {
        if (path != g_loaded_path)
            throw std::invalid_argument("NVRTC is already loaded from '" + g_loaded_path +
                                        "'; cannot switch to '" + path + "'");
        return;
    }
    g_requested_path = path;
}

void set_library_resolver(std::function<std::string()> resolver) {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_resolver = std::move(resolver);
}

void ensure_loaded() {
    if (g_loaded.load(std::memory_order_acquire))
        return;
    std::string path;
    std::function<std::string()> resolver;
    {
        std::lock_guard<std::mutex> lock(g_mutex);
        path = g_requested_path;
        resolver = g_resolver;
    }
    if (path.empty() && resolver)
        path = resolver();  // may run Python; no lock held
    if (path.empty())
        throw CompileError(std::string("NVRTC was not found. ") + kHowToInstall, "", "");
    std::lock_guard<std::mutex> lock(g_mutex);
    if (!g_loaded.load(std::memory_order_acquire))
        load_locked(path);
}

std::string loaded_library() {
    std::lock_guard<std::mutex> lock(g_mutex);
    return g_loaded_path;
}

std::pair<int, int> version() {
    int major = 0, minor = 0;
    check(api().nvrtcVersion(&major, &minor), "nvrtcVersion");
    return {major, minor};
}

std::vector<int> supported_archs() {
    int n = 0;
    check(api().nvrtcGetNumSupportedArchs(&n), "nvrtcGetNumSupportedArchs");
    std::vector<int> archs(size_t(n > 0 ? n : 0));
    if (n > 0)
        check(api().nvrtcGetSupportedArchs(archs.data()), "nvrtcGetSupportedArchs");
    return archs;
}

std::string arch_for(int major, int minor) {
    int wanted = major * 10 + minor, best = -1;
    for (int a : supported_archs())
        if (a / 10 == major && a <= wanted && a > best)
            best = a;
    if (best < 0) {
        auto v = version();
        throw CompileError("NVRTC " + std::to_string(v.first) + "." + std::to_string(v.second) +
                               " cannot compile for compute capability " +
                               std::to_string(major) + "." + std::to_string(minor) +
                               "; use an NVRTC that supports it. " + kHowToInstall,
                           "", "");
    }
    return "sm_" + std::to_string(best);
}

std::string number_lines(const std::string &source) {
    std::string out;
    size_t start = 0;
    for (int n = 1; start < source.size(); ++n) {
        size_t end = source.find('\n', start);
        if (end == std::string::npos)
            end = source.size();
        std::string number = std::to_string(n);
        out += std::string(number.size() < 4 ? 4 - number.size() : 0, ' ') + number + " | " +
               source.substr(start, end - start) + "\n";
        start = end + 1;
    }
    return out;
}

namespace {

enum class Output { cubin, ptx };

// Compiles `source` with --gpu-architecture=`arch` and `options`, and returns the program's
// cubin or PTX. Throws CompileError with the log and numbered source.
std::string compile(const std::string &source, const std::string &name, const std::string &arch,
                    const std::vector<std::string> &options, const Headers &headers,
                    Output output) {
    const Api &nv = api();
    Program program;
    std::vector<const char *> header_names, header_texts;
    for (const auto &h : headers) {
        header_names.push_back(h.first.c_str());
        header_texts.push_back(h.second.c_str());
    }
    check(nv.nvrtcCreateProgram(&program.handle, source.c_str(), name.c_str(),
                                int(headers.size()), header_texts.data(), header_names.data()),
          "nvrtcCreateProgram");
    std::vector<std::string> all = {"--gpu-architecture=" + arch};
    all.insert(all.end(), options.begin(), options.end());
    std::vector<const char *> argv;
    for (const auto &o : all)
        argv.push_back(o.c_str());
    nvrtcResult result = nv.nvrtcCompileProgram(program.handle, int(argv.size()), argv.data());

    size_t log_size = 0;
    std::string log;
    if (nv.nvrtcGetProgramLogSize(program.handle, &log_size) == 0 && log_size > 1) {
        log.resize(log_size);
        if (nv.nvrtcGetProgramLog(program.handle, &log[0]) != 0)
            log.clear();
        while (!log.empty() && (log.back() == '\0' || log.back() == '\n'))
            log.pop_back();
    }
    if (result != 0) {
        std::string msg = "NVRTC failed to compile '" + name + "' for " + arch + ": " +
                          result_text(result) + "\noptions:";
        for (const auto &o : all)
            msg += " " + o;
        msg += "\n--- log ---\n" + log + "\n--- source ---\n" + number_lines(source);
        throw CompileError(msg, log, source);
    }
    size_t size = 0;
    std::string text;
    if (output == Output::cubin) {
        check(nv.nvrtcGetCUBINSize(program.handle, &size), "nvrtcGetCUBINSize");
        text.assign(size, '\0');
        check(nv.nvrtcGetCUBIN(program.handle, &text[0]), "nvrtcGetCUBIN");
    } else {
        check(nv.nvrtcGetPTXSize(program.handle, &size), "nvrtcGetPTXSize");
        text.assign(size, '\0');
        check(nv.nvrtcGetPTX(program.handle, &text[0]), "nvrtcGetPTX");
        while (!text.empty() && text.back() == '\0')  // the size counts the terminator
            text.pop_back();
    }
    return text;
}

}  // namespace

std::string compile_to_cubin(const std::string &source, const std::string &name,
                             const std::string &arch, const std::vector<std::string> &options,
                             const Headers &headers) {
    if (arch.rfind("sm_", 0) != 0)
        throw std::invalid_argument("arch must be a real architecture such as 'sm_90' (a cubin "
                                    "needs one), got '" + arch + "'");
    return compile(source, name, arch, options, headers, Output::cubin);
}

std::string compile_to_ptx(const std::string &source, const std::string &name,
                           const std::string &arch, const std::vector<std::string> &options,
                           const Headers &headers) {
    if (arch.rfind("sm_", 0) != 0 && arch.rfind("compute_", 0) != 0)
        throw std::invalid_argument("arch must be an architecture such as 'sm_90' or "
                                    "'compute_90', got '" + arch + "'");
    return compile(source, name, arch, options, headers, Output::ptx);
}

}  // namespace nvrtc
}  // namespace kfuse

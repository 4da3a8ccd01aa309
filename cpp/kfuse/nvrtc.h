// kfuse/nvrtc.h: the lazily loaded NVRTC library; CUDA C++ source -> cubin.
#pragma once

#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace kfuse {

// NVRTC could not compile a program, or could not be loaded. `log` is NVRTC's log (empty
// when the library itself is the problem); the message carries it with the numbered source.
class CompileError : public std::runtime_error {
public:
    CompileError(const std::string &message, std::string log, std::string source)
        : std::runtime_error(message), log_(std::move(log)), source_(std::move(source)) {}
    const std::string &log() const { return log_; }
    const std::string &source() const { return source_; }

private:
    std::string log_;
    std::string source_;
};

namespace nvrtc {

using nvrtcResult = int;
using nvrtcProgram = struct _nvrtcProgram *;

// Every NVRTC entry point kfuse calls: X(return type, name, parameter list).
#define KFUSE_NVRTC_API(X)                                                                    \
    X(const char *, nvrtcGetErrorString, (nvrtcResult))                                       \
    X(nvrtcResult, nvrtcVersion, (int *, int *))                                              \
    X(nvrtcResult, nvrtcGetNumSupportedArchs, (int *))                                        \
    X(nvrtcResult, nvrtcGetSupportedArchs, (int *))                                           \
    X(nvrtcResult, nvrtcCreateProgram,                                                        \
      (nvrtcProgram *, const char *, const char *, int, const char *const *,                  \
       const char *const *))                                                                  \
    X(nvrtcResult, nvrtcDestroyProgram, (nvrtcProgram *))                                     \
    X(nvrtcResult, nvrtcCompileProgram, (nvrtcProgram, int, const char *const *))             \
    X(nvrtcResult, nvrtcGetProgramLogSize, (nvrtcProgram, size_t *))                          \
    X(nvrtcResult, nvrtcGetProgramLog, (nvrtcProgram, char *))                                \
    X(nvrtcResult, nvrtcGetCUBINSize, (nvrtcProgram, size_t *))                               \
    X(nvrtcResult, nvrtcGetCUBIN, (nvrtcProgram, char *))                                     \
    X(nvrtcResult, nvrtcGetPTXSize, (nvrtcProgram, size_t *))                                 \
    X(nvrtcResult, nvrtcGetPTX, (nvrtcProgram, char *))

// Sets the libnvrtc to load. Only possible before the library is loaded (an error after,
// unless it is the same path).
void set_library(const std::string &path);

// Called (without locks held) when NVRTC is first needed and no path was set; the bindings
// install one that asks kfuse.nvrtc_loader (cuda.pathfinder, KFUSE_NVRTC_LIBRARY).
void set_library_resolver(std::function<std::string()> resolver);

// Loads the library now if it is not loaded yet (throws CompileError when it cannot).
void ensure_loaded();
std::string loaded_library();  // "" before the library is loaded

std::pair<int, int> version();
std::vector<int> supported_archs();  // e.g. {75, 80, 86, 89, 90, ...}

// Headers a program may #include by name: (include name, text), handed to NVRTC in memory.
using Headers = std::vector<std::pair<std::string, std::string>>;

// Compiles `source` for `arch` ("sm_80", "sm_90a", ...) to a cubin. `name` is the program
// name NVRTC uses in its messages. Throws CompileError with the log and numbered source.
std::string compile_to_cubin(const std::string &source, const std::string &name,
                             const std::string &arch, const std::vector<std::string> &options,
                             const Headers &headers = {});

// The PTX NVRTC makes of `source` on its way to the cubin: the same compile as
// compile_to_cubin's for the same arguments (a virtual "compute_XY" arch is accepted too).
std::string compile_to_ptx(const std::string &source, const std::string &name,
                           const std::string &arch, const std::vector<std::string> &options,
                           const Headers &headers = {});

// "sm_XY" for a device of compute capability major.minor, or the newest architecture NVRTC
// knows with the same major version (a cubin runs on later minors of its major).
std::string arch_for(int major, int minor);

// Source with line numbers, as used in CompileError messages.
std::string number_lines(const std::string &source);

}  // namespace nvrtc
}  // namespace kfuse

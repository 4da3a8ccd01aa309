// kfuse/kernel_executor.h: compile a raw CUDA kernel once, then run it on any device's inputs.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "compile_params.h"
#include "kernel.h"
#include "launch_params.h"

namespace kfuse {

// Holds one kernel's source and cubin; loads a module per device on first use there.
// Launch dimensions come from the constraints given to compile(), overridden field by field
// by those given to run().
class KernelExecutor {
public:
    // Options every kfuse compilation gets before CompileParams' own (see INTERFACES.md).
    static std::vector<std::string> default_options();

    void compile(const std::string &source, const std::string &kernel_name,
                 const std::optional<LaunchParams> &launch_constraints,
                 const std::optional<CompileParams> &compile_params);

    void run(const std::vector<KernelArg> &args,
             const std::optional<LaunchParams> &launch_constraints, uintptr_t stream);

    bool is_compiled() const { return !cubin_.empty(); }
    const std::string &kernel_name() const { return kernel_name_; }
    const std::string &source() const { return source_; }
    const std::string &cubin() const { return cubin_; }
    const std::string &arch() const { return arch_; }
    const LaunchParams &launch_constraints() const { return launch_constraints_; }
    const CompileParams &compile_params() const { return compile_params_; }

    // The kernel loaded (lazily) on `device`.
    Kernel &kernel(int device);

private:
    void require_compiled() const;

    std::string source_, kernel_name_, cubin_, arch_;
    LaunchParams launch_constraints_;
    CompileParams compile_params_;
    std::mutex mutex_;
    std::map<int, std::unique_ptr<Kernel>> kernels_;
};

}  // namespace kfuse

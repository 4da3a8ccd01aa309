// kfuse/kernel_executor.cpp: NVRTC compile with kfuse's options, device choice, launch.
#include "kernel_executor.h"

#include <stdexcept>

#include "nvrtc.h"

namespace kfuse {

std::vector<std::string> KernelExecutor::default_options() {
    return {"--std=c++17", "-DKFUSE_USE_PTX"};
}

void KernelExecutor::compile(const std::string &source, const std::string &kernel_name,
                             const std::optional<LaunchParams> &launch_constraints,
                             const std::optional<CompileParams> &compile_params) {
    if (kernel_name.empty())
        throw std::invalid_argument("KernelExecutor.compile: kernel_name must not be empty");
    LaunchParams lp = launch_constraints.value_or(LaunchParams{});
    CompileParams cp = compile_params.value_or(CompileParams{});
    lp.validate();
    cp.validate();
    std::string arch;
    if (cp.arch) {
        arch = *cp.arch;
    } else {
        const auto &dev = driver::device_properties(driver::current_device());
        arch = nvrtc::arch_for(dev.major, dev.minor);
    }
    std::vector<std::string> options = default_options();
    for (auto &o : cp.nvrtc_options())
        options.push_back(o);
    std::string cubin = nvrtc::compile_to_cubin(source, kernel_name + ".cu", arch, options);

    std::lock_guard<std::mutex> lock(mutex_);
    source_ = source;
    kernel_name_ = kernel_name;
    cubin_ = std::move(cubin);
    arch_ = arch;
    launch_constraints_ = lp;
    compile_params_ = cp;
    kernels_.clear();
}

void KernelExecutor::require_compiled() const {
    if (!is_compiled())
        throw std::runtime_error("KernelExecutor: call compile() before run()");
}

Kernel &KernelExecutor::kernel(int device) {
    require_compiled();
    std::lock_guard<std::mutex> lock(mutex_);
    auto &slot = kernels_[device];
    if (!slot)
        slot = std::make_unique<Kernel>(cubin_, kernel_name_, device);
    return *slot;
}

void KernelExecutor::run(const std::vector<KernelArg> &args,
                         const std::optional<LaunchParams> &launch_constraints,
                         uintptr_t stream) {
    require_compiled();
    LaunchParams lp = launch_constraints_;
    if (launch_constraints) {
        launch_constraints->validate();
        lp = lp.merged_with(*launch_constraints);
    }
    if (!lp.grid_x || !lp.block_x)
        throw std::invalid_argument("KernelExecutor.run: the launch needs grid_x and block_x; "
                                    "give them in launch_constraints to compile() or run(), "
                                    "got " + lp.repr());
    // The kernel runs where its tensors are; all of them must agree.
    int device = -1;
    for (size_t i = 0; i < args.size(); ++i) {
        if (args[i].kind != KernelArg::Kind::Tensor || args[i].device_type == 1 ||
            args[i].device_id < 0)
            continue;  // not a device tensor, or a descriptor whose device is unknown
        if (device < 0)
            device = args[i].device_id;
        else if (device != args[i].device_id)
            throw std::invalid_argument("KernelExecutor.run: argument " + std::to_string(i) +
                                        " is on CUDA device " +
                                        std::to_string(args[i].device_id) +
                                        " but an earlier one is on device " +
                                        std::to_string(device));
    }
    if (device < 0)
        device = driver::current_device();
    kernel(device).launch(lp.grid(), lp.block(), lp.shared_mem, stream, args);
}

}  // namespace kfuse

// kfuse/kernel.cpp: module loading, launch checks, argument packing by parameter size, launch.
#include "kernel.h"

#include <cstring>
#include <limits>
#include <stdexcept>

namespace kfuse {
namespace {

std::string dims(const std::array<int64_t, 3> &d) {
    return "(" + std::to_string(d[0]) + ", " + std::to_string(d[1]) + ", " +
           std::to_string(d[2]) + ")";
}

int func_attribute(CUfunction f, int attr, const char *what) {
    int v = 0;
    driver::check(driver::sym::cuFuncGetAttribute()(&v, attr, f),
                  (std::string("cuFuncGetAttribute(") + what + ")").c_str());
    return v;
}

}  // namespace

Kernel::Kernel(std::string cubin, std::string kernel_name, int device)
    : cubin_(std::move(cubin)), name_(std::move(kernel_name)), device_(device) {
    if (cubin_.size() < 4 || std::memcmp(cubin_.data(), "\x7f" "ELF", 4) != 0)
        throw std::invalid_argument("Kernel: cubin is not an ELF image (" +
                                    std::to_string(cubin_.size()) + " bytes)");
    if (device < 0)
        throw std::invalid_argument("Kernel: device must be >= 0, got " + std::to_string(device));
}

Kernel::~Kernel() {
    if (loaded_ && loaded_->module) {
        // Unloading needs the device's context current; failures (e.g. the driver already
        // shutting down at exit) are ignored because nothing can be done about them here.
        try {
            driver::make_current(device_);
            driver::sym::cuModuleUnload()(loaded_->module);
        } catch (...) {
        }
    }
}

Kernel::Loaded &Kernel::loaded() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (loaded_)
        return *loaded_;
    driver::make_current(device_);
    auto l = std::make_unique<Loaded>();
    driver::check(driver::sym::cuModuleLoadData()(&l->module, cubin_.data()),
                  ("cuModuleLoadData(kernel '" + name_ + "')").c_str());
    CUresult r = driver::sym::cuModuleGetFunction()(&l->function, l->module, name_.c_str());
    if (r != cu::SUCCESS) {
        driver::sym::cuModuleUnload()(l->module);
        driver::check(r, ("cuModuleGetFunction('" + name_ +
                          "'; is the kernel extern \"C\" and named so?)").c_str());
    }
    for (size_t i = 0;; ++i) {
        size_t offset = 0, size = 0;
        CUresult pr = driver::sym::cuFuncGetParamInfo()(l->function, i, &offset, &size);
        if (pr == cu::ERROR_INVALID_VALUE)
            break;  // past the last parameter
        driver::check(pr, "cuFuncGetParamInfo");
        l->param_sizes.push_back(size);
    }
    l->num_regs = func_attribute(l->function, cu::FUNC_NUM_REGS, "NUM_REGS");
    l->static_shared_mem =
        func_attribute(l->function, cu::FUNC_SHARED_SIZE_BYTES, "SHARED_SIZE_BYTES");
    l->local_mem = func_attribute(l->function, cu::FUNC_LOCAL_SIZE_BYTES, "LOCAL_SIZE_BYTES");
    // The default is 48 KB less the static shared memory, not 48 KB: read it rather than
    // assume it (a kernel with 2 KB static and 48 KB dynamic needs the attribute raised).
    l->dynamic_smem_limit = func_attribute(l->function, cu::FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                           "MAX_DYNAMIC_SHARED_SIZE_BYTES");
    l->max_threads_per_block =
        func_attribute(l->function, cu::FUNC_MAX_THREADS_PER_BLOCK, "MAX_THREADS_PER_BLOCK");
    loaded_ = std::move(l);
    return *loaded_;
}

int Kernel::num_regs() { return loaded().num_regs; }
int Kernel::static_shared_mem() { return loaded().static_shared_mem; }
int Kernel::local_mem() { return loaded().local_mem; }
int Kernel::max_threads_per_block() { return loaded().max_threads_per_block; }
const std::vector<size_t> &Kernel::param_sizes() { return loaded().param_sizes; }

void Kernel::check_config(const Loaded &l, const std::array<int64_t, 3> &grid,
                          const std::array<int64_t, 3> &block, int64_t shared_mem) const {
    const auto &dev = driver::device_properties(device_);
    auto fail = [&](const std::string &what) {
        throw driver::make_error(cu::ERROR_INVALID_VALUE,
                                 "invalid launch of kernel '" + name_ + "' on device " +
                                     std::to_string(device_) + " (" + dev.name + "): " + what);
    };
    const char *axis = "xyz";
    for (int i = 0; i < 3; ++i) {
        if (grid[i] < 1 || grid[i] > dev.max_grid_dim[i])
            fail("grid " + dims(grid) + ": grid." + axis[i] + " must be in [1, " +
                 std::to_string(dev.max_grid_dim[i]) + "]");
        if (block[i] < 1 || block[i] > dev.max_block_dim[i])
            fail("block " + dims(block) + ": block." + axis[i] + " must be in [1, " +
                 std::to_string(dev.max_block_dim[i]) + "]");
    }
    int64_t threads = block[0] * block[1] * block[2];
    if (threads > l.max_threads_per_block)
        fail("block " + dims(block) + " has " + std::to_string(threads) +
             " threads; this kernel allows at most " + std::to_string(l.max_threads_per_block) +
             " (device limit " + std::to_string(dev.max_threads_per_block) + ", " +
             std::to_string(l.num_regs) + " registers per thread)");
    if (shared_mem < 0)
        fail("shared_mem must be >= 0, got " + std::to_string(shared_mem));
    if (shared_mem + l.static_shared_mem > dev.shared_mem_per_block_optin)
        fail(std::to_string(shared_mem) + " bytes of dynamic shared memory plus " +
             std::to_string(l.static_shared_mem) + " static exceed the device's " +
             std::to_string(dev.shared_mem_per_block_optin) + " bytes per block");
}

void Kernel::pack(const Loaded &l, const std::vector<KernelArg> &args,
                  std::vector<uint64_t> &storage, std::vector<void *> &pointers) const {
    const auto &sizes = l.param_sizes;
    if (args.size() != sizes.size())
        throw std::invalid_argument("kernel '" + name_ + "' takes " +
                                    std::to_string(sizes.size()) + " parameters, got " +
                                    std::to_string(args.size()) + " arguments");
    std::vector<size_t> offsets(sizes.size());
    size_t words = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
        offsets[i] = words;
        words += (sizes[i] + 7) / 8;
    }
    storage.assign(words, 0);
    pointers.resize(sizes.size());
    char *base = reinterpret_cast<char *>(storage.data());

    for (size_t i = 0; i < args.size(); ++i) {
        const KernelArg &a = args[i];
        const size_t S = sizes[i];
        char *dst = base + offsets[i] * 8;
        pointers[i] = dst;
        auto bad = [&](const std::string &what) {
            throw std::invalid_argument("kernel '" + name_ + "' parameter " + std::to_string(i) +
                                        " (" + std::to_string(S) + " bytes): " + what);
        };
        switch (a.kind) {
            case KernelArg::Kind::Tensor: {
                if (a.device_type != 2 && a.device_type != 13)
                    bad("the array is not in CUDA device memory (DLPack device type " +
                        std::to_string(a.device_type) + ")");
                if (a.device_id >= 0 && a.device_id != device_)
                    bad("the array is on CUDA device " + std::to_string(a.device_id) +
                        " but the kernel runs on device " + std::to_string(device_));
                const size_t N = size_t(a.ndim);
                std::memcpy(dst, &a.data, 8);
                if (S == 8)
                    break;
                if (S == 8 + 8 * N) {
                    int32_t idx[2 * KernelArg::kMaxRank];
                    for (size_t d = 0; d < N; ++d) {
                        if (!fits_int32(a.shape[d]) || !fits_int32(a.stride[d]))
                            bad("the array's sizes or strides do not fit the kernel's 32-bit "
                                "index type; compile with index_type='int64'");
                        idx[d] = int32_t(a.shape[d]);
                        idx[N + d] = int32_t(a.stride[d]);
                    }
                    std::memcpy(dst + 8, idx, 8 * N);
                } else if (S == 8 + 16 * N) {
                    std::memcpy(dst + 8, a.shape, 8 * N);
                    std::memcpy(dst + 8 + 8 * N, a.stride, 8 * N);
                } else {
                    bad("got a rank-" + std::to_string(N) + " array; expected a pointer (8 "
                        "bytes) or a Tensor of that rank (" + std::to_string(8 + 8 * N) +
                        " bytes with int indices, " + std::to_string(8 + 16 * N) +
                        " with long long)");
                }
                break;
            }
            case KernelArg::Kind::Bool:
                if (S != 1)
                    bad("got a bool, which needs a 1-byte parameter");
                write_scalar(dst, a.kind, S, a.b, a.i, a.f);
                break;
            case KernelArg::Kind::Int:
                if (S != 4 && S != 8)
                    bad("got an int, which needs a 4- or 8-byte parameter");
                if (S == 4 && !fits_int32(a.i))
                    bad(std::to_string(a.i) + " does not fit the 32-bit int parameter");
                write_scalar(dst, a.kind, S, a.b, a.i, a.f);
                break;
            case KernelArg::Kind::Float:
                if (S != 4 && S != 8)
                    bad("got a float, which needs a 4- or 8-byte parameter");
                write_scalar(dst, a.kind, S, a.b, a.i, a.f);
                break;
        }
    }
}

Kernel::Loaded &Kernel::prepare(const std::array<int64_t, 3> &grid,
                                const std::array<int64_t, 3> &block, int64_t shared_mem) {
    Loaded &l = loaded();
    check_config(l, grid, block, shared_mem);
    if (shared_mem > l.dynamic_smem_limit) {
        driver::make_current(device_);
        driver::check(driver::sym::cuFuncSetAttribute()(
                          l.function, cu::FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES, int(shared_mem)),
                      ("cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES, kernel '" + name_ +
                       "')").c_str());
        l.dynamic_smem_limit = shared_mem;
    }
    return l;
}

void Kernel::launch(const std::array<int64_t, 3> &grid, const std::array<int64_t, 3> &block,
                    int64_t shared_mem, uintptr_t stream, const std::vector<KernelArg> &args) {
    Loaded &l = prepare(grid, block, shared_mem);
    std::vector<uint64_t> storage;
    std::vector<void *> pointers;
    pack(l, args, storage, pointers);
    driver::make_current(device_);
    CUresult r = driver::sym::cuLaunchKernel()(
        l.function, unsigned(grid[0]), unsigned(grid[1]), unsigned(grid[2]), unsigned(block[0]),
        unsigned(block[1]), unsigned(block[2]), unsigned(shared_mem),
        reinterpret_cast<CUstream>(stream), pointers.empty() ? nullptr : pointers.data(),
        nullptr);
    if (r != cu::SUCCESS) {
        std::string call = "cuLaunchKernel(kernel '" + name_ + "', grid " + dims(grid) +
                           ", block " + dims(block) + ", shared_mem " +
                           std::to_string(shared_mem) + ")";
        driver::check(r, call.c_str());
    }
}

}  // namespace kfuse

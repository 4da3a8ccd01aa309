// kfuse/kernel.h: one compiled kernel (cubin + name) on one device: load, inspect, pack, launch.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cuda_driver.h"

namespace kfuse {

// Whether v fits a 32-bit int parameter or index.
inline bool fits_int32(int64_t v) {
    return v >= std::numeric_limits<int32_t>::min() && v <= std::numeric_limits<int32_t>::max();
}

// One launch argument, already taken apart by the bindings (no Python types here).
// How it is packed depends on the kernel parameter's byte size: see docs/INTERFACES.md,
// "Kernel ABI".
struct KernelArg {
    static constexpr int kMaxRank = 16;
    enum class Kind { Tensor, Bool, Int, Float } kind = Kind::Int;
    // Tensor: data pointer (byte offset applied), rank, sizes and strides in elements, and
    // the DLPack device it lives on.
    void *data = nullptr;
    int ndim = 0;
    int64_t shape[kMaxRank] = {};
    int64_t stride[kMaxRank] = {};
    int device_type = 0;  // DLPack: 2 = CUDA, 13 = CUDA managed
    int device_id = 0;    // -1: unknown (a hand-made descriptor), not checked
    bool b = false;
    int64_t i = 0;
    double f = 0.0;
};

// Writes a scalar argument into its parameter of `size` bytes (a bool: 1; an int or a float:
// 4 or 8, narrowed to 32 bits for 4). The caller has checked the size and, for a 4-byte int,
// that the value fits (Kernel::pack when packing, PackedLaunch::accepts per call).
inline void write_scalar(char *dst, KernelArg::Kind kind, size_t size, bool b, int64_t i,
                         double f) {
    if (kind == KernelArg::Kind::Bool) {
        *dst = b ? 1 : 0;
    } else if (kind == KernelArg::Kind::Int) {
        const int32_t narrow = int32_t(i);
        std::memcpy(dst, size == 4 ? static_cast<const void *>(&narrow) : &i, size);
    } else if (kind == KernelArg::Kind::Float) {
        const float narrow = float(f);
        std::memcpy(dst, size == 4 ? static_cast<const void *>(&narrow) : &f, size);
    }
}

class Kernel {
public:
    Kernel(std::string cubin, std::string kernel_name, int device);
    ~Kernel();
    Kernel(const Kernel &) = delete;
    Kernel &operator=(const Kernel &) = delete;

    const std::string &name() const { return name_; }
    const std::string &cubin() const { return cubin_; }
    int device() const { return device_; }

    // Attributes of the loaded function (the first access loads the module).
    int num_regs();
    int static_shared_mem();
    int local_mem();
    int max_threads_per_block();
    const std::vector<size_t> &param_sizes();

    // Checks the configuration against the device and the function, packs `args` by the
    // parameters' sizes, and launches on `stream` (0: the legacy default stream).
    void launch(const std::array<int64_t, 3> &grid, const std::array<int64_t, 3> &block,
                int64_t shared_mem, uintptr_t stream, const std::vector<KernelArg> &args);

private:
    friend class PackedLaunch;
    struct Loaded {
        CUmodule module = nullptr;
        CUfunction function = nullptr;
        std::vector<size_t> param_sizes;
        int num_regs = 0, static_shared_mem = 0, local_mem = 0, max_threads_per_block = 0;
        int64_t dynamic_smem_limit = 0;  // current MAX_DYNAMIC_SHARED_SIZE_BYTES
    };
    Loaded &loaded();
    // Checks a configuration and raises the dynamic shared memory limit where it needs to.
    Loaded &prepare(const std::array<int64_t, 3> &grid, const std::array<int64_t, 3> &block,
                    int64_t shared_mem);
    void check_config(const Loaded &l, const std::array<int64_t, 3> &grid,
                      const std::array<int64_t, 3> &block, int64_t shared_mem) const;
    void pack(const Loaded &l, const std::vector<KernelArg> &args,
              std::vector<uint64_t> &storage, std::vector<void *> &pointers) const;

    std::string cubin_;
    std::string name_;
    int device_;
    std::mutex mutex_;
    std::unique_ptr<Loaded> loaded_;
};

}  // namespace kfuse

// kfuse/packed_launch.cpp: pack once, patch pointers and scalar values, launch per call.
#include "packed_launch.h"

#include <cstring>
#include <stdexcept>
#include <string>

namespace kfuse {

PackedLaunch::PackedLaunch(Kernel &kernel, const std::array<int64_t, 3> &grid,
                           const std::array<int64_t, 3> &block, int64_t shared_mem,
                           const std::vector<KernelArg> &args, std::vector<ArgSlot> slots)
    : kernel_(kernel), shared_mem_(unsigned(shared_mem)), slots_(std::move(slots)) {
    Kernel::Loaded &l = kernel.prepare(grid, block, shared_mem);
    function_ = l.function;
    std::vector<void *> pointers;
    kernel.pack(l, args, storage_, pointers);
    const char *base = reinterpret_cast<const char *>(storage_.data());
    for (void *p : pointers)
        offsets_.push_back(size_t(static_cast<const char *>(p) - base));
    for (ArgSlot &s : slots_) {
        const std::string where = "kernel '" + kernel.name() + "': slot for parameter " +
                                  std::to_string(s.param);
        if (s.param >= args.size())
            throw std::invalid_argument(where + ", which does not exist");
        if (s.index < 0)
            throw std::invalid_argument(where + ": the index must be >= 0");
        const bool tensor = args[s.param].kind == KernelArg::Kind::Tensor;
        if ((s.source == ArgSlot::Source::Scalar) == tensor)
            throw std::invalid_argument(where + (tensor ? ", a tensor, takes a pointer slot"
                                                        : ", a scalar, takes a scalar slot"));
        // pack() accepted the placeholder, so kind and size are a valid pair.
        s.kind = args[s.param].kind;
        s.size = l.param_sizes[s.param];
    }
    for (int i = 0; i < 3; ++i) {
        grid_[i] = unsigned(grid[i]);
        block_[i] = unsigned(block[i]);
    }
}

int PackedLaunch::count(ArgSlot::Source source) const {
    int n = 0;
    for (const ArgSlot &s : slots_)
        if (s.source == source && s.index + 1 > n)
            n = s.index + 1;
    return n;
}

bool PackedLaunch::accepts(const ScalarValue *scalars) const {
    for (const ArgSlot &s : slots_) {
        if (s.source != ArgSlot::Source::Scalar || s.kind != KernelArg::Kind::Int)
            continue;
        const ScalarValue &v = scalars[s.index];
        if (!v.has_i || (s.size == 4 && !fits_int32(v.i)))
            return false;
    }
    return true;
}

void PackedLaunch::launch(uintptr_t stream, const uintptr_t *inputs, const uintptr_t *outputs,
                          const uintptr_t *workspaces, const ScalarValue *scalars) const {
    // Kernels of a fusion take a few dozen words; the rare larger one goes to the heap.
    constexpr size_t kInlineWords = 128, kInlineParams = 64;
    uint64_t inline_words[kInlineWords];
    void *inline_params[kInlineParams];
    std::vector<uint64_t> heap_words;
    std::vector<void *> heap_params;
    uint64_t *words = inline_words;
    void **params = inline_params;
    if (storage_.size() > kInlineWords) {
        heap_words.resize(storage_.size());
        words = heap_words.data();
    }
    if (offsets_.size() > kInlineParams) {
        heap_params.resize(offsets_.size());
        params = heap_params.data();
    }
    std::memcpy(words, storage_.data(), storage_.size() * sizeof(uint64_t));
    char *base = reinterpret_cast<char *>(words);
    for (const ArgSlot &s : slots_) {
        char *dst = base + offsets_[s.param];
        if (s.source == ArgSlot::Source::Scalar) {  // accepts() checked an int's range
            const ScalarValue &v = scalars[s.index];
            write_scalar(dst, s.kind, s.size, v.b, v.i, v.f);
            continue;
        }
        const uintptr_t *from = s.source == ArgSlot::Source::Input    ? inputs
                                : s.source == ArgSlot::Source::Output ? outputs
                                                                      : workspaces;
        uintptr_t p = from[s.index] + uintptr_t(s.byte_offset);
        std::memcpy(dst, &p, sizeof(p));
    }
    for (size_t i = 0; i < offsets_.size(); ++i)
        params[i] = base + offsets_[i];
    driver::make_current(kernel_.device());
    CUresult r = driver::sym::cuLaunchKernel()(
        function_, grid_[0], grid_[1], grid_[2], block_[0], block_[1], block_[2], shared_mem_,
        reinterpret_cast<CUstream>(stream), offsets_.empty() ? nullptr : params, nullptr);
    if (r != cu::SUCCESS)
        driver::check(r, ("cuLaunchKernel(kernel '" + kernel_.name() + "')").c_str());
}

}  // namespace kfuse

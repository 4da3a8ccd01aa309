// kfuse/packed_launch.cpp: pack once, patch pointers and launch per call.
#include "packed_launch.h"

#include <cstring>
#include <stdexcept>
#include <string>

namespace kfuse {

PackedLaunch::PackedLaunch(Kernel &kernel, const std::array<int64_t, 3> &grid,
                           const std::array<int64_t, 3> &block, int64_t shared_mem,
                           const std::vector<KernelArg> &args, std::vector<PointerSlot> slots)
    : kernel_(kernel), shared_mem_(unsigned(shared_mem)), slots_(std::move(slots)) {
    Kernel::Loaded &l = kernel.prepare(grid, block, shared_mem);
    function_ = l.function;
    std::vector<void *> pointers;
    kernel.pack(l, args, storage_, pointers);
    const char *base = reinterpret_cast<const char *>(storage_.data());
    for (void *p : pointers)
        offsets_.push_back(size_t(static_cast<const char *>(p) - base));
    for (const PointerSlot &s : slots_) {
        if (s.param >= args.size() || args[s.param].kind != KernelArg::Kind::Tensor)
            throw std::invalid_argument("kernel '" + kernel.name() + "': pointer slot for "
                                        "parameter " + std::to_string(s.param) +
                                        ", which is not a tensor parameter");
        if (s.index < 0)
            throw std::invalid_argument("pointer slot index must be >= 0");
    }
    for (int i = 0; i < 3; ++i) {
        grid_[i] = unsigned(grid[i]);
        block_[i] = unsigned(block[i]);
    }
}

int PackedLaunch::count(PointerSlot::Source source) const {
    int n = 0;
    for (const PointerSlot &s : slots_)
        if (s.source == source && s.index + 1 > n)
            n = s.index + 1;
    return n;
}

void PackedLaunch::launch(uintptr_t stream, const uintptr_t *inputs, const uintptr_t *outputs,
                          const uintptr_t *workspaces) const {
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
    for (const PointerSlot &s : slots_) {
        const uintptr_t *from = s.source == PointerSlot::Source::Input    ? inputs
                                : s.source == PointerSlot::Source::Output ? outputs
                                                                          : workspaces;
        uintptr_t p = from[s.index] + uintptr_t(s.byte_offset);
        std::memcpy(base + offsets_[s.param], &p, sizeof(p));
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

// kfuse/packed_launch.h: a kernel launch whose arguments were packed once. A call copies the
// packed bytes, writes the data pointers of that call's arrays into them and launches: the
// launch half of the host fast path (no argument conversion, no checks per call).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "kernel.h"

namespace kfuse {

// Where a tensor parameter's data pointer comes from on each call.
struct PointerSlot {
    enum class Source { Input, Output, Workspace };
    Source source = Source::Input;
    int index = 0;            // position in that call's list of pointers
    int64_t byte_offset = 0;  // added to the pointer (a workspace's sub-buffer)
    size_t param = 0;         // kernel parameter whose first 8 bytes are the pointer
};

class PackedLaunch {
public:
    // Checks the configuration and packs `args` (whose slot parameters carry placeholder
    // pointers) once; throws as Kernel::launch would for a bad configuration or argument.
    PackedLaunch(Kernel &kernel, const std::array<int64_t, 3> &grid,
                 const std::array<int64_t, 3> &block, int64_t shared_mem,
                 const std::vector<KernelArg> &args, std::vector<PointerSlot> slots);

    // Launch on `stream` with this call's pointers (indexed by PointerSlot::index).
    void launch(uintptr_t stream, const uintptr_t *inputs, const uintptr_t *outputs,
                const uintptr_t *workspaces) const;

    // The highest index each source's slots use, plus one (the pointers a call must supply).
    int count(PointerSlot::Source source) const;

private:
    Kernel &kernel_;
    CUfunction function_ = nullptr;
    unsigned grid_[3], block_[3], shared_mem_;
    std::vector<uint64_t> storage_;  // the packed parameters, 8-byte aligned each
    std::vector<size_t> offsets_;    // byte offset of each parameter in storage_
    std::vector<PointerSlot> slots_;
};

}  // namespace kfuse

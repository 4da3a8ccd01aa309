// kfuse/packed_launch.h: a kernel launch whose arguments were packed once. A call copies the
// packed bytes, writes the data pointers of that call's arrays and the values of its scalar
// inputs into them and launches: the launch half of the host fast path (no argument
// conversion, no checks per call beyond the range of 32-bit scalar parameters).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "kernel.h"

namespace kfuse {

// A parameter that changes per call: a tensor's data pointer, or a scalar input's value.
struct ArgSlot {
    enum class Source { Input, Output, Workspace, Scalar };
    Source source = Source::Input;
    int index = 0;            // position in that call's pointers (Scalar: in its inputs)
    int64_t byte_offset = 0;  // added to the pointer (a workspace's sub-buffer)
    size_t param = 0;         // kernel parameter (a tensor's first 8 bytes are the pointer)
    // Scalar slots: the parameter's kind and size, as packed at construction.
    KernelArg::Kind kind = KernelArg::Kind::Tensor;
    size_t size = 0;
};

// A scalar input's value in each form a parameter may take (kfuse.launch.scalar_argument
// passes float(v), int(v) or bool(v) by the scalar's dtype).
struct ScalarValue {
    double f = 0.0;
    bool b = false;
    bool has_i = false;  // the value is an integer (int(v) is exact): i holds it
    int64_t i = 0;
};

class PackedLaunch {
public:
    // Checks the configuration and packs `args` (whose slot parameters carry placeholder
    // pointers and values) once; throws as Kernel::launch would for a bad configuration or
    // argument, or for a scalar slot on a tensor parameter and vice versa.
    PackedLaunch(Kernel &kernel, const std::array<int64_t, 3> &grid,
                 const std::array<int64_t, 3> &block, int64_t shared_mem,
                 const std::vector<KernelArg> &args, std::vector<ArgSlot> slots);

    // Whether `scalars` (indexed by input position) fit this launch's scalar parameters: an
    // int parameter needs an integer, and a 32-bit one a value in its range.
    bool accepts(const ScalarValue *scalars) const;

    // Launch on `stream` with this call's pointers and scalar values (indexed by
    // ArgSlot::index; `scalars` may be null when the launch has no scalar slot).
    void launch(uintptr_t stream, const uintptr_t *inputs, const uintptr_t *outputs,
                const uintptr_t *workspaces, const ScalarValue *scalars = nullptr) const;

    // The highest index each source's slots use, plus one (what a call must supply).
    int count(ArgSlot::Source source) const;

private:
    Kernel &kernel_;
    CUfunction function_ = nullptr;
    unsigned grid_[3], block_[3], shared_mem_;
    std::vector<uint64_t> storage_;  // the packed parameters, 8-byte aligned each
    std::vector<size_t> offsets_;    // byte offset of each parameter in storage_
    std::vector<ArgSlot> slots_;
};

}  // namespace kfuse

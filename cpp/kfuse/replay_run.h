// kfuse/replay_run.h: consecutive kernel segments of a replayed segmented call, launched from
// one call (kfuse.engine.replay_runs builds one per run of such segments, once per input
// signature).
//
// A replayed call keeps its arrays in numbered slots (kfuse.engine.segmented_replay); a
// ReplayRun reads the data pointers of the slots its kernels take from outside the run (the
// caller has matched those arrays to their planned layouts), allocates what the run makes,
// launches every kernel of the run and writes the arrays it made for later readers back into
// the slots. What the run makes falls in two kinds:
//
//   * exported arrays, read after the run (a library segment, the call's results): each its
//     own framework array, allocated by a Python callable, so that no array a caller or a
//     library call holds is a view of memory a later call reuses;
//   * pooled buffers, read only by the run's own kernels (intermediates passed between them,
//     their workspaces): one allocation of their summed sizes (each at a 256-byte boundary),
//     dropped when the call returns. The frameworks' caching allocators order a freed block's
//     reuse after the work already queued on its stream, as for any released intermediate.
//
// On a GPU each kernel is a PackedLaunch whose pointer slots index the run's pointer table;
// on the emulator (no driver) each launch is the kernel object's Python `launch` method,
// called with the launch's arguments packed once and the call's TensorArgs patched in.
#pragma once

#include <nanobind/nanobind.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "fast_call.h"
#include "packed_launch.h"

namespace kfuse {

namespace nb = nanobind;

class ReplayRun {
public:
    // framework: "torch", "cupy" or "numpy"; pointer_of: callable(array) -> data pointer (used
    // for NumPy arrays; None otherwise); table_size: the pointer table's length (the replay's
    // slots, then pooled buffers no slot holds); inputs: the table entries read from the
    // call's pointer list; checked: (slot, (type, dtype, shape, strides, alignment class,
    // device)) per array a library segment made that the run reads (torch and CuPy: matched
    // here, as a FastCall matches its inputs; a NumPy array is matched by the caller);
    // exports: (slot, callable, args, kwargs, alignment class, like) per exported array (the
    // class its data pointer modulo 16 must have where a kernel of the run reads it, planned
    // on it, or -1; like: a slot whose array the callable is called with instead of args and
    // kwargs, torch.empty_like's way, or -1); pool: None or (callable, args, kwargs,
    // [(table entry, byte offset), ...]); launches: a PackedLaunch each (GPU), or (kernel,
    // grid, block, shared_mem, args, tensor slots [(parameter, table entry, byte offset)],
    // scalar slots [(parameter, scalar index)]) (emulator); scalar_count: how many scalar
    // values a call passes; poison: None, or callable(array) called on each exported array
    // and the pool once allocated.
    ReplayRun(const std::string &framework, nb::object pointer_of, int table_size,
              std::vector<int> inputs, std::vector<nb::tuple> checked,
              std::vector<nb::tuple> exports, nb::object pool, std::vector<nb::object> launches,
              int scalar_count, nb::object poison);

    // Runs the kernels: `slots` and `pointers` are the replay's lists (the exported arrays and
    // their data pointers are written into them), `scalars` a sequence of the scalar slots'
    // values (None when there are none), `stream` the stream to launch on. False, before
    // anything is launched, when a scalar does not fit its parameter, a checked array is off
    // its planned layout, or an exported array is
    // at another alignment class than the run's kernels were planned on (the caller then runs
    // the segments one by one, whose checks say why or take the checked path).
    bool call(nb::handle slots, nb::handle pointers, nb::handle scalars, uintptr_t stream) const;

    int traverse(visitproc visit, void *arg) const;
    void clear();

private:
    struct Export {
        int slot;
        nb::object callable, args, kwargs;
        int64_t align;
        int like;
    };
    struct Launch {
        const PackedLaunch *packed = nullptr;  // GPU
        nb::object holder;                     // the PackedLaunch, or the emulated kernel
        nb::object grid, block, shared_mem, args;
        std::vector<std::pair<Py_ssize_t, int>> tensors;          // (parameter, table entry)
        std::vector<int64_t> offsets;                             // bytes added, per tensor
        std::vector<std::pair<Py_ssize_t, int>> scalar_params;    // (parameter, scalar index)
    };

    uintptr_t pointer(PyObject *array) const;
    // callable(*args, **kwargs), poisoned where the run poisons.
    nb::object allocate(const nb::object &callable, const nb::object &args,
                        const nb::object &kwargs) const;
    void launch_emulated(const Launch &l, const Scratch<uintptr_t> &table, PyObject *scalars,
                         PyObject *stream) const;

    Framework framework_ = Framework::Torch;
    bool numpy_ = false;
    bool cleared_ = false;
    nb::object pointer_of_, poison_;
    int table_size_ = 0;
    std::vector<int> inputs_;
    std::vector<std::pair<int, InputSpec>> checked_;
    std::vector<Export> exports_;
    nb::object pool_callable_, pool_args_, pool_kwargs_;
    std::vector<std::pair<int, int64_t>> pooled_;
    std::vector<Launch> launches_;
    int scalar_count_ = 0;
};

}  // namespace kfuse

// kfuse/fast_call.h: the engine of the host fast path (kfuse.runtime.fast_path).
//
// kfuse.runtime.fast_path builds one FastCall per input layout a fusion has run with (and a
// FastCallCache per fusion). A call then matches the inputs against those layouts (scalar
// inputs by their Python type), allocates outputs through the inputs' framework, asks the
// framework for its current stream and launches packed launches, without running any of
// kfuse's Python code; only a fusion with scalar inputs calls back into Python, for the
// values of the scalar parameters (kfuse.runtime.fast_path.ScalarProgram). Inputs of another
// layout make a call return None, and the caller takes the checked path. It reads Python
// objects through the limited C API only (the module is built for the stable ABI); the
// bindings (bindings/fast_call.cpp) only expose it.
#pragma once

#include <nanobind/nanobind.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "packed_launch.h"

namespace kfuse {

namespace nb = nanobind;

enum class Framework { Torch, CuPy };

// Per-call arrays: on the stack for the usual handful of arrays, on the heap beyond.
template <typename T>
class Scratch {
public:
    explicit Scratch(size_t n) : data_(n <= kInline ? inline_ : (heap_.resize(n), heap_.data())) {}
    T &operator[](size_t i) { return data_[i]; }
    const T &operator[](size_t i) const { return data_[i]; }
    T *data() { return data_; }
    const T *data() const { return data_; }

private:
    static constexpr size_t kInline = 16;
    T inline_[kInline];
    std::vector<T> heap_;
    T *data_;
};

// The layout one tensor input must have: exactly what the checked path saw when it compiled.
// A scalar input (scalar = true) must have the same Python type; its value may change.
struct InputSpec {
    nb::object type, dtype, shape, strides;  // strides as the framework reports them
    int64_t align = 0;                       // data pointer modulo 16
    int64_t device = 0;
    bool scalar = false;
};

// Whether `array` (a torch tensor or a CuPy array, by `framework`) has exactly the layout
// `spec` describes; `ptr` receives its data pointer. FastCall matches its inputs with it, and
// a ReplayRun the intermediates it takes from library segments.
bool layout_matches(Framework framework, const InputSpec &spec, PyObject *array, uintptr_t &ptr);

// A Python number in every form a scalar parameter may take; false (no error set) when it
// has no float value (then the checked path decides what to do with it).
bool to_scalar(PyObject *o, ScalarValue &v);

// Arrays a caller gives for the outputs (fd.execute's outputs=): each must match `layout` (the
// dense layout the kernels store, 16-byte aligned) and span `bytes` bytes; `input_spans` are
// each input's bytes below and above its data pointer, so that no given output may share
// memory with an input (threads would store over values others have yet to read).
struct GivenOutputs {
    std::vector<InputSpec> layouts;
    std::vector<int64_t> bytes;
    std::vector<std::pair<int64_t, int64_t>> input_spans;
};

// How to allocate one buffer: callable(*args, **kwargs), or callable(inputs[like]).
struct BufferSpec {
    nb::object callable, args, kwargs;
    int like = -1;
};

class FastCall {
public:
    FastCall(const std::string &framework, int device, std::vector<nb::tuple> inputs,
             std::vector<nb::tuple> outputs, std::vector<nb::tuple> workspaces,
             std::vector<nb::object> launches, nb::object stream_callable, nb::object stream_args,
             nb::object device_callable, nb::object tag, nb::object scalars,
             nb::object given = nb::none(), nb::object direct_scalars = nb::none());

    // (tag, outputs) after launching, or None when `inputs` do not have this layout.
    nb::object call(nb::handle inputs, nb::handle stream) const;

    // call() writing into `outputs` (a list of the caller's arrays): (tag, outputs) after
    // launching, or None when the inputs have another layout, the FastCall takes no given
    // outputs, or one of them does not fit exactly (the checked path then says why).
    nb::object call_into(nb::handle inputs, nb::handle outputs, nb::handle stream) const;

    const nb::object &tag() const { return tag_; }

    // Where a call's host time goes (fast_call_probe.cpp): the median nanoseconds of each
    // stage run `repeats` times on its own ("match inputs", "match outputs" where `outputs`
    // is given, "stream", "allocate outputs" where it is not, "allocate workspaces", a list
    // "launches" of each launch's, and the whole "call"), `between` called before each
    // launching repetition, outside the timing (None, or e.g. the framework's synchronize).
    nb::dict stage_times(nb::handle inputs, nb::handle outputs, int repeats,
                         nb::handle between) const;

    // Python's cycle collector sees the objects a FastCall holds through these (its tag is
    // the compiled fusion, which a user's objects may lead back to).
    int traverse(visitproc visit, void *arg) const {
        for (const auto *specs : {&inputs_, &given_.layouts})
            for (const InputSpec &i : *specs) {
                Py_VISIT(i.type.ptr());
                Py_VISIT(i.dtype.ptr());
                Py_VISIT(i.shape.ptr());
                Py_VISIT(i.strides.ptr());
            }
        for (const auto *list : {&outputs_, &workspaces_})
            for (const BufferSpec &b : *list) {
                Py_VISIT(b.callable.ptr());
                Py_VISIT(b.args.ptr());
                Py_VISIT(b.kwargs.ptr());
            }
        for (const nb::object &l : launch_objects_)
            Py_VISIT(l.ptr());
        Py_VISIT(stream_callable_.ptr());
        Py_VISIT(stream_args_.ptr());
        Py_VISIT(device_callable_.ptr());
        Py_VISIT(tag_.ptr());
        Py_VISIT(scalars_.ptr());
        return 0;
    }

    // Drops every reference; a cleared FastCall matches nothing and launches nothing.
    void clear();

private:
    static void buffers(const std::vector<nb::tuple> &specs, std::vector<BufferSpec> &out);

    static InputSpec layout_spec(nb::handle t);

    // The inputs' data pointers (0 for scalars) and objects, and the scalar slots' values:
    // false when the inputs do not have this FastCall's layout.
    bool match_inputs(PyObject *seq, Scratch<uintptr_t> &ptrs, Scratch<PyObject *> &items,
                      Scratch<ScalarValue> &scalars) const;

    // The given outputs' data pointers: false unless each fits its layout and none shares
    // memory with an input or another output.
    bool match_given(PyObject *outputs, const Scratch<uintptr_t> &input_ptrs,
                     Scratch<uintptr_t> &ptrs) const;

    nb::object launch(const Scratch<uintptr_t> &input_ptrs, const Scratch<PyObject *> &items,
                      const Scratch<ScalarValue> &scalars, nb::handle stream,
                      const Scratch<uintptr_t> *given_ptrs, nb::handle given) const;

    bool matches(const InputSpec &spec, PyObject *t, uintptr_t &ptr) const;

    // The scalar parameters' values for this call's inputs, from the scalar program (the
    // checked path's own evaluation; its errors propagate as the checked path's would);
    // false when one is not a number.
    bool scalar_values(PyObject *inputs, const Scratch<PyObject *> &items,
                       Scratch<ScalarValue> &out) const;

    // The scalar slots' values read from the inputs themselves (direct_scalars_): false when
    // one needs the scalar program (a float32 slot's value out of float32's finite range).
    bool direct_scalar_values(const Scratch<PyObject *> &items, Scratch<ScalarValue> &out) const;

    bool on_current_device() const;

    uintptr_t current_stream() const;

    nb::list allocate(const std::vector<BufferSpec> &specs, const Scratch<PyObject *> &items,
                      Scratch<uintptr_t> &ptrs) const;

    Framework framework_ = Framework::Torch;
    bool cleared_ = false;
    int64_t device_;
    std::vector<InputSpec> inputs_;
    std::vector<BufferSpec> outputs_, workspaces_;
    std::vector<PackedLaunch *> launches_;
    std::vector<nb::object> launch_objects_;  // keeps launches_ (and their kernels) alive
    nb::object stream_callable_, stream_args_, device_callable_, tag_;
    nb::object scalars_;  // callable(inputs) -> tuple of the scalar slots' values, or None
    // Where every scalar slot's value is a scalar input's as given (kind 0), or a Python
    // float input rounded to float32 (kind 1): (input position, kind) per slot, read without
    // calling the scalar program (about 2 us of a call on an H100's host); else empty.
    std::vector<std::pair<int, int>> direct_scalars_;
    int scalar_count_ = 0;
    bool takes_given_ = false;
    GivenOutputs given_;
};

// The FastCalls of one fusion, newest first; a call tries each until one matches.
class FastCallCache {
public:
    // 16: nvFuser's host benchmarks call a fusion with 10 input sizes in turn ("dynamic");
    // with 8 entries every such call missed (an H100: adaptive layer norm 417 us a call, 15.6
    // us at one size). A miss tries every entry, each rejected at its first differing field.
    static constexpr size_t kMaxEntries = 16;

    void add(nb::object entry) {
        (void)nb::cast<FastCall *>(entry);
        entries_.insert(entries_.begin(), entry);
        if (entries_.size() > kMaxEntries)
            entries_.pop_back();
    }

    nb::object call(nb::handle inputs, nb::handle stream) const {
        return first_hit(inputs, nb::handle(), stream);
    }

    nb::object call_into(nb::handle inputs, nb::handle outputs, nb::handle stream) const {
        return first_hit(inputs, outputs, stream);
    }

    size_t size() const { return entries_.size(); }
    void clear() { entries_.clear(); }

    // The FastCalls, newest first (for probes and tests).
    nb::list entries() const {
        nb::list out;
        for (const nb::object &e : entries_)
            out.append(e);
        return out;
    }

    int traverse(visitproc visit, void *arg) const {
        for (const nb::object &e : entries_)
            Py_VISIT(e.ptr());
        return 0;
    }

private:
    // The first entry's hit (call_into's when `outputs` is set), or None.
    nb::object first_hit(nb::handle inputs, nb::handle outputs, nb::handle stream) const {
        // By index, holding each entry: a call runs Python code (attribute reads, allocation),
        // during which another thread may add an entry and reallocate the vector.
        for (size_t k = 0; k < entries_.size(); ++k) {
            nb::object entry = entries_[k];
            const FastCall *call = nb::cast<FastCall *>(entry);
            nb::object r = outputs.is_valid() ? call->call_into(inputs, outputs, stream)
                                              : call->call(inputs, stream);
            if (!r.is_none())
                return r;
        }
        return nb::none();
    }

    std::vector<nb::object> entries_;
};

}  // namespace kfuse

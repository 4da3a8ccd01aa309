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

// A Python number in every form a scalar parameter may take; false (no error set) when it
// has no float value (then the checked path decides what to do with it).
bool to_scalar(PyObject *o, ScalarValue &v);

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
             nb::object device_callable, nb::object tag, nb::object scalars);

    // (tag, outputs) after launching, or None when `inputs` do not have this layout.
    nb::object call(nb::handle inputs, nb::handle stream) const;

    const nb::object &tag() const { return tag_; }

    // Python's cycle collector sees the objects a FastCall holds through these (its tag is
    // the compiled fusion, which a user's objects may lead back to).
    int traverse(visitproc visit, void *arg) const {
        for (const InputSpec &i : inputs_) {
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

    bool matches(const InputSpec &spec, PyObject *t, uintptr_t &ptr) const;

    // The scalar parameters' values for this call's inputs, from the scalar program (the
    // checked path's own evaluation; its errors propagate as the checked path's would);
    // false when one is not a number.
    bool scalar_values(PyObject *inputs, Scratch<ScalarValue> &out) const;

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
    int scalar_count_ = 0;
};

// The FastCalls of one fusion, newest first; a call tries each until one matches.
class FastCallCache {
public:
    static constexpr size_t kMaxEntries = 8;

    void add(nb::object entry) {
        (void)nb::cast<FastCall *>(entry);
        entries_.insert(entries_.begin(), entry);
        if (entries_.size() > kMaxEntries)
            entries_.pop_back();
    }

    nb::object call(nb::handle inputs, nb::handle stream) const {
        // By index, holding each entry: a call runs Python code (attribute reads, allocation),
        // during which another thread may add an entry and reallocate the vector.
        for (size_t k = 0; k < entries_.size(); ++k) {
            nb::object entry = entries_[k];
            nb::object r = nb::cast<FastCall *>(entry)->call(inputs, stream);
            if (!r.is_none())
                return r;
        }
        return nb::none();
    }

    size_t size() const { return entries_.size(); }
    void clear() { entries_.clear(); }

    int traverse(visitproc visit, void *arg) const {
        for (const nb::object &e : entries_)
            Py_VISIT(e.ptr());
        return 0;
    }

private:
    std::vector<nb::object> entries_;
};

}  // namespace kfuse

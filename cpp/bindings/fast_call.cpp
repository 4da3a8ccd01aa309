// bindings/fast_call.cpp: the host fast path of cached GPU calls, in C++.
//
// kfuse.runtime.fast_path builds one FastCall per input layout a fusion has run with (and a
// FastCallCache per fusion). A call then matches the inputs against those layouts (scalar
// inputs by their Python type), allocates outputs through the inputs' framework, asks the
// framework for its current stream and launches packed launches, without running any of
// kfuse's Python code; only a fusion with scalar inputs calls back into Python, for the
// values of the scalar parameters (kfuse.runtime.fast_path.ScalarProgram). Inputs of another
// layout make __call__ return None, and the caller takes the checked path. Only the limited C
// API is used (the module is built for the stable ABI).
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "../kfuse/packed_launch.h"
#include "bindings.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace kfuse {
namespace bindings {

namespace {

// Interned attribute names, created on first use (with the GIL held) and kept for the
// process's life.
PyObject *name(const char *s) { return PyUnicode_InternFromString(s); }
PyObject *attr_dtype() { static PyObject *n = name("dtype"); return n; }
PyObject *attr_shape() { static PyObject *n = name("shape"); return n; }
PyObject *attr_stride() { static PyObject *n = name("stride"); return n; }
PyObject *attr_strides() { static PyObject *n = name("strides"); return n; }
PyObject *attr_data_ptr() { static PyObject *n = name("data_ptr"); return n; }
PyObject *attr_get_device() { static PyObject *n = name("get_device"); return n; }
PyObject *attr_data() { static PyObject *n = name("data"); return n; }
PyObject *attr_ptr() { static PyObject *n = name("ptr"); return n; }
PyObject *attr_device_id() { static PyObject *n = name("device_id"); return n; }

// A new reference that is released at scope exit.
struct Ref {
    PyObject *p;
    explicit Ref(PyObject *o) : p(o) {}
    ~Ref() { Py_XDECREF(p); }
    Ref(const Ref &) = delete;
    Ref &operator=(const Ref &) = delete;
    explicit operator bool() const { return p != nullptr; }
};

[[noreturn]] void raise_current() { throw nb::python_error(); }

// CallMethodObjArgs skips building a bound method object for methods defined in C (torch's
// data_ptr, stride, get_device), which GetAttr followed by a call would allocate every time.
PyObject *call_method(PyObject *o, PyObject *method) {
    PyObject *r = PyObject_CallMethodObjArgs(o, method, nullptr);
    if (!r)
        raise_current();
    return r;
}

PyObject *get(PyObject *o, PyObject *attribute) {
    PyObject *r = PyObject_GetAttr(o, attribute);
    if (!r)
        raise_current();
    return r;
}

bool equal(PyObject *a, PyObject *b) {
    if (a == b)
        return true;
    int r = PyObject_RichCompareBool(a, b, Py_EQ);
    if (r < 0)
        raise_current();
    return r == 1;
}

uintptr_t as_pointer(PyObject *o) {
    unsigned long long v = PyLong_AsUnsignedLongLong(o);
    if (v == (unsigned long long)-1 && PyErr_Occurred())
        raise_current();
    return uintptr_t(v);
}

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
bool to_scalar(PyObject *o, ScalarValue &v) {
    v.f = PyFloat_AsDouble(o);
    if (v.f == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return false;
    }
    const int truth = PyObject_IsTrue(o);
    if (truth < 0) {
        PyErr_Clear();
        return false;
    }
    v.b = truth == 1;
    v.has_i = false;
    if (PyLong_Check(o)) {
        v.i = PyLong_AsLongLong(o);
        if (v.i == -1 && PyErr_Occurred())
            PyErr_Clear();  // beyond 64 bits: no int form (an int parameter refuses it)
        else
            v.has_i = true;
    }
    return true;
}

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
             nb::object device_callable, nb::object tag, nb::object scalars)
        : device_(device), stream_callable_(std::move(stream_callable)),
          stream_args_(std::move(stream_args)), device_callable_(std::move(device_callable)),
          tag_(std::move(tag)), scalars_(std::move(scalars)) {
        if (framework == "torch")
            framework_ = Framework::Torch;
        else if (framework == "cupy")
            framework_ = Framework::CuPy;
        else
            throw nb::value_error("FastCall: framework must be 'torch' or 'cupy'");
        for (nb::tuple t : inputs) {
            if (t.size() == 1) {  // a scalar input: (type,)
                inputs_.push_back({nb::borrow(t[0]), nb::none(), nb::none(), nb::none(), 0, 0,
                                   true});
                continue;
            }
            if (t.size() != 6)
                throw nb::value_error("FastCall: an input spec is (type, dtype, shape, strides, "
                                      "align, device), or (type,) for a scalar input");
            inputs_.push_back({nb::borrow(t[0]), nb::borrow(t[1]), nb::borrow(t[2]),
                               nb::borrow(t[3]), nb::cast<int64_t>(t[4]),
                               nb::cast<int64_t>(t[5])});
        }
        buffers(outputs, outputs_);
        buffers(workspaces, workspaces_);
        for (nb::object l : launches) {
            launches_.push_back(nb::cast<PackedLaunch *>(l));
            launch_objects_.push_back(l);
        }
        for (const PackedLaunch *l : launches_) {
            if (l->count(ArgSlot::Source::Input) > int(inputs_.size()) ||
                l->count(ArgSlot::Source::Output) > int(outputs_.size()) ||
                l->count(ArgSlot::Source::Workspace) > int(workspaces_.size()))
                throw nb::value_error("FastCall: a launch reads more pointers than the call has");
            scalar_count_ = std::max(scalar_count_, l->count(ArgSlot::Source::Scalar));
        }
        if (scalar_count_ > 0 && scalars_.is_none())
            throw nb::value_error("FastCall: the launches have scalar slots but no scalar "
                                  "program computes their values");
    }

    // (tag, outputs) after launching, or None when `inputs` do not have this layout.
    nb::object call(nb::handle inputs, nb::handle stream) const {
        PyObject *seq = inputs.ptr();
        const bool is_list = PyList_Check(seq), is_tuple = PyTuple_Check(seq);
        if (!is_list && !is_tuple)
            return nb::none();
        const Py_ssize_t n = is_list ? PyList_Size(seq) : PyTuple_Size(seq);
        if (cleared_ || n != Py_ssize_t(inputs_.size()))
            return nb::none();
        Scratch<uintptr_t> input_ptrs(inputs_.size());
        Scratch<PyObject *> items(inputs_.size());
        for (size_t i = 0; i < inputs_.size(); ++i) {
            PyObject *t = is_list ? PyList_GetItem(seq, Py_ssize_t(i))
                                  : PyTuple_GetItem(seq, Py_ssize_t(i));
            items[i] = t;
            if (inputs_[i].scalar) {
                input_ptrs[i] = 0;
                if (reinterpret_cast<PyObject *>(Py_TYPE(t)) != inputs_[i].type.ptr())
                    return nb::none();
            } else if (!matches(inputs_[i], t, input_ptrs[i])) {
                return nb::none();
            }
        }
        Scratch<ScalarValue> scalars{size_t(scalar_count_)};
        if (scalar_count_ > 0) {  // a fusion without scalar inputs skips all of this
            if (!scalar_values(seq, scalars))
                return nb::none();
            for (const PackedLaunch *l : launches_)
                if (!l->accepts(scalars.data()))
                    return nb::none();  // e.g. out of a 32-bit parameter's range: the checked
                                        // path says so
        }
        if (framework_ == Framework::CuPy && !on_current_device())
            return nb::none();  // cupy allocates on the current device: take the checked path
        uintptr_t raw_stream = stream.is_none() ? current_stream() : nb::cast<uintptr_t>(stream);
        Scratch<uintptr_t> output_ptrs(outputs_.size()), workspace_ptrs(workspaces_.size());
        nb::list outputs = allocate(outputs_, items, output_ptrs);
        nb::list workspaces = allocate(workspaces_, items, workspace_ptrs);
        for (const PackedLaunch *l : launches_)
            l->launch(raw_stream, input_ptrs.data(), output_ptrs.data(), workspace_ptrs.data(),
                      scalars.data());
        return nb::make_tuple(tag_, outputs);
    }

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
    void clear() {
        cleared_ = true;
        inputs_.clear();
        outputs_.clear();
        workspaces_.clear();
        launches_.clear();
        launch_objects_.clear();
        stream_callable_ = stream_args_ = device_callable_ = tag_ = scalars_ = nb::none();
        scalar_count_ = 0;
    }

private:
    static void buffers(const std::vector<nb::tuple> &specs, std::vector<BufferSpec> &out) {
        for (nb::tuple t : specs) {
            if (t.size() != 4)
                throw nb::value_error("FastCall: a buffer spec is (callable, args, kwargs, like)");
            out.push_back({nb::borrow(t[0]), nb::borrow(t[1]), nb::borrow(t[2]),
                           nb::cast<int>(t[3])});
        }
    }

    bool matches(const InputSpec &spec, PyObject *t, uintptr_t &ptr) const {
        if (reinterpret_cast<PyObject *>(Py_TYPE(t)) != spec.type.ptr())
            return false;
        Ref dtype(get(t, attr_dtype()));
        if (!equal(dtype.p, spec.dtype.ptr()))
            return false;
        Ref shape(get(t, attr_shape()));
        if (!equal(shape.p, spec.shape.ptr()))
            return false;
        if (framework_ == Framework::Torch) {
            Ref strides(call_method(t, attr_stride()));
            if (!equal(strides.p, spec.strides.ptr()))
                return false;
            Ref p(call_method(t, attr_data_ptr()));
            ptr = as_pointer(p.p);
            Ref device(call_method(t, attr_get_device()));
            if (PyLong_AsLongLong(device.p) != spec.device)
                return false;
        } else {
            Ref strides(get(t, attr_strides()));
            if (!equal(strides.p, spec.strides.ptr()))
                return false;
            Ref data(get(t, attr_data()));
            Ref p(get(data.p, attr_ptr()));
            ptr = as_pointer(p.p);
            Ref device(get(data.p, attr_device_id()));
            if (PyLong_AsLongLong(device.p) != spec.device)
                return false;
        }
        if (PyErr_Occurred())
            raise_current();
        return int64_t(ptr & 15) == spec.align;
    }

    // The scalar parameters' values for this call's inputs, from the scalar program (the
    // checked path's own evaluation; its errors propagate as the checked path's would);
    // false when one is not a number.
    bool scalar_values(PyObject *inputs, Scratch<ScalarValue> &out) const {
        Ref values(PyObject_CallFunctionObjArgs(scalars_.ptr(), inputs, nullptr));
        if (!values)
            raise_current();
        if (!PyTuple_Check(values.p) || PyTuple_Size(values.p) < scalar_count_)
            throw nb::value_error("FastCall: the scalar program must return a tuple of a value "
                                  "for each scalar slot");
        for (int k = 0; k < scalar_count_; ++k)
            if (!to_scalar(PyTuple_GetItem(values.p, k), out[size_t(k)]))
                return false;
        return true;
    }

    bool on_current_device() const {
        Ref d(PyObject_CallNoArgs(device_callable_.ptr()));
        if (!d)
            raise_current();
        return PyLong_AsLongLong(d.p) == device_;
    }

    uintptr_t current_stream() const {
        Ref s(PyObject_Call(stream_callable_.ptr(), stream_args_.ptr(), nullptr));
        if (!s)
            raise_current();
        if (PyLong_Check(s.p))
            return as_pointer(s.p);
        Ref p(get(s.p, attr_ptr()));  // a cupy Stream
        return as_pointer(p.p);
    }

    nb::list allocate(const std::vector<BufferSpec> &specs, const Scratch<PyObject *> &items,
                      Scratch<uintptr_t> &ptrs) const {
        nb::list out;
        for (size_t k = 0; k < specs.size(); ++k) {
            const BufferSpec &b = specs[k];
            PyObject *made;
            if (b.like >= 0) {
                Ref args(PyTuple_Pack(1, items[size_t(b.like)]));
                if (!args)
                    raise_current();
                made = PyObject_Call(b.callable.ptr(), args.p, nullptr);
            } else {
                made = PyObject_Call(b.callable.ptr(), b.args.ptr(),
                                     b.kwargs.is_none() ? nullptr : b.kwargs.ptr());
            }
            if (!made)
                raise_current();
            nb::object array = nb::steal(made);
            if (framework_ == Framework::Torch) {
                Ref p(call_method(made, attr_data_ptr()));
                ptrs[k] = as_pointer(p.p);
            } else {
                Ref data(get(made, attr_data()));
                Ref p(get(data.p, attr_ptr()));
                ptrs[k] = as_pointer(p.p);
            }
            out.append(array);
        }
        return out;
    }

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

ArgSlot::Source to_source(const std::string &s) {
    if (s == "input")
        return ArgSlot::Source::Input;
    if (s == "output")
        return ArgSlot::Source::Output;
    if (s == "workspace")
        return ArgSlot::Source::Workspace;
    if (s == "scalar")
        return ArgSlot::Source::Scalar;
    throw nb::value_error("slot source must be 'input', 'output', 'workspace' or 'scalar'");
}

// tp_traverse / tp_clear for a bound class T with traverse() and clear() (nanobind's recipe
// for objects that hold Python references: without them a cycle through one is never freed).
template <typename T>
int traverse_slot(PyObject *self, visitproc visit, void *arg) {
    Py_VISIT(Py_TYPE(self));
    if (!nb::inst_ready(self))
        return 0;
    return nb::inst_ptr<T>(self)->traverse(visit, arg);
}

template <typename T>
int clear_slot(PyObject *self) {
    if (nb::inst_ready(self))
        nb::inst_ptr<T>(self)->clear();
    return 0;
}

template <typename T>
PyType_Slot gc_slots[] = {{Py_tp_traverse, (void *)traverse_slot<T>},
                          {Py_tp_clear, (void *)clear_slot<T>},
                          {0, nullptr}};

}  // namespace

void register_fast_call(nb::module_ &m) {
    nb::class_<PackedLaunch>(m, "PackedLaunch",
                             "A launch packed once; each call patches its arrays' data pointers "
                             "in (the host fast path).")
        .def(
            "__init__",
            [](PackedLaunch *self, Kernel &kernel, const std::vector<int64_t> &grid,
               const std::vector<int64_t> &block, int64_t shared_mem, nb::handle args,
               const std::vector<std::tuple<int, std::string, int, int64_t>> &slots) {
                std::vector<ArgSlot> converted;
                for (const auto &[param, source, index, offset] : slots) {
                    if (param < 0)
                        throw nb::value_error("slot parameter must be >= 0");
                    ArgSlot slot;
                    slot.source = to_source(source);
                    slot.index = index;
                    slot.byte_offset = offset;
                    slot.param = size_t(param);
                    converted.push_back(slot);
                }
                new (self) PackedLaunch(kernel, to_dim3(grid, "grid"), to_dim3(block, "block"),
                                        shared_mem, convert_args(args), std::move(converted));
            },
            "kernel"_a, "grid"_a, "block"_a, "shared_mem"_a, "args"_a, "slots"_a,
            nb::keep_alive<1, 2>(),
            "slots: (parameter, 'input' | 'output' | 'workspace', index, byte offset) for each "
            "tensor parameter whose data pointer changes per call, and (parameter, 'scalar', "
            "input position, 0) for each scalar input's parameter.")
        .def(
            "launch",
            [](const PackedLaunch &self, uintptr_t stream, const std::vector<uintptr_t> &inputs,
               const std::vector<uintptr_t> &outputs, const std::vector<uintptr_t> &workspaces,
               const std::vector<nb::object> &scalars) {
                if (self.count(ArgSlot::Source::Input) > int(inputs.size()) ||
                    self.count(ArgSlot::Source::Output) > int(outputs.size()) ||
                    self.count(ArgSlot::Source::Workspace) > int(workspaces.size()))
                    throw nb::value_error("PackedLaunch.launch: too few pointers");
                if (self.count(ArgSlot::Source::Scalar) > int(scalars.size()))
                    throw nb::value_error("PackedLaunch.launch: too few scalars");
                std::vector<ScalarValue> values(scalars.size());
                for (size_t i = 0; i < scalars.size(); ++i)
                    if (!scalars[i].is_none() && !to_scalar(scalars[i].ptr(), values[i]))
                        throw nb::type_error("PackedLaunch.launch: a scalar is not a number");
                if (!self.accepts(values.data()))
                    throw nb::value_error("PackedLaunch.launch: a scalar does not fit its "
                                          "parameter");
                self.launch(stream, inputs.data(), outputs.data(), workspaces.data(),
                            values.data());
            },
            "stream"_a, "inputs"_a, "outputs"_a, "workspaces"_a,
            "scalars"_a = std::vector<nb::object>(),
            "scalars: the values of the launch's scalar slots, by slot index.");

    nb::class_<FastCall>(m, "FastCall",
                         "One input layout's cached call (kfuse.runtime.fast_path).",
                         nb::type_slots(gc_slots<FastCall>))
        .def(nb::init<const std::string &, int, std::vector<nb::tuple>, std::vector<nb::tuple>,
                      std::vector<nb::tuple>, std::vector<nb::object>, nb::object, nb::object,
                      nb::object, nb::object, nb::object>(),
             "framework"_a, "device"_a, "inputs"_a, "outputs"_a, "workspaces"_a, "launches"_a,
             "stream_callable"_a, "stream_args"_a, "device_callable"_a.none(), "tag"_a.none(),
             "scalars"_a.none() = nb::none(),
             "scalars: callable(inputs) returning the values of the launches' scalar slots "
             "(required when they have any).")
        .def("__call__", &FastCall::call, "inputs"_a, "stream"_a.none() = nb::none(),
             "(tag, outputs) after launching, or None when the inputs have another layout.")
        .def_prop_ro("tag", &FastCall::tag);

    nb::class_<FastCallCache>(m, "FastCallCache", "A fusion's FastCalls, newest first.",
                              nb::type_slots(gc_slots<FastCallCache>))
        .def(nb::init<>())
        .def_ro_static("MAX_ENTRIES", &FastCallCache::kMaxEntries,
                       "FastCalls kept; adding one more drops the oldest.")
        .def("add", &FastCallCache::add, "entry"_a)
        .def("__call__", &FastCallCache::call, "inputs"_a, "stream"_a.none() = nb::none())
        .def("__len__", &FastCallCache::size)
        .def("clear", &FastCallCache::clear);
}

}  // namespace bindings
}  // namespace kfuse

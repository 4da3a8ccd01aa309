// kfuse/fast_call.cpp: FastCall's matching, allocation and launch (see fast_call.h).
#include "fast_call.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>

namespace kfuse {

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

}  // namespace

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

FastCall::FastCall(const std::string &framework, int device, std::vector<nb::tuple> inputs,
                   std::vector<nb::tuple> outputs, std::vector<nb::tuple> workspaces,
                   std::vector<nb::object> launches, nb::object stream_callable,
                   nb::object stream_args, nb::object device_callable, nb::object tag,
                   nb::object scalars, nb::object given, nb::object direct_scalars)
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
        inputs_.push_back(layout_spec(t));
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
    if (!direct_scalars.is_none()) {
        for (nb::handle d : direct_scalars) {
            nb::tuple t = nb::cast<nb::tuple>(d);
            if (t.size() != 2)
                throw nb::value_error("FastCall: a direct scalar is (input position, kind)");
            const int position = nb::cast<int>(t[0]), kind = nb::cast<int>(t[1]);
            if (position < 0 || size_t(position) >= inputs_.size() ||
                !inputs_[size_t(position)].scalar || (kind != 0 && kind != 1))
                throw nb::value_error("FastCall: a direct scalar names a scalar input and a "
                                      "kind of 0 (as given) or 1 (rounded to float32)");
            direct_scalars_.emplace_back(position, kind);
        }
        if (int(direct_scalars_.size()) < scalar_count_)
            throw nb::value_error("FastCall: direct scalars need one for each scalar slot");
    }
    if (!given.is_none()) {
        nb::tuple g = nb::cast<nb::tuple>(given);
        if (g.size() != 3)
            throw nb::value_error("FastCall: given is (output layouts, output sizes in bytes, "
                                  "input spans)");
        for (nb::handle t : g[0])
            given_.layouts.push_back(layout_spec(t));
        for (nb::handle b : g[1])
            given_.bytes.push_back(nb::cast<int64_t>(b));
        for (nb::handle s : g[2]) {
            nb::tuple span = nb::cast<nb::tuple>(s);
            if (span.size() != 2)
                throw nb::value_error("FastCall: an input span is (bytes below, bytes above)");
            given_.input_spans.emplace_back(nb::cast<int64_t>(span[0]),
                                            nb::cast<int64_t>(span[1]));
        }
        if (given_.layouts.size() != outputs_.size() || given_.bytes.size() != outputs_.size() ||
            given_.input_spans.size() != inputs_.size())
            throw nb::value_error("FastCall: given needs a layout and a size for each output "
                                  "and a span for each input");
        takes_given_ = true;
    }
}

InputSpec FastCall::layout_spec(nb::handle spec) {
    nb::tuple t = nb::cast<nb::tuple>(spec);
    if (t.size() != 6)
        throw nb::value_error("FastCall: an input spec is (type, dtype, shape, strides, "
                              "align, device), or (type,) for a scalar input");
    return {nb::borrow(t[0]), nb::borrow(t[1]), nb::borrow(t[2]),
            nb::borrow(t[3]), nb::cast<int64_t>(t[4]), nb::cast<int64_t>(t[5])};
}

nb::object FastCall::call(nb::handle inputs, nb::handle stream) const {
    Scratch<uintptr_t> input_ptrs(inputs_.size());
    Scratch<PyObject *> items(inputs_.size());
    Scratch<ScalarValue> scalars{size_t(scalar_count_)};
    if (!match_inputs(inputs.ptr(), input_ptrs, items, scalars))
        return nb::none();
    return launch(input_ptrs, items, scalars, stream, nullptr, nb::handle());
}

nb::object FastCall::call_into(nb::handle inputs, nb::handle outputs, nb::handle stream) const {
    if (!takes_given_)
        return nb::none();
    Scratch<uintptr_t> input_ptrs(inputs_.size());
    Scratch<PyObject *> items(inputs_.size());
    Scratch<ScalarValue> scalars{size_t(scalar_count_)};
    if (!match_inputs(inputs.ptr(), input_ptrs, items, scalars))
        return nb::none();
    Scratch<uintptr_t> given_ptrs(given_.layouts.size());
    if (!match_given(outputs.ptr(), input_ptrs, given_ptrs))
        return nb::none();
    return launch(input_ptrs, items, scalars, stream, &given_ptrs, outputs);
}

bool FastCall::match_inputs(PyObject *seq, Scratch<uintptr_t> &input_ptrs,
                            Scratch<PyObject *> &items, Scratch<ScalarValue> &scalars) const {
    const bool is_list = PyList_Check(seq), is_tuple = PyTuple_Check(seq);
    if (!is_list && !is_tuple)
        return false;
    const Py_ssize_t n = is_list ? PyList_Size(seq) : PyTuple_Size(seq);
    if (cleared_ || n != Py_ssize_t(inputs_.size()))
        return false;
    for (size_t i = 0; i < inputs_.size(); ++i) {
        PyObject *t = is_list ? PyList_GetItem(seq, Py_ssize_t(i))
                              : PyTuple_GetItem(seq, Py_ssize_t(i));
        items[i] = t;
        if (inputs_[i].scalar) {
            input_ptrs[i] = 0;
            if (reinterpret_cast<PyObject *>(Py_TYPE(t)) != inputs_[i].type.ptr())
                return false;
        } else if (!matches(inputs_[i], t, input_ptrs[i])) {
            return false;
        }
    }
    if (scalar_count_ > 0) {  // a fusion without scalar inputs skips all of this
        if (!scalar_values(seq, items, scalars))
            return false;
        for (const PackedLaunch *l : launches_)
            if (!l->accepts(scalars.data()))
                return false;  // e.g. out of a 32-bit parameter's range: the checked path
                               // says so
    }
    return true;
}

bool FastCall::match_given(PyObject *outputs, const Scratch<uintptr_t> &input_ptrs,
                           Scratch<uintptr_t> &ptrs) const {
    const bool is_list = PyList_Check(outputs), is_tuple = PyTuple_Check(outputs);
    if (!is_list && !is_tuple)
        return false;
    const Py_ssize_t n = is_list ? PyList_Size(outputs) : PyTuple_Size(outputs);
    if (n != Py_ssize_t(given_.layouts.size()))
        return false;
    for (size_t k = 0; k < given_.layouts.size(); ++k) {
        PyObject *t = is_list ? PyList_GetItem(outputs, Py_ssize_t(k))
                              : PyTuple_GetItem(outputs, Py_ssize_t(k));
        if (!matches(given_.layouts[k], t, ptrs[k]))
            return false;
        const uintptr_t low = ptrs[k], high = low + uintptr_t(given_.bytes[k]);
        if (low == high)
            continue;  // an empty array shares no memory
        for (size_t i = 0; i < inputs_.size(); ++i) {
            const auto &[below, above] = given_.input_spans[i];
            if (inputs_[i].scalar || below + above == 0)
                continue;
            const uintptr_t in_low = input_ptrs[i] - uintptr_t(below);
            const uintptr_t in_high = input_ptrs[i] + uintptr_t(above);
            if (low < in_high && in_low < high)
                return false;
        }
        for (size_t j = 0; j < k; ++j) {
            const uintptr_t other_low = ptrs[j];
            const uintptr_t other_high = other_low + uintptr_t(given_.bytes[j]);
            if (other_low != other_high && low < other_high && other_low < high)
                return false;
        }
    }
    return true;
}

nb::object FastCall::launch(const Scratch<uintptr_t> &input_ptrs,
                            const Scratch<PyObject *> &items, const Scratch<ScalarValue> &scalars,
                            nb::handle stream, const Scratch<uintptr_t> *given_ptrs,
                            nb::handle given) const {
    if (framework_ == Framework::CuPy && !on_current_device())
        return nb::none();  // cupy allocates on the current device: take the checked path
    uintptr_t raw_stream = stream.is_none() ? current_stream() : nb::cast<uintptr_t>(stream);
    Scratch<uintptr_t> output_ptrs(outputs_.size()), workspace_ptrs(workspaces_.size());
    nb::list outputs;
    if (given_ptrs != nullptr) {
        for (size_t k = 0; k < outputs_.size(); ++k)
            output_ptrs[k] = (*given_ptrs)[k];
        PyObject *same = PySequence_List(given.ptr());  // the given objects, in a new list
        if (!same)
            raise_current();
        outputs = nb::steal<nb::list>(same);
    } else {
        outputs = allocate(outputs_, items, output_ptrs);
    }
    nb::list workspaces = allocate(workspaces_, items, workspace_ptrs);
    for (const PackedLaunch *l : launches_)
        l->launch(raw_stream, input_ptrs.data(), output_ptrs.data(), workspace_ptrs.data(),
                  scalars.data());
    return nb::make_tuple(tag_, outputs);
}

void FastCall::clear() {
    cleared_ = true;
    inputs_.clear();
    outputs_.clear();
    workspaces_.clear();
    launches_.clear();
    launch_objects_.clear();
    given_ = GivenOutputs();
    takes_given_ = false;
    stream_callable_ = stream_args_ = device_callable_ = tag_ = scalars_ = nb::none();
    direct_scalars_.clear();
    scalar_count_ = 0;
}

void FastCall::buffers(const std::vector<nb::tuple> &specs, std::vector<BufferSpec> &out) {
    for (nb::tuple t : specs) {
        if (t.size() != 4)
            throw nb::value_error("FastCall: a buffer spec is (callable, args, kwargs, like)");
        out.push_back({nb::borrow(t[0]), nb::borrow(t[1]), nb::borrow(t[2]),
                       nb::cast<int>(t[3])});
    }
}

bool FastCall::matches(const InputSpec &spec, PyObject *t, uintptr_t &ptr) const {
    return layout_matches(framework_, spec, t, ptr);
}

bool layout_matches(Framework framework, const InputSpec &spec, PyObject *t, uintptr_t &ptr) {
    if (reinterpret_cast<PyObject *>(Py_TYPE(t)) != spec.type.ptr())
        return false;
    Ref dtype(get(t, attr_dtype()));
    if (!equal(dtype.p, spec.dtype.ptr()))
        return false;
    Ref shape(get(t, attr_shape()));
    if (!equal(shape.p, spec.shape.ptr()))
        return false;
    if (framework == Framework::Torch) {
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

bool FastCall::direct_scalar_values(const Scratch<PyObject *> &items,
                                    Scratch<ScalarValue> &out) const {
    for (int k = 0; k < scalar_count_; ++k) {
        const auto [position, kind] = direct_scalars_[size_t(k)];
        ScalarValue &v = out[size_t(k)];
        if (!to_scalar(items[size_t(position)], v))
            return false;
        if (kind == 0)
            continue;
        // Rounded to float32 as the scalar program rounds it (kfuse.ir.scalar_eval.to_python:
        // to nearest, a conversion C++ defines for every value within float32's finite
        // range); beyond that range, and for NaN, the program decides.
        if (!(std::fabs(v.f) <= double(std::numeric_limits<float>::max())))
            return false;
        v.f = double(float(v.f));
        v.b = v.f != 0.0;
    }
    return true;
}

bool FastCall::scalar_values(PyObject *inputs, const Scratch<PyObject *> &items,
                             Scratch<ScalarValue> &out) const {
    if (!direct_scalars_.empty() && direct_scalar_values(items, out))
        return true;
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

bool FastCall::on_current_device() const {
    Ref d(PyObject_CallNoArgs(device_callable_.ptr()));
    if (!d)
        raise_current();
    return PyLong_AsLongLong(d.p) == device_;
}

uintptr_t FastCall::current_stream() const {
    Ref s(PyObject_Call(stream_callable_.ptr(), stream_args_.ptr(), nullptr));
    if (!s)
        raise_current();
    if (PyLong_Check(s.p))
        return as_pointer(s.p);
    Ref p(get(s.p, attr_ptr()));  // a cupy Stream
    return as_pointer(p.p);
}

nb::list FastCall::allocate(const std::vector<BufferSpec> &specs,
                            const Scratch<PyObject *> &items, Scratch<uintptr_t> &ptrs) const {
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

}  // namespace kfuse

// kfuse/replay_run.cpp: ReplayRun's allocation and launches (see replay_run.h).
#include "replay_run.h"

namespace kfuse {

namespace {

constexpr uintptr_t kPoolAlign = 256;  // every framework's allocations start at such a boundary

[[noreturn]] void raise_current() { throw nb::python_error(); }

PyObject *or_raise(PyObject *o) {
    if (!o)
        raise_current();
    return o;
}

uintptr_t as_pointer(PyObject *o) {
    unsigned long long v = PyLong_AsUnsignedLongLong(o);
    if (v == (unsigned long long)-1 && PyErr_Occurred())
        raise_current();
    return uintptr_t(v);
}

PyObject *interned(const char *s) { return PyUnicode_InternFromString(s); }
PyObject *attr_data_ptr() { static PyObject *n = interned("data_ptr"); return n; }
PyObject *attr_data() { static PyObject *n = interned("data"); return n; }
PyObject *attr_ptr() { static PyObject *n = interned("ptr"); return n; }
PyObject *attr_launch() { static PyObject *n = interned("launch"); return n; }

// A tuple of `placeholder`'s type (the emulator's TensorArg, a NamedTuple) holding `data` and
// the placeholder's shape and strides: allocated through the type's tp_alloc and filled, as
// tuple.__new__ fills a subclass's instance, without a Python call.
PyObject *tensor_arg_like(PyObject *placeholder, PyObject *data) {
    PyTypeObject *type = Py_TYPE(placeholder);
    if (type == &PyTuple_Type)
        return or_raise(PyTuple_Pack(3, data, PyTuple_GetItem(placeholder, 1),
                                     PyTuple_GetItem(placeholder, 2)));
    auto alloc = reinterpret_cast<allocfunc>(PyType_GetSlot(type, Py_tp_alloc));
    PyObject *arg = or_raise(alloc(type, 3));
    PyObject *items[3] = {data, PyTuple_GetItem(placeholder, 1), PyTuple_GetItem(placeholder, 2)};
    for (Py_ssize_t i = 0; i < 3; ++i) {
        Py_INCREF(items[i]);
        if (PyTuple_SetItem(arg, i, items[i]) < 0) {  // steals, also on failure
            Py_DECREF(arg);
            raise_current();
        }
    }
    return arg;
}

// ctypes.addressof(ctypes.c_char.from_buffer(array)): a writable NumPy array's data pointer
// (kfuse.runtime.arrays.numpy_data_ptr's first way) without a Python frame; 0 with no error
// set where ctypes refuses the buffer.
uintptr_t numpy_pointer(PyObject *array) {
    static PyObject *ctypes = PyImport_ImportModule("ctypes");
    static PyObject *from_buffer =
        ctypes ? PyObject_GetAttrString(PyObject_GetAttrString(ctypes, "c_char"), "from_buffer")
               : nullptr;
    static PyObject *addressof = ctypes ? PyObject_GetAttrString(ctypes, "addressof") : nullptr;
    if (!from_buffer || !addressof) {
        PyErr_Clear();
        return 0;
    }
    PyObject *view = PyObject_CallFunctionObjArgs(from_buffer, array, nullptr);
    if (!view) {
        PyErr_Clear();
        return 0;
    }
    PyObject *address = PyObject_CallFunctionObjArgs(addressof, view, nullptr);
    Py_DECREF(view);
    if (!address) {
        PyErr_Clear();
        return 0;
    }
    const uintptr_t ptr = as_pointer(address);
    Py_DECREF(address);
    return ptr;
}

}  // namespace

ReplayRun::ReplayRun(const std::string &framework, nb::object pointer_of, int table_size,
                     std::vector<int> inputs, std::vector<nb::tuple> checked,
                     std::vector<nb::tuple> exports, nb::object pool,
                     std::vector<nb::object> launches, int scalar_count, nb::object poison)
    : pointer_of_(std::move(pointer_of)), poison_(std::move(poison)), table_size_(table_size),
      inputs_(std::move(inputs)),
      scalar_count_(scalar_count) {
    if (framework == "torch")
        framework_ = Framework::Torch;
    else if (framework == "cupy")
        framework_ = Framework::CuPy;
    else if (framework == "numpy")
        numpy_ = true;
    else
        throw nb::value_error("ReplayRun: framework must be 'torch', 'cupy' or 'numpy'");
    if (numpy_ && pointer_of_.is_none())
        throw nb::value_error("ReplayRun: NumPy arrays need pointer_of");
    auto entry = [&](int k) {
        if (k < 0 || k >= table_size_)
            throw nb::value_error("ReplayRun: a table entry is outside the table");
        return k;
    };
    for (int k : inputs_)
        entry(k);
    for (nb::tuple t : checked) {
        nb::tuple spec = t.size() == 2 ? nb::cast<nb::tuple>(t[1]) : nb::tuple();
        if (numpy_ || spec.size() != 6)
            throw nb::value_error("ReplayRun: a checked array is (slot, (type, dtype, shape, "
                                  "strides, alignment class, device)), for torch or CuPy");
        checked_.emplace_back(entry(nb::cast<int>(t[0])),
                              InputSpec{nb::borrow(spec[0]), nb::borrow(spec[1]),
                                        nb::borrow(spec[2]), nb::borrow(spec[3]),
                                        nb::cast<int64_t>(spec[4]), nb::cast<int64_t>(spec[5])});
    }
    for (nb::tuple t : exports) {
        if (t.size() != 6)
            throw nb::value_error("ReplayRun: an export is (slot, callable, args, kwargs, "
                                  "alignment class, like)");
        const int like = nb::cast<int>(t[5]);
        exports_.push_back({entry(nb::cast<int>(t[0])), nb::borrow(t[1]), nb::borrow(t[2]),
                            nb::borrow(t[3]), nb::cast<int64_t>(t[4]),
                            like < 0 ? -1 : entry(like)});
    }
    if (!pool.is_none()) {
        nb::tuple p = nb::cast<nb::tuple>(pool);
        if (p.size() != 4)
            throw nb::value_error("ReplayRun: the pool is (callable, args, kwargs, entries)");
        pool_callable_ = nb::borrow(p[0]);
        pool_args_ = nb::borrow(p[1]);
        pool_kwargs_ = nb::borrow(p[2]);
        for (nb::handle e : p[3]) {
            nb::tuple t = nb::cast<nb::tuple>(e);
            pooled_.emplace_back(entry(nb::cast<int>(t[0])), nb::cast<int64_t>(t[1]));
        }
    }
    for (nb::object o : launches) {
        Launch l;
        l.holder = o;
        if (nb::isinstance<PackedLaunch>(o)) {
            if (numpy_)
                throw nb::value_error("ReplayRun: NumPy arrays launch on the emulator");
            l.packed = nb::cast<const PackedLaunch *>(o);
            if (l.packed->count(ArgSlot::Source::Input) > table_size_ ||
                l.packed->count(ArgSlot::Source::Scalar) > scalar_count_)
                throw nb::value_error("ReplayRun: a launch reads past the table or the scalars");
        } else {
            nb::tuple t = nb::cast<nb::tuple>(o);
            if (t.size() != 7)
                throw nb::value_error("ReplayRun: an emulated launch is (kernel, grid, block, "
                                      "shared_mem, args, tensor slots, scalar slots)");
            l.holder = nb::borrow(t[0]);
            l.grid = nb::borrow(t[1]);
            l.block = nb::borrow(t[2]);
            l.shared_mem = nb::borrow(t[3]);
            l.args = nb::borrow(nb::cast<nb::list>(t[4]));
            const Py_ssize_t n = Py_ssize_t(nb::len(l.args));
            for (nb::handle s : t[5]) {
                nb::tuple slot = nb::cast<nb::tuple>(s);
                const Py_ssize_t param = nb::cast<Py_ssize_t>(slot[0]);
                PyObject *placeholder =
                    param < 0 || param >= n ? nullptr : PyList_GetItem(l.args.ptr(), param);
                if (!placeholder || !PyTuple_Check(placeholder) || PyTuple_Size(placeholder) != 3)
                    throw nb::value_error("ReplayRun: a tensor slot's parameter holds no "
                                          "(data, shape, strides) placeholder");
                l.tensors.emplace_back(param, entry(nb::cast<int>(slot[1])));
                l.offsets.push_back(nb::cast<int64_t>(slot[2]));
            }
            for (nb::handle s : t[6]) {
                nb::tuple slot = nb::cast<nb::tuple>(s);
                const Py_ssize_t param = nb::cast<Py_ssize_t>(slot[0]);
                const int index = nb::cast<int>(slot[1]);
                if (param < 0 || param >= n || index < 0 || index >= scalar_count_)
                    throw nb::value_error("ReplayRun: a scalar slot is out of range");
                l.scalar_params.emplace_back(param, index);
            }
        }
        launches_.push_back(std::move(l));
    }
}

bool ReplayRun::call(nb::handle slots, nb::handle pointers, nb::handle scalars,
                     uintptr_t stream) const {
    PyObject *slot_list = slots.ptr(), *pointer_list = pointers.ptr();
    if (cleared_ || !PyList_Check(slot_list) || !PyList_Check(pointer_list) ||
        PyList_Size(slot_list) > PyList_Size(pointer_list))
        throw nb::type_error("ReplayRun: slots and pointers must be the replay's lists");
    const Py_ssize_t width = PyList_Size(slot_list);
    for (const Export &e : exports_)
        if (e.slot >= width || e.like >= width)
            throw nb::value_error("ReplayRun: an exported slot is past the slots list");
    for (const auto &[slot, spec] : checked_) {
        if (slot >= width)
            throw nb::value_error("ReplayRun: a checked slot is past the slots list");
        PyObject *known = PyList_GetItem(pointer_list, slot);
        if (known != Py_None) {  // an array a kernel made, in its planned layout
            if (int64_t(as_pointer(known) & 15) != spec.align)
                return false;
            continue;
        }
        uintptr_t ptr = 0;
        if (!layout_matches(framework_, spec, PyList_GetItem(slot_list, slot), ptr))
            return false;
        if (PyList_SetItem(pointer_list, slot, or_raise(PyLong_FromUnsignedLongLong(ptr))) < 0)
            raise_current();
    }
    // The call's scalar values, each in every form a parameter takes.
    Scratch<ScalarValue> values{size_t(scalar_count_)};
    nb::object scalar_tuple;
    if (scalar_count_ > 0) {
        scalar_tuple = nb::steal(or_raise(PySequence_Tuple(scalars.ptr())));
        if (PyTuple_Size(scalar_tuple.ptr()) < scalar_count_)
            throw nb::value_error("ReplayRun: too few scalar values");
        for (int k = 0; k < scalar_count_; ++k)
            if (!to_scalar(PyTuple_GetItem(scalar_tuple.ptr(), k), values[size_t(k)]))
                return false;
        for (const Launch &l : launches_)
            if (l.packed != nullptr && !l.packed->accepts(values.data()))
                return false;
    }
    Scratch<uintptr_t> table{size_t(table_size_)};
    for (int k : inputs_) {
        PyObject *p = PyList_GetItem(pointer_list, k);
        if (!p)
            raise_current();
        table[size_t(k)] = as_pointer(p);
    }
    nb::object pool;  // held until the launches are queued
    if (pool_callable_.is_valid() && !pool_callable_.is_none()) {
        pool = allocate(pool_callable_, pool_args_, pool_kwargs_);
        const uintptr_t base = (pointer(pool.ptr()) + kPoolAlign - 1) & ~(kPoolAlign - 1);
        for (const auto &[k, offset] : pooled_)
            table[size_t(k)] = base + uintptr_t(offset);
    }
    std::vector<nb::object> made;
    made.reserve(exports_.size());
    for (const Export &e : exports_) {
        if (e.like >= 0) {  // callable(slots[like])
            nb::object like = nb::steal(or_raise(PyTuple_Pack(1, PyList_GetItem(slot_list,
                                                                               e.like))));
            made.push_back(allocate(e.callable, like, nb::none()));
        } else {
            made.push_back(allocate(e.callable, e.args, e.kwargs));
        }
        table[size_t(e.slot)] = pointer(made.back().ptr());
        if (e.align >= 0 && int64_t(table[size_t(e.slot)] & 15) != e.align)
            return false;  // the kernels that read it were planned on another class
    }
    nb::object stream_object = nb::steal(or_raise(PyLong_FromUnsignedLongLong(stream)));
    for (const Launch &l : launches_) {
        if (l.packed != nullptr)
            l.packed->launch(stream, table.data(), nullptr, nullptr, values.data());
        else
            launch_emulated(l, table, scalar_tuple.ptr(), stream_object.ptr());
    }
    for (size_t k = 0; k < exports_.size(); ++k) {
        const Py_ssize_t slot = exports_[k].slot;
        PyObject *ptr = or_raise(PyLong_FromUnsignedLongLong(table[size_t(slot)]));
        if (PyList_SetItem(pointer_list, slot, ptr) < 0)
            raise_current();
        if (PyList_SetItem(slot_list, slot, made[k].release().ptr()) < 0)
            raise_current();
    }
    return true;
}

void ReplayRun::launch_emulated(const Launch &l, const Scratch<uintptr_t> &table,
                                PyObject *scalars, PyObject *stream) const {
    nb::object args = nb::steal(or_raise(PyList_GetSlice(l.args.ptr(), 0,
                                                        PyList_Size(l.args.ptr()))));
    for (size_t k = 0; k < l.tensors.size(); ++k) {
        const auto &[param, entry] = l.tensors[k];
        PyObject *placeholder = PyList_GetItem(args.ptr(), param);  // borrowed
        nb::object data = nb::steal(or_raise(
            PyLong_FromUnsignedLongLong(table[size_t(entry)] + uintptr_t(l.offsets[k]))));
        PyObject *arg = tensor_arg_like(placeholder, data.ptr());
        if (PyList_SetItem(args.ptr(), param, arg) < 0)
            raise_current();
    }
    for (const auto &[param, index] : l.scalar_params) {
        PyObject *value = PyTuple_GetItem(scalars, index);
        Py_INCREF(value);
        if (PyList_SetItem(args.ptr(), param, value) < 0)
            raise_current();
    }
    nb::object r = nb::steal(or_raise(PyObject_CallMethodObjArgs(
        l.holder.ptr(), attr_launch(), l.grid.ptr(), l.block.ptr(), l.shared_mem.ptr(), stream,
        args.ptr(), nullptr)));
}

uintptr_t ReplayRun::pointer(PyObject *array) const {
    if (numpy_) {
        if (const uintptr_t ptr = numpy_pointer(array))
            return ptr;
        nb::object p = nb::steal(or_raise(PyObject_CallFunctionObjArgs(pointer_of_.ptr(), array, nullptr)));
        return as_pointer(p.ptr());
    }
    if (framework_ == Framework::Torch) {
        nb::object p = nb::steal(or_raise(PyObject_CallMethodObjArgs(array, attr_data_ptr(),
                                                                    nullptr)));
        return as_pointer(p.ptr());
    }
    nb::object data = nb::steal(or_raise(PyObject_GetAttr(array, attr_data())));
    nb::object p = nb::steal(or_raise(PyObject_GetAttr(data.ptr(), attr_ptr())));
    return as_pointer(p.ptr());
}

nb::object ReplayRun::allocate(const nb::object &callable, const nb::object &args,
                               const nb::object &kwargs) const {
    nb::object array = nb::steal(or_raise(PyObject_Call(
        callable.ptr(), args.ptr(), kwargs.is_none() ? nullptr : kwargs.ptr())));
    if (!poison_.is_none())
        nb::steal(or_raise(PyObject_CallFunctionObjArgs(poison_.ptr(), array.ptr(), nullptr)));
    return array;
}

int ReplayRun::traverse(visitproc visit, void *arg) const {
    Py_VISIT(pointer_of_.ptr());
    Py_VISIT(poison_.ptr());
    for (const auto &[slot, spec] : checked_) {
        Py_VISIT(spec.type.ptr());
        Py_VISIT(spec.dtype.ptr());
        Py_VISIT(spec.shape.ptr());
        Py_VISIT(spec.strides.ptr());
    }
    for (const Export &e : exports_) {
        Py_VISIT(e.callable.ptr());
        Py_VISIT(e.args.ptr());
        Py_VISIT(e.kwargs.ptr());
    }
    Py_VISIT(pool_callable_.ptr());
    Py_VISIT(pool_args_.ptr());
    Py_VISIT(pool_kwargs_.ptr());
    for (const Launch &l : launches_) {
        Py_VISIT(l.holder.ptr());
        Py_VISIT(l.grid.ptr());
        Py_VISIT(l.block.ptr());
        Py_VISIT(l.shared_mem.ptr());
        Py_VISIT(l.args.ptr());
    }
    return 0;
}

void ReplayRun::clear() {
    cleared_ = true;
    pointer_of_ = poison_ = pool_callable_ = pool_args_ = pool_kwargs_ = nb::object();
    checked_.clear();
    exports_.clear();
    pooled_.clear();
    launches_.clear();
    inputs_.clear();
}

}  // namespace kfuse

// bindings/errors.cpp: kfuse's C++ exceptions as Python classes deriving from kfuse.KfuseError.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include "../kfuse/cuda_driver.h"
#include "../kfuse/nvrtc.h"
#include "../kfuse/params_error.h"
#include "bindings.h"

namespace nb = nanobind;

namespace kfuse {
namespace bindings {
namespace {

// Created once at import and kept for the life of the process (module state would need
// more machinery for no benefit: the types are immutable).
PyObject *g_cuda_error = nullptr;
PyObject *g_compile_error = nullptr;
PyObject *g_params_error = nullptr;

PyObject *new_exception(const char *name, const char *doc, nb::handle base, nb::dict attrs) {
    PyObject *type = PyErr_NewExceptionWithDoc(name, doc, base.ptr(), attrs.ptr());
    if (!type)
        throw nb::python_error();
    return type;
}

void raise(PyObject *type, const char *message, nb::dict attrs) {
    nb::object exc = nb::borrow(type)(message);
    for (auto [key, value] : attrs)
        nb::setattr(exc, key, value);
    PyErr_SetObject(type, exc.ptr());
}

}  // namespace

void register_errors(nb::module_ &m) {
    nb::object base = nb::module_::import_("kfuse._errors_base").attr("KfuseError");

    nb::dict cuda_defaults;
    cuda_defaults["code"] = nb::none();
    cuda_defaults["name"] = nb::none();
    cuda_defaults["text"] = nb::none();
    g_cuda_error = new_exception(
        "kfuse._C.CudaError",
        "A CUDA driver call failed, or the driver cannot be used. Attributes: code (the "
        "CUresult), name (e.g. 'CUDA_ERROR_INVALID_VALUE') and text (the driver's description).",
        base, cuda_defaults);

    nb::dict compile_defaults;
    compile_defaults["log"] = nb::none();
    compile_defaults["source"] = nb::none();
    g_compile_error = new_exception(
        "kfuse._C.CompileError",
        "NVRTC could not compile a kernel, or could not be loaded. Attributes: log (NVRTC's "
        "log) and source; the message has both, with the source's lines numbered.",
        base, compile_defaults);

    // Also a ValueError and a TypeError: a bad params value or type raised those before, and
    // code that catches them, as Python's conventions suggest, still does.
    nb::object value_error = nb::borrow(PyExc_ValueError), type_error = nb::borrow(PyExc_TypeError);
    g_params_error = new_exception(
        "kfuse._C.ParamsError",
        "A launch, compile or heuristic parameter was given a value it cannot take (out of "
        "range, or of the wrong type); the message names the field.",
        nb::make_tuple(base, value_error, type_error), nb::dict());
    m.attr("ParamsError") = nb::borrow(g_params_error);
    m.attr("CudaError") = nb::borrow(g_cuda_error);
    m.attr("CompileError") = nb::borrow(g_compile_error);

    nb::register_exception_translator([](const std::exception_ptr &p, void *) {
        try {
            std::rethrow_exception(p);
        } catch (const CudaError &e) {
            nb::dict attrs;
            attrs["code"] = e.code();
            attrs["name"] = e.name();
            attrs["text"] = e.text();
            raise(g_cuda_error, e.what(), attrs);
        } catch (const ParamsError &e) {
            PyErr_SetString(g_params_error, e.what());
        } catch (const CompileError &e) {
            nb::dict attrs;
            attrs["log"] = e.log();
            attrs["source"] = e.source();
            raise(g_compile_error, e.what(), attrs);
        }
    });
}

}  // namespace bindings
}  // namespace kfuse

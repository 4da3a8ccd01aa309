// bindings/fast_call.cpp: PackedLaunch, FastCall and FastCallCache as Python classes (the
// engine is kfuse/fast_call.h; kfuse.runtime.fast_path builds them).
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "../kfuse/fast_call.h"
#include "../kfuse/packed_launch.h"
#include "bindings.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace kfuse {
namespace bindings {

namespace {

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
                      nb::object, nb::object, nb::object, nb::object, nb::object>(),
             "framework"_a, "device"_a, "inputs"_a, "outputs"_a, "workspaces"_a, "launches"_a,
             "stream_callable"_a, "stream_args"_a, "device_callable"_a.none(), "tag"_a.none(),
             "scalars"_a.none() = nb::none(), "given"_a.none() = nb::none(),
             "direct_scalars"_a.none() = nb::none(),
             "scalars: callable(inputs) returning the values of the launches' scalar slots "
             "(required when they have any). given: (a layout spec for each output as the "
             "inputs' are given, each output's size in bytes, (bytes below, bytes above) each "
             "input's data pointer) to take the caller's outputs in call_into. "
             "direct_scalars: (input position, 0 | 1) per scalar slot where each slot's value "
             "is that scalar input's as given (0) or rounded to float32 (1), read without "
             "calling `scalars` (which still decides a float32 slot's value beyond float32's "
             "finite range).")
        .def("__call__", &FastCall::call, "inputs"_a, "stream"_a.none() = nb::none(),
             "(tag, outputs) after launching, or None when the inputs have another layout.")
        .def("call_into", &FastCall::call_into, "inputs"_a, "outputs"_a,
             "stream"_a.none() = nb::none(),
             "(tag, outputs) after launching into `outputs` (a list of arrays, returned as a "
             "new list of the same objects), or None when the inputs have another layout or "
             "an output does not fit exactly.")
        .def("stage_times", &FastCall::stage_times, "inputs"_a, "outputs"_a.none() = nb::none(),
             "repeats"_a = 1000, "between"_a.none() = nb::none(),
             "Where a call's host time goes: {stage: median ns} for 'match inputs', 'match "
             "outputs' (outputs given), 'stream', 'allocate outputs' (none given, freeing "
             "included), 'allocate workspaces', 'launches' (a list, each launch's) and the "
             "whole 'call', each stage run `repeats` times on its own; `between` (e.g. "
             "torch.cuda.synchronize) is called before each launching repetition, untimed.")
        .def_prop_ro("tag", &FastCall::tag);

    nb::class_<FastCallCache>(m, "FastCallCache", "A fusion's FastCalls, newest first.",
                              nb::type_slots(gc_slots<FastCallCache>))
        .def(nb::init<>())
        .def_ro_static("MAX_ENTRIES", &FastCallCache::kMaxEntries,
                       "FastCalls kept; adding one more drops the oldest.")
        .def("add", &FastCallCache::add, "entry"_a)
        .def("__call__", &FastCallCache::call, "inputs"_a, "stream"_a.none() = nb::none())
        .def("call_into", &FastCallCache::call_into, "inputs"_a, "outputs"_a,
             "stream"_a.none() = nb::none())
        .def("__len__", &FastCallCache::size)
        .def("entries", &FastCallCache::entries, "The FastCalls, newest first.")
        .def("clear", &FastCallCache::clear);
}

}  // namespace bindings
}  // namespace kfuse

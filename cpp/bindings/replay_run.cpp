// bindings/replay_run.cpp: ReplayRun as a Python class (the engine is kfuse/replay_run.h;
// kfuse.engine.replay_runs builds them).
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "../kfuse/replay_run.h"
#include "bindings.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace kfuse {
namespace bindings {

namespace {

// Python's cycle collector sees what a ReplayRun holds (its callables, launches and kernels).
int traverse_run(PyObject *self, visitproc visit, void *arg) {
    Py_VISIT(Py_TYPE(self));
    if (!nb::inst_ready(self))
        return 0;
    return nb::inst_ptr<ReplayRun>(self)->traverse(visit, arg);
}

int clear_run(PyObject *self) {
    if (nb::inst_ready(self))
        nb::inst_ptr<ReplayRun>(self)->clear();
    return 0;
}

PyType_Slot run_slots[] = {{Py_tp_traverse, (void *)traverse_run},
                           {Py_tp_clear, (void *)clear_run},
                           {0, nullptr}};

}  // namespace

void register_replay_run(nb::module_ &m) {
    nb::class_<ReplayRun>(m, "ReplayRun",
                          "Consecutive kernel segments of a replayed segmented call, run by "
                          "one call (kfuse.engine.replay_runs).",
                          nb::type_slots(run_slots))
        .def(nb::init<const std::string &, nb::object, int, std::vector<int>,
                      std::vector<nb::tuple>, std::vector<nb::tuple>, nb::object,
                      std::vector<nb::object>, int, nb::object>(),
             "framework"_a, "pointer_of"_a.none(), "table_size"_a, "inputs"_a, "checked"_a,
             "exports"_a,
             "pool"_a.none(), "launches"_a, "scalar_count"_a, "poison"_a.none() = nb::none(),
             "framework: 'torch', 'cupy' or 'numpy'; pointer_of: callable(array) -> data "
             "pointer, for NumPy arrays; table_size: the pointer table's length (the replay's "
             "slots, then pooled buffers); inputs: the table entries read from the call's "
             "pointers; checked: (slot, (type, dtype, shape, strides, alignment class, "
             "device)) per array from a library segment the run reads, matched per call "
             "(torch and CuPy; [] for NumPy); exports: (slot, callable, args, kwargs, alignment class or -1, "
             "like slot or -1: callable(slots[like]) instead) per array the run makes for "
             "later readers; pool: None or (callable, args, kwargs, [(table entry, byte "
             "offset)]) for the buffers only its kernels read; launches: a PackedLaunch "
             "(whose 'input' slots index the table) each, or for the emulator (kernel, grid, "
             "block, shared_mem, args, [(parameter, table entry, byte offset)], [(parameter, "
             "scalar index)]); scalar_count: the scalar values a call passes; poison: "
             "callable(array) called on each exported array and the pool, or None.")
        .def("__call__", &ReplayRun::call, "slots"_a, "pointers"_a, "scalars"_a.none(),
             "stream"_a,
             "Allocate, launch, and write the exported arrays and their data pointers into "
             "`slots` and `pointers`: True, or False before anything is launched when a scalar "
             "does not fit its parameter, a checked array is off its layout, or an exported "
             "array read by a later kernel of the "
             "run is at another alignment class than planned.");
}

}  // namespace bindings
}  // namespace kfuse

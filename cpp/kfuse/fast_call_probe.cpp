// kfuse/fast_call_probe.cpp: FastCall::stage_times, where the host time of a cached call goes
// (tools/host_call_probe.py reports it beside the whole call as Python sees it).
//
// Each stage runs `repeats` times on its own, timed in C++ with the steady clock, so that what
// is reported is the stage's cost and not the cost of a Python loop around it. A stage that
// launches meets an idle GPU: `between` (the framework's synchronize) is called before each
// repetition, outside the timing, as a caller's single call would meet it.
#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "fast_call.h"

namespace kfuse {

namespace {

using Clock = std::chrono::steady_clock;

void call_between(nb::handle between) {
    if (!between.is_valid() || between.is_none())
        return;
    PyObject *r = PyObject_CallNoArgs(between.ptr());
    if (!r)
        throw nb::python_error();
    Py_DECREF(r);
}

// The median of `repeats` timings of `stage()`, in nanoseconds.
template <typename Stage>
double median_ns(int repeats, nb::handle between, Stage &&stage) {
    std::vector<double> times(static_cast<size_t>(repeats));
    for (double &t : times) {
        call_between(between);
        const Clock::time_point start = Clock::now();
        stage();
        t = std::chrono::duration<double, std::nano>(Clock::now() - start).count();
    }
    std::sort(times.begin(), times.end());
    const size_t n = times.size();
    return n % 2 ? times[n / 2] : 0.5 * (times[n / 2 - 1] + times[n / 2]);
}

}  // namespace

nb::dict FastCall::stage_times(nb::handle inputs, nb::handle outputs, int repeats,
                               nb::handle between) const {
    if (repeats < 1)
        throw nb::value_error("stage_times: repeats must be at least 1");
    const bool given = !outputs.is_none();
    if (given && !takes_given_)
        throw nb::value_error("stage_times: this FastCall takes no given outputs");
    Scratch<uintptr_t> input_ptrs(inputs_.size());
    Scratch<PyObject *> items(inputs_.size());
    Scratch<ScalarValue> scalars{size_t(scalar_count_)};
    if (!match_inputs(inputs.ptr(), input_ptrs, items, scalars))
        throw nb::value_error("stage_times: the inputs do not have this FastCall's layout");
    Scratch<uintptr_t> given_ptrs(given_.layouts.size());
    if (given && !match_given(outputs.ptr(), input_ptrs, given_ptrs))
        throw nb::value_error("stage_times: the outputs do not fit this FastCall's layouts");

    nb::dict d;
    // Matching includes the scalar program's values where the fusion has scalar inputs.
    d["match inputs"] = median_ns(repeats, nb::handle(), [&] {
        (void)match_inputs(inputs.ptr(), input_ptrs, items, scalars);
    });
    if (given)
        d["match outputs"] = median_ns(repeats, nb::handle(), [&] {
            (void)match_given(outputs.ptr(), input_ptrs, given_ptrs);
        });
    d["stream"] = median_ns(repeats, nb::handle(), [&] {
        if (framework_ == Framework::CuPy)
            (void)on_current_device();
        (void)current_stream();
    });
    // Allocating includes freeing what was allocated (the caller frees a call's outputs).
    Scratch<uintptr_t> output_ptrs(outputs_.size()), workspace_ptrs(workspaces_.size());
    if (!given)
        d["allocate outputs"] = median_ns(repeats, nb::handle(), [&] {
            nb::list made = allocate(outputs_, items, output_ptrs);
        });
    d["allocate workspaces"] = median_ns(repeats, nb::handle(), [&] {
        nb::list made = allocate(workspaces_, items, workspace_ptrs);
    });

    // Each launch on its own, into buffers allocated once.
    const uintptr_t stream = current_stream();
    nb::list kept_outputs = given ? nb::list() : allocate(outputs_, items, output_ptrs);
    if (given)
        for (size_t k = 0; k < outputs_.size(); ++k)
            output_ptrs[k] = given_ptrs[k];
    nb::list kept_workspaces = allocate(workspaces_, items, workspace_ptrs);
    nb::list launches;
    for (const PackedLaunch *l : launches_)
        launches.append(median_ns(repeats, between, [&] {
            l->launch(stream, input_ptrs.data(), output_ptrs.data(), workspace_ptrs.data(),
                      scalars.data());
        }));
    d["launches"] = launches;

    d["call"] = median_ns(repeats, between, [&] {
        nb::object r = given ? call_into(inputs, outputs, nb::none()) : call(inputs, nb::none());
        if (r.is_none())
            throw nb::value_error("stage_times: the call missed");
    });
    call_between(between);
    return d;
}

}  // namespace kfuse

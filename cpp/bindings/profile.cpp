// bindings/profile.cpp: ProfilerError, the CUPTI session, the record join, and the profiles.
#include <nanobind/nanobind.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "../kfuse/cupti.h"
#include "../kfuse/profiler.h"
#include "bindings.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace kfuse {
namespace bindings {
namespace {

PyObject *g_profiler_error = nullptr;

using profiler::ExternalCorrelation;
using profiler::FusionProfile;
using profiler::FusionRecord;
using profiler::KernelActivity;
using profiler::KernelProfile;
using profiler::SegmentTag;

nb::tuple triple(const int32_t *v) { return nb::make_tuple(v[0], v[1], v[2]); }

void set_triple(int32_t *v, const std::vector<int32_t> &values, const char *what) {
    if (values.size() != 3)
        throw nb::value_error((std::string(what) + " takes 3 values").c_str());
    for (int i = 0; i < 3; ++i)
        v[i] = values[i];
}

nb::tuple as_tuple(const std::vector<int> &v) {
    nb::list l;
    for (int x : v)
        l.append(x);
    return nb::tuple(l);
}

nb::dict kernel_dict(const KernelProfile &k) {
    nb::dict d;
    d["name"] = k.name;
    d["scheduler"] = k.scheduler;
    d["segment_id"] = k.segment_id;
    d["device"] = k.device;
    d["stream"] = k.stream;
    d["correlation_id"] = k.correlation_id;
    d["time_ms"] = k.time_ms;
    d["compile_time_ms"] = k.compile_time_ms;
    d["grid"] = as_tuple(k.grid);
    d["block"] = as_tuple(k.block);
    d["cluster"] = as_tuple(k.cluster);
    d["dynamic_shared_mem"] = k.dynamic_shared_mem;
    d["static_shared_mem"] = k.static_shared_mem;
    d["registers"] = k.registers;
    d["input_bytes"] = k.input_bytes;
    d["output_bytes"] = k.output_bytes;
    d["effective_bandwidth_gbs"] = k.effective_bandwidth_gbs;
    d["percentage_peak_bandwidth"] = k.percentage_peak_bandwidth;
    return d;
}

nb::dict fusion_dict(const FusionProfile &f) {
    nb::dict d;
    d["fusion_id"] = f.fusion_id;
    d["device"] = f.device;
    d["segments"] = f.segments;
    d["kernel_time_ms"] = f.kernel_time_ms;
    d["host_time_ms"] = f.host_time_ms;
    d["compile_time_ms"] = f.compile_time_ms;
    d["input_bytes"] = f.input_bytes;
    d["output_bytes"] = f.output_bytes;
    d["effective_bandwidth_gbs"] = f.effective_bandwidth_gbs;
    d["percentage_peak_bandwidth"] = f.percentage_peak_bandwidth;
    nb::list kernels;
    for (const auto &k : f.kernel_profiles)
        kernels.append(kernel_dict(k));
    d["kernel_profiles"] = kernels;
    return d;
}

void register_records(nb::module_ &m) {
    nb::class_<KernelActivity>(m, "KernelActivity",
                               "One CUPTI kernel record, decoded (internal; tests build these).")
        .def(nb::init<>())
        .def_rw("name", &KernelActivity::name)
        .def_rw("correlation_id", &KernelActivity::correlation_id)
        .def_rw("device", &KernelActivity::device)
        .def_rw("context", &KernelActivity::context)
        .def_rw("stream", &KernelActivity::stream)
        .def_rw("start_ns", &KernelActivity::start_ns)
        .def_rw("end_ns", &KernelActivity::end_ns)
        .def_prop_rw(
            "grid", [](const KernelActivity &k) { return triple(k.grid); },
            [](KernelActivity &k, const std::vector<int32_t> &v) { set_triple(k.grid, v, "grid"); })
        .def_prop_rw(
            "block", [](const KernelActivity &k) { return triple(k.block); },
            [](KernelActivity &k, const std::vector<int32_t> &v) {
                set_triple(k.block, v, "block");
            })
        .def_prop_rw(
            "cluster", [](const KernelActivity &k) { return triple(k.cluster); },
            [](KernelActivity &k, const std::vector<int32_t> &v) {
                set_triple(k.cluster, v, "cluster");
            })
        .def_rw("dynamic_shared_mem", &KernelActivity::dynamic_shared_mem)
        .def_rw("static_shared_mem", &KernelActivity::static_shared_mem)
        .def_rw("registers", &KernelActivity::registers);

    nb::class_<ExternalCorrelation>(m, "ExternalCorrelation",
                                    "One CUPTI external-correlation record (internal).")
        .def(nb::init<>())
        .def_rw("external_kind", &ExternalCorrelation::external_kind)
        .def_rw("external_id", &ExternalCorrelation::external_id)
        .def_rw("correlation_id", &ExternalCorrelation::correlation_id);

    nb::class_<profiler::Activities>(m, "Activities", "The records of one profiling session.")
        .def(nb::init<>())
        .def_rw("kernels", &profiler::Activities::kernels)
        .def_rw("correlations", &profiler::Activities::correlations);

    nb::class_<FusionRecord>(m, "FusionRecord", "One execute seen by a profiler (internal).")
        .def(nb::init<>())
        .def_rw("fusion_id", &FusionRecord::fusion_id)
        .def_rw("device", &FusionRecord::device)
        .def_rw("host_time_ms", &FusionRecord::host_time_ms)
        .def_rw("compile_time_ms", &FusionRecord::compile_time_ms);

    nb::class_<SegmentTag>(m, "SegmentTag",
                           "The launches of one segment and the external id tagging them "
                           "(internal).")
        .def(nb::init<>())
        .def_rw("external_id", &SegmentTag::external_id)
        .def_rw("fusion_id", &SegmentTag::fusion_id)
        .def_rw("segment_id", &SegmentTag::segment_id)
        .def_rw("scheduler", &SegmentTag::scheduler)
        .def_rw("device", &SegmentTag::device)
        .def_rw("input_bytes", &SegmentTag::input_bytes)
        .def_rw("output_bytes", &SegmentTag::output_bytes)
        .def_rw("compile_time_ms", &SegmentTag::compile_time_ms)
        .def_rw("kernel_compile_ms", &SegmentTag::kernel_compile_ms);
}

void register_profiles(nb::module_ &m) {
    nb::class_<KernelProfile>(m, "KernelProfile",
                              "One kernel a fusion ran, as CUPTI measured it. A segment's input "
                              "bytes are charged to its first kernel and its output bytes to "
                              "its last.")
        .def_ro("name", &KernelProfile::name, "The kernel's (demangled) name.")
        .def_ro("scheduler", &KernelProfile::scheduler,
                "The scheduler of its segment ('pointwise', 'reduction', 'expr_eval', 'user').")
        .def_ro("segment_id", &KernelProfile::segment_id)
        .def_ro("device", &KernelProfile::device)
        .def_ro("stream", &KernelProfile::stream, "CUPTI's id of the stream.")
        .def_ro("correlation_id", &KernelProfile::correlation_id)
        .def_ro("time_ms", &KernelProfile::time_ms, "GPU time, end - start.")
        .def_ro("compile_time_ms", &KernelProfile::compile_time_ms,
                "Time spent compiling this kernel in this execute (0 when cached).")
        .def_prop_ro("grid", [](const KernelProfile &k) { return as_tuple(k.grid); })
        .def_prop_ro("block", [](const KernelProfile &k) { return as_tuple(k.block); })
        .def_prop_ro("cluster", [](const KernelProfile &k) { return as_tuple(k.cluster); })
        .def_ro("dynamic_shared_mem", &KernelProfile::dynamic_shared_mem)
        .def_ro("static_shared_mem", &KernelProfile::static_shared_mem)
        .def_ro("registers", &KernelProfile::registers, "Registers per thread.")
        .def_ro("input_bytes", &KernelProfile::input_bytes)
        .def_ro("output_bytes", &KernelProfile::output_bytes)
        .def_ro("effective_bandwidth_gbs", &KernelProfile::effective_bandwidth_gbs)
        .def_ro("percentage_peak_bandwidth", &KernelProfile::percentage_peak_bandwidth)
        .def("to_dict", &kernel_dict, "The fields as a dict (tuples for dimensions).")
        .def("__repr__", &KernelProfile::repr);

    nb::class_<FusionProfile>(m, "FusionProfile",
                              "What one execute ran: its kernels, their total GPU time, the "
                              "host and compile time, and the bandwidth achieved.")
        .def_ro("fusion_id", &FusionProfile::fusion_id, "Position in PythonProfiler.profiles.")
        .def_ro("device", &FusionProfile::device)
        .def_ro("segments", &FusionProfile::segments, "Number of segments (1 if unsegmented).")
        .def_ro("kernel_time_ms", &FusionProfile::kernel_time_ms, "Sum of the kernels' times.")
        .def_ro("host_time_ms", &FusionProfile::host_time_ms, "Wall time of the execute call.")
        .def_ro("compile_time_ms", &FusionProfile::compile_time_ms,
                "Time this execute spent scheduling and compiling (0 when cached).")
        .def_ro("input_bytes", &FusionProfile::input_bytes)
        .def_ro("output_bytes", &FusionProfile::output_bytes)
        .def_ro("effective_bandwidth_gbs", &FusionProfile::effective_bandwidth_gbs,
                "Bytes of every segment's inputs and outputs / kernel_time_ms.")
        .def_ro("percentage_peak_bandwidth", &FusionProfile::percentage_peak_bandwidth)
        .def_ro("kernel_profiles", &FusionProfile::kernel_profiles)
        .def("to_dict", &fusion_dict, "The fields as a dict; kernel_profiles as dicts.")
        .def("__repr__", &FusionProfile::repr);
}

}  // namespace

void register_profile(nb::module_ &m) {
    nb::object base = nb::module_::import_("kfuse._errors_base").attr("KfuseError");
    g_profiler_error = PyErr_NewExceptionWithDoc(
        "kfuse._C.ProfilerError",
        "The profiler (CUPTI) could not be used: no GPU, no CUPTI, another profiler holds "
        "it, or CUPTI reported an error.",
        base.ptr(), nullptr);
    if (!g_profiler_error)
        throw nb::python_error();
    m.attr("ProfilerError") = nb::borrow(g_profiler_error);
    nb::register_exception_translator([](const std::exception_ptr &p, void *) {
        try {
            std::rethrow_exception(p);
        } catch (const ProfilerError &e) {
            PyErr_SetString(g_profiler_error, e.what());
        }
    });

    register_records(m);
    register_profiles(m);

    m.def("set_cupti_library", &cupti::set_library, "path"_a,
          "Use this libcupti (before the profiler first starts; kfuse.profiler finds it).");
    m.def("cupti_library", &cupti::loaded_library,
          "Path of the loaded libcupti, or '' when not loaded yet.");
    m.def("profiler_start", &profiler::start,
          "Take CUPTI and record kernels. Raises ProfilerError (no GPU, no CUPTI, another "
          "profiler holds CUPTI).");
    m.def(
        "profiler_stop",
        [](const std::vector<int> &devices) {
            nb::gil_scoped_release release;
            return profiler::stop(devices);
        },
        "devices"_a, "Wait for `devices`, flush, release CUPTI; the records since start.");
    m.def("profiler_recording", &profiler::recording);
    m.def("profiler_push_external_id", &profiler::push_external_id, "id"_a,
          "Tag this thread's next launches with `id`.");
    m.def("profiler_pop_external_id", &profiler::pop_external_id);
    m.def("join_profiles", &profiler::join, "fusions"_a, "segments"_a, "activities"_a,
          "peak_bandwidth_gbs"_a, "external_kind"_a = cupti::EXTERNAL_CORRELATION_KIND_CUSTOM2,
          "FusionProfiles from kfuse's records and CUPTI's (pure; records in any order).");
    m.def("demangle", &profiler::demangle, "name"_a);
    m.attr("PROFILER_EXTERNAL_KIND") = cupti::EXTERNAL_CORRELATION_KIND_CUSTOM2;
}

}  // namespace bindings
}  // namespace kfuse

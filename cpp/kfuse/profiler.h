// kfuse/profiler.h: CUPTI activity recording, and the join of its records into fusion profiles.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "cupti.h"

namespace kfuse {
namespace profiler {

// ---- what CUPTI reports ----------------------------------------------------------------------

// One kernel execution (a CUPTI CONCURRENT_KERNEL record), decoded.
struct KernelActivity {
    std::string name;  // as CUPTI gives it (mangled for C++ kernels)
    uint32_t correlation_id = 0;  // of the API call that launched it
    uint32_t device = 0, context = 0, stream = 0;
    uint64_t start_ns = 0, end_ns = 0;
    int32_t grid[3] = {0, 0, 0}, block[3] = {0, 0, 0}, cluster[3] = {0, 0, 0};
    int32_t dynamic_shared_mem = 0, static_shared_mem = 0;
    int32_t registers = 0;
};

// An EXTERNAL_CORRELATION record: API call `correlation_id` ran while `external_id` of
// `external_kind` was pushed on its thread.
struct ExternalCorrelation {
    int external_kind = 0;
    uint64_t external_id = 0;
    uint32_t correlation_id = 0;
};

struct Activities {
    std::vector<KernelActivity> kernels;
    std::vector<ExternalCorrelation> correlations;
};

// ---- what kfuse tells the profiler ----------------------------------------------------------

// One execute (a fusion run, or a KernelExecutor run) inside a profiler's block.
struct FusionRecord {
    int64_t fusion_id = 0;  // position in the profiler's list
    int device = 0;
    double host_time_ms = 0, compile_time_ms = 0;
};

// The launches of one segment, tagged with `external_id` (pushed before them, popped after).
struct SegmentTag {
    uint64_t external_id = 0;
    int64_t fusion_id = 0;
    int segment_id = 0;
    std::string scheduler;
    int device = 0;
    int64_t input_bytes = 0, output_bytes = 0;
    double compile_time_ms = 0;
    // Time spent compiling each kernel of the segment in this execute, by kernel name.
    std::vector<std::pair<std::string, double>> kernel_compile_ms;
};

// ---- the profiles ----------------------------------------------------------------------------

struct KernelProfile {
    std::string name;  // demangled
    std::string scheduler;
    int segment_id = 0;
    int device = 0;
    int64_t stream = 0;
    int64_t correlation_id = 0;
    double time_ms = 0, compile_time_ms = 0;
    std::vector<int> grid, block, cluster;
    int dynamic_shared_mem = 0, static_shared_mem = 0, registers = 0;
    // A segment's inputs are charged to its first kernel, its outputs to its last.
    int64_t input_bytes = 0, output_bytes = 0;
    double effective_bandwidth_gbs = 0, percentage_peak_bandwidth = 0;
    std::string repr() const;
};

struct FusionProfile {
    int64_t fusion_id = 0;
    int device = 0;
    int segments = 0;
    double kernel_time_ms = 0, host_time_ms = 0, compile_time_ms = 0;
    int64_t input_bytes = 0, output_bytes = 0;
    double effective_bandwidth_gbs = 0, percentage_peak_bandwidth = 0;
    std::vector<KernelProfile> kernel_profiles;
    std::string repr() const;  // a small table, one row per kernel
};

// The profile of each fusion in `fusions`, built from CUPTI's records. A kernel belongs to
// the segment whose external id (of kind `external_kind`) CUPTI correlated with its launch;
// kernels without one (launched outside kfuse's segments) and ids kfuse did not tag are
// ignored. Records may come in any order. `peak_bandwidth_gbs` is by device.
std::vector<FusionProfile> join(const std::vector<FusionRecord> &fusions,
                                const std::vector<SegmentTag> &segments,
                                const Activities &activities,
                                const std::map<int, double> &peak_bandwidth_gbs,
                                int external_kind = cupti::EXTERNAL_CORRELATION_KIND_CUSTOM2);

// "void foo<int>(float*)" for a mangled C++ name; other names unchanged.
std::string demangle(const std::string &name);

// ---- the recording session (one per process at a time) -------------------------------------

// Checks for a GPU, loads CUPTI, takes CUPTI (fails when another profiler holds it) and
// enables kernel + external-correlation activity. Throws ProfilerError.
void start();
// Waits for the work on `devices`, flushes CUPTI, disables activity, releases CUPTI, and
// returns the records collected since start().
Activities stop(const std::vector<int> &devices);
bool recording();

// Tag the calling thread's next launches with `id` (kind CUSTOM2) / stop tagging them.
void push_external_id(uint64_t id);
void pop_external_id();

}  // namespace profiler
}  // namespace kfuse

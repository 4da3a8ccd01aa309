// kfuse/profile_join.cpp: CUPTI kernel records + kfuse's segment tags -> FusionProfiles (pure:
// no CUDA, no CUPTI, so it is tested on CPU with synthetic records), and the profiles' text.
#include <cxxabi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <set>

#include "profiler.h"

namespace kfuse {
namespace profiler {
namespace {

using Kernels = std::vector<const KernelActivity *>;

bool starts_earlier(const KernelActivity *a, const KernelActivity *b) {
    if (a->start_ns != b->start_ns)
        return a->start_ns < b->start_ns;
    if (a->end_ns != b->end_ns)
        return a->end_ns < b->end_ns;
    return a->correlation_id < b->correlation_id;
}

double gbs(int64_t bytes, double ms) { return ms > 0 ? double(bytes) / ms / 1e6 : 0.0; }

double percent_of(double value, double peak) { return peak > 0 ? 100.0 * value / peak : 0.0; }

// Which tagged segment each kernel belongs to: external id -> its kernels, by start time.
std::map<uint64_t, Kernels> kernels_by_tag(const std::set<uint64_t> &tagged,
                                           const Activities &activities, int external_kind) {
    // The tagged external ids of each API call, in id order (ids grow with time).
    std::map<uint32_t, std::vector<uint64_t>> ids_of;
    for (const auto &c : activities.correlations)
        if (c.external_kind == external_kind && tagged.count(c.external_id))
            ids_of[c.correlation_id].push_back(c.external_id);
    for (auto &entry : ids_of) {
        auto &ids = entry.second;
        std::sort(ids.begin(), ids.end());
        ids.erase(std::unique(ids.begin(), ids.end()), ids.end());  // a repeated record
    }
    // One API call can run several kernels (a graph launch), so kernels are grouped, never
    // deduplicated, by correlation id.
    std::map<uint32_t, Kernels> kernels_of;
    for (const auto &k : activities.kernels)
        if (ids_of.count(k.correlation_id))
            kernels_of[k.correlation_id].push_back(&k);
    std::map<uint64_t, Kernels> by_tag;
    for (auto &entry : kernels_of) {
        Kernels &ks = entry.second;
        const auto &ids = ids_of[entry.first];
        std::sort(ks.begin(), ks.end(), starts_earlier);
        // A correlation id tagged by several segments was reused by CUPTI (its counter
        // restarts when CUPTI is re-initialized): the launches happened in tag order, so the
        // i-th kernel by start time goes with the i-th tag, and any extra with the last.
        for (size_t i = 0; i < ks.size(); ++i)
            by_tag[ids[std::min(i, ids.size() - 1)]].push_back(ks[i]);
    }
    for (auto &entry : by_tag)
        std::sort(entry.second.begin(), entry.second.end(), starts_earlier);
    return by_tag;
}

KernelProfile kernel_profile(const KernelActivity &k, const SegmentTag &tag) {
    KernelProfile p;
    p.name = demangle(k.name);
    p.scheduler = tag.scheduler;
    p.segment_id = tag.segment_id;
    p.device = int(k.device);
    p.stream = int64_t(k.stream);
    p.correlation_id = int64_t(k.correlation_id);
    p.time_ms = k.end_ns > k.start_ns ? double(k.end_ns - k.start_ns) / 1e6 : 0.0;
    p.grid = {k.grid[0], k.grid[1], k.grid[2]};
    p.block = {k.block[0], k.block[1], k.block[2]};
    p.cluster = {k.cluster[0], k.cluster[1], k.cluster[2]};
    p.dynamic_shared_mem = k.dynamic_shared_mem;
    p.static_shared_mem = k.static_shared_mem;
    p.registers = k.registers;
    return p;
}

std::string fixed(double v, int digits) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
    return buf;
}

std::string dims(const std::vector<int> &d) {
    std::string s = "(";
    for (size_t i = 0; i < d.size(); ++i)
        s += (i ? ", " : "") + std::to_string(d[i]);
    return s + (d.size() == 1 ? ",)" : ")");
}

std::string pad(std::string s, size_t width) {
    if (s.size() > width)
        s = s.substr(0, width - 3) + "...";
    return s + std::string(width - s.size() + 1, ' ');
}

std::string quoted(const std::string &s) {
    std::string out = "'";
    for (char c : s)
        out += (c == '\'' ? std::string("\\'") : std::string(1, c));
    return out + "'";
}

}  // namespace

std::string demangle(const std::string &name) {
    if (name.rfind("_Z", 0) != 0)
        return name;
    int status = 0;
    std::unique_ptr<char, void (*)(void *)> out(
        abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status), std::free);
    return status == 0 && out ? std::string(out.get()) : name;
}

std::vector<FusionProfile> join(const std::vector<FusionRecord> &fusions,
                                const std::vector<SegmentTag> &segments,
                                const Activities &activities,
                                const std::map<int, double> &peak_bandwidth_gbs,
                                int external_kind) {
    std::set<uint64_t> tagged;
    std::map<int64_t, std::vector<const SegmentTag *>> tags_of_fusion;
    for (const auto &tag : segments) {
        tagged.insert(tag.external_id);
        tags_of_fusion[tag.fusion_id].push_back(&tag);
    }
    auto by_tag = kernels_by_tag(tagged, activities, external_kind);
    auto peak = [&](int device) {
        auto it = peak_bandwidth_gbs.find(device);
        return it == peak_bandwidth_gbs.end() ? 0.0 : it->second;
    };

    std::vector<FusionProfile> out;
    for (const auto &record : fusions) {
        FusionProfile f;
        f.fusion_id = record.fusion_id;
        f.device = record.device;
        f.host_time_ms = record.host_time_ms;
        f.compile_time_ms = record.compile_time_ms;
        auto tags = tags_of_fusion[record.fusion_id];
        std::stable_sort(tags.begin(), tags.end(), [](const SegmentTag *a, const SegmentTag *b) {
            return a->segment_id < b->segment_id;
        });
        f.segments = int(tags.size());
        for (const SegmentTag *tag : tags) {
            f.input_bytes += tag->input_bytes;
            f.output_bytes += tag->output_bytes;
            const Kernels &ks = by_tag[tag->external_id];
            std::set<std::string> charged;  // a kernel's compile time is reported once
            for (size_t i = 0; i < ks.size(); ++i) {
                KernelProfile p = kernel_profile(*ks[i], *tag);
                // A segment reads its inputs first and writes its outputs last.
                p.input_bytes = i == 0 ? tag->input_bytes : 0;
                p.output_bytes = i + 1 == ks.size() ? tag->output_bytes : 0;
                p.effective_bandwidth_gbs = gbs(p.input_bytes + p.output_bytes, p.time_ms);
                p.percentage_peak_bandwidth =
                    percent_of(p.effective_bandwidth_gbs, peak(p.device));
                for (const auto &entry : tag->kernel_compile_ms)
                    if (entry.first == ks[i]->name && charged.insert(entry.first).second)
                        p.compile_time_ms = entry.second;
                f.kernel_time_ms += p.time_ms;
                f.kernel_profiles.push_back(std::move(p));
            }
        }
        f.effective_bandwidth_gbs = gbs(f.input_bytes + f.output_bytes, f.kernel_time_ms);
        int device = f.kernel_profiles.empty() ? f.device : f.kernel_profiles.front().device;
        f.percentage_peak_bandwidth = percent_of(f.effective_bandwidth_gbs, peak(device));
        out.push_back(std::move(f));
    }
    return out;
}

std::string KernelProfile::repr() const {
    return "KernelProfile(name=" + quoted(name) + ", scheduler=" + quoted(scheduler) +
           ", segment_id=" + std::to_string(segment_id) + ", device=" + std::to_string(device) +
           ", stream=" + std::to_string(stream) + ", time_ms=" + fixed(time_ms, 4) +
           ", compile_time_ms=" + fixed(compile_time_ms, 1) + ", grid=" + dims(grid) +
           ", block=" + dims(block) + ", cluster=" + dims(cluster) +
           ", shared_mem=" + std::to_string(dynamic_shared_mem) + "+" +
           std::to_string(static_shared_mem) + ", registers=" + std::to_string(registers) +
           ", bytes=" + std::to_string(input_bytes) + "+" + std::to_string(output_bytes) +
           ", effective_bandwidth_gbs=" + fixed(effective_bandwidth_gbs, 1) +
           ", percentage_peak_bandwidth=" + fixed(percentage_peak_bandwidth, 1) + ")";
}

std::string FusionProfile::repr() const {
    std::string s = "FusionProfile(fusion " + std::to_string(fusion_id) + ", device " +
                    std::to_string(device) + ", " + std::to_string(segments) + " segment" +
                    (segments == 1 ? "" : "s") + ", " +
                    std::to_string(kernel_profiles.size()) + " kernel" +
                    (kernel_profiles.size() == 1 ? "" : "s") + ": kernel " +
                    fixed(kernel_time_ms, 4) + " ms, host " + fixed(host_time_ms, 3) +
                    " ms, compile " + fixed(compile_time_ms, 1) + " ms, " +
                    fixed(double(input_bytes + output_bytes) / 1e6, 2) + " MB, " +
                    fixed(effective_bandwidth_gbs, 1) + " GB/s = " +
                    fixed(percentage_peak_bandwidth, 1) + "% of peak)";
    if (kernel_profiles.empty())
        return s;
    s += "\n  " + pad("seg", 3) + pad("scheduler", 16) + pad("kernel", 40) + pad("ms", 9) +
         pad("grid", 16) + pad("block", 14) + pad("regs", 4) + pad("GB/s", 8) + "%peak";
    for (const auto &k : kernel_profiles)
        s += "\n  " + pad(std::to_string(k.segment_id), 3) + pad(k.scheduler, 16) +
             pad(k.name, 40) + pad(fixed(k.time_ms, 4), 9) + pad(dims(k.grid), 16) +
             pad(dims(k.block), 14) + pad(std::to_string(k.registers), 4) +
             pad(fixed(k.effective_bandwidth_gbs, 1), 8) + fixed(k.percentage_peak_bandwidth, 1);
    return s;
}

}  // namespace profiler
}  // namespace kfuse

// kfuse/profiler.cpp: the CUPTI activity session (buffers, record decoding) and the join of
// kernel records with kfuse's segment tags into FusionProfiles.
#include "profiler.h"

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>

#include "cuda_driver.h"

namespace kfuse {
namespace profiler {
namespace {

// ---- record layouts --------------------------------------------------------------------------
// Byte offsets of the fields kfuse reads, from cupti_activity.h. CUpti_ActivityKernel4 (CUDA
// 11.0) to CUpti_ActivityKernel10 (CUDA 13.0) share this prefix; the cluster dimensions came
// with CUpti_ActivityKernel8 (CUPTI API version 18, CUDA 11.8). Records are packed and 8-byte
// aligned; every record starts with its uint32 kind.
namespace kernel_record {
constexpr size_t kind = 0, registers = 6, start = 16, end = 24, device = 40, context = 44,
                 stream = 48, grid = 52, block = 64, static_shared = 76, dynamic_shared = 80,
                 correlation = 92, name = 104, cluster = 176;
constexpr uint32_t cluster_since_version = 18;
}  // namespace kernel_record
namespace correlation_record {
constexpr size_t external_kind = 4, external_id = 8, correlation = 16;
}

template <typename T>
T field(const uint8_t *record, size_t offset) {
    T value;
    std::memcpy(&value, record + offset, sizeof(T));
    return value;
}

KernelActivity decode_kernel(const uint8_t *r, bool has_cluster) {
    namespace o = kernel_record;
    KernelActivity k;
    const char *name = field<const char *>(r, o::name);
    k.name = name ? name : "";
    k.correlation_id = field<uint32_t>(r, o::correlation);
    k.device = field<uint32_t>(r, o::device);
    k.context = field<uint32_t>(r, o::context);
    k.stream = field<uint32_t>(r, o::stream);
    k.start_ns = field<uint64_t>(r, o::start);
    k.end_ns = field<uint64_t>(r, o::end);
    for (int i = 0; i < 3; ++i) {
        k.grid[i] = field<int32_t>(r, o::grid + 4 * i);
        k.block[i] = field<int32_t>(r, o::block + 4 * i);
        k.cluster[i] = has_cluster ? int32_t(field<uint32_t>(r, o::cluster + 4 * i)) : 0;
    }
    k.static_shared_mem = field<int32_t>(r, o::static_shared);
    k.dynamic_shared_mem = field<int32_t>(r, o::dynamic_shared);
    k.registers = field<uint16_t>(r, o::registers);
    return k;
}

ExternalCorrelation decode_correlation(const uint8_t *r) {
    namespace o = correlation_record;
    ExternalCorrelation c;
    c.external_kind = int(field<uint32_t>(r, o::external_kind));
    c.external_id = field<uint64_t>(r, o::external_id);
    c.correlation_id = field<uint32_t>(r, o::correlation);
    return c;
}

// ---- the session -----------------------------------------------------------------------------

// Kinds enabled while recording. DRIVER and RUNTIME records are dropped, but CUPTI only
// emits EXTERNAL_CORRELATION records alongside API records, so both must be on (kfuse
// launches through the driver, framework libraries such as cuBLAS through the runtime).
constexpr int kKinds[] = {cupti::ACTIVITY_KIND_CONCURRENT_KERNEL,
                          cupti::ACTIVITY_KIND_EXTERNAL_CORRELATION,
                          cupti::ACTIVITY_KIND_DRIVER, cupti::ACTIVITY_KIND_RUNTIME};
constexpr size_t kBufferBytes = size_t(8) << 20;

struct State {
    std::mutex session;  // start/stop
    std::mutex records_mutex;  // records, collecting (buffer callbacks run on CUPTI's threads)
    bool collecting = false;
    Activities records;
    cupti::CUpti_SubscriberHandle subscriber = nullptr;
    std::vector<int> enabled;
    bool has_cluster = false;
};

// Leaked on purpose: CUPTI may deliver a buffer while the process exits.
State &state() {
    static State *s = new State();
    return *s;
}

void buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    *buffer = static_cast<uint8_t *>(std::aligned_alloc(8, kBufferBytes));
    *size = *buffer ? kBufferBytes : 0;
    *max_records = 0;  // as many as fit
}

void buffer_completed(void *, uint32_t, uint8_t *buffer, size_t, size_t valid_size) {
    State &s = state();
    Activities decoded;
    try {  // a C callback: nothing may escape
        bool has_cluster;
        {
            std::lock_guard<std::mutex> lock(s.records_mutex);
            has_cluster = s.has_cluster;
        }
        auto next = cupti::sym::cuptiActivityGetNextRecord();
        cupti::Activity *record = nullptr;
        while (buffer && next(buffer, valid_size, &record) == cupti::SUCCESS) {
            const auto *r = reinterpret_cast<const uint8_t *>(record);
            int kind = int(field<uint32_t>(r, kernel_record::kind));
            if (kind == cupti::ACTIVITY_KIND_CONCURRENT_KERNEL ||
                kind == cupti::ACTIVITY_KIND_KERNEL)
                decoded.kernels.push_back(decode_kernel(r, has_cluster));
            else if (kind == cupti::ACTIVITY_KIND_EXTERNAL_CORRELATION)
                decoded.correlations.push_back(decode_correlation(r));
        }
        std::lock_guard<std::mutex> lock(s.records_mutex);
        if (s.collecting) {
            for (auto &k : decoded.kernels)
                s.records.kernels.push_back(std::move(k));
            for (auto &c : decoded.correlations)
                s.records.correlations.push_back(c);
        }
    } catch (...) {
    }
    std::free(buffer);
}

void ignore_callback(void *, int, uint32_t, const void *) {}

// Resolves every CUPTI entry point now, so that the buffer callback never has to throw.
void resolve_all() {
#define KFUSE_RESOLVE_CUPTI_FN(name, params) cupti::sym::name();
    KFUSE_CUPTI_API(KFUSE_RESOLVE_CUPTI_FN)
#undef KFUSE_RESOLVE_CUPTI_FN
}

void disable_activity(State &s) {
    for (auto it = s.enabled.rbegin(); it != s.enabled.rend(); ++it)
        cupti::sym::cuptiActivityDisable()(*it);
    s.enabled.clear();
}

// Undoes a (partial) start: activity off, later buffers dropped, CUPTI released.
void release(State &s) {
    disable_activity(s);
    {
        std::lock_guard<std::mutex> lock(s.records_mutex);
        s.collecting = false;
    }
    if (s.subscriber)
        cupti::sym::cuptiUnsubscribe()(s.subscriber);
    s.subscriber = nullptr;
}

// cuCtxSynchronize on each device, leaving the caller's current context as it was.
void synchronize_devices(const std::vector<int> &devices) {
    if (devices.empty())
        return;
    CUcontext saved = nullptr;
    driver::check(driver::sym::cuCtxGetCurrent()(&saved), "cuCtxGetCurrent");
    for (int d : std::set<int>(devices.begin(), devices.end()))
        if (d >= 0)
            driver::synchronize(d);
    if (saved)
        driver::check(driver::sym::cuCtxSetCurrent()(saved), "cuCtxSetCurrent");
}

}  // namespace

bool recording() {
    State &s = state();
    std::lock_guard<std::mutex> lock(s.session);
    return s.subscriber != nullptr;
}

void start() {
    int count = 0;
    try {
        count = driver::device_count();
    } catch (const CudaError &e) {
        throw ProfilerError(std::string("the profiler needs an NVIDIA GPU, but the CUDA driver "
                                        "cannot be used: ") + e.what());
    }
    if (count == 0)
        throw ProfilerError("the profiler needs an NVIDIA GPU, but the CUDA driver sees none "
                            "(check nvidia-smi and CUDA_VISIBLE_DEVICES)");
    cupti::ensure_loaded();
    resolve_all();

    State &s = state();
    std::lock_guard<std::mutex> lock(s.session);
    if (s.subscriber)
        throw ProfilerError("a kfuse PythonProfiler is already recording in this process; "
                            "profilers do not nest");
    cupti::CUptiResult r = cupti::sym::cuptiSubscribe()(&s.subscriber, ignore_callback, nullptr);
    if (r != cupti::SUCCESS) {
        s.subscriber = nullptr;
        if (r == cupti::ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)
            throw ProfilerError(
                "CUPTI is already in use by another profiler (torch.profiler, Nsight Systems, "
                "Nsight Compute, cuda-gdb or compute-sanitizer): cuptiSubscribe returned " +
                cupti::result_text(r) + ". Stop that profiler, or run without it.");
        cupti::check(r, "cuptiSubscribe");
    }
    try {
        uint32_t version = 0;
        cupti::check(cupti::sym::cuptiGetVersion()(&version), "cuptiGetVersion");
        {
            std::lock_guard<std::mutex> records(s.records_mutex);
            s.records = Activities{};
            s.collecting = true;
            s.has_cluster = version >= kernel_record::cluster_since_version;
        }
        cupti::check(cupti::sym::cuptiActivityRegisterCallbacks()(buffer_requested,
                                                                    buffer_completed),
                     "cuptiActivityRegisterCallbacks");
        for (int kind : kKinds) {
            cupti::check(cupti::sym::cuptiActivityEnable()(kind), "cuptiActivityEnable");
            s.enabled.push_back(kind);
        }
    } catch (...) {
        release(s);
        throw;
    }
}

Activities stop(const std::vector<int> &devices) {
    State &s = state();
    std::lock_guard<std::mutex> lock(s.session);
    if (!s.subscriber)
        throw ProfilerError("the profiler is not recording");
    std::string error;
    try {
        synchronize_devices(devices);
    } catch (const CudaError &e) {
        error = std::string("waiting for the profiled work failed: ") + e.what();
    }
    // Forced: after the synchronization every record is complete, and a partly filled
    // buffer must be delivered too.
    cupti::CUptiResult r = cupti::sym::cuptiActivityFlushAll()(cupti::ACTIVITY_FLAG_FLUSH_FORCED);
    if (r != cupti::SUCCESS && error.empty())
        error = "cuptiActivityFlushAll failed: " + cupti::result_text(r);
    disable_activity(s);
    // Records produced between the flush and the disable.
    cupti::sym::cuptiActivityFlushAll()(cupti::ACTIVITY_FLAG_FLUSH_FORCED);
    release(s);
    Activities out;
    {
        std::lock_guard<std::mutex> records(s.records_mutex);
        out = std::move(s.records);
        s.records = Activities{};
    }
    if (!error.empty())
        throw ProfilerError(error);
    return out;
}

void push_external_id(uint64_t id) {
    cupti::check(cupti::sym::cuptiActivityPushExternalCorrelationId()(
                     cupti::EXTERNAL_CORRELATION_KIND_CUSTOM2, id),
                 "cuptiActivityPushExternalCorrelationId");
}

void pop_external_id() {
    uint64_t last = 0;
    cupti::check(cupti::sym::cuptiActivityPopExternalCorrelationId()(
                     cupti::EXTERNAL_CORRELATION_KIND_CUSTOM2, &last),
                 "cuptiActivityPopExternalCorrelationId");
}

}  // namespace profiler
}  // namespace kfuse

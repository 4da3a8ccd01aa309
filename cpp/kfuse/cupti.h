// kfuse/cupti.h: the lazily loaded CUPTI library (libcupti) and the few CUPTI types kfuse reads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace kfuse {

// The profiler cannot be used (no CUPTI, no GPU, another profiler holds CUPTI) or CUPTI
// reported an error. The bindings raise it as kfuse.ProfilerError.
class ProfilerError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

namespace cupti {

// CUPTI's types, declared here so that no CUPTI header is needed to build. Values are from
// cupti_result.h / cupti_activity.h (CUDA 13.0), stable across releases.
using CUptiResult = int;
using CUpti_SubscriberHandle = struct CUpti_Subscriber_st *;
using CUpti_CallbackFunc = void (*)(void *userdata, int domain, uint32_t cbid, const void *data);
using BufferRequestedFn = void (*)(uint8_t **buffer, size_t *size, size_t *max_records);
using BufferCompletedFn = void (*)(void *context, uint32_t stream_id, uint8_t *buffer,
                                   size_t size, size_t valid_size);
struct Activity;  // CUpti_Activity: a record, read by offset (see profiler.cpp)

constexpr CUptiResult SUCCESS = 0;
constexpr CUptiResult ERROR_MAX_LIMIT_REACHED = 12;
constexpr CUptiResult ERROR_NOT_INITIALIZED = 15;
constexpr CUptiResult ERROR_QUEUE_EMPTY = 18;
constexpr CUptiResult ERROR_INSUFFICIENT_PRIVILEGES = 35;
constexpr CUptiResult ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED = 39;

// CUpti_ActivityKind
constexpr int ACTIVITY_KIND_KERNEL = 3;
constexpr int ACTIVITY_KIND_DRIVER = 4;
constexpr int ACTIVITY_KIND_RUNTIME = 5;
constexpr int ACTIVITY_KIND_CONCURRENT_KERNEL = 10;
constexpr int ACTIVITY_KIND_EXTERNAL_CORRELATION = 39;
// CUpti_ExternalCorrelationKind. PyTorch's profiler uses CUSTOM0 and CUSTOM1; kfuse tags
// its launches with CUSTOM2 so that its ids are never mistaken for another tool's.
constexpr int EXTERNAL_CORRELATION_KIND_CUSTOM2 = 5;
constexpr uint32_t ACTIVITY_FLAG_FLUSH_FORCED = 1;

// Every CUPTI entry point kfuse calls: X(name, parameter list). Each is looked up with dlsym
// the first time it is called, so a CUPTI that lacks one only fails the feature needing it.
#define KFUSE_CUPTI_API(X)                                                                    \
    X(cuptiGetResultString, (CUptiResult, const char **))                                     \
    X(cuptiGetVersion, (uint32_t *))                                                          \
    X(cuptiSubscribe, (CUpti_SubscriberHandle *, CUpti_CallbackFunc, void *))                 \
    X(cuptiUnsubscribe, (CUpti_SubscriberHandle))                                             \
    X(cuptiActivityRegisterCallbacks, (BufferRequestedFn, BufferCompletedFn))                 \
    X(cuptiActivityEnable, (int))                                                             \
    X(cuptiActivityDisable, (int))                                                            \
    X(cuptiActivityFlushAll, (uint32_t))                                                      \
    X(cuptiActivityGetNextRecord, (uint8_t *, size_t, Activity **))                           \
    X(cuptiActivityPushExternalCorrelationId, (int, uint64_t))                                \
    X(cuptiActivityPopExternalCorrelationId, (int, uint64_t *))

// Sets the libcupti to load (kfuse.profiler finds it with cuda.pathfinder or
// KFUSE_CUPTI_LIBRARY). Only before the library is loaded; afterwards a different path is
// an error and the same path a no-op.
void set_library(const std::string &path);
std::string loaded_library();  // "" before the library is loaded

// Loads the library now (throws ProfilerError saying how to install CUPTI when it cannot).
void ensure_loaded();

#define KFUSE_DECLARE_CUPTI_FN(name, params) \
    using name##_fn = CUptiResult(*) params; \
    name##_fn name();
namespace sym {
KFUSE_CUPTI_API(KFUSE_DECLARE_CUPTI_FN)
}
#undef KFUSE_DECLARE_CUPTI_FN

// "CUPTI_ERROR_..." text for a result (CUPTI's own words when the library can say).
std::string result_text(CUptiResult result);

// Throws ProfilerError "<call> failed: <text>" for a failed result.
void check(CUptiResult result, const char *call);

}  // namespace cupti
}  // namespace kfuse

// cuda_emu.h: the CUDA built-ins kfuse kernels use, defined for the host C++ compiler so that
// kfuse.runtime.emulator can run generated kernels on the CPU (threads of a block as fibers).
//
// Included before the kernel source; emu_launch.h (the block scheduler and the exported launch
// entry point) is included after it by the launch shim. Everything here is one translation unit
// per kernel, so globals are `static` and the kernel's `__shared__` variables become
// function-local statics: shared by all fibers of a block, reused by the next block. They all
// live in one section, kf_emu_shared, so that the blocks of a thread-block cluster, which run
// together, each get their own copy (emu_launch.h swaps the section's contents).
#pragma once

// The C <math.h> rather than <cmath>: it provides the same global names (expf, log1p, ...) and
// halves the compile time of a kernel (<cmath> drags in C++17's special functions).
#define _GLIBCXX_INCLUDE_NEXT_C_HEADERS 1
#include <math.h>
#undef _GLIBCXX_INCLUDE_NEXT_C_HEADERS
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <type_traits>
#include <utility>

#ifndef KFUSE_EMULATOR
#define KFUSE_EMULATOR 1
#endif

#define KF_EMU_EXPORT extern "C" __attribute__((visibility("default")))

// ---- qualifiers -------------------------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __shared__ static __attribute__((section("kf_emu_shared")))
#define __cluster_dims__(...)
#define __constant__ static
// `extern __shared__ T name[];` is rewritten by kfuse.runtime.emulator (Python) into a pointer to the
// block's dynamic shared memory, kf_emu_dyn_smem below. __restrict__ is a g++ keyword.

// ---- vector types ---------------------------------------------------------------------------
struct uint3 { unsigned x, y, z; };
struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
struct alignas(8) float2 { float x, y; };
struct float3 { float x, y, z; };
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(8) int2 { int x, y; };
struct int3 { int x, y, z; };
struct alignas(16) int4 { int x, y, z, w; };
struct alignas(8) uint2 { unsigned x, y; };
struct alignas(16) uint4 { unsigned x, y, z, w; };
struct alignas(16) double2 { double x, y; };
struct alignas(16) longlong2 { long long x, y; };

inline float2 make_float2(float x, float y) { return {x, y}; }
inline float3 make_float3(float x, float y, float z) { return {x, y, z}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline int2 make_int2(int x, int y) { return {x, y}; }
inline int3 make_int3(int x, int y, int z) { return {x, y, z}; }
inline int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }
inline uint2 make_uint2(unsigned x, unsigned y) { return {x, y}; }
inline uint3 make_uint3(unsigned x, unsigned y, unsigned z) { return {x, y, z}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
inline double2 make_double2(double x, double y) { return {x, y}; }

// ---- math -------------------------------------------------------------------------------------
// C's classification macros become CUDA's overloaded functions.
#undef isnan
#undef isinf
#undef isfinite
#undef signbit
inline bool isnan(float x) { return __builtin_isnan(x); }
inline bool isnan(double x) { return __builtin_isnan(x); }
inline bool isinf(float x) { return __builtin_isinf(x); }
inline bool isinf(double x) { return __builtin_isinf(x); }
inline bool isfinite(float x) { return __builtin_isfinite(x); }
inline bool isfinite(double x) { return __builtin_isfinite(x); }
inline bool signbit(float x) { return __builtin_signbit(x); }
inline bool signbit(double x) { return __builtin_signbit(x); }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __powf(float x, float y) { return powf(x, y); }
inline float __fdividef(float x, float y) { return x / y; }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }

// CUDA's inverse error functions, which the C library lacks: solved by Newton's method in
// double, on erfc itself where the root is large (erf(x) - y would cancel there) and on erf
// near 0 (where erfc(x) - t would), to within an ulp or two of double; the float forms round
// that (CUDA's erfinvf and erfcinvf are within 2 and 4 ulp of the exact value).
namespace kf_emu {
inline double erfc_root(double t) {  // x > 0 with erfc(x) = t, 0 < t <= 1
    const double two_over_sqrt_pi = 1.1283791670955126;
    // sqrt(-log(t (2 - t))) lies above the root; the first step lands below it, and the
    // steps from there rise to it (erfc is convex for x > 0).
    double x = sqrt(-log(t * (2.0 - t)));
    for (int k = 0; k < 60; ++k) {
        const double slope = two_over_sqrt_pi * exp(-x * x);
        if (slope == 0.0) break;  // t below double's normal range: the start is within an ulp
        const double next = x + (erfc(x) - t) / slope;
        const double moved = fabs(next - x);
        x = next > 0.0 ? next : 0.5 * x;
        if (moved <= 1e-16 * x) break;
    }
    return x;
}
inline double erf_root(double y) {  // x with erf(x) = y, |y| < 0.5
    const double two_over_sqrt_pi = 1.1283791670955126;
    double x = y / two_over_sqrt_pi;
    for (int k = 0; k < 8; ++k) x -= (erf(x) - y) / (two_over_sqrt_pi * exp(-x * x));
    return x;
}
}  // namespace kf_emu
inline double erfinv(double y) {
    if (isnan(y) || y < -1.0 || y > 1.0) return NAN;
    if (y == 1.0 || y == -1.0) return copysign(INFINITY, y);
    if (y == 0.0) return y;
    if (fabs(y) < 0.5) return kf_emu::erf_root(y);
    return copysign(kf_emu::erfc_root(1.0 - fabs(y)), y);  // 1 - |y| is exact here
}
inline double erfcinv(double t) {
    if (isnan(t) || t < 0.0 || t > 2.0) return NAN;
    if (t == 0.0) return INFINITY;
    if (t == 2.0) return -INFINITY;
    if (t > 0.5 && t < 1.5) return erfinv(1.0 - t);  // exact for t in [0.5, 2]
    return t <= 0.5 ? kf_emu::erfc_root(t) : -kf_emu::erfc_root(2.0 - t);
}
inline float erfinvf(float y) { return (float)erfinv((double)y); }
inline float erfcinvf(float t) { return (float)erfcinv((double)t); }

namespace kf_emu {
inline float min_of(float a, float b) { return fminf(a, b); }
inline double min_of(double a, double b) { return fmin(a, b); }
inline float max_of(float a, float b) { return fmaxf(a, b); }
inline double max_of(double a, double b) { return fmax(a, b); }
template <class T> inline T min_of(T a, T b) { return b < a ? b : a; }
template <class T> inline T max_of(T a, T b) { return a < b ? b : a; }
}  // namespace kf_emu

// CUDA's overloads follow the usual arithmetic conversions; floating forms are fminf/fmaxf.
// The common type of two prvalues (the conditional of two lvalues of one type would be a
// reference: min(i, j) of two int variables).
template <class A, class B>
using common_arith = decltype(true ? static_cast<A>(0) : static_cast<B>(0));
template <class A, class B>
inline common_arith<A, B> min(A a, B b) {
    using R = common_arith<A, B>;
    return kf_emu::min_of(static_cast<R>(a), static_cast<R>(b));
}
template <class A, class B>
inline common_arith<A, B> max(A a, B b) {
    using R = common_arith<A, B>;
    return kf_emu::max_of(static_cast<R>(a), static_cast<R>(b));
}

namespace kf_emu {
template <class To, class From>
inline To bit_cast(From v) {
    static_assert(sizeof(To) == sizeof(From), "bit_cast size mismatch");
    To r;
    std::memcpy(&r, &v, sizeof(To));
    return r;
}
}  // namespace kf_emu

inline unsigned __float_as_uint(float x) { return kf_emu::bit_cast<unsigned>(x); }
inline float __uint_as_float(unsigned x) { return kf_emu::bit_cast<float>(x); }
inline int __float_as_int(float x) { return kf_emu::bit_cast<int>(x); }
inline float __int_as_float(int x) { return kf_emu::bit_cast<float>(x); }
inline long long __double_as_longlong(double x) { return kf_emu::bit_cast<long long>(x); }
inline double __longlong_as_double(long long x) { return kf_emu::bit_cast<double>(x); }
template <class T> inline T __ldg(const T* p) { return *p; }

// ---- execution state ----------------------------------------------------------------------
// Defined in the runtime object (emu_launch.h with KF_EMU_RUNTIME), compiled once and linked
// into every kernel library: each library has its own, hidden, as when they were static here.
#define KF_EMU_HIDDEN __attribute__((visibility("hidden")))
extern KF_EMU_HIDDEN uint3 threadIdx;
extern KF_EMU_HIDDEN uint3 blockIdx;
extern KF_EMU_HIDDEN dim3 blockDim;
extern KF_EMU_HIDDEN dim3 gridDim;
static const int warpSize = 32;

#ifndef KF_EMU_DYN_SMEM_BYTES
#define KF_EMU_DYN_SMEM_BYTES (256 * 1024)
#endif
// One buffer per loaded kernel: launches of one kernel are serialized and blocks run one
// after another, so every block gets it to itself.
alignas(128) extern KF_EMU_HIDDEN unsigned char kf_emu_dyn_smem[KF_EMU_DYN_SMEM_BYTES];

namespace kf_emu {

enum ThreadState : int { RUNNABLE = 0, WAIT_BARRIER = 1, WAIT_WARP = 2, DONE = 3, WAIT_CLUSTER = 4 };
enum WarpOp : int { OP_SYNC = 0, OP_IDX, OP_UP, OP_DOWN, OP_XOR, OP_BALLOT, OP_ANY, OP_ALL };

struct Thread {
    void* sp;  // saved stack pointer while suspended (fiber mode)
    void* uctx;  // ucontext_t* in the portable fallback
    uint3 tid;
    int lane, warp, state;
    unsigned long long result;  // of the warp collective this thread waited on
    const void* spin_addr;  // the last no-effect atomic's address and value, and how many
    unsigned long long spin_value;  // times in a row this thread repeated it
    long long spin_count;
};

struct Warp {
    unsigned existing, exited, arrived;
    unsigned mask[32];
    int op[32], arg[32], width[32];
    unsigned long long value[32];
};

// Thrown to abandon the launch; the message is already in g.err.
struct Abort {};

struct Launch {
    Thread* threads;
    Warp* warps;
    int nthreads, nwarps;
    Thread* cur;
    Thread seq_thread;  // the state of the running thread in sequential mode
    void* sched_sp;
    void* sched_uctx;
    bool fibers;
    void (*thunk)(void**);  // runs the kernel for the current thread from the argument array
    void** argv;
    int live, barrier_waiting, barrier_count, barrier_result_count;
    char* err;
    int errlen;
    int failed;
    unsigned long long bad_ptr;
    long long spin_limit;
    unsigned long long progress;  // bumped at every thread start, switch and collective
    long long spin_total;  // no-effect atomics of the block since anything else happened
};
extern KF_EMU_HIDDEN Launch g;

__attribute__((format(printf, 1, 2), noinline)) static void fail_message(const char* fmt, ...) {
    if (g.failed) return;
    g.failed = 1;
    int n = snprintf(g.err, g.errlen, "thread (%u,%u,%u) of block (%u,%u,%u): ", threadIdx.x,
                     threadIdx.y, threadIdx.z, blockIdx.x, blockIdx.y, blockIdx.z);
    if (n < 0 || n >= g.errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g.err + n, g.errlen - n, fmt, ap);
    va_end(ap);
}

[[noreturn]] __attribute__((noinline)) static void throw_abort() { throw Abort{}; }

// Implemented in emu_launch.h. The first three are defined there (not here) with a marker
// symbol each, so that the compiled kernel exports kf_emu_uses_fibers only if it really calls a
// barrier or warp op; the others are the runtime object's.
static void barrier_arrive(int pred);
static unsigned long long warp_collective(int op, unsigned mask, unsigned long long v, int arg,
                                          int width);
KF_EMU_HIDDEN void spin_yield();
// Thread-block clusters (kf_reductions.cuh's cluster_sync and cluster_load): a barrier over
// every thread of the cluster, and `local` (this block's shared memory) in block `rank`'s.
static void cluster_barrier();
KF_EMU_HIDDEN const void* cluster_map(const void* local, unsigned rank);

// ---- bounds checking (KF_CHECK_BOUNDS, used by kf_memory.cuh when defined) ----------------
template <class T>
struct has_size_member {
    template <class U> static char test(decltype(&U::size));
    template <class U> static long test(...);
    static constexpr bool value = sizeof(test<T>(nullptr)) == 1;
};

__attribute__((noinline)) static void bounds_failure(const void* data, const char* expr,
                                                     long long idx, long long count,
                                                     long long lo, long long hi, bool empty,
                                                     int line) {
    g.bad_ptr = reinterpret_cast<unsigned long long>(data);
    if (empty)
        fail_message("out-of-bounds access to tensor `%s` at element offset %lld (count %lld): "
                     "the tensor is empty (check at line %d)", expr, idx, count, line);
    else
        fail_message("out-of-bounds access to tensor `%s` at element offset %lld (count %lld); "
                     "valid offsets are [%lld, %lld] (check at line %d)",
                     expr, idx, count, lo, hi, line);
    throw_abort();
}

// A vector access (count > 1 elements as one kf::Vec) must be aligned as the GPU's ld/st.v2
// and .v4 need, to its size up to 16 bytes: the host reads misaligned vectors as any other,
// where the GPU stops with a misaligned-address error.
__attribute__((noinline)) static void alignment_failure(const void* data, const char* expr,
                                                        long long idx, long long count,
                                                        long long align, int line) {
    g.bad_ptr = reinterpret_cast<unsigned long long>(data);
    fail_message("misaligned vector access to tensor `%s` at element offset %lld (%lld "
                 "elements as one access, which needs %lld-byte alignment; check at line %d)",
                 expr, idx, count, align, line);
    throw_abort();
}

template <class TT>
inline void check_bounds(const TT& t, long long idx, long long count, const char* expr,
                         int line) {
    if (count < 1) return;
    if (count > 1) {
        const long long bytes = static_cast<long long>(sizeof(*t.data)) * count;
        const long long align = bytes < 16 ? bytes : 16;
        if (reinterpret_cast<unsigned long long>(t.data + idx) % align != 0)
            alignment_failure(static_cast<const void*>(t.data), expr, idx, count, align, line);
    }
    long long lo = 0, hi = 0;
    bool empty = false;
    if constexpr (has_size_member<TT>::value) {
        constexpr int n = sizeof(t.size) / sizeof(t.size[0]);
        for (int d = 0; d < n; ++d) {
            long long size = static_cast<long long>(t.size[d]);
            if (size <= 0) {
                empty = true;
                continue;
            }
            long long span = (size - 1) * static_cast<long long>(t.stride[d]);
            (span < 0 ? lo : hi) += span;
        }
    }
    if (empty || idx < lo || idx + count - 1 > hi)
        bounds_failure(static_cast<const void*>(t.data), expr, idx, count, lo, hi, empty, line);
}

// ---- atomics ------------------------------------------------------------------------------
// Each atomic that leaves memory unchanged counts towards the spin watchdog when the same
// thread repeats it on the same address and sees the same value.
template <class T>
inline void note_atomic(const void* addr, T old, bool changed) {
    Thread* t = g.cur;
    unsigned long long bits = 0;
    std::memcpy(&bits, &old, sizeof(T) < 8 ? sizeof(T) : 8);
    if (changed || addr != t->spin_addr || bits != t->spin_value) {
        if (changed) g.spin_total = 0;
        t->spin_addr = addr;
        t->spin_value = bits;
        t->spin_count = 0;
        return;
    }
    if ((++t->spin_count & 1023) == 0) spin_yield();
}

template <class T, class F>
inline T atomic_update(T* p, F f) {
    T old = __atomic_load_n(p, __ATOMIC_RELAXED);
    T next;
    do {
        next = f(old);
    } while (!__atomic_compare_exchange_n(p, &old, next, false, __ATOMIC_SEQ_CST,
                                          __ATOMIC_RELAXED));
    note_atomic(p, old, std::memcmp(&old, &next, sizeof(T)) != 0);
    return old;
}

template <class T>
inline T atomic_update_float(T* p, T v) {
    using B = typename std::conditional<sizeof(T) == 4, unsigned, unsigned long long>::type;
    B* bp = reinterpret_cast<B*>(p);
    B old = __atomic_load_n(bp, __ATOMIC_RELAXED);
    B next;
    do {
        next = bit_cast<B>(static_cast<T>(bit_cast<T>(old) + v));
    } while (!__atomic_compare_exchange_n(bp, &old, next, false, __ATOMIC_SEQ_CST,
                                          __ATOMIC_RELAXED));
    note_atomic(p, old, old != next);
    return bit_cast<T>(old);
}

}  // namespace kf_emu

#define KF_EMU_INT_ATOMICS(T)                                                                  \
    inline T atomicAdd(T* p, T v) {                                                            \
        return kf_emu::atomic_update(p, [v](T o) { return static_cast<T>(o + v); });           \
    }                                                                                          \
    inline T atomicSub(T* p, T v) {                                                            \
        return kf_emu::atomic_update(p, [v](T o) { return static_cast<T>(o - v); });           \
    }                                                                                          \
    inline T atomicMax(T* p, T v) {                                                            \
        return kf_emu::atomic_update(p, [v](T o) { return o < v ? v : o; });                  \
    }                                                                                          \
    inline T atomicMin(T* p, T v) {                                                            \
        return kf_emu::atomic_update(p, [v](T o) { return v < o ? v : o; });                   \
    }                                                                                          \
    inline T atomicExch(T* p, T v) {                                                           \
        return kf_emu::atomic_update(p, [v](T) { return v; });                                 \
    }                                                                                          \
    inline T atomicCAS(T* p, T cmp, T v) {                                                     \
        return kf_emu::atomic_update(p, [cmp, v](T o) { return o == cmp ? v : o; });          \
    }                                                                                          \
    inline T atomicAnd(T* p, T v) {                                                            \
        return kf_emu::atomic_update(p, [v](T o) { return static_cast<T>(o & v); });           \
    }                                                                                          \
    inline T atomicOr(T* p, T v) {                                                             \
        return kf_emu::atomic_update(p, [v](T o) { return static_cast<T>(o | v); });           \
    }                                                                                          \
    inline T atomicXor(T* p, T v) {                                                            \
        return kf_emu::atomic_update(p, [v](T o) { return static_cast<T>(o ^ v); });           \
    }
KF_EMU_INT_ATOMICS(int)
KF_EMU_INT_ATOMICS(unsigned)
KF_EMU_INT_ATOMICS(unsigned long long)
KF_EMU_INT_ATOMICS(long long)
#undef KF_EMU_INT_ATOMICS

inline unsigned atomicInc(unsigned* p, unsigned v) {
    return kf_emu::atomic_update(p, [v](unsigned o) { return o >= v ? 0u : o + 1u; });
}
inline float atomicAdd(float* p, float v) { return kf_emu::atomic_update_float(p, v); }
inline double atomicAdd(double* p, double v) { return kf_emu::atomic_update_float(p, v); }
inline float atomicExch(float* p, float v) {
    return __uint_as_float(atomicExch(reinterpret_cast<unsigned*>(p), __float_as_uint(v)));
}

inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

// ---- barriers and warp collectives -----------------------------------------------------------
inline void __syncthreads() { kf_emu::barrier_arrive(0); }
inline int __syncthreads_count(int pred) {
    kf_emu::barrier_arrive(pred != 0);
    return kf_emu::g.barrier_result_count;
}
inline int __syncthreads_and(int pred) {
    kf_emu::barrier_arrive(pred != 0);
    return kf_emu::g.barrier_result_count == static_cast<int>(blockDim.x * blockDim.y * blockDim.z);
}
inline int __syncthreads_or(int pred) {
    kf_emu::barrier_arrive(pred != 0);
    return kf_emu::g.barrier_result_count != 0;
}
inline void __syncwarp(unsigned mask = 0xffffffffu) {
    kf_emu::warp_collective(kf_emu::OP_SYNC, mask, 0, 0, 32);
}
inline unsigned __ballot_sync(unsigned mask, int pred) {
    return static_cast<unsigned>(kf_emu::warp_collective(kf_emu::OP_BALLOT, mask, pred != 0, 0, 32));
}
inline int __any_sync(unsigned mask, int pred) {
    return static_cast<int>(kf_emu::warp_collective(kf_emu::OP_ANY, mask, pred != 0, 0, 32));
}
inline int __all_sync(unsigned mask, int pred) {
    return static_cast<int>(kf_emu::warp_collective(kf_emu::OP_ALL, mask, pred != 0, 0, 32));
}
inline unsigned __activemask() {
    const kf_emu::Thread* t = kf_emu::g.cur;
    if (!kf_emu::g.fibers) return 1u << t->lane;
    const kf_emu::Warp& w = kf_emu::g.warps[t->warp];
    return w.existing & ~w.exited;
}

namespace kf_emu {
template <class T>
inline T shuffle(int op, unsigned mask, T v, int arg, int width) {
    static_assert(sizeof(T) <= 8, "warp shuffles move at most 8 bytes");
    unsigned long long bits = 0;
    std::memcpy(&bits, &v, sizeof(T));
    bits = warp_collective(op, mask, bits, arg, width);
    T r;
    std::memcpy(&r, &bits, sizeof(T));
    return r;
}
}  // namespace kf_emu

template <class T>
inline T __shfl_sync(unsigned mask, T v, int src_lane, int width = 32) {
    return kf_emu::shuffle(kf_emu::OP_IDX, mask, v, src_lane, width);
}
template <class T>
inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    return kf_emu::shuffle(kf_emu::OP_UP, mask, v, static_cast<int>(delta), width);
}
template <class T>
inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    return kf_emu::shuffle(kf_emu::OP_DOWN, mask, v, static_cast<int>(delta), width);
}
template <class T>
inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
    return kf_emu::shuffle(kf_emu::OP_XOR, mask, v, lane_mask, width);
}

#define KF_CHECK_BOUNDS(tensor, index, count)                                                   \
    ::kf_emu::check_bounds((tensor), static_cast<long long>(index),                             \
                           static_cast<long long>(count), #tensor, __LINE__)

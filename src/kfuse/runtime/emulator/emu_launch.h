// emu_launch.h: the block scheduler (threads as fibers), barriers, warp collectives and the
// exported launch entry point of an emulated kernel. Included (by emu_prelude.h) before the
// kernel source, whose names it never uses; the launch shim's KF_EMU_KERNEL_ENTRY(name) after
// the kernel then defines the exported C functions.
#pragma once

#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <cstdlib>
#include <new>

#if !defined(__x86_64__) || defined(KF_EMU_UCONTEXT)
#define KF_EMU_USE_UCONTEXT 1
#include <ucontext.h>
#endif

// Each function that only a barrier- or warp-using kernel reaches defines a global marker
// symbol. The functions are `noipa` (never inlined or cloned), so a marker is emitted once,
// and only when the kernel really calls it: Python reads the markers to pick fiber mode.
#define KF_EMU_MARKER(sym)                                                                    \
    asm volatile(".pushsection .data.kf_emu_markers,\"aw\"\n.globl " #sym "\n.type " #sym     \
                 ", @object\n" #sym ":\n.byte 1\n.popsection")

namespace kf_emu {

struct LaunchRequest {
    const unsigned* grid;
    const unsigned* block;
    unsigned long long shared_mem;
    unsigned cluster;  // blocks of a thread-block cluster along x (1: none)
    void** argv;
    int use_fibers;
    long long spin_limit;
    long long stack_bytes;
    double watchdog_seconds;
    char* err;
    int errlen;
    unsigned long long* bad_ptr;
};

// The runtime: everything below up to KernelSignature, compiled once (with KF_EMU_RUNTIME) into
// an object that every kernel library links, so that a kernel's compile only generates the
// kernel and these wrappers. The wrappers stay in the kernel's own code: each defines its
// marker symbol, present only where the kernel really calls it.
KF_EMU_HIDDEN void barrier_arrive_impl(int pred);
KF_EMU_HIDDEN unsigned long long warp_collective_impl(int op, unsigned mask, unsigned long long v,
                                                      int arg, int width);
KF_EMU_HIDDEN void cluster_barrier_impl();
KF_EMU_HIDDEN int launch(void (*thunk)(void**), const LaunchRequest& r);

__attribute__((noipa)) static void barrier_arrive(int pred) {
    KF_EMU_MARKER(kf_emu_uses_fibers_barrier);
    barrier_arrive_impl(pred);
}

__attribute__((noipa)) static unsigned long long warp_collective(int op, unsigned mask,
                                                                 unsigned long long v, int arg,
                                                                 int width) {
    KF_EMU_MARKER(kf_emu_uses_fibers_warp);
    return warp_collective_impl(op, mask, v, arg, width);
}

__attribute__((noipa)) static void cluster_barrier() {
    KF_EMU_MARKER(kf_emu_uses_fibers_cluster);
    cluster_barrier_impl();
}

}  // namespace kf_emu

#ifdef KF_EMU_RUNTIME
uint3 threadIdx;
uint3 blockIdx;
dim3 blockDim;
dim3 gridDim;
alignas(128) unsigned char kf_emu_dyn_smem[KF_EMU_DYN_SMEM_BYTES];

namespace kf_emu {

Launch g;

// ---- context switching -------------------------------------------------------------------
#ifndef KF_EMU_USE_UCONTEXT
// switch_stack(save, to): push the callee-saved registers and the SSE/x87 control words, save
// the stack pointer in *save, load `to` and pop the same frame from there.
asm(R"(
.pushsection .text
.p2align 4
.type kf_emu_switch_stack, @function
kf_emu_switch_stack:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
.size kf_emu_switch_stack, .-kf_emu_switch_stack
.popsection
)");
extern "C" __attribute__((visibility("hidden"))) void kf_emu_switch_stack(void** save, void* to);

static void fiber_entry();

static void start_fiber(Thread* t, char* stack, size_t size) {
    uintptr_t top = (reinterpret_cast<uintptr_t>(stack) + size) & ~static_cast<uintptr_t>(15);
    void** sp = reinterpret_cast<void**>(top);
    *--sp = nullptr;  // fiber_entry's return address: ends backtraces, never used
    *--sp = reinterpret_cast<void*>(&fiber_entry);
    for (int i = 0; i < 6; ++i) *--sp = nullptr;  // rbp rbx r12 r13 r14 r15
    --sp;
    unsigned* csr = reinterpret_cast<unsigned*>(sp);
    asm volatile("stmxcsr %0" : "=m"(csr[0]));
    asm volatile("fnstcw %0" : "=m"(*reinterpret_cast<unsigned short*>(&csr[1])));
    t->sp = sp;
}
static inline void to_fiber(Thread* t) { kf_emu_switch_stack(&g.sched_sp, t->sp); }
static inline void to_scheduler(Thread* t) { kf_emu_switch_stack(&t->sp, g.sched_sp); }
#else
static void fiber_entry();
static void start_fiber(Thread* t, char* stack, size_t size) {
    ucontext_t* uc = static_cast<ucontext_t*>(t->uctx);
    getcontext(uc);
    uc->uc_stack.ss_sp = stack;
    uc->uc_stack.ss_size = size;
    uc->uc_link = nullptr;
    makecontext(uc, &fiber_entry, 0);
}
static inline void to_fiber(Thread* t) {
    swapcontext(static_cast<ucontext_t*>(g.sched_uctx), static_cast<ucontext_t*>(t->uctx));
}
static inline void to_scheduler(Thread* t) {
    swapcontext(static_cast<ucontext_t*>(t->uctx), static_cast<ucontext_t*>(g.sched_uctx));
}
#endif

// ---- running one thread ---------------------------------------------------------------------
static void run_thread() {
    try {
        g.thunk(g.argv);
    } catch (const Abort&) {
        // message already recorded
    } catch (const std::bad_alloc&) {
        fail_message("out of host memory");
    } catch (...) {
        fail_message("unexpected C++ exception");
    }
}

// Called wherever a thread makes progress other than by atomics (start, barrier, warp op).
static void reset_spin(Thread* t) {
    t->spin_addr = nullptr;
    t->spin_count = 0;
    g.spin_total = 0;
}

static void check_barrier() {
    if (g.barrier_waiting == 0 || g.barrier_waiting != g.live) return;
    for (int i = 0; i < g.nthreads; ++i)
        if (g.threads[i].state == WAIT_BARRIER) g.threads[i].state = RUNNABLE;
    g.barrier_result_count = g.barrier_count;
    g.barrier_count = 0;
    g.barrier_waiting = 0;
}

static void complete_warp_group(int wi, unsigned m) {
    Warp& w = g.warps[wi];
    unsigned votes = 0;
    for (unsigned b = m; b; b &= b - 1) {
        int l = __builtin_ctz(b);
        if (w.value[l]) votes |= 1u << l;
    }
    for (unsigned b = m; b; b &= b - 1) {
        int l = __builtin_ctz(b);
        int width = w.width[l], arg = w.arg[l];
        int base = l & ~(width - 1);
        int src = l;
        unsigned long long r = 0;
        switch (w.op[l]) {
            case OP_IDX: src = base + (arg & (width - 1)); break;
            case OP_UP: src = (l - base) - arg >= 0 ? l - arg : l; break;
            case OP_DOWN: src = (l - base) + arg < width ? l + arg : l; break;
            case OP_XOR:
                src = l ^ arg;
                if (src < 0 || src > 31 || (src & ~(width - 1)) > base) src = l;
                break;
            case OP_BALLOT: r = votes; break;
            case OP_ANY: r = votes != 0; break;
            case OP_ALL: r = votes == m; break;
            default: break;
        }
        if (w.op[l] >= OP_IDX && w.op[l] <= OP_XOR)
            r = ((m >> src) & 1u) ? w.value[src] : w.value[l];
        Thread& t = g.threads[wi * 32 + l];
        t.result = r;
        t.state = RUNNABLE;
    }
    w.arrived &= ~m;
}

// Completes lane l's group if every lane of its mask (less lanes that do not exist or have
// exited) has arrived. Only the arriving lane's group can have become complete.
static bool try_complete_lane(int wi, int l) {
    Warp& w = g.warps[wi];
    unsigned m = w.mask[l] & w.existing & ~w.exited;
    if ((w.arrived & m) != m) return false;
    complete_warp_group(wi, m);
    return true;
}

// After a lane exits (or when lanes disagree on masks), any waiting group may be complete.
static bool try_complete_warp(int wi) {
    bool any = false;
    unsigned pending = g.warps[wi].arrived;
    while (pending) {
        int l = __builtin_ctz(pending);
        pending &= ~(1u << l);
        if (try_complete_lane(wi, l)) {
            any = true;
            pending &= g.warps[wi].arrived;
        }
    }
    return any;
}

static void fiber_entry() {
    Thread* t = g.cur;
    run_thread();
    t->state = DONE;
    --g.live;
    g.spin_total = 0;
    g.warps[t->warp].exited |= 1u << t->lane;
    if (!g.failed) {
        try_complete_warp(t->warp);
        check_barrier();
    }
    to_scheduler(t);
    __builtin_unreachable();
}

static inline void note_progress() { __atomic_add_fetch(&g.progress, 1, __ATOMIC_RELAXED); }

static void resume(Thread* t) {
    note_progress();
    g.cur = t;
    threadIdx = t->tid;
    to_fiber(t);
}

[[noreturn]] static void not_in_fiber_mode(const char* what) {
    fail_message("%s called in sequential mode (internal error in kfuse.runtime.emulator)", what);
    throw_abort();
}

void barrier_arrive_impl(int pred) {
    if (!g.fibers) not_in_fiber_mode("__syncthreads");
    note_progress();
    Thread* t = g.cur;
    reset_spin(t);
    t->state = WAIT_BARRIER;
    ++g.barrier_waiting;
    g.barrier_count += pred;
    check_barrier();
    if (t->state != RUNNABLE) to_scheduler(t);
}

unsigned long long warp_collective_impl(int op, unsigned mask, unsigned long long v, int arg,
                                        int width) {
    if (!g.fibers) not_in_fiber_mode("a warp collective");
    if (width <= 0 || width > 32 || (width & (width - 1)) != 0) {
        fail_message("warp shuffle width %d is not a power of two in [1, 32]", width);
        throw_abort();
    }
    note_progress();
    Thread* t = g.cur;
    reset_spin(t);
    Warp& w = g.warps[t->warp];
    int l = t->lane;
    w.mask[l] = mask | (1u << l);
    w.op[l] = op;
    w.arg[l] = arg;
    w.width[l] = width;
    w.value[l] = v;
    w.arrived |= 1u << l;
    t->state = WAIT_WARP;
    try_complete_lane(t->warp, l);
    if (t->state != RUNNABLE) to_scheduler(t);
    return t->result;
}

void spin_yield() {
    Thread* t = g.cur;
    g.spin_total += 1024;
    if (g.spin_total >= g.spin_limit) {
        fail_message("kernel spins waiting for another block (its threads repeated %lld atomic "
                     "operations that changed nothing, this one on address %p, and nothing else "
                     "happened); the emulator runs blocks one after another",
                     g.spin_total, t->spin_addr);
        throw_abort();
    }
    // Let the other threads of the block run: the value may be another thread's to change.
    if (g.fibers) to_scheduler(t);
}

static void report_deadlock() {
    int at_barrier = 0, at_warp = 0, done = 0;
    const Thread *first_barrier = nullptr, *first_warp = nullptr;
    for (int i = 0; i < g.nthreads; ++i) {
        const Thread& t = g.threads[i];
        if (t.state == WAIT_BARRIER) {
            if (!at_barrier++) first_barrier = &t;
        } else if (t.state == WAIT_WARP) {
            if (!at_warp++) first_warp = &t;
        } else if (t.state == DONE) {
            ++done;
        }
    }
    g.failed = 1;
    int n = snprintf(g.err, g.errlen,
                     "block (%u,%u,%u) deadlocked: %d thread(s) wait at __syncthreads, %d at a "
                     "warp collective, %d exited",
                     blockIdx.x, blockIdx.y, blockIdx.z, at_barrier, at_warp, done);
    if (first_warp && n > 0 && n < g.errlen) {
        const Warp& w = g.warps[first_warp->warp];
        n += snprintf(g.err + n, g.errlen - n,
                      "; thread (%u,%u,%u) waits at a warp collective with mask 0x%08x for "
                      "lanes that never arrive (arrived 0x%08x, exited 0x%08x)",
                      first_warp->tid.x, first_warp->tid.y, first_warp->tid.z,
                      w.mask[first_warp->lane], w.arrived, w.exited);
    }
    if (first_barrier && n > 0 && n < g.errlen)
        snprintf(g.err + n, g.errlen - n,
                 "; thread (%u,%u,%u) waits at __syncthreads that other threads never reach",
                 first_barrier->tid.x, first_barrier->tid.y, first_barrier->tid.z);
}

// A block's threads as new fibers on their stacks, and its warps with no lane waiting.
static void start_threads(Thread* threads, Warp* warps, char* stacks, size_t stride,
                          size_t guard) {
    for (int i = 0; i < g.nthreads; ++i) {
        Thread& t = threads[i];
        start_fiber(&t, stacks + i * stride + guard, stride - guard);
        t.state = RUNNABLE;
        reset_spin(&t);
    }
    for (int wi = 0; wi < g.nwarps; ++wi) {
        Warp& w = warps[wi];
        int lanes = g.nthreads - wi * 32;
        w.existing = lanes >= 32 ? 0xffffffffu : ((1u << lanes) - 1u);
        w.exited = 0;
        w.arrived = 0;
    }
}

// Runs the current block's threads until none can go on; whether any ran.
static bool run_until_stuck() {
    bool ran_any = false;
    while (g.live > 0) {
        bool ran = false;
        for (int i = 0; i < g.nthreads; ++i) {
            if (g.threads[i].state != RUNNABLE) continue;
            resume(&g.threads[i]);
            if (g.failed) return true;
            ran = true;
        }
        ran_any |= ran;
        if (!ran) {
            bool unblocked = false;
            for (int wi = 0; wi < g.nwarps; ++wi) unblocked |= try_complete_warp(wi);
            if (!unblocked) break;
        }
    }
    return ran_any;
}

static void run_block_fibers(char* stacks, size_t stride, size_t guard) {
    start_threads(g.threads, g.warps, stacks, stride, guard);
    g.live = g.nthreads;
    g.barrier_waiting = 0;
    g.barrier_count = 0;
    run_until_stuck();
    if (g.live > 0 && !g.failed) report_deadlock();
}

// ---- thread-block clusters -------------------------------------------------------------------
// The C blocks of a cluster run together: one block's threads at a time (its thread, warp and
// barrier state in g, its shared memory in the kf_emu_shared section and kf_emu_dyn_smem),
// the others suspended with their state and shared memory saved in Cluster::blocks. A block
// runs until none of its threads can go on; then the next. When no block can go on and every
// live thread of the cluster waits at the cluster barrier, the barrier opens.
extern "C" char __start_kf_emu_shared[] __attribute__((weak, visibility("hidden")));
extern "C" char __stop_kf_emu_shared[] __attribute__((weak, visibility("hidden")));

struct SuspendedBlock {
    Thread* threads;
    Warp* warps;
    int live, barrier_waiting, barrier_count, barrier_result_count;
    uint3 idx;
    unsigned char* smem;  // the static shared section, then the dynamic shared memory
};

struct Cluster {
    int size;  // blocks; 1 outside a cluster launch
    int current;  // the running block's rank
    int waiting;  // threads at the cluster barrier
    size_t static_bytes, dynamic_bytes;
    SuspendedBlock* blocks;
};
static Cluster cluster;

static size_t static_shared_bytes() {
    return __start_kf_emu_shared ? static_cast<size_t>(__stop_kf_emu_shared - __start_kf_emu_shared)
                                 : 0;
}

static void enter_block(int rank) {
    SuspendedBlock& b = cluster.blocks[rank];
    g.threads = b.threads;
    g.warps = b.warps;
    g.live = b.live;
    g.barrier_waiting = b.barrier_waiting;
    g.barrier_count = b.barrier_count;
    g.barrier_result_count = b.barrier_result_count;
    blockIdx = b.idx;
    cluster.current = rank;
    if (cluster.static_bytes) std::memcpy(__start_kf_emu_shared, b.smem, cluster.static_bytes);
    std::memcpy(kf_emu_dyn_smem, b.smem + cluster.static_bytes, cluster.dynamic_bytes);
}

static void leave_block() {
    SuspendedBlock& b = cluster.blocks[cluster.current];
    b.live = g.live;
    b.barrier_waiting = g.barrier_waiting;
    b.barrier_count = g.barrier_count;
    b.barrier_result_count = g.barrier_result_count;
    if (cluster.static_bytes) std::memcpy(b.smem, __start_kf_emu_shared, cluster.static_bytes);
    std::memcpy(b.smem + cluster.static_bytes, kf_emu_dyn_smem, cluster.dynamic_bytes);
}

void cluster_barrier_impl() {
    if (cluster.size <= 1) {  // not a cluster launch: the block is the cluster
        barrier_arrive_impl(0);
        return;
    }
    note_progress();
    Thread* t = g.cur;
    reset_spin(t);
    t->state = WAIT_CLUSTER;
    ++cluster.waiting;
    to_scheduler(t);
}

const void* cluster_map(const void* local, unsigned rank) {
    const unsigned char* p = static_cast<const unsigned char*>(local);
    if (rank >= static_cast<unsigned>(cluster.size)) {
        fail_message("cluster rank %u out of range: the cluster has %d block(s)", rank,
                     cluster.size);
        throw_abort();
    }
    if (static_cast<int>(rank) == cluster.current) return local;
    if (cluster.blocks[rank].live == 0) {  // its shared memory is gone on a GPU
        fail_message("reads the shared memory of block %u of its cluster, which has exited "
                     "(end the kernel with kf::cluster_sync)", rank);
        throw_abort();
    }
    const unsigned char* image = cluster.blocks[rank].smem;
    const unsigned char* start = reinterpret_cast<const unsigned char*>(__start_kf_emu_shared);
    if (start && p >= start && p < start + cluster.static_bytes) return image + (p - start);
    if (p >= kf_emu_dyn_smem && p < kf_emu_dyn_smem + cluster.dynamic_bytes)
        return image + cluster.static_bytes + (p - kf_emu_dyn_smem);
    fail_message("a cluster's shared-memory load from %p, which is not this block's shared memory",
                 local);
    throw_abort();
}

static void start_block_fibers(SuspendedBlock& b, char* stacks, size_t stride, size_t guard) {
    start_threads(b.threads, b.warps, stacks, stride, guard);
    b.live = g.nthreads;
    b.barrier_waiting = b.barrier_count = b.barrier_result_count = 0;
    // Shared memory starts undefined on a GPU: make reads before writes visible.
    std::memset(b.smem, 0xff, cluster.static_bytes + cluster.dynamic_bytes);
}

// One cluster, its blocks' indices already in cluster.blocks[*].idx.
static void run_cluster_fibers(char* stacks, size_t stride, size_t guard) {
    size_t block_stacks = stride * static_cast<size_t>(g.nthreads);
    for (int r = 0; r < cluster.size; ++r)
        start_block_fibers(cluster.blocks[r], stacks + r * block_stacks, stride, guard);
    cluster.waiting = 0;
    while (!g.failed) {
        bool ran = false;
        int live = 0;
        for (int r = 0; r < cluster.size && !g.failed; ++r) {
            if (cluster.blocks[r].live == 0) continue;
            enter_block(r);
            ran |= run_until_stuck();
            leave_block();
            live += cluster.blocks[r].live;
        }
        if (g.failed || live == 0) return;
        if (ran) continue;
        if (cluster.waiting == live) {  // every live thread is at the cluster barrier
            for (int r = 0; r < cluster.size; ++r)
                for (int i = 0; i < g.nthreads; ++i)
                    if (cluster.blocks[r].threads[i].state == WAIT_CLUSTER)
                        cluster.blocks[r].threads[i].state = RUNNABLE;
            cluster.waiting = 0;
            continue;
        }
        for (int r = 0; r < cluster.size; ++r) {  // name the first block that is stuck
            enter_block(r);
            bool waits = false;
            for (int i = 0; i < g.nthreads; ++i)
                waits |= g.threads[i].state == WAIT_BARRIER || g.threads[i].state == WAIT_WARP;
            if (waits || r == cluster.size - 1) {
                report_deadlock();
                int n = static_cast<int>(strlen(g.err));
                if (n < g.errlen)
                    snprintf(g.err + n, g.errlen - n,
                             " (block %d of a cluster of %d; %d thread(s) of the cluster wait at "
                             "its barrier)",
                             r, cluster.size, cluster.waiting);
                return;
            }
            leave_block();
        }
    }
}

static void run_block_sequential() {
    Thread* t = &g.seq_thread;
    g.cur = t;
    for (int i = 0; i < g.nthreads && !g.failed; ++i) {
        threadIdx = g.threads[i].tid;
        t->tid = threadIdx;
        t->lane = i & 31;
        t->warp = i >> 5;
        reset_spin(t);
        note_progress();
        run_thread();
    }
}

// ---- watchdog: a thread that runs on and on without a barrier or warp op ----------------------
// Spinning on a volatile load cannot be seen from inside, so a helper thread watches g.progress;
// when it stands still for the whole timeout, a signal makes the launching thread jump out of the
// kernel (siglongjmp to launch_locked). kfuse.runtime.emulator runs one launch at a time per process, so
// the process-wide handler installed for the launch belongs to it.
struct Watchdog {
    pthread_t thread, target;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    double seconds;
    bool stop, fired;
};
static sigjmp_buf watchdog_jump;
static volatile sig_atomic_t watchdog_armed, watchdog_delivered;

static int watchdog_signal() { return SIGRTMIN + 5; }

static void watchdog_handler(int) {
    watchdog_delivered = 1;
    if (watchdog_armed) {
        watchdog_armed = 0;
        siglongjmp(watchdog_jump, 1);
    }
}

static double now_seconds() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static void* watchdog_main(void* arg) {
    Watchdog* w = static_cast<Watchdog*>(arg);
    double poll = w->seconds / 4 < 0.1 ? w->seconds / 4 : 0.1;
    unsigned long long last = __atomic_load_n(&g.progress, __ATOMIC_RELAXED);
    double since = now_seconds();
    pthread_mutex_lock(&w->mu);
    while (!w->stop) {
        timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        double t = until.tv_sec + 1e-9 * until.tv_nsec + poll;
        until.tv_sec = static_cast<time_t>(t);
        until.tv_nsec = static_cast<long>((t - until.tv_sec) * 1e9);
        pthread_cond_timedwait(&w->cv, &w->mu, &until);
        if (w->stop) break;
        unsigned long long p = __atomic_load_n(&g.progress, __ATOMIC_RELAXED);
        double now = now_seconds();
        if (p != last) {
            last = p;
            since = now;
        } else if (now - since > w->seconds) {
            w->fired = true;
            pthread_kill(w->target, watchdog_signal());
            break;
        }
    }
    pthread_mutex_unlock(&w->mu);
    return nullptr;
}

static bool watchdog_start(Watchdog* w, double seconds, struct sigaction* old) {
    std::memset(w, 0, sizeof(*w));
    w->seconds = seconds;
    w->target = pthread_self();
    pthread_mutex_init(&w->mu, nullptr);
    pthread_cond_init(&w->cv, nullptr);
    struct sigaction sa;
    std::memset(&sa, 0, sizeof(sa));
    sa.sa_handler = &watchdog_handler;
    sigemptyset(&sa.sa_mask);
    sigaction(watchdog_signal(), &sa, old);
    watchdog_delivered = 0;
    return pthread_create(&w->thread, nullptr, &watchdog_main, w) == 0;
}

static void watchdog_stop(Watchdog* w, const struct sigaction* old) {
    watchdog_armed = 0;
    pthread_mutex_lock(&w->mu);
    w->stop = true;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, nullptr);
    // A signal already sent must land on our (now disarmed) handler, not on the old one.
    while (w->fired && !watchdog_delivered) sched_yield();
    sigaction(watchdog_signal(), old, nullptr);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
}

// ---- integer faults: a kernel dividing an integer by zero (or INT_MIN by -1) ------------------
// A GPU gives some value and goes on; the host CPU raises SIGFPE, whose default action ends the
// user's whole process. While a kernel runs, the launching thread traps it and jumps out of the
// kernel (as the watchdog does), and the launch fails with a message naming the thread.
static sigjmp_buf fault_jump;
static volatile sig_atomic_t fault_armed;

static void fault_handler(int sig) {
    if (fault_armed) {
        fault_armed = 0;
        siglongjmp(fault_jump, 1);
    }
    signal(sig, SIG_DFL);  // not ours (another thread, or outside a kernel): as before
    raise(sig);
}

static void fault_trap_start(struct sigaction* old) {
    struct sigaction sa;
    std::memset(&sa, 0, sizeof(sa));
    sa.sa_handler = &fault_handler;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGFPE, &sa, old);
}

static void fault_trap_stop(const struct sigaction* old) {
    fault_armed = 0;
    sigaction(SIGFPE, old, nullptr);
}

static pthread_mutex_t launch_mutex = PTHREAD_MUTEX_INITIALIZER;


static int launch_locked(void (*thunk)(void**), const LaunchRequest& r) {
    std::memset(&g, 0, sizeof(g));
    std::memset(&cluster, 0, sizeof(cluster));
    const int clustered = r.cluster > 1 ? static_cast<int>(r.cluster) : 1;
    cluster.size = 1;
    g.thunk = thunk;
    g.argv = r.argv;
    g.err = r.err;
    g.errlen = r.errlen;
    g.err[0] = 0;
    g.spin_limit = r.spin_limit;
    g.fibers = r.use_fibers != 0;
    gridDim = dim3(r.grid[0], r.grid[1], r.grid[2]);
    blockDim = dim3(r.block[0], r.block[1], r.block[2]);
    if (r.shared_mem > sizeof(kf_emu_dyn_smem)) {
        snprintf(g.err, g.errlen, "dynamic shared memory of %llu bytes exceeds the emulator's %zu",
                 r.shared_mem, sizeof(kf_emu_dyn_smem));
        return 1;
    }
    if (clustered > 1 && (gridDim.x % clustered != 0 || !r.use_fibers)) {
        snprintf(g.err, g.errlen, "a cluster of %d blocks needs a grid whose x (%u) it divides",
                 clustered, gridDim.x);
        return 1;
    }
    g.nthreads = static_cast<int>(blockDim.x * blockDim.y * blockDim.z);
    g.nwarps = (g.nthreads + 31) / 32;
    // A cluster's blocks each have their threads, warps and stacks (one block's otherwise).
    Thread* all_threads = static_cast<Thread*>(calloc(g.nthreads * clustered, sizeof(Thread)));
    Warp* all_warps = static_cast<Warp*>(calloc(g.nwarps * clustered, sizeof(Warp)));
    g.threads = all_threads;
    g.warps = all_warps;
    size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    size_t stride = ((static_cast<size_t>(r.stack_bytes) + page - 1) / page + 1) * page;
    char* stacks = nullptr;
    void* uctx = nullptr;
    if (g.fibers) {
        void* m = mmap(nullptr, stride * g.nthreads * clustered, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        stacks = m == MAP_FAILED ? nullptr : static_cast<char*>(m);
#ifdef KF_EMU_USE_UCONTEXT
        uctx = calloc(g.nthreads * clustered + 1, sizeof(ucontext_t));
        g.sched_uctx = static_cast<ucontext_t*>(uctx) + g.nthreads * clustered;
#endif
    }
    SuspendedBlock* blocks = nullptr;
    unsigned char* images = nullptr;
    size_t image_bytes = static_shared_bytes() + r.shared_mem;
    if (clustered > 1) {
        blocks = static_cast<SuspendedBlock*>(calloc(clustered, sizeof(SuspendedBlock)));
        images = static_cast<unsigned char*>(malloc(image_bytes * clustered + 1));
    }
    if (!all_threads || !all_warps || (g.fibers && !stacks) ||
        (clustered > 1 && (!blocks || !images))) {
        snprintf(g.err, g.errlen, "out of host memory for %d threads", g.nthreads * clustered);
        g.failed = 1;
    }
    for (int k = 0; k < g.nthreads * clustered && !g.failed; ++k) {
        int i = k % g.nthreads;
        Thread& t = all_threads[k];
        t.tid.x = i % blockDim.x;
        t.tid.y = (i / blockDim.x) % blockDim.y;
        t.tid.z = i / (blockDim.x * blockDim.y);
        t.lane = i & 31;
        t.warp = i >> 5;
#ifdef KF_EMU_USE_UCONTEXT
        t.uctx = static_cast<ucontext_t*>(uctx) + k;
#endif
        if (stacks) mprotect(stacks + k * stride, page, PROT_NONE);  // overflow -> SIGSEGV
    }
    if (clustered > 1 && !g.failed) {
        cluster.size = clustered;
        cluster.static_bytes = static_shared_bytes();
        cluster.dynamic_bytes = r.shared_mem;
        cluster.blocks = blocks;
        for (int b = 0; b < clustered; ++b) {
            blocks[b].threads = all_threads + b * g.nthreads;
            blocks[b].warps = all_warps + b * g.nwarps;
            blocks[b].smem = images + b * image_bytes;
        }
    }
    Watchdog dog;
    struct sigaction old_action, old_fpe;
    bool watched = !g.failed && r.watchdog_seconds > 0 &&
                   watchdog_start(&dog, r.watchdog_seconds, &old_action);
    fault_trap_start(&old_fpe);
    if (sigsetjmp(fault_jump, 1) != 0) {
        watchdog_armed = 0;
        g.failed = 1;
        snprintf(g.err, g.errlen,
                 "thread (%u,%u,%u) of block (%u,%u,%u): integer division by zero (or of the "
                 "least integer by -1) in the kernel (SIGFPE on the host; a GPU would have gone "
                 "on with an undefined value)",
                 threadIdx.x, threadIdx.y, threadIdx.z, blockIdx.x, blockIdx.y, blockIdx.z);
    } else if (watched && sigsetjmp(watchdog_jump, 1) != 0) {
        fault_armed = 0;
        g.failed = 1;
        snprintf(g.err, g.errlen,
                 "thread (%u,%u,%u) of block (%u,%u,%u): kernel spins waiting for another block "
                 "(it ran %.1f s without reaching a barrier, a warp operation or its end); the "
                 "emulator runs blocks one after another, and the threads of a block switch only "
                 "at barriers, warp operations and repeated atomics",
                 threadIdx.x, threadIdx.y, threadIdx.z, blockIdx.x, blockIdx.y, blockIdx.z,
                 r.watchdog_seconds);
    } else {
        watchdog_armed = watched;
        fault_armed = 1;
        for (unsigned z = 0; z < gridDim.z && !g.failed; ++z)
            for (unsigned y = 0; y < gridDim.y && !g.failed; ++y)
                for (unsigned x = 0; x < gridDim.x && !g.failed; x += clustered) {
                    if (clustered > 1) {
                        for (int b = 0; b < clustered; ++b) blocks[b].idx = uint3{x + b, y, z};
                        run_cluster_fibers(stacks, stride, page);
                        continue;
                    }
                    blockIdx = uint3{x, y, z};
                    // Shared memory starts undefined on a GPU: make reads before writes visible.
                    std::memset(kf_emu_dyn_smem, 0xff, r.shared_mem);
                    if (g.fibers)
                        run_block_fibers(stacks, stride, page);
                    else
                        run_block_sequential();
                }
    }
    fault_trap_stop(&old_fpe);
    if (watched) watchdog_stop(&dog, &old_action);
    *r.bad_ptr = g.bad_ptr;
    if (stacks) munmap(stacks, stride * g.nthreads * clustered);
    free(uctx);
    free(all_threads);
    free(all_warps);
    free(blocks);
    free(images);
    std::memset(&cluster, 0, sizeof(cluster));
    g.threads = nullptr;
    g.warps = nullptr;
    return g.failed ? 1 : 0;
}

int launch(void (*thunk)(void**), const LaunchRequest& r) {
    pthread_mutex_lock(&launch_mutex);
    int rc = launch_locked(thunk, r);
    pthread_mutex_unlock(&launch_mutex);
    return rc;
}

}  // namespace kf_emu
#endif  // KF_EMU_RUNTIME

namespace kf_emu {

template <class F>
struct KernelSignature;

template <class... A>
struct KernelSignature<void (*)(A...)> {
    static constexpr int count = static_cast<int>(sizeof...(A));
    static void sizes(long long* out) {
        const long long s[] = {static_cast<long long>(sizeof(A))..., 0};
        for (int i = 0; i < count; ++i) out[i] = s[i];
    }
    template <void (*K)(A...), size_t... I>
    static void call(void** argv, std::index_sequence<I...>) {
        K(*static_cast<A*>(argv[I])...);
    }
    template <void (*K)(A...)>
    static void thunk(void** argv) {
        call<K>(argv, std::index_sequence_for<A...>{});
    }
};

}  // namespace kf_emu

#define KF_EMU_KERNEL_ENTRY(kernel)                                                           \
    using kf_emu_signature = ::kf_emu::KernelSignature<decltype(&kernel)>;                    \
    KF_EMU_EXPORT int kf_emu_abi_version() { return 3; }                                      \
    KF_EMU_EXPORT int kf_emu_param_count() { return kf_emu_signature::count; }                \
    KF_EMU_EXPORT void kf_emu_param_sizes(long long* out) { kf_emu_signature::sizes(out); }   \
    KF_EMU_EXPORT int kf_emu_launch(const unsigned* grid, const unsigned* block,              \
                                    unsigned long long shared_mem, unsigned cluster,          \
                                    void** argv,                                              \
                                    int use_fibers, long long spin_limit,                     \
                                    long long stack_bytes, double watchdog_seconds,           \
                                    char* err, int errlen, unsigned long long* bad_ptr) {     \
        ::kf_emu::LaunchRequest r{grid,        block,       shared_mem, cluster, argv,        \
                                  use_fibers,  spin_limit,  stack_bytes, watchdog_seconds,    \
                                  err,         errlen,      bad_ptr};                         \
        return ::kf_emu::launch(&kf_emu_signature::thunk<&kernel>, r);                        \
    }

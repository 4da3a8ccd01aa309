// tools/launch_floor.cu: what one kernel launch costs the host on this machine, with no
// Python anywhere, to tell the launch's own floor from kfuse's overhead around it (H1).
//
//   nvcc -O2 -o /tmp/launch_floor tools/launch_floor.cu -lcuda && /tmp/launch_floor
//
// Each figure is the median over 40 batches of the host time of 500 back-to-back launches
// of a tiny kernel (divided by 500), with the stream drained between batches so that a full
// launch queue never blocks the launching thread. The last line is the device's side: the
// time per launch of 20000 launches including the final synchronization.
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <vector>

struct Tensor1 {  // the layout of kf::Tensor<float, 1, int>: pointer, size, stride
    float *data;
    int size[1];
    int stride[1];
};

__global__ void h1_kernel(Tensor1 a, Tensor1 b, Tensor1 out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < out.size[0])
        out.data[i] = (a.data[i] + b.data[i]) * 2.0f;
}

__global__ void empty_kernel() {}

#define CHECK(x)                                                                      \
    do {                                                                              \
        auto r_ = (x);                                                                \
        if (r_ != 0) {                                                                \
            std::fprintf(stderr, "%s failed: %d (line %d)\n", #x, int(r_), __LINE__); \
            return 1;                                                                 \
        }                                                                             \
    } while (0)

static double median_us(const std::function<void()> &launch, cudaStream_t stream) {
    constexpr int kBatches = 40, kPerBatch = 500;
    std::vector<double> per_launch;
    for (int b = 0; b < kBatches + 2; ++b) {  // two warm-up batches
        cudaStreamSynchronize(stream);
        auto start = std::chrono::steady_clock::now();
        for (int i = 0; i < kPerBatch; ++i)
            launch();
        auto stop = std::chrono::steady_clock::now();
        if (b >= 2)
            per_launch.push_back(std::chrono::duration<double, std::micro>(stop - start).count() /
                                 kPerBatch);
    }
    cudaStreamSynchronize(stream);
    std::sort(per_launch.begin(), per_launch.end());
    return per_launch[per_launch.size() / 2];
}

int main() {
    CHECK(cudaSetDevice(0));
    CHECK(cudaFree(nullptr));  // creates the primary context
    const int n = 1024;
    float *buf = nullptr;
    CHECK(cudaMalloc(&buf, 3 * n * sizeof(float)));
    CHECK(cudaMemset(buf, 0, 3 * n * sizeof(float)));
    Tensor1 a{buf, {n}, {1}}, b{buf + n, {n}, {1}}, out{buf + 2 * n, {n}, {1}};

    cudaFunction_t rt_h1 = nullptr, rt_empty = nullptr;
    CHECK(cudaGetFuncBySymbol(&rt_h1, (const void *)h1_kernel));
    CHECK(cudaGetFuncBySymbol(&rt_empty, (const void *)empty_kernel));
    CUfunction h1 = reinterpret_cast<CUfunction>(rt_h1);
    CUfunction empty = reinterpret_cast<CUfunction>(rt_empty);

    for (int pass = 0; pass < 2; ++pass) {  // the legacy default stream, then a created one
        cudaStream_t stream = nullptr;
        if (pass == 1)
            CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
        const char *which = pass == 0 ? "legacy default stream" : "non-blocking stream";
        CUstream cs = reinterpret_cast<CUstream>(stream);
        void *params[] = {&a, &b, &out};
        unsigned char packed[3 * sizeof(Tensor1)];
        std::memcpy(packed, &a, sizeof a);
        std::memcpy(packed + sizeof a, &b, sizeof b);
        std::memcpy(packed + 2 * sizeof a, &out, sizeof out);
        size_t packed_size = sizeof packed;
        void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, packed, CU_LAUNCH_PARAM_BUFFER_SIZE,
                         &packed_size, CU_LAUNCH_PARAM_END};

        double kp = median_us([&] { cuLaunchKernel(h1, 8, 1, 1, 128, 1, 1, 0, cs, params, nullptr); },
                              stream);
        double ex = median_us([&] { cuLaunchKernel(h1, 8, 1, 1, 128, 1, 1, 0, cs, nullptr, extra); },
                              stream);
        double rt = median_us([&] { cudaLaunchKernel((const void *)h1_kernel, dim3(8), dim3(128),
                                                     params, 0, stream); },
                              stream);
        double em = median_us([&] { cuLaunchKernel(empty, 1, 1, 1, 32, 1, 1, 0, cs, nullptr, nullptr); },
                              stream);
        CUcontext ctx = nullptr;
        double withctx = median_us([&] {
            cuCtxGetCurrent(&ctx);
            cuLaunchKernel(h1, 8, 1, 1, 128, 1, 1, 0, cs, params, nullptr);
        }, stream);
        std::printf("%s: cuLaunchKernel(params) %.2f us, cuLaunchKernel(extra) %.2f us, "
                    "cudaLaunchKernel %.2f us, empty kernel %.2f us, with cuCtxGetCurrent %.2f us\n",
                    which, kp, ex, rt, em, withctx);

        cudaStreamSynchronize(stream);
        auto start = std::chrono::steady_clock::now();
        for (int i = 0; i < 20000; ++i)
            cuLaunchKernel(h1, 8, 1, 1, 128, 1, 1, 0, cs, params, nullptr);
        cudaStreamSynchronize(stream);
        double total = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() -
                                                                 start).count();
        std::printf("%s: 20000 launches then synchronize: %.2f us per launch\n", which,
                    total / 20000);
        if (stream)
            cudaStreamDestroy(stream);
    }
    CHECK(cudaGetLastError());
    cudaFree(buf);
    return 0;
}

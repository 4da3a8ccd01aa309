// Prototype: outer normalizations in one kernel, the reduced axis split over a thread-block
// cluster, the second pass rereading its inputs (from L2) instead of holding them.
//   nvcc -arch=sm_90 -O3 -std=c++17 outer_reread.cu -o outer_reread && ./outer_reread
// Ops: softmax backward over dim 0 (dx = y * (dy - sum_r y*dy)), batch norm forward over
// the rows of [R, C] (mean, invstd; y = (x - mean) * invstd * w + b), bf16 in and out.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cooperative_groups.h>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <vector>
#include <algorithm>
#include <string>
namespace cg = cooperative_groups;

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("CUDA %s at %d: %s\n", #x, __LINE__, cudaGetErrorString(e_)); exit(1);} } while (0)

__device__ __forceinline__ void unpack(uint4 v, float (&f)[8]) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) { float2 t = __bfloat1622float2(h[i]); f[2*i] = t.x; f[2*i+1] = t.y; }
}
__device__ __forceinline__ uint4 pack(const float (&f)[8]) {
  uint4 v; __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(f[2*i], f[2*i+1]);
  return v;
}

// OP 0: softmax backward (inputs y, dy; one sum). OP 1: batch norm forward (input x; sum and
// sum of squares; weight, bias; outputs y, mean, invstd).
template <int OP, int K, int BX, int BY, int U, bool REV>
__global__ void __launch_bounds__(BX * BY) outer_reread(
    const __nv_bfloat16* __restrict__ a, const __nv_bfloat16* __restrict__ b,
    const float* __restrict__ w, const float* __restrict__ bias,
    __nv_bfloat16* __restrict__ out, float* __restrict__ mean_out, float* __restrict__ invstd_out,
    int R, int C) {
  constexpr int W = BX * 8;          // columns a cluster's group covers
  constexpr int NS = OP == 0 ? 1 : 2; // sums per column
  extern __shared__ float pad_smem[];  // residency control only
  __shared__ float part[BY][NS][W];
  __shared__ float total[NS][W];
  cg::cluster_group cluster = cg::this_cluster();
  const int rank = (int)cluster.block_rank();
  const int group = blockIdx.x / K;
  const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * BX + tx;
  const long long col = (long long)group * W + tx * 8;
  const int rows_per = (R + K - 1) / K;
  const int r0 = rank * rows_per, r1 = min(R, r0 + rows_per);
  float acc[NS][8];
#pragma unroll
  for (int s = 0; s < NS; ++s)
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[s][i] = 0.f;
  for (int r = r0 + ty; r < r1; r += BY * U) {
    uint4 va[U], vb[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int rr = r + u * BY;
      if (rr < r1) {
        va[u] = *reinterpret_cast<const uint4*>(a + (long long)rr * C + col);
        if (OP == 0) vb[u] = *reinterpret_cast<const uint4*>(b + (long long)rr * C + col);
      } else {
        va[u] = make_uint4(0, 0, 0, 0); vb[u] = make_uint4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float fa[8]; unpack(va[u], fa);
      if (OP == 0) {
        float fb[8]; unpack(vb[u], fb);
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[0][i] += fa[i] * fb[i];
      } else {
#pragma unroll
        for (int i = 0; i < 8; ++i) { acc[0][i] += fa[i]; acc[NS - 1][i] += fa[i] * fa[i]; }
      }
    }
  }
#pragma unroll
  for (int s = 0; s < NS; ++s)
#pragma unroll
    for (int i = 0; i < 8; ++i) part[ty][s][tx * 8 + i] = acc[s][i];
  __syncthreads();
  for (int t = tid; t < NS * W; t += BX * BY) {
    const int s = t / W, c = t % W;
    float v = 0.f;
    for (int j = 0; j < BY; ++j) v += part[j][s][c];
    total[s][c] = v;
  }
  cluster.sync();
  float stat[NS][8];
  {
    // every thread sums the K blocks' totals of its 8 columns in rank order
#pragma unroll
    for (int s = 0; s < NS; ++s)
#pragma unroll
      for (int i = 0; i < 8; ++i) stat[s][i] = 0.f;
    for (int k = 0; k < K; ++k) {
      float* remote = cluster.map_shared_rank(&total[0][0], k);
#pragma unroll
      for (int s = 0; s < NS; ++s)
#pragma unroll
        for (int i = 0; i < 8; ++i) stat[s][i] += remote[s * W + tx * 8 + i];
    }
  }
  cluster.sync();  // no block leaves (or reuses total) while another reads it
  float m[8], is[8], ww[8], bb[8];
  if (OP == 1) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      m[i] = stat[0][i] / R;
      const float var = fmaxf(stat[NS - 1][i] / R - m[i] * m[i], 0.f);
      is[i] = rsqrtf(var + 1e-5f);
      ww[i] = w[col + i]; bb[i] = bias[col + i];
    }
    if (rank == 0 && ty == 0) {
#pragma unroll
      for (int i = 0; i < 8; ++i) { mean_out[col + i] = m[i]; invstd_out[col + i] = is[i]; }
    }
  }
  // pass 2: reread (L2), compute, store; REV walks the block's rows backwards (most recent first)
  const int n_iter = (r1 - r0 - ty + BY * U - 1) / (BY * U);
  for (int it0 = 0; it0 < n_iter; ++it0) {
    const int it = REV ? n_iter - 1 - it0 : it0;
    const int r = r0 + ty + it * BY * U;
    uint4 va[U], vb[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int rr = r + u * BY;
      if (rr < r1) {
        va[u] = *reinterpret_cast<const uint4*>(a + (long long)rr * C + col);
        if (OP == 0) vb[u] = *reinterpret_cast<const uint4*>(b + (long long)rr * C + col);
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int rr = r + u * BY;
      if (rr < r1) {
        float fa[8], fo[8]; unpack(va[u], fa);
        if (OP == 0) {
          float fb[8]; unpack(vb[u], fb);
#pragma unroll
          for (int i = 0; i < 8; ++i) fo[i] = fa[i] * (fb[i] - stat[0][i]);
        } else {
#pragma unroll
          for (int i = 0; i < 8; ++i) fo[i] = (fa[i] - m[i]) * is[i] * ww[i] + bb[i];
        }
        *reinterpret_cast<uint4*>(out + (long long)rr * C + col) = pack(fo);
      }
    }
  }
  (void)pad_smem;
}

// ------------------------------------------------------------------------------------------
struct Problem { int op; int R, C; };
struct Bufs { __nv_bfloat16 *a, *b, *out; float *w, *bias, *mean, *invstd; };

typedef void (*KernelFn)(const __nv_bfloat16*, const __nv_bfloat16*, const float*, const float*,
                         __nv_bfloat16*, float*, float*, int, int);
struct Variant { int op, K, BX, BY, U; bool rev; KernelFn fn; };

template <int OP, int K, int BX, int BY, int U, bool REV>
Variant make() { return Variant{OP, K, BX, BY, U, REV, outer_reread<OP, K, BX, BY, U, REV>}; }

template <int OP>
void variants(std::vector<Variant>& v) {
#define V2(K, BX, BY, U) v.push_back(make<OP, K, BX, BY, U, false>()); v.push_back(make<OP, K, BX, BY, U, true>());
  V2(8, 4, 32, 4) V2(8, 4, 64, 2) V2(8, 8, 32, 2) V2(8, 8, 32, 4) V2(8, 8, 64, 2)
  V2(16, 4, 32, 4) V2(16, 4, 64, 2) V2(16, 8, 32, 2) V2(16, 8, 32, 4) V2(16, 8, 64, 2)
  V2(4, 8, 32, 4) V2(4, 8, 64, 2)
  V2(16, 2, 128, 2) V2(16, 2, 64, 4) V2(8, 2, 128, 2) V2(16, 4, 64, 4)
#undef V2
}

static float* flush_buf = nullptr;
static void flush_l2() { CK(cudaMemsetAsync(flush_buf, 0, 256 << 20)); }

static float bf(__nv_bfloat16 h) { return __bfloat162float(h); }

// the float64 reference of every output element and its scale
static void reference(const Problem& p, const std::vector<__nv_bfloat16>& ha, const std::vector<__nv_bfloat16>& hb,
                      const std::vector<float>& hw, const std::vector<float>& hbias,
                      std::vector<double>& ref, std::vector<double>& scale) {
  const size_t n = (size_t)p.R * p.C;
  ref.resize(n); scale.resize(n);
  std::vector<double> s0(p.C, 0.0), s1(p.C, 0.0);
  for (int r = 0; r < p.R; ++r)
    for (int c = 0; c < p.C; ++c) {
      const double x = bf(ha[(size_t)r * p.C + c]);
      if (p.op == 0) s0[c] += x * bf(hb[(size_t)r * p.C + c]);
      else { s0[c] += x; s1[c] += x * x; }
    }
  for (int r = 0; r < p.R; ++r)
    for (int c = 0; c < p.C; ++c) {
      const size_t i = (size_t)r * p.C + c;
      const double x = bf(ha[i]);
      if (p.op == 0) { ref[i] = x * (bf(hb[i]) - s0[c]); scale[i] = std::fabs(x) * (1 + std::fabs(s0[c])); }
      else {
        const double m = s0[c] / p.R, var = s1[c] / p.R - m * m, is = 1 / std::sqrt(var + 1e-5);
        ref[i] = (x - m) * is * hw[c] + hbias[c]; scale[i] = 1 + std::fabs(ref[i]);
      }
    }
}

// the worst error against the reference, relative to its scale
static double check(const std::vector<double>& ref, const std::vector<double>& scale, const Bufs& d) {
  const size_t n = ref.size();
  std::vector<__nv_bfloat16> out(n);
  CK(cudaMemcpy(out.data(), d.out, n * 2, cudaMemcpyDeviceToHost));
  double worst = 0;
  for (size_t i = 0; i < n; ++i) worst = std::max(worst, std::fabs(bf(out[i]) - ref[i]) / (scale[i] + 1e-30));
  return worst;
}

int main(int argc, char** argv) {
  CK(cudaMalloc(&flush_buf, 256 << 20));
  cudaDeviceProp prop; CK(cudaGetDeviceProperties(&prop, 0));
  printf("%s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);
  std::vector<Problem> problems = {{0, 4096, 16384}, {0, 16384, 4096}, {0, 32768, 1024},
                                   {1, 12544, 2048}, {1, 3136 * 64 / 64 * 64, 256}};
  std::vector<Variant> vs;
  variants<0>(vs); variants<1>(vs);
  cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
  for (const Problem& p : problems) {
    const size_t n = (size_t)p.R * p.C;
    std::vector<__nv_bfloat16> ha(n), hb(n);
    std::vector<float> hw(p.C), hbias(p.C);
    srand(1);
    for (size_t i = 0; i < n; ++i) {
      ha[i] = __float2bfloat16(p.op == 0 ? (float)rand() / RAND_MAX / p.R * 2 : (float)rand() / RAND_MAX * 2 - 0.5f);
      hb[i] = __float2bfloat16((float)rand() / RAND_MAX * 2 - 1);
    }
    for (int c = 0; c < p.C; ++c) { hw[c] = 1 + 0.01f * (c % 7); hbias[c] = 0.1f * (c % 5); }
    Bufs d;
    CK(cudaMalloc(&d.a, n * 2)); CK(cudaMalloc(&d.b, n * 2)); CK(cudaMalloc(&d.out, n * 2));
    CK(cudaMalloc(&d.w, p.C * 4)); CK(cudaMalloc(&d.bias, p.C * 4));
    CK(cudaMalloc(&d.mean, p.C * 4)); CK(cudaMalloc(&d.invstd, p.C * 4));
    CK(cudaMemcpy(d.a, ha.data(), n * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d.b, hb.data(), n * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d.w, hw.data(), p.C * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d.bias, hbias.data(), p.C * 4, cudaMemcpyHostToDevice));
    const double bytes = p.op == 0 ? 3.0 * n * 2 : 2.0 * n * 2;
    // copy bandwidth of the same bytes (device-to-device memcpy of bytes / 2)
    std::vector<float> ct;
    for (int rep = 0; rep < 15; ++rep) {
      flush_l2(); CK(cudaEventRecord(e0)); CK(cudaMemcpyAsync(d.out, d.a, n * 2, cudaMemcpyDeviceToDevice));
      CK(cudaEventRecord(e1)); CK(cudaEventSynchronize(e1)); float ms; CK(cudaEventElapsedTime(&ms, e0, e1)); ct.push_back(ms);
    }
    std::sort(ct.begin(), ct.end());
    const double copy_bw = 2.0 * n * 2 / (ct[ct.size() / 2] * 1e-3);
    printf("\n== op %s R=%d C=%d: one-pass bytes %.1f MB, copy %.0f GB/s -> floor %.1f us\n",
           p.op == 0 ? "softmax_bwd_dim0" : "batchnorm_fwd", p.R, p.C, bytes / 1e6, copy_bw / 1e9, bytes / copy_bw * 1e6);
    std::vector<double> ref, scale;
    reference(p, ha, hb, hw, hbias, ref, scale);
    for (const Variant& v : vs) {
      if (v.op != p.op) continue;
      if (p.C % (v.BX * 8)) continue;
      const int groups = p.C / (v.BX * 8);
      if (v.K == 16) CK(cudaFuncSetAttribute((const void*)v.fn, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
      for (int pad_kb : {0, 60, 100}) {
        const int smem = pad_kb * 1024;
        if (smem) CK(cudaFuncSetAttribute((const void*)v.fn, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(groups * v.K); cfg.blockDim = dim3(v.BX, v.BY); cfg.dynamicSmemBytes = smem;
        cudaLaunchAttribute at[1]; at[0].id = cudaLaunchAttributeClusterDimension;
        at[0].val.clusterDim.x = v.K; at[0].val.clusterDim.y = 1; at[0].val.clusterDim.z = 1;
        cfg.attrs = at; cfg.numAttrs = 1;
        int clusters = 0;
        if (cudaOccupancyMaxActiveClusters(&clusters, (void*)v.fn, &cfg) != cudaSuccess || clusters == 0) {
          cudaGetLastError();
          printf("K=%2d BX=%d BY=%2d U=%d rev=%d pad=%3dKB: cannot launch\n", v.K, v.BX, v.BY, v.U, v.rev, pad_kb);
          continue;
        }
        auto launch = [&]() {
          return cudaLaunchKernelEx(&cfg, v.fn, (const __nv_bfloat16*)d.a, (const __nv_bfloat16*)d.b,
                                    (const float*)d.w, (const float*)d.bias, d.out, d.mean, d.invstd, p.R, p.C);
        };
        CK(cudaMemset(d.out, 0xff, n * 2));
        CK(launch()); CK(cudaDeviceSynchronize());
        double err = -1;
        if (pad_kb == 0) err = check(ref, scale, d);
        std::vector<float> t;
        for (int rep = 0; rep < 15; ++rep) {
          flush_l2(); CK(cudaEventRecord(e0)); CK(launch()); CK(cudaEventRecord(e1));
          CK(cudaEventSynchronize(e1)); float ms; CK(cudaEventElapsedTime(&ms, e0, e1)); t.push_back(ms * 1000);
        }
        std::sort(t.begin(), t.end());
        const double med = t[t.size() / 2];
        printf("K=%2d BX=%d BY=%2d U=%d rev=%d pad=%3dKB clusters/GPU=%4d: %8.1f us (%3.0f%% of copy)%s\n",
               v.K, v.BX, v.BY, v.U, v.rev, pad_kb, clusters, med, bytes / copy_bw * 1e6 / med * 100,
               err >= 0 ? (err < 2e-2 ? "  check ok" : (std::string("  CHECK FAILED ") + std::to_string(err)).c_str()) : "");
        if (err >= 2e-2) printf("   worst rel err %.3g\n", err);
      }
    }
    cudaFree(d.a); cudaFree(d.b); cudaFree(d.out); cudaFree(d.w); cudaFree(d.bias); cudaFree(d.mean); cudaFree(d.invstd);
  }
  return 0;
}

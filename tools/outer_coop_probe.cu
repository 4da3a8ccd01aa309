// A probe for issue 61's outer normalizations (not part of kfuse): can one cooperative kernel
// beat the statistics reduction + normalizing kernel that read the input twice? The columns
// are taken in strips; each strip's R x W elements are held in registers across the whole grid (every block a
// tile of rows x 64 columns), the column statistics combined through a small workspace after
// a grid-wide barrier (a cooperative launch makes every block resident), then normalized
// from the held values: one read of the input from memory, one barrier a statistic a strip.
//   nvcc -arch=sm_90 -O3 -std=c++17 tools/outer_coop_probe.cu -o /tmp/outer_coop && /tmp/outer_coop
// (tools/tuning_plan.txt runs it beside kfuse's and torch.compile's kernels for the same rows).
// Why this form: holding each column's part in L2 instead failed (2026-12-08-3c16389-h100.md:
// the blocks resident at once read more than L2 keeps before their second pass); here the
// grid holds a strip in registers, which the launch guarantees are all resident. What it
// costs: a grid barrier a statistic a strip, with nothing in flight across it.
// Ops: 0 softmax backward over dim 0 (dx = y * (dy - sum_r y*dy)); 1 batch norm forward over
// the rows of [R, C] (two-pass variance: two barriers a strip), bf16 in and out.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cooperative_groups.h>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <vector>
#include <algorithm>
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

constexpr int TX = 8;          // threads along a tile's 64 columns (8 bf16 each)
constexpr int TILE_W = TX * 8;

// Per-column partials of this block's rows (over ty in shared memory), written to ws[buf]
// at [block row][strip column]; after the grid barrier, every thread sums its 8 columns'
// partials over the block rows in order.
template <int TY>
__device__ __forceinline__ void combine(float (&acc)[8], float (*red)[TILE_W], float* ws, int buf,
                                        int gr, int strip_w, int br, int bc, cg::grid_group& grid) {
  const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * TX + tx;
#pragma unroll
  for (int i = 0; i < 8; ++i) red[ty][tx * 8 + i] = acc[i];
  __syncthreads();
  if (tid < TILE_W) {
    float v = 0.f;
    for (int j = 0; j < TY; ++j) v += red[j][tid];
    ws[((size_t)buf * gr + br) * strip_w + bc * TILE_W + tid] = v;
  }
  grid.sync();
#pragma unroll
  for (int i = 0; i < 8; ++i) acc[i] = 0.f;
  for (int k = 0; k < gr; ++k) {
    const float* p = ws + ((size_t)buf * gr + k) * strip_w + bc * TILE_W + tx * 8;
    const float4 a = *reinterpret_cast<const float4*>(p), b = *reinterpret_cast<const float4*>(p + 4);
    acc[0] += a.x; acc[1] += a.y; acc[2] += a.z; acc[3] += a.w;
    acc[4] += b.x; acc[5] += b.y; acc[6] += b.z; acc[7] += b.w;
  }
  __syncthreads();  // red is free again
}

template <int OP, int ROWS, int TY>
__global__ void __launch_bounds__(TX * TY, 1) outer_coop(
    const __nv_bfloat16* __restrict__ a, const __nv_bfloat16* __restrict__ b,
    const float* __restrict__ w, const float* __restrict__ bias,
    __nv_bfloat16* __restrict__ out, float* __restrict__ mean_out, float* __restrict__ invstd_out,
    float* __restrict__ ws, int R, int C, int gr, int gc) {
  cg::grid_group grid = cg::this_grid();
  __shared__ float red[TY][TILE_W];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int br = blockIdx.x / gc, bc = blockIdx.x % gc;
  const int row0 = br * TY * ROWS;
  const int strip_w = gc * TILE_W;
  int barrier = 0;
  for (int c0 = 0; c0 < C; c0 += strip_w) {
    const int col = c0 + bc * TILE_W + tx * 8;
    const bool col_ok = col < C;
    uint4 va[ROWS], vb[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      const int row = row0 + ty + r * TY;
      if (col_ok && row < R) {
        va[r] = *reinterpret_cast<const uint4*>(a + (size_t)row * C + col);
        if (OP == 0) vb[r] = *reinterpret_cast<const uint4*>(b + (size_t)row * C + col);
      } else {
        va[r] = make_uint4(0, 0, 0, 0); vb[r] = make_uint4(0, 0, 0, 0);
      }
    }
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      float fa[8]; unpack(va[r], fa);
      if (OP == 0) {
        float fb[8]; unpack(vb[r], fb);
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[i] += fa[i] * fb[i];
      } else {
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[i] += fa[i];
      }
    }
    combine<TY>(acc, red, ws, (barrier++) & 1, gr, strip_w, br, bc, grid);
    if (OP == 0) {
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        const int row = row0 + ty + r * TY;
        if (!col_ok || row >= R) continue;
        float fa[8], fb[8], fo[8]; unpack(va[r], fa); unpack(vb[r], fb);
#pragma unroll
        for (int i = 0; i < 8; ++i) fo[i] = fa[i] * (fb[i] - acc[i]);
        *reinterpret_cast<uint4*>(out + (size_t)row * C + col) = pack(fo);
      }
    } else {
      float m[8], m2[8] = {0, 0, 0, 0, 0, 0, 0, 0};
#pragma unroll
      for (int i = 0; i < 8; ++i) m[i] = acc[i] / R;
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        const int row = row0 + ty + r * TY;
        if (!col_ok || row >= R) continue;
        float fa[8]; unpack(va[r], fa);
#pragma unroll
        for (int i = 0; i < 8; ++i) { const float d = fa[i] - m[i]; m2[i] += d * d; }
      }
      combine<TY>(m2, red, ws, (barrier++) & 1, gr, strip_w, br, bc, grid);
      float is[8], ww[8], bb[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        is[i] = rsqrtf(m2[i] / R + 1e-5f);
        ww[i] = col_ok ? w[col + i] : 0.f; bb[i] = col_ok ? bias[col + i] : 0.f;
      }
      if (br == 0 && ty == 0 && col_ok) {
#pragma unroll
        for (int i = 0; i < 8; ++i) { mean_out[col + i] = m[i]; invstd_out[col + i] = is[i]; }
      }
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        const int row = row0 + ty + r * TY;
        if (!col_ok || row >= R) continue;
        float fa[8], fo[8]; unpack(va[r], fa);
#pragma unroll
        for (int i = 0; i < 8; ++i) fo[i] = (fa[i] - m[i]) * is[i] * ww[i] + bb[i];
        *reinterpret_cast<uint4*>(out + (size_t)row * C + col) = pack(fo);
      }
    }
  }
}

// ------------------------------------------------------------------------------------------
struct Problem { int op; int R, C; };
struct Bufs { __nv_bfloat16 *a, *b, *out; float *w, *bias, *mean, *invstd, *ws; };
typedef void (*KernelFn)(const __nv_bfloat16*, const __nv_bfloat16*, const float*, const float*,
                         __nv_bfloat16*, float*, float*, float*, int, int, int, int);
struct Variant { int op, rows, ty; KernelFn fn; };
template <int OP, int ROWS, int TY>
Variant make() { return Variant{OP, ROWS, TY, outer_coop<OP, ROWS, TY>}; }

static float* flush_buf = nullptr;
static float bf(__nv_bfloat16 h) { return __bfloat162float(h); }

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

static double check(const std::vector<double>& ref, const std::vector<double>& scale, const Bufs& d) {
  const size_t n = ref.size();
  std::vector<__nv_bfloat16> out(n);
  CK(cudaMemcpy(out.data(), d.out, n * 2, cudaMemcpyDeviceToHost));
  double worst = 0;
  for (size_t i = 0; i < n; ++i) worst = std::max(worst, std::fabs(bf(out[i]) - ref[i]) / (scale[i] + 1e-30));
  return worst;
}

int main() {
  CK(cudaMalloc(&flush_buf, 256 << 20));
  cudaDeviceProp prop; CK(cudaGetDeviceProperties(&prop, 0));
  const int sms = prop.multiProcessorCount;
  printf("%s, %d SMs, L2 %d MB, cooperative launch %d\n", prop.name, sms, prop.l2CacheSize >> 20, prop.cooperativeLaunch);
  std::vector<Problem> problems = {{0, 4096, 16384}, {0, 16384, 4096}, {0, 32768, 1024}, {1, 12544, 2048}};
  std::vector<Variant> vs = {make<0, 8, 64>(), make<0, 16, 32>(), make<0, 20, 32>(), make<0, 8, 32>(),
                             make<1, 8, 64>(), make<1, 12, 64>(), make<1, 16, 32>(), make<1, 24, 32>()};
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
    CK(cudaMalloc(&d.ws, 64 << 20));
    CK(cudaMemcpy(d.a, ha.data(), n * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d.b, hb.data(), n * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d.w, hw.data(), p.C * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d.bias, hbias.data(), p.C * 4, cudaMemcpyHostToDevice));
    const double bytes = p.op == 0 ? 3.0 * n * 2 : 2.0 * n * 2;
    std::vector<float> ct;
    for (int rep = 0; rep < 15; ++rep) {
      CK(cudaMemsetAsync(flush_buf, 0, 256 << 20)); CK(cudaEventRecord(e0)); CK(cudaMemcpyAsync(d.out, d.a, n * 2, cudaMemcpyDeviceToDevice));
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
      int per_sm = 0;
      CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, v.fn, TX * v.ty, 0));
      const int max_blocks = per_sm * sms;
      const int rows_per_block = v.ty * v.rows;
      const int gr = (p.R + rows_per_block - 1) / rows_per_block;
      int gc = max_blocks / std::max(gr, 1);
      gc = std::min(gc, (p.C + TILE_W - 1) / TILE_W);
      if (per_sm == 0 || gc == 0) { printf("rows=%2d ty=%2d: %d blocks an SM, %d block rows: cannot hold a tile column\n", v.rows, v.ty, per_sm, gr); continue; }
      int grid = gr * gc;
      const int strips = (p.C + gc * TILE_W - 1) / (gc * TILE_W);
      int R = p.R, C = p.C;
      void* args[] = {&d.a, &d.b, &d.w, &d.bias, &d.out, &d.mean, &d.invstd, &d.ws, &R, &C, (void*)&gr, (void*)&gc};
      auto launch = [&]() { return cudaLaunchCooperativeKernel((void*)v.fn, dim3(grid), dim3(TX, v.ty), args, 0, 0); };
      CK(cudaMemset(d.out, 0xff, n * 2));
      CK(launch()); CK(cudaDeviceSynchronize());
      const double err = check(ref, scale, d);
      std::vector<float> t;
      for (int rep = 0; rep < 15; ++rep) {
        CK(cudaMemsetAsync(flush_buf, 0, 256 << 20)); CK(cudaEventRecord(e0)); CK(launch()); CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1)); float ms; CK(cudaEventElapsedTime(&ms, e0, e1)); t.push_back(ms * 1000);
      }
      std::sort(t.begin(), t.end());
      const double med = t[t.size() / 2];
      printf("rows=%2d ty=%2d: %d blocks (%d a SM) as %d x %d, %d strips of %d columns: %8.1f us (%3.0f%% of copy)  %s %.3g\n",
             v.rows, v.ty, grid, per_sm, gr, gc, strips, gc * TILE_W, med, bytes / copy_bw * 1e6 / med * 100,
             err < 2e-2 ? "check ok" : "CHECK FAILED", err);
    }
    cudaFree(d.a); cudaFree(d.b); cudaFree(d.out); cudaFree(d.w); cudaFree(d.bias); cudaFree(d.mean); cudaFree(d.invstd); cudaFree(d.ws);
  }
  return 0;
}

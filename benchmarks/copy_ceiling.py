"""How fast can anything move W1f's bytes? Hand-written kernels next to torch's copy, kfuse and
torch.compile, alternated in one process (a tuning probe, not part of the suite).

W1f (fp32 bias + gelu over [16384, 8192]) reads 512 MiB and writes 512 MiB, like a copy. kfuse
and torch.compile both run it at 98 to 99% of torch's copy. This probe asks whether a different
way of moving the bytes beats the copy itself, and so could put kfuse clearly ahead:

* ``vec U/T``: one block per tile, each of T threads loading U 16-byte vectors, warp-coalesced
  (the layout kfuse's pointwise kernels and Triton both use), grid over the whole tensor;
* ``grid-stride U/T xB``: the same, with B resident blocks per SM looping over the tiles;
* ``bulk C/S xB``: B persistent blocks per SM, each streaming chunks of C bytes through S
  shared-memory stages with the Hopper bulk-copy engine (cp.async.bulk loads into shared
  memory completed on an mbarrier, math in place, cp.async.bulk stores back).

Each kernel is run as a pure copy and with W1f's math; every result is checked (copies
exactly, W1f against float64) before it is timed.

    python benchmarks/copy_ceiling.py [--json out.json] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from run import check, copy_bandwidth, time_ms  # noqa: E402

# The kernels. MATH selects W1f's body (x + bias[col], gelu_tanh, * 0.5) or a plain copy.
# Sizes are compile-time constants (-D), so each variant is its own module.
SOURCE = r"""
__device__ __forceinline__ float w1f_body(float x, float b) {
  float v = x + b;
  float inner = 0.79788456080286535588f * (v + 0.044715f * v * v * v);
  return 0.5f * (0.5f * v * (1.0f + tanhf(inner)));
}

__device__ __forceinline__ float4 apply(float4 a, float4 b) {
#if MATH
  a.x = w1f_body(a.x, b.x); a.y = w1f_body(a.y, b.y);
  a.z = w1f_body(a.z, b.z); a.w = w1f_body(a.w, b.w);
#endif
  return a;
}

__device__ __forceinline__ float4 bias_at(const float* bias, long long i, int n_inner) {
#if MATH
  return __ldg(reinterpret_cast<const float4*>(bias + (int)(i % n_inner)));
#else
  return make_float4(0.f, 0.f, 0.f, 0.f);
#endif
}

// One tile of THREADS * U vectors per block (GRID_STRIDE 0), or resident blocks looping over
// the tiles (GRID_STRIDE 1). n is a multiple of the tile.
extern "C" __global__ void __launch_bounds__(THREADS) vec_kernel(
    const float* __restrict__ x, const float* __restrict__ bias, float* __restrict__ out,
    long long n, int n_inner) {
  const long long tile = (long long)THREADS * U * 4;
  const long long tiles = n / tile;
  for (long long t = blockIdx.x; t < tiles; t += (GRID_STRIDE ? gridDim.x : tiles)) {
    float4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      v[u] = __ldg(reinterpret_cast<const float4*>(x + t * tile) + u * THREADS + threadIdx.x);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const long long i = t * tile + (long long)(u * THREADS + threadIdx.x) * 4;
      reinterpret_cast<float4*>(out)[i / 4] = apply(v[u], bias_at(bias, i, n_inner));
    }
  }
}

__device__ __forceinline__ unsigned smem_address(const void* p) {
  return (unsigned)__cvta_generic_to_shared(p);
}

// Persistent blocks: chunk c of this block is chunks[blockIdx.x + c * gridDim.x]. Thread 0
// keeps STAGES bulk loads in flight; every thread applies the math in shared memory; thread 0
// then bulk-stores the chunk and refills the buffer the previous chunk's store has finished
// reading.
extern "C" __global__ void __launch_bounds__(THREADS) bulk_kernel(
    const float* __restrict__ x, const float* __restrict__ bias, float* __restrict__ out,
    long long n, int n_inner) {
  extern __shared__ __align__(128) float stage[];  // STAGES * CHUNK floats
  __shared__ __align__(8) unsigned long long full[STAGES];
  const long long chunks = n / CHUNK;
  const long long mine = blockIdx.x < chunks ? (chunks - 1 - blockIdx.x) / gridDim.x + 1 : 0;
  const unsigned bytes = CHUNK * 4;
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_address(&full[s])));
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  auto load = [&](long long k) {
    const int s = (int)(k % STAGES);
    const long long chunk = blockIdx.x + k * gridDim.x;
    const unsigned bar = smem_address(&full[s]);
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
                 : "memory");
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
        ::"r"(smem_address(stage + s * CHUNK)), "l"(x + chunk * CHUNK), "r"(bytes), "r"(bar)
        : "memory");
  };
  if (threadIdx.x == 0) {
    for (long long k = 0; k < STAGES && k < mine; ++k) load(k);
  }
  for (long long k = 0; k < mine; ++k) {
    const int s = (int)(k % STAGES);
    const unsigned parity = (unsigned)((k / STAGES) & 1);
    asm volatile(
        "{\n .reg .pred done;\n WAIT_%=:\n"
        " mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        " @!done bra WAIT_%=;\n}" ::"r"(smem_address(&full[s])), "r"(parity) : "memory");
    const long long chunk = blockIdx.x + k * gridDim.x;
#if MATH
    float4* v = reinterpret_cast<float4*>(stage + s * CHUNK);
    for (int i = threadIdx.x; i < CHUNK / 4; i += THREADS) {
      v[i] = apply(v[i], bias_at(bias, chunk * CHUNK + 4LL * i, n_inner));
    }
    // Make the threads' shared-memory writes visible to the bulk-copy engine.
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
#endif
    if (threadIdx.x == 0) {
      asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"
                   ::"l"(out + chunk * CHUNK), "r"(smem_address(stage + s * CHUNK)), "r"(bytes)
                   : "memory");
      asm volatile("cp.async.bulk.commit_group;" ::: "memory");
      if (k >= 1 && k - 1 + STAGES < mine) {
        asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
        load(k - 1 + STAGES);
      }
    }
  }
  if (threadIdx.x == 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}
"""


def build(cupy: Any, kind: str, math: bool, **sizes: int) -> Any:
    defines = [f"-D{k.upper()}={v}" for k, v in sizes.items()] + [f"-DMATH={int(math)}"]
    for k in ("U", "GRID_STRIDE", "CHUNK", "STAGES"):  # unused by one of the kernels
        if k not in {s.upper() for s in sizes}:
            defines.append(f"-D{k}=1")
    module = cupy.RawModule(code=SOURCE, options=("-std=c++17", *defines))
    return module.get_function(f"{kind}_kernel")


def variants(sms: int) -> list[tuple[str, str, dict[str, int], int]]:
    """(label, kernel, sizes, blocks per SM or 0 for one block per tile)."""
    out = []
    for u, t in ((2, 128), (4, 128), (4, 256), (8, 128)):
        out.append((f"vec {u}/{t}", "vec", {"u": u, "threads": t, "grid_stride": 0}, 0))
    for u, t, b in ((4, 256, 4), (8, 128, 8)):
        out.append(
            (f"grid-stride {u}/{t} x{b}", "vec", {"u": u, "threads": t, "grid_stride": 1}, b)
        )
    for kb, stages, b, t in (
        (16, 4, 3, 256),
        (32, 3, 2, 256),
        (8, 8, 3, 256),
        (16, 6, 2, 256),
        (16, 2, 6, 128),
        (32, 6, 1, 512),
    ):
        out.append(
            (
                f"bulk {kb}K/{stages} x{b} t{t}",
                "bulk",
                {"chunk": kb * 256, "stages": stages, "threads": t},
                b,
            )
        )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", default="")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    import cupy
    import torch
    from workloads import WORKLOADS

    def log(line: str) -> None:
        print(line, flush=True)

    cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream).use()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    copy_gbs = copy_bandwidth(torch, 20)
    log(f"device-to-device copy (torch, 2 GiB): {copy_gbs:.0f} GB/s")

    w1f = next(w for w in WORKLOADS if w.id == "W1f")
    x, bias = w1f.make_inputs(torch, False)
    ref = w1f.reference(x, bias)
    out = torch.empty_like(x)
    n, n_inner = x.numel(), x.shape[1]
    nbytes = w1f.bytes_moved([x, bias])
    cx, cb, co = (cupy.from_dlpack(t) for t in (x, bias, out))

    runs: dict[str, Any] = {}
    failures: list[str] = []
    runs["torch copy_"] = lambda: out.copy_(x)
    runs["cupy memcpy"] = lambda: cupy.copyto(co, cx)
    fd = w1f.definition()
    runs["kfuse W1f"] = lambda: fd.execute([x, bias])
    compiled = torch.compile(w1f.eager)
    runs["torch.compile W1f"] = lambda: compiled(x, bias)
    for label, kind, sizes, per_sm in variants(sms):
        threads = sizes["threads"]
        if kind == "vec":
            tile = threads * sizes["u"] * 4
            grid = per_sm * sms if per_sm else n // tile
            smem = 0
        else:
            grid = per_sm * sms
            smem = sizes["chunk"] * 4 * sizes["stages"]
        for math in (False, True):
            name = f"{label} {'W1f' if math else 'copy'}"
            try:
                kern = build(cupy, kind, math, **sizes)
                if smem > 48 * 1024:
                    kern.max_dynamic_shared_size_bytes = smem

                def call(
                    kern: Any = kern, grid: int = grid, threads: int = threads, smem: int = smem
                ) -> None:
                    kern(
                        (grid,),
                        (threads,),
                        (cx, cb, co, cupy.int64(n), cupy.int32(n_inner)),
                        shared_mem=smem,
                    )

                out.fill_(float("nan"))
                call()
                torch.cuda.synchronize()
                status = (
                    check(name, out, ref, torch.float32)
                    if math
                    else ("ok" if torch.equal(out, x) else f"MISMATCH {name}: copy differs")
                )
            except Exception as e:  # a variant that does not build or launch is reported
                status = f"FAILED {name}: {type(e).__name__}: {e}"
            if status != "ok":
                failures.append(status)
                log(f"  {status}")
                continue
            runs[name] = call

    rows = []
    for round_ in range(args.rounds):
        for label, run in runs.items():
            ms = time_ms(torch, run, 50)
            frac = nbytes / (ms * 1e-3) / 1e9 / copy_gbs
            rows.append({"round": round_, "config": label, "ms": ms, "fraction_of_copy": frac})
    log(f"\n{'config':34s} " + " ".join(f"round {r} us (%copy)" for r in range(args.rounds)))
    for label in runs:
        cells = [
            f"{r['ms'] * 1e3:7.1f} ({100 * r['fraction_of_copy']:5.1f})"
            for r in rows
            if r["config"] == label
        ]
        log(f"{label:34s} " + "  ".join(cells))
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {"copy_gbs": copy_gbs, "sms": sms, "rows": rows, "failures": failures}, indent=2
            )
        )
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())

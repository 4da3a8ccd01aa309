"""Tests of the device runtime headers (src/kfuse/runtime/kf_runtime/*.cuh).

Three ways in, none of which needs kfuse._C:
  * NVRTC (through ctypes) compiles a kernel that instantiates every helper for every dtype, for
    sm_80 and sm_90, with and without KFUSE_USE_PTX, and we read the PTX it emits;
  * g++ compiles the header as host code (the emulator's view: no KFUSE_USE_PTX, CUDA built-ins
    stubbed) into a small program whose answers are compared against NumPy;
  * on a GPU machine (marker `gpu`), kernels are launched through the driver API (ctypes) to check
    that the PTX conversions match the portable ones bit for bit and that block reductions are
    right for every block shape.
"""

# The embedded CUDA / C++ sources keep lines the width C++ code reads best at.
# ruff: noqa: E501

from __future__ import annotations

import ctypes
import math
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from kfuse.runtime.runtime_header import runtime_header

HEADER_TEXT = runtime_header()  # the kf_*.cuh parts joined, as kernels see them

DTYPES = {  # kfuse dtype -> C++ type in kernels
    "bool": "bool",
    "int32": "int",
    "int64": "long long",
    "float16": "kf::half",
    "bfloat16": "kf::bfloat16",
    "float32": "float",
    "float64": "double",
}

# ---------------------------------------------------------------------------------------------
# NVRTC through ctypes
# ---------------------------------------------------------------------------------------------


class _Nvrtc:
    def __init__(self) -> None:
        try:
            from cuda.pathfinder import load_nvidia_dynamic_lib

            path = load_nvidia_dynamic_lib("nvrtc").abs_path
        except Exception as exc:  # a missing NVRTC is a broken test environment, not a skip
            pytest.fail(
                "libnvrtc could not be loaded through cuda.pathfinder "
                f"(install the test extras, which bring the NVRTC wheel): {exc!r}"
            )
        self.lib = ctypes.CDLL(path)

    def compile(self, source: str, options: list[str]) -> tuple[int, str, bytes, str]:
        """Returns (result code, log, cubin or b"", ptx or "")."""
        lib = self.lib
        prog = ctypes.c_void_p()
        rc = lib.nvrtcCreateProgram(
            ctypes.byref(prog), source.encode(), b"kf_test.cu", 0, None, None
        )
        assert rc == 0, f"nvrtcCreateProgram failed: {rc}"
        try:
            opts = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
            rc = lib.nvrtcCompileProgram(prog, len(options), opts)
            size = ctypes.c_size_t()
            lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
            buf = ctypes.create_string_buffer(size.value)
            lib.nvrtcGetProgramLog(prog, buf)
            log = buf.value.decode(errors="replace")
            cubin, ptx = b"", ""
            if rc == 0:
                if lib.nvrtcGetCUBINSize(prog, ctypes.byref(size)) == 0 and size.value:
                    out = ctypes.create_string_buffer(size.value)
                    lib.nvrtcGetCUBIN(prog, out)
                    cubin = out.raw
                if lib.nvrtcGetPTXSize(prog, ctypes.byref(size)) == 0 and size.value:
                    out = ctypes.create_string_buffer(size.value)
                    lib.nvrtcGetPTX(prog, out)
                    ptx = out.value.decode()
            return rc, log, cubin, ptx
        finally:
            lib.nvrtcDestroyProgram(ctypes.byref(prog))


@pytest.fixture(scope="module")
def nvrtc() -> _Nvrtc:
    return _Nvrtc()


def _numbered(source: str) -> str:
    return "\n".join(f"{i + 1:5d} {line}" for i, line in enumerate(source.splitlines()))


def _compile_or_fail(nvrtc: _Nvrtc, source: str, options: list[str]) -> tuple[bytes, str]:
    rc, log, cubin, ptx = nvrtc.compile(source, options)
    if rc != 0:
        pytest.fail(f"NVRTC failed ({rc}) with {options}:\n{log}\n{_numbered(source)}")
    return cubin, ptx


def _instantiation_kernel() -> str:
    """A kernel that touches every helper for every dtype it is defined for."""
    lines = [HEADER_TEXT, ""]
    lines.append(
        """
template <typename T>
__device__ void exercise_memory(kf::Tensor<T, 2, int> a, kf::Tensor<T, 1, long long> b,
                                kf::Tensor<T, 0, int> s, T* p) {
  int i = threadIdx.x;
  T v = kf::load(a, i);
  kf::store(b, (long long)i, v);
  kf::store(s, 0, kf::load(s, 0));
  kf::st(p + i, kf::ld(p + i + 1));
  kf::Vec<T, 1> v1 = kf::load_vec<1>(a, i);
  kf::Vec<T, 2> v2 = kf::load_vec<2>(a, 2 * i);
  kf::Vec<T, 4> v4 = kf::load_vec<4>(b, 4LL * i);
  kf::store_vec<1>(b, i, v1);
  kf::store_vec<2>(a, 2 * i, v2);
  kf::store_vec<4>(p + 4 * i, v4);
  if (sizeof(T) <= 2) {
    kf::Vec<T, 8> v8 = kf::load_vec<8>(p + 8 * i);
    kf::store_vec<8>(p + 8 * i + 8, v8);
  }
  constexpr int V16 = 16 / sizeof(T);
  __shared__ kf::Vec<T, V16> slots[32];
  kf::copy_async(&slots[i % 32], a, V16 * i);
  kf::copy_async_wait();
  kf::store_vec<V16>(p + V16 * i, slots[i % 32]);
}

template <typename F>
__device__ F exercise_float_math(F x, F y, F z) {
  F r = kf::exp(x) + kf::exp2(x) + kf::expm1(x) + kf::log(x) + kf::log2(x) + kf::log10(x)
      + kf::log1p(x) + kf::sqrt(x) + kf::rsqrt(x) + kf::reciprocal(x) + kf::sin(x) + kf::cos(x)
      + kf::tan(x) + kf::asin(x) + kf::acos(x) + kf::atan(x) + kf::sinh(x) + kf::cosh(x)
      + kf::tanh(x) + kf::asinh(x) + kf::acosh(x) + kf::atanh(x) + kf::erf(x) + kf::erfc(x)
      + kf::sigmoid(x) + kf::relu(x) + kf::silu(x) + kf::gelu_erf(x) + kf::gelu_tanh(x)
      + kf::floor(x) + kf::ceil(x) + kf::round(x) + kf::trunc(x) + kf::sign(x) + kf::abs(x)
      + kf::neg(x) + kf::fmod(x, y) + kf::remainder(x, y) + kf::pow(x, y) + kf::atan2(x, y)
      + kf::maximum(x, y) + kf::minimum(x, y) + kf::clamp(x, y, z) + kf::lerp(x, y, z)
      + kf::where(x < y, x, z);
  bool b = kf::isnan(r) || kf::isinf(r) || !kf::isfinite(r);
  return b ? r : x;
}

template <typename I>
__device__ I exercise_int_math(I x, I y, I z) {
  bool b = kf::isnan(x) || kf::isinf(x) || !kf::isfinite(x);
  return kf::abs(x) + kf::neg(x) + kf::sign(x) + kf::maximum(x, y) + kf::minimum(x, y)
       + kf::clamp(x, y, z) + kf::fmod(x, y) + kf::remainder(x, y) + kf::where(b, x, y)
       + (x & y) + (x | z) + (x ^ y) + (x << 1) + (x >> 1) + kf::ceil_div(x, y);
}

template <typename T, typename Op>
__device__ T exercise_reduce(T v, Op op, T* scratch) {
  T w = kf::warp_reduce(v, op);
  T bx = kf::block_reduce_x(w, op, scratch);
  return kf::block_reduce(op(bx, Op::template identity<T>()), op, scratch);
}

template <typename F>
__device__ F exercise_welford(F x, kf::WelfordState<F>* scratch) {
  kf::WelfordState<F> s = kf::welford_identity<F>();
  kf::welford_update(s, x);
  s = kf::welford_combine(s, kf::warp_welford(s));
  s = kf::block_welford_x(s, scratch);
  s = kf::block_welford(s, scratch);
  return kf::welford_mean(s) + s.m2 / s.count;
}
"""
    )
    params = []
    body = []
    for name, cpp in DTYPES.items():
        params.append(
            f"kf::Tensor<{cpp}, 2, int> a_{name}, kf::Tensor<{cpp}, 1, long long> b_{name}, "
            f"kf::Tensor<{cpp}, 0, int> s_{name}, {cpp}* p_{name}"
        )
        body.append(f"  exercise_memory<{cpp}>(a_{name}, b_{name}, s_{name}, p_{name});")
        # every cast pair, and to_float / from_float
        body.append(f"  {cpp} x_{name} = kf::load(s_{name}, 0);")
        body.append(f"  acc += kf::to_float(x_{name});")
        body.append(f"  kf::store(s_{name}, 0, kf::from_float<{cpp}>(acc));")
    for src_name in DTYPES:
        for dst_cpp in DTYPES.values():
            body.append(f"  acc += kf::to_float(kf::cast<{dst_cpp}>(x_{src_name}));")
    body.append(
        """
  __shared__ float sf[256];
  __shared__ double sd[256];
  __shared__ int si[256];
  __shared__ long long sl[256];
  __shared__ bool sb[256];
  __shared__ kf::WelfordState<float> swf[256];
  __shared__ kf::WelfordState<double> swd[256];
  float fv = exercise_float_math(acc, acc + 1.0f, acc + 2.0f);
  double dv = exercise_float_math((double)acc, 1.0, 2.0);
  int iv = exercise_int_math((int)acc, 3, 4);
  long long lv = exercise_int_math((long long)acc, 3LL, 4LL);
  fv += exercise_reduce(fv, kf::SumOp(), sf) + exercise_reduce(fv, kf::ProdOp(), sf)
      + exercise_reduce(fv, kf::MaxOp(), sf) + exercise_reduce(fv, kf::MinOp(), sf);
  dv += exercise_reduce(dv, kf::SumOp(), sd) + exercise_reduce(dv, kf::ProdOp(), sd)
      + exercise_reduce(dv, kf::MaxOp(), sd) + exercise_reduce(dv, kf::MinOp(), sd);
  iv += exercise_reduce(iv, kf::SumOp(), si) + exercise_reduce(iv, kf::ProdOp(), si)
      + exercise_reduce(iv, kf::MaxOp(), si) + exercise_reduce(iv, kf::MinOp(), si);
  lv += exercise_reduce(lv, kf::SumOp(), sl) + exercise_reduce(lv, kf::ProdOp(), sl)
      + exercise_reduce(lv, kf::MaxOp(), sl) + exercise_reduce(lv, kf::MinOp(), sl);
  bool bv = exercise_reduce(acc > 0.0f, kf::MaxOp(), sb) && exercise_reduce(acc > 1.0f, kf::MinOp(), sb);
  fv += exercise_welford(fv, swf);
  dv += exercise_welford(dv, swd);
  out[threadIdx.x] = fv + (float)dv + (float)iv + (float)lv + (float)bv
                   + (float)kf::block_threads() + (float)kf::thread_rank();
"""
    )
    lines.append(
        'extern "C" __global__ void kf_instantiate_all('
        + ",\n    ".join(params)
        + ", float* out) {"
    )
    lines.append("  float acc = 0.0f;")
    lines.extend(body)
    lines.append("}")
    return "\n".join(lines)


def test_header_is_self_contained() -> None:
    text = HEADER_TEXT
    code = re.sub(r"//[^\n]*", "", text)  # the rules apply to code, not to comments explaining them
    assert not re.search(r"^\s*#\s*include", code, re.M)
    assert not re.search(r"\b(u?int(8|16|32|64)_t|size_t|std::)", code)
    # inline PTX only inside KFUSE_USE_PTX blocks: every asm( follows such a guard
    for i, line in enumerate(text.splitlines()):
        if "asm(" in line:
            before = text.splitlines()[max(0, i - 4) : i]
            assert any("KFUSE_USE_PTX" in b for b in before), f"unguarded asm on line {i + 1}"


@pytest.mark.slow
@pytest.mark.parametrize(
    "arch, use_ptx",
    [
        # Every helper instantiated, in each form (5-8 s of NVRTC each): CI's extended step.
        # The README's command still compiles the header through NVRTC with the kernels of
        # the tests below and of the schedulers' NVRTC tests.
        pytest.param("sm_90", True, id="ptx-sm_90", marks=pytest.mark.extended),
        pytest.param("sm_90", False, id="portable-sm_90", marks=pytest.mark.extended),
        pytest.param("sm_80", True, id="ptx-sm_80", marks=pytest.mark.extended),
        pytest.param("sm_80", False, id="portable-sm_80", marks=pytest.mark.extended),
    ],
)
def test_nvrtc_compiles_every_helper(nvrtc: _Nvrtc, arch: str, use_ptx: bool) -> None:
    options = [f"--gpu-architecture={arch}", "-std=c++17"] + (
        ["-DKFUSE_USE_PTX"] if use_ptx else []
    )
    cubin, _ = _compile_or_fail(nvrtc, _instantiation_kernel(), options)
    assert cubin[:4] == b"\x7fELF"


def test_nvrtc_accepts_the_emulators_bounds_hook(nvrtc: _Nvrtc) -> None:
    source = (
        "#define KF_CHECK_BOUNDS(t, off, n) do { if ((off) < 0 || (off) + (n) > (t).size[0] * 4) "
        "__trap(); } while (0)\n"
        + HEADER_TEXT
        + """
extern "C" __global__ void k(kf::Tensor<float, 1, int> t) {
  kf::store_vec<4>(t, 4 * (int)threadIdx.x, kf::load_vec<4>(t, 4 * (int)threadIdx.x));
}
"""
    )
    _compile_or_fail(nvrtc, source, ["--gpu-architecture=sm_90", "-std=c++17", "-DKFUSE_USE_PTX"])


def test_ptx_fast_paths_and_vector_accesses(nvrtc: _Nvrtc) -> None:
    source = (
        HEADER_TEXT
        + """
extern "C" __global__ void k(kf::Tensor<float, 1, int> f, kf::Tensor<kf::half, 1, int> h,
                             kf::Tensor<kf::bfloat16, 1, int> b) {
  int i = threadIdx.x;
  kf::Vec<float, 4> v = kf::load_vec<4>(f, 4 * i);
  kf::Vec<kf::half, 8> w = kf::load_vec<8>(h, 8 * i);
  kf::Vec<kf::bfloat16, 4> u;
  for (int j = 0; j < 4; ++j) {
    v[j] += kf::to_float(w[j]);
    u[j] = kf::from_float<kf::bfloat16>(v[j]);
    w[j] = kf::from_float<kf::half>(v[j]);
  }
  kf::store_vec<4>(f, 4 * i, v);
  kf::store_vec<8>(h, 8 * i, w);
  kf::store_vec<4>(b, 4 * i, u);
  __shared__ kf::Vec<kf::bfloat16, 8> held[32];
  kf::copy_async(&held[i % 32], b, 8 * i);
  kf::copy_async_wait();
  kf::store_vec<8>(b, 8 * i + 8, held[i % 32]);
}
"""
    )
    _, ptx = _compile_or_fail(
        nvrtc, source, ["--gpu-architecture=compute_90", "-std=c++17", "-DKFUSE_USE_PTX"]
    )
    assert "cvt.rn.bf16.f32" in ptx
    assert "cvt.rn.f16.f32" in ptx
    assert "cvt.f32.f16" in ptx
    assert "ld.global.v4" in ptx  # 16-byte loads: 4 floats and 8 halves
    assert "st.global.v4" in ptx
    # held rows go to shared memory without registers
    assert "cp.async.cg.shared.global" in ptx and "cp.async.wait_all" in ptx
    # ... and no element-wise 16-bit traffic left: 4 bfloat16 go out as one 8-byte store
    assert not re.search(r"(ld|st)\.global\.[ub]16", ptx)


def test_cluster_reductions_use_distributed_shared_memory(nvrtc: _Nvrtc) -> None:
    """kf::cluster_reduce combines the blocks of a cluster through barrier.cluster and loads
    from the other blocks' shared memory (mapa + ld.shared::cluster), for every accumulator
    kind: a float sum, a bool max, a double Welford state."""
    source = (
        HEADER_TEXT
        + """
extern "C" __global__ void __cluster_dims__(2, 1, 1) k(float* f, bool* b, double* d) {
  __shared__ __align__(16) unsigned char slots[64];
  __shared__ __align__(16) unsigned char scratch[1024 * 24];
  int phase = 0;
  float s = kf::block_reduce_x(f[threadIdx.x], kf::SumOp(), reinterpret_cast<float*>(scratch));
  f[threadIdx.x] = kf::cluster_reduce<2>(s, kf::SumOp(), slots, phase);
  bool m = kf::block_reduce_x(b[threadIdx.x], kf::MaxOp(), reinterpret_cast<bool*>(scratch));
  b[threadIdx.x] = kf::cluster_reduce<2>(m, kf::MaxOp(), slots, phase);
  kf::WelfordState<double> w = kf::welford_identity<double>();
  kf::welford_update(w, d[threadIdx.x]);
  w = kf::block_welford_x(w, reinterpret_cast<kf::WelfordState<double>*>(scratch));
  d[threadIdx.x] = kf::cluster_reduce<2>(w, kf::WelfordOp(), slots, phase).m2;
  kf::cluster_sync();
}
"""
    )
    _, ptx = _compile_or_fail(
        nvrtc, source, ["--gpu-architecture=compute_90", "-std=c++17", "-DKFUSE_USE_PTX"]
    )
    assert ".explicitcluster" in ptx and ".reqnctapercluster 2" in ptx
    assert "barrier.cluster.arrive.release" in ptx and "barrier.cluster.wait.acquire" in ptx
    assert "mapa.shared::cluster" in ptx and "ld.shared::cluster.u32" in ptx


# ---------------------------------------------------------------------------------------------
# The header as host C++ (the emulator's view), checked against NumPy
# ---------------------------------------------------------------------------------------------

_HOST_STUBS = r"""
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#define __device__
#define __forceinline__ inline
#define __global__
struct kf_dim3 { unsigned x, y, z; };
static kf_dim3 threadIdx = {0, 0, 0}, blockDim = {1, 1, 1};
static inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
static inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
static inline long long __double_as_longlong(double d) { long long u; std::memcpy(&u, &d, 8); return u; }
static inline double __longlong_as_double(long long u) { double d; std::memcpy(&d, &u, 8); return d; }
static inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
static inline void __syncthreads() {}
template <typename T> T __shfl_xor_sync(unsigned, T v, int, int) { return v; }
template <typename T> T __shfl_down_sync(unsigned, T v, int, int) { return v; }
template <typename T> T __shfl_sync(unsigned, T v, int, int) { return v; }
"""

_HOST_MAIN = r"""
template <typename T> static std::vector<T> read_all(const char* path) {
  FILE* f = std::fopen(path, "rb");
  std::fseek(f, 0, SEEK_END);
  long n = std::ftell(f);
  std::fseek(f, 0, SEEK_SET);
  std::vector<T> v(n / sizeof(T));
  if (!v.empty() && std::fread(v.data(), sizeof(T), v.size(), f) != v.size()) std::exit(3);
  std::fclose(f);
  return v;
}
template <typename T> static void write_all(const char* path, const std::vector<T>& v) {
  FILE* f = std::fopen(path, "wb");
  if (!v.empty()) std::fwrite(v.data(), sizeof(T), v.size(), f);
  std::fclose(f);
}
// Applies fn to each group of K inputs.
template <typename In, typename Out, int K, typename Fn>
static int run(const char* in, const char* out, Fn fn) {
  std::vector<In> x = read_all<In>(in);
  std::vector<Out> y(x.size() / K);
  for (size_t i = 0; i < y.size(); ++i) y[i] = fn(&x[i * K]);
  write_all(out, y);
  return 0;
}
typedef unsigned short u16;
typedef unsigned char u8;
static u16 raw(kf::half h) { return h.bits; }
static u16 raw(kf::bfloat16 h) { return h.bits; }
template <typename T> static T raw(T v) { return v; }
static u8 raw(bool b) { return b ? 1 : 0; }
template <typename T> struct In { typedef T type; static T get(T v) { return v; } };
template <> struct In<kf::half> { typedef u16 type; static kf::half get(u16 v) { return kf::half_from_bits(v); } };
template <> struct In<kf::bfloat16> { typedef u16 type; static kf::bfloat16 get(u16 v) { return kf::bfloat16_from_bits(v); } };
template <> struct In<bool> { typedef u8 type; static bool get(u8 v) { return v != 0; } };

template <typename From, typename To>
static int cast_op(const char* in, const char* out) {
  typedef typename In<From>::type RawIn;
  typedef decltype(raw(To())) RawOut;
  return run<RawIn, RawOut, 1>(in, out, [](const RawIn* x) {
    return (RawOut)raw(kf::cast<To>(In<From>::get(x[0])));
  });
}

int main(int argc, char** argv) {
  std::string op = argv[1];
  const char* in = argv[2];
  const char* out = argv[3];
#define UNARY(name)                                                                        \
  if (op == "f32." #name) return run<float, float, 1>(in, out, [](const float* x) { return (float)kf::name(x[0]); }); \
  if (op == "f64." #name) return run<double, double, 1>(in, out, [](const double* x) { return (double)kf::name(x[0]); });
#define BINARY(name)                                                                       \
  if (op == "f32." #name) return run<float, float, 2>(in, out, [](const float* x) { return kf::name(x[0], x[1]); }); \
  if (op == "f64." #name) return run<double, double, 2>(in, out, [](const double* x) { return kf::name(x[0], x[1]); }); \
  if (op == "i32." #name) return run<int, int, 2>(in, out, [](const int* x) { return kf::name(x[0], x[1]); }); \
  if (op == "i64." #name) return run<long long, long long, 2>(in, out, [](const long long* x) { return kf::name(x[0], x[1]); });
#define TERNARY(name)                                                                      \
  if (op == "f32." #name) return run<float, float, 3>(in, out, [](const float* x) { return kf::name(x[0], x[1], x[2]); }); \
  if (op == "f64." #name) return run<double, double, 3>(in, out, [](const double* x) { return kf::name(x[0], x[1], x[2]); });
  UNARY(exp) UNARY(exp2) UNARY(expm1) UNARY(log) UNARY(log2) UNARY(log10) UNARY(log1p)
  UNARY(sqrt) UNARY(rsqrt) UNARY(reciprocal) UNARY(sin) UNARY(cos) UNARY(tan) UNARY(asin)
  UNARY(acos) UNARY(atan) UNARY(sinh) UNARY(cosh) UNARY(tanh) UNARY(asinh) UNARY(acosh)
  UNARY(atanh) UNARY(erf) UNARY(erfc) UNARY(sigmoid) UNARY(relu) UNARY(silu) UNARY(gelu_erf)
  UNARY(gelu_tanh) UNARY(floor) UNARY(ceil) UNARY(round) UNARY(trunc) UNARY(sign) UNARY(abs)
  UNARY(neg) UNARY(isnan) UNARY(isinf) UNARY(isfinite)
  BINARY(fmod) BINARY(remainder) BINARY(maximum) BINARY(minimum)
  if (op == "f32.pow") return run<float, float, 2>(in, out, [](const float* x) { return kf::pow(x[0], x[1]); });
  if (op == "f32.atan2") return run<float, float, 2>(in, out, [](const float* x) { return kf::atan2(x[0], x[1]); });
  TERNARY(clamp) TERNARY(lerp)
  if (op == "i32.unary") return run<int, int, 1>(in, out, [](const int* x) { return kf::abs(x[0]) ^ (kf::sign(x[0]) * 3) ^ kf::neg(x[0]); });
  if (op == "welford") {
    // Welford over the input in chunks of 7, chunks combined left to right: (mean, m2, count).
    std::vector<double> x = read_all<double>(in);
    kf::WelfordState<double> total = kf::welford_identity<double>();
    for (size_t i = 0; i < x.size(); i += 7) {
      kf::WelfordState<double> part = kf::welford_identity<double>();
      for (size_t j = i; j < x.size() && j < i + 7; ++j) kf::welford_update(part, x[j]);
      total = kf::welford_combine(total, part);
    }
    total = kf::welford_combine(total, kf::welford_identity<double>());
    total = kf::block_welford_x(total, (kf::WelfordState<double>*)nullptr);
    write_all(out, std::vector<double>{kf::welford_mean(total), total.m2, total.count});
    return 0;
  }
  if (op == "welford_batches") {
    // float Welford, one way per output triple: value by value, then in batches of 8 (the
    // remainder value by value): (mean, m2, count) of each.
    std::vector<double> x = read_all<double>(in);
    kf::WelfordState<float> one = kf::welford_identity<float>();
    kf::WelfordState<float> batched = kf::welford_identity<float>();
    size_t i = 0;
    for (; i + 8 <= x.size(); i += 8) {
      float b[8];
      for (int k = 0; k < 8; ++k) b[k] = (float)x[i + k];
      kf::welford_update_batch(batched, b);
    }
    for (; i < x.size(); ++i) kf::welford_update(batched, (float)x[i]);
    for (double v : x) kf::welford_update(one, (float)v);
    write_all(out, std::vector<double>{kf::welford_mean(one), one.m2, one.count,
                                       kf::welford_mean(batched), batched.m2,
                                       batched.count});
    return 0;
  }
  if (op == "identities") {
    std::vector<double> v = {
        kf::SumOp::identity<float>(), kf::ProdOp::identity<float>(), kf::MaxOp::identity<float>(),
        kf::MinOp::identity<float>(), kf::MaxOp::identity<double>(), kf::MinOp::identity<double>(),
        (double)kf::MaxOp::identity<int>(), (double)kf::MinOp::identity<int>(),
        (double)kf::MaxOp::identity<long long>(), (double)kf::MinOp::identity<long long>(),
        (double)kf::MaxOp()(1.0f, std::nanf("")), (double)kf::MinOp()(std::nanf(""), 1.0f),
        (double)kf::ceil_div(10, 3), (double)kf::ceil_div(9LL, 3LL),
        (double)sizeof(kf::half), (double)alignof(kf::half), (double)sizeof(kf::bfloat16),
        (double)alignof(kf::Vec<float, 4>), (double)alignof(kf::Vec<double, 4>),
        (double)alignof(kf::Vec<kf::half, 2>), (double)sizeof(kf::Tensor<float, 3, int>),
        (double)sizeof(kf::Tensor<float, 3, long long>), (double)sizeof(kf::Tensor<float, 0, int>)};
    write_all(out, v);
    return 0;
  }
CASTS
  std::fprintf(stderr, "unknown op %s\n", op.c_str());
  return 2;
}
"""

_CPP_OF = {
    "bool": "bool",
    "int32": "int",
    "int64": "long long",
    "float16": "kf::half",
    "bfloat16": "kf::bfloat16",
    "float32": "float",
    "float64": "double",
}
# raw storage of each dtype in the files exchanged with the host program
_RAW = {
    "bool": np.uint8,
    "int32": np.int32,
    "int64": np.int64,
    "float16": np.uint16,
    "bfloat16": np.uint16,
    "float32": np.float32,
    "float64": np.float64,
}


class _HostProgram:
    def __init__(self, workdir: Path) -> None:
        gxx = shutil.which("g++")
        if gxx is None:
            pytest.fail("g++ is needed to compile the runtime header as host code")
        casts = "\n".join(
            f'  if (op == "cast.{a}.{b}") return cast_op<{_CPP_OF[a]}, {_CPP_OF[b]}>(in, out);'
            for a in _CPP_OF
            for b in _CPP_OF
        )
        source = _HOST_STUBS + HEADER_TEXT + _HOST_MAIN.replace("CASTS", casts)
        self.dir = workdir
        src = workdir / "host_helpers.cpp"
        src.write_text(source)
        self.exe = workdir / "host_helpers"
        proc = subprocess.run(
            [
                gxx,
                "-std=c++17",
                "-O2",
                "-Wall",
                "-Wextra",
                "-Werror",
                "-Wno-unused-function",
                "-Wno-unused-parameter",
                "-o",
                str(self.exe),
                str(src),
            ],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            pytest.fail(f"g++ failed on the runtime header:\n{proc.stderr}")
        self.count = 0

    def __call__(self, op: str, data: np.ndarray, out_dtype) -> np.ndarray:
        self.count += 1
        inp = self.dir / f"in{self.count}.bin"
        out = self.dir / f"out{self.count}.bin"
        np.ascontiguousarray(data).tofile(inp)
        proc = subprocess.run(
            [str(self.exe), op, str(inp), str(out)], capture_output=True, text=True
        )
        assert proc.returncode == 0, f"{op}: {proc.stderr}"
        return np.fromfile(out, dtype=out_dtype)


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> _HostProgram:
    return _HostProgram(tmp_path_factory.mktemp("kf_host"))


def _special_floats() -> np.ndarray:
    f32 = np.finfo(np.float32)
    f16 = np.finfo(np.float16)
    # fmt: off
    vals = [
        0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, 2.5, -2.5, 3.5, 1e-45, -1e-45, f32.tiny, f32.max,
        -f32.max, np.inf, -np.inf, np.nan, -np.nan, float(f16.max), 65519.996, 65520.0, 65536.0,
        float(f16.tiny), float(f16.smallest_subnormal), 2.0**-25, 2.0**-25 * 1.0000001, 2.0**-26,
        3 * 2.0**-25, 2.0**-24 * 1.5, 2.0**-24 * 2.5, 1e30, -1e30, 3e9, -3e9, 2.0**31, -(2.0**31),
        2.0**63, -(2.0**63), 1e20,
    ]
    # fmt: on
    out = np.array(vals, dtype=np.float32)
    # payload NaNs, signalling NaN, and every rounding tie of both 16-bit formats around 1.0
    nans = np.array([0x7F800001, 0xFF800001, 0x7FA00000, 0x7FFFFFFF, 0x7F802000], dtype=np.uint32)
    ties = np.arange(
        0x3F800000, 0x3F800000 + 0x40000, 0x1000, dtype=np.uint32
    )  # fp16 ties and neighbours
    ties_bf = np.arange(0x3F800000, 0x3F800000 + 0x80000, 0x8000, dtype=np.uint32)  # bf16 ties
    near = np.concatenate([ties - 1, ties, ties + 1, ties_bf - 1, ties_bf + 1])
    return np.concatenate([out, nans.view(np.float32), near.view(np.float32)])


def _float_corpus(seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    random_bits = rng.integers(0, 2**32, size=200_000, dtype=np.uint64).astype(np.uint32)
    small = np.ldexp(rng.uniform(-2, 2, 50_000), rng.integers(-30, -10, 50_000))  # fp16 subnormals
    sub_bits = np.arange(
        0x33000000 - 64, 0x38800000 + 64, 997, dtype=np.uint32
    )  # dense subnormal band
    return np.concatenate(
        [
            _special_floats(),
            random_bits.view(np.float32),
            small.astype(np.float32),
            sub_bits.view(np.float32),
            -sub_bits.view(np.float32),
        ]
    )


def _bf16_reference_bits(x: np.ndarray) -> np.ndarray:
    """Round to nearest even, written in Python integers' terms (independent of the C++)."""
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF
    return np.where(np.isnan(x), 0x7FC0, rounded).astype(np.uint16)


def _bf16_to_float(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def _assert_same_floats(
    got: np.ndarray, want: np.ndarray, what: str, rtol: float = 0.0, atol: float = 0.0
) -> None:
    got = np.asarray(got)
    want = np.asarray(want, dtype=got.dtype)
    nan_got, nan_want = np.isnan(got), np.isnan(want)
    bad = np.flatnonzero(nan_got != nan_want)
    assert bad.size == 0, (
        f"{what}: NaN mismatch at {bad[:5]}: got {got[bad[:5]]}, want {want[bad[:5]]}"
    )
    ok = ~nan_want
    if rtol == 0.0 and atol == 0.0:
        bad = np.flatnonzero(ok & (got != want))
    else:
        with np.errstate(invalid="ignore", over="ignore"):
            close = np.isclose(got, want, rtol=rtol, atol=atol) | (got == want)
        bad = np.flatnonzero(ok & ~close)
    assert bad.size == 0, (
        f"{what}: {bad.size} mismatches, e.g. got {got[bad[:5]]}, want {want[bad[:5]]}"
    )


def test_float_to_half_is_exact_rne(host: _HostProgram) -> None:
    x = _float_corpus()
    got = host("cast.float32.float16", x, np.uint16)
    with np.errstate(over="ignore"):
        want = x.astype(np.float16).view(np.uint16)
    nan_got = (got & 0x7C00) == 0x7C00
    nan_got &= (got & 0x3FF) != 0
    assert np.array_equal(nan_got, np.isnan(x))
    assert np.all((got[np.isnan(x)] & 0x0200) != 0), "NaN must come out quiet"
    assert np.array_equal(got[~np.isnan(x)], want[~np.isnan(x)])


def test_half_to_float_covers_every_bit_pattern(host: _HostProgram) -> None:
    bits = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    got = host("cast.float16.float32", bits, np.float32)
    want = bits.view(np.float16).astype(np.float32)
    _assert_same_floats(got, want, "half -> float")
    assert np.array_equal(np.signbit(got), np.signbit(want))
    # and back: every half value survives the round trip (NaNs stay NaN)
    back = host("cast.float32.float16", got, np.uint16)
    finite = ~np.isnan(want)
    assert np.array_equal(back[finite], bits[finite])


def test_float_to_bfloat16_is_rne_and_keeps_nan(host: _HostProgram) -> None:
    x = _float_corpus(1)
    got = host("cast.float32.bfloat16", x, np.uint16)
    isnan = np.isnan(x)
    assert np.all((got[isnan] & 0x7F80) == 0x7F80) and np.all((got[isnan] & 0x7F) != 0)
    assert np.array_equal(got[~isnan], _bf16_reference_bits(x)[~isnan])
    # widening every bfloat16 is exact
    bits = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    _assert_same_floats(
        host("cast.bfloat16.float32", bits, np.float32), _bf16_to_float(bits), "bf16 -> float"
    )


def _cast_inputs(dtype: str) -> np.ndarray:
    if dtype == "bool":
        return np.array([0, 1, 1, 0], dtype=np.uint8)
    if dtype == "int32":
        return np.array(
            [0, 1, -1, 7, -7, 2**31 - 1, -(2**31), 65504, 65520, 2**24 + 1, 300], dtype=np.int32
        )
    if dtype == "int64":
        return np.array(
            [0, 1, -1, 2**40 + 1, -(2**63), 2**63 - 1, 2**31, 2**24 + 1, -70000], dtype=np.int64
        )
    x = _special_floats()
    extra = np.array(
        [0.9, -0.9, 1.9999, -1.9999, 123.456, -(2.0**31) - 256, 2.0**31 - 128], dtype=np.float32
    )
    x = np.concatenate([x, extra])
    if dtype == "float16":
        with np.errstate(over="ignore"):
            return x.astype(np.float16).view(np.uint16)
    if dtype == "bfloat16":
        return _bf16_reference_bits(x)
    if dtype == "float32":
        return x
    with np.errstate(invalid="ignore"):  # the inputs hold NaN and infinities on purpose
        wide = x.astype(np.float64)
    return np.concatenate([wide, [1e300, -1e300, 2.0**63 - 1024, 1e-310, 0.1]])


def _as_value(raw: np.ndarray, dtype: str) -> np.ndarray:
    """Raw storage -> numbers a Python reference can use (float64 for floats, int for ints)."""
    if dtype == "float16":
        return raw.view(np.float16).astype(np.float64)
    if dtype == "bfloat16":
        return _bf16_to_float(raw).astype(np.float64)
    if dtype == "bool":
        return raw.astype(bool)
    return raw


def _reference_cast(raw: np.ndarray, src: str, dst: str) -> np.ndarray:
    """PyTorch's casting rules (GPU behaviour for float -> int out of range: saturate, NaN -> 0)."""
    v = _as_value(raw, src)
    if dst == "bool":
        return (v != 0).astype(np.uint8)
    if dst in ("int32", "int64"):
        info = np.iinfo(np.int32 if dst == "int32" else np.int64)
        if src in ("float16", "bfloat16", "float32", "float64"):
            if src == "float64":
                f = v
            else:
                with np.errstate(invalid="ignore"):  # NaN and infinities on purpose
                    f = v.astype(np.float32).astype(np.float64)
            out = []
            for item in f:
                if math.isnan(item):
                    out.append(0)
                elif item >= 2.0 ** (info.bits - 1):
                    out.append(int(info.max))
                elif item <= -(2.0 ** (info.bits - 1)):
                    out.append(int(info.min))
                else:
                    out.append(int(item))  # truncates toward zero
            return np.array(out, dtype=_RAW[dst])
        return v.astype(_RAW[dst])  # integer -> integer wraps, as static_cast does
    with np.errstate(over="ignore", invalid="ignore"):
        if dst == "float64":
            return v.astype(np.float64)
        as_f32 = v.astype(np.float32)  # everything reaches the 16-bit types through float
        if dst == "float32":
            return as_f32
        if dst == "float16":
            return as_f32.astype(np.float16).view(np.uint16)
        return _bf16_reference_bits(as_f32)


@pytest.mark.parametrize("src", list(_CPP_OF))
@pytest.mark.parametrize("dst", list(_CPP_OF))
def test_cast_semantics_match_torch(host: _HostProgram, src: str, dst: str) -> None:
    raw = _cast_inputs(src)
    got = host(f"cast.{src}.{dst}", raw, _RAW[dst])
    want = _reference_cast(raw, src, dst)
    if dst in ("float16", "bfloat16"):
        g = _as_value(got, dst)
        w = _as_value(want, dst)
        _assert_same_floats(g, w, f"cast {src}->{dst}")
    elif dst in ("float32", "float64"):
        _assert_same_floats(got, want, f"cast {src}->{dst}")
    else:
        assert np.array_equal(got, want), (
            f"cast {src}->{dst}: got {got}, want {want} for input {raw}"
        )


def _erf(x: np.ndarray) -> np.ndarray:
    return np.array([math.erf(v) if not math.isnan(v) else math.nan for v in x])


def _erfc(x: np.ndarray) -> np.ndarray:
    return np.array([math.erfc(v) if not math.isnan(v) else math.nan for v in x])


def _unary_reference(name: str, x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    with np.errstate(all="ignore"):
        table = {
            "exp": np.exp,
            "exp2": np.exp2,
            "expm1": np.expm1,
            "log": np.log,
            "log2": np.log2,
            "log10": np.log10,
            "log1p": np.log1p,
            "sqrt": np.sqrt,
            "rsqrt": lambda v: 1 / np.sqrt(v),
            "reciprocal": lambda v: 1 / v,
            "sin": np.sin,
            "cos": np.cos,
            "tan": np.tan,
            "asin": np.arcsin,
            "acos": np.arccos,
            "atan": np.arctan,
            "sinh": np.sinh,
            "cosh": np.cosh,
            "tanh": np.tanh,
            "asinh": np.arcsinh,
            "acosh": np.arccosh,
            "atanh": np.arctanh,
            "erf": _erf,
            "erfc": _erfc,
            "sigmoid": lambda v: 1 / (1 + np.exp(-v)),
            "relu": lambda v: np.where(v < 0, 0.0, v),
            "silu": lambda v: v / (1 + np.exp(-v)),
            "gelu_erf": lambda v: v * 0.5 * (1 + _erf(v / math.sqrt(2))),
            "gelu_tanh": lambda v: (
                0.5 * v * (1 + np.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v**3)))
            ),
            "floor": np.floor,
            "ceil": np.ceil,
            "round": np.round,
            "trunc": np.trunc,
            "sign": lambda v: np.where(np.isnan(v), 0.0, np.sign(v)),  # torch.sign(nan) == 0
            "abs": np.abs,
            "neg": np.negative,
            "isnan": lambda v: np.isnan(v).astype(np.float64),
            "isinf": lambda v: np.isinf(v).astype(np.float64),
            "isfinite": lambda v: np.isfinite(v).astype(np.float64),
        }
        return table[name](x)


_UNARY = (
    "exp exp2 expm1 log log2 log10 log1p sqrt rsqrt reciprocal sin cos tan asin acos atan sinh cosh"
    " tanh asinh acosh atanh erf erfc sigmoid relu silu gelu_erf gelu_tanh floor ceil round trunc"
    " sign abs neg isnan isinf isfinite"
).split()


def _math_inputs(rng: np.random.Generator) -> np.ndarray:
    # fmt: off
    specials = [
        0.0, -0.0, 0.5, -0.5, 1.5, 2.5, -2.5, 3.5, -3.5, 1.0, -1.0, 0.999, -0.999, 20.0, -20.0,
        89.0, -89.0, -104.0, np.inf, -np.inf, np.nan, 1e-20, -1e-20, 1e30, -1e30,
    ]
    # fmt: on
    return np.concatenate(
        [
            specials,
            rng.uniform(-10, 10, 3000),
            rng.uniform(-1, 1, 1000),
            np.round(rng.uniform(-50, 50, 500)) + 0.5,
        ]
    )


@pytest.mark.parametrize("name", _UNARY)
@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_unary_math_matches_numpy(host: _HostProgram, name: str, dtype: str) -> None:
    npt = np.float32 if dtype == "f32" else np.float64
    x = _math_inputs(np.random.default_rng(2)).astype(npt)
    got = host(f"{dtype}.{name}", x, npt).astype(np.float64)
    want = _unary_reference(name, x)
    if dtype == "f32":
        with np.errstate(over="ignore"):
            want = want.astype(np.float32).astype(np.float64)
        rtol, atol = 3e-6, 1e-37
        if name in ("gelu_tanh", "gelu_erf"):  # 1 + tanh/erf(..) cancels for negative x
            atol = 2e-6
        if name == "silu":  # exp(-x) overflows below x = -88: torch's formula gives -0 there
            atol = 1e-30
        if name in ("exp", "exp2", "expm1", "sinh", "cosh", "tan", "erfc", "silu", "gelu_erf"):
            rtol = 2e-5  # arguments up to 100: one ulp of the argument moves the result more
    else:
        rtol, atol = 1e-13, 1e-300
        if name in ("gelu_tanh", "gelu_erf"):
            atol = 1e-15
    _assert_same_floats(got, want, f"{dtype}.{name}", rtol=rtol, atol=atol)


def test_round_is_half_to_even(host: _HostProgram) -> None:
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5, 4.5, 1e7 + 0.5], dtype=np.float32)
    got = host("f32.round", x, np.float32)
    assert got.tolist() == [0.0, 2.0, 2.0, -0.0, -2.0, -2.0, 4.0, 4.0, 1e7]


def test_float_binary_ops(host: _HostProgram) -> None:
    rng = np.random.default_rng(3)
    a = np.concatenate(
        [rng.uniform(-20, 20, 2000), [5.0, -5.0, 5.0, -5.0, 0.0, np.nan, 1.0, np.inf, 3.0]]
    )
    b = np.concatenate(
        [rng.uniform(-5, 5, 2000), [3.0, 3.0, -3.0, -3.0, 2.0, 1.0, np.nan, 2.0, np.inf]]
    )
    for dtype, npt in (("f32", np.float32), ("f64", np.float64)):
        A, B = a.astype(npt), b.astype(npt)
        pairs = np.stack([A, B], axis=1)
        with np.errstate(all="ignore"):
            fmod = np.fmod(A, B)
            rem = np.where((fmod != 0) & ((B < 0) != (fmod < 0)), fmod + B, fmod)
            _assert_same_floats(host(f"{dtype}.fmod", pairs, npt), fmod, "fmod")
            _assert_same_floats(host(f"{dtype}.remainder", pairs, npt), rem, "remainder")
            # and the sign rule itself, against Python's modulo, on finite values
            got = host(f"{dtype}.remainder", pairs, npt)
            finite = np.isfinite(A) & np.isfinite(B) & (got != 0)
            assert np.all(np.sign(got[finite]) == np.sign(B[finite]))
            _assert_same_floats(
                got[finite], np.remainder(A, B)[finite], "remainder vs numpy", rtol=1e-5, atol=1e-5
            )
            _assert_same_floats(host(f"{dtype}.maximum", pairs, npt), np.maximum(A, B), "maximum")
            _assert_same_floats(host(f"{dtype}.minimum", pairs, npt), np.minimum(A, B), "minimum")
    P = np.stack([np.abs(a).astype(np.float32), b.astype(np.float32)], axis=1)
    with np.errstate(all="ignore"):
        _assert_same_floats(
            host("f32.pow", P, np.float32),
            np.power(P[:, 0].astype(np.float64), P[:, 1]).astype(np.float32),
            "pow",
            rtol=2e-5,
            atol=1e-37,
        )
    _assert_same_floats(
        host("f32.atan2", np.stack([a, b], 1).astype(np.float32), np.float32),
        np.arctan2(a.astype(np.float32).astype(np.float64), b.astype(np.float32)).astype(
            np.float32
        ),
        "atan2",
        rtol=3e-6,
    )


def test_maximum_minimum_propagate_nan(host: _HostProgram) -> None:
    pairs = np.array(
        [[1.0, np.nan], [np.nan, 1.0], [np.nan, np.nan], [-np.inf, np.nan]], dtype=np.float32
    )
    assert np.all(np.isnan(host("f32.maximum", pairs, np.float32)))
    assert np.all(np.isnan(host("f32.minimum", pairs, np.float32)))


def test_clamp_and_lerp(host: _HostProgram) -> None:
    rng = np.random.default_rng(4)
    n = 2000
    x, lo, hi = rng.uniform(-3, 3, n), rng.uniform(-2, 0, n), rng.uniform(0, 2, n)
    x[:3] = [np.nan, 1.0, 1.0]
    lo[1] = np.nan
    hi[2] = -5.0  # lo > hi gives hi
    for dtype, npt in (("f32", np.float32), ("f64", np.float64)):
        trip = np.stack([x, lo, hi], 1).astype(npt)
        got = host(f"{dtype}.clamp", trip, npt)
        want = np.minimum(np.maximum(trip[:, 0], trip[:, 1]), trip[:, 2])
        _assert_same_floats(got, want, "clamp")
        assert got[2] == npt(-5.0)
    a, b = rng.uniform(-10, 10, n), rng.uniform(-10, 10, n)
    w = np.concatenate([[0.0, 1.0, 0.5, -0.5, 2.0], rng.uniform(-1, 2, n - 5)])
    for dtype, npt in (("f32", np.float32), ("f64", np.float64)):
        A, B, W = a.astype(npt), b.astype(npt), w.astype(npt)
        got = host(f"{dtype}.lerp", np.stack([A, B, W], 1), npt)
        d = B - A
        want = np.where(np.abs(W) < 0.5, A + W * d, B - d * (npt(1) - W))  # torch's formula
        _assert_same_floats(
            got, want, f"{dtype}.lerp", rtol=1e-6 if dtype == "f32" else 1e-15, atol=1e-6
        )
        assert got[0] == A[0] and got[1] == B[1]  # exact at both ends


def test_integer_remainder_fmod_and_division_by_zero(host: _HostProgram) -> None:
    a = np.array([7, -7, 7, -7, 0, 5, -(2**31), -(2**31), 6, -6, 3], dtype=np.int64)
    b = np.array([3, 3, -3, -3, 5, 0, -1, 2, 3, -3, 7], dtype=np.int64)
    py_mod = [x % y if y not in (0, -1) else 0 for x, y in zip(a.tolist(), b.tolist(), strict=True)]
    c_mod = [
        int(math.fmod(x, y)) if y not in (0, -1) else 0
        for x, y in zip(a.tolist(), b.tolist(), strict=True)
    ]
    for dtype, npt in (("i32", np.int32), ("i64", np.int64)):
        pairs = np.stack([a, b], 1).astype(npt)
        assert host(f"{dtype}.remainder", pairs, npt).tolist() == py_mod
        assert host(f"{dtype}.fmod", pairs, npt).tolist() == c_mod
        assert host(f"{dtype}.maximum", pairs, npt).tolist() == np.maximum(a, b).tolist()
        assert host(f"{dtype}.minimum", pairs, npt).tolist() == np.minimum(a, b).tolist()
    x = np.array([5, -5, 0, 2**31 - 1], dtype=np.int32)
    got = host("i32.unary", x, np.int32)
    want = [abs(v) ^ (int(np.sign(v)) * 3) ^ (-v) for v in x.tolist()]
    assert got.tolist() == want


def test_welford_chunks_match_numpy(host: _HostProgram) -> None:
    x = np.random.default_rng(5).normal(3.0, 2.0, 1000)
    mean, m2, count = host("welford", x, np.float64)
    assert count == 1000
    assert mean == pytest.approx(x.mean(), rel=1e-12)
    assert m2 / count == pytest.approx(x.var(), rel=1e-10)


@pytest.mark.parametrize("seed", [6, 7, 8])
@pytest.mark.parametrize(
    ("center", "spread", "rel"),
    [(3.0, 2.0, 5e-5), (0.0, 1e-3, 5e-5), (-5e4, 3.0, 2e-3), (1000.0, 0.01, 1e-2)],
)
def test_welford_in_batches_is_as_accurate_as_value_by_value(
    host: _HostProgram, seed: int, center: float, spread: float, rel: float
) -> None:
    """kf::welford_update_batch (a batch's own mean and M2, measured from its first value,
    then one combine) in float stays within the same bound of float64's statistics as one
    update per value, over 100003 values, also far from zero (the last rows: a spread of
    6e-5 and 1e-5 of the values, where float itself keeps only a few digits of it)."""
    x = np.random.default_rng(seed).normal(center, spread, 100_003)
    one_mean, one_m2, one_n, b_mean, b_m2, b_n = host("welford_batches", x, np.float64)
    assert one_n == b_n == x.size
    for mean, m2 in ((one_mean, one_m2), (b_mean, b_m2)):
        assert mean == pytest.approx(x.mean(), rel=1e-5, abs=1e-8)
        assert m2 / x.size == pytest.approx(x.var(), rel=rel)


def test_identities_layout_and_small_utilities(host: _HostProgram) -> None:
    v = host("identities", np.zeros(1), np.float64).tolist()
    assert v[:4] == [0.0, 1.0, -math.inf, math.inf]
    assert v[4:6] == [-math.inf, math.inf]
    assert v[6:10] == [-(2**31), 2**31 - 1, float(-(2**63)), float(2**63 - 1)]
    assert math.isnan(v[10]) and math.isnan(v[11])
    assert v[12:14] == [4.0, 3.0]
    assert v[14:17] == [2.0, 2.0, 2.0]  # half: 2 bytes, alignment 2; bfloat16: 2 bytes
    assert v[17:20] == [16.0, 16.0, 4.0]  # Vec alignment: min(sizeof(T) * V, 16)
    assert v[20:23] == [8 + 8 * 3, 8 + 16 * 3, 8]  # the launcher's packing rule


# ---------------------------------------------------------------------------------------------
# On a GPU: PTX conversions == portable conversions, and block reductions for every block shape
# ---------------------------------------------------------------------------------------------


class _Driver:
    """The few driver API calls these tests need, through ctypes."""

    def __init__(self) -> None:
        try:
            self.lib = ctypes.CDLL("libcuda.so.1")
        except OSError as exc:
            pytest.skip(f"no CUDA driver: {exc}")
        if self.lib.cuInit(0) != 0:
            pytest.skip("cuInit failed: no usable GPU")
        dev = ctypes.c_int()
        self._check(self.lib.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
        major, minor = ctypes.c_int(), ctypes.c_int()
        self.lib.cuDeviceGetAttribute(ctypes.byref(major), 75, dev)
        self.lib.cuDeviceGetAttribute(ctypes.byref(minor), 76, dev)
        self.arch = f"sm_{major.value}{minor.value}"
        self.ctx = ctypes.c_void_p()
        self._check(
            self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(self.ctx), dev),
            "cuDevicePrimaryCtxRetain",
        )
        self._check(self.lib.cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent")
        self.lib.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
        self.lib.cuMemcpyHtoD_v2.argtypes = [ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t]
        self.lib.cuMemcpyDtoH_v2.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t]
        self.lib.cuMemFree_v2.argtypes = [ctypes.c_uint64]

    @staticmethod
    def _check(rc: int, what: str) -> None:
        assert rc == 0, f"{what} failed with CUresult {rc}"

    def to_device(self, a: np.ndarray) -> int:
        ptr = ctypes.c_uint64()
        self._check(self.lib.cuMemAlloc_v2(ctypes.byref(ptr), max(a.nbytes, 1)), "cuMemAlloc")
        self._check(self.lib.cuMemcpyHtoD_v2(ptr.value, a.ctypes.data, a.nbytes), "cuMemcpyHtoD")
        return ptr.value

    def from_device(self, ptr: int, like: np.ndarray) -> np.ndarray:
        out = np.empty_like(like)
        self._check(self.lib.cuMemcpyDtoH_v2(out.ctypes.data, ptr, out.nbytes), "cuMemcpyDtoH")
        self.lib.cuMemFree_v2(ptr)
        return out

    def launch(
        self, cubin: bytes, name: str, grid: tuple, block: tuple, args: list, shared: int = 0
    ) -> None:
        module, func = ctypes.c_void_p(), ctypes.c_void_p()
        self._check(self.lib.cuModuleLoadData(ctypes.byref(module), cubin), "cuModuleLoadData")
        self._check(
            self.lib.cuModuleGetFunction(ctypes.byref(func), module, name.encode()),
            "cuModuleGetFunction",
        )
        # every test kernel here takes (pointer, pointer, int, int)
        holders = [ctypes.c_uint64(a) for a in args[:2]] + [ctypes.c_int(a) for a in args[2:]]
        argv = (ctypes.c_void_p * len(holders))(
            *[ctypes.cast(ctypes.byref(h), ctypes.c_void_p) for h in holders]
        )
        self._check(
            self.lib.cuLaunchKernel(func, *grid, *block, shared, None, argv, None),
            f"cuLaunchKernel {name}",
        )
        self._check(self.lib.cuCtxSynchronize(), f"kernel {name}")
        self.lib.cuModuleUnload(module)


@pytest.fixture(scope="module")
def driver() -> _Driver:
    return _Driver()


_GPU_CONVERT = r"""
extern "C" __global__ void convert(const unsigned int* in, unsigned int* out, int n, int unused) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float f = __uint_as_float(in[i]);
  unsigned int h = kf::from_float<kf::half>(f).bits;
  unsigned int b = kf::from_float<kf::bfloat16>(f).bits;
  out[2 * i] = (h << 16) | b;
  out[2 * i + 1] = __float_as_uint(kf::to_float(kf::half_from_bits((unsigned short)(in[i] & 0xffffu))));
}
"""


@pytest.mark.gpu
def test_gpu_ptx_conversions_match_portable_ones(nvrtc: _Nvrtc, driver: _Driver) -> None:
    src = HEADER_TEXT + _GPU_CONVERT
    bits = _float_corpus(7).view(np.uint32)
    bits = np.concatenate([bits, np.arange(0, 2**32, 4099, dtype=np.uint64).astype(np.uint32)])
    results = []
    for ptx in (True, False):
        opts = [f"--gpu-architecture={driver.arch}", "-std=c++17"] + (
            ["-DKFUSE_USE_PTX"] if ptx else []
        )
        cubin, _ = _compile_or_fail(nvrtc, src, opts)
        d_in = driver.to_device(bits)
        out = np.zeros(2 * bits.size, dtype=np.uint32)
        d_out = driver.to_device(out)
        driver.launch(
            cubin,
            "convert",
            ((bits.size + 255) // 256, 1, 1),
            (256, 1, 1),
            [d_in, d_out, bits.size, 0],
        )
        driver.from_device(d_in, bits)
        results.append(driver.from_device(d_out, out))
    fast, portable = results
    f = bits.view(np.float32)
    nan = np.isnan(f)
    half_fast, half_port = fast[0::2] >> 16, portable[0::2] >> 16
    bf_fast, bf_port = fast[0::2] & 0xFFFF, portable[0::2] & 0xFFFF
    assert np.array_equal(half_fast[~nan], half_port[~nan])
    assert np.array_equal(bf_fast[~nan], bf_port[~nan])
    assert np.all((bf_fast[nan] & 0x7F80) == 0x7F80) and np.all((bf_fast[nan] & 0x7F) != 0)
    assert np.all((half_fast[nan] & 0x7C00) == 0x7C00) and np.all((half_fast[nan] & 0x3FF) != 0)
    widened_fast, widened_port = fast[1::2].view(np.float32), portable[1::2].view(np.float32)
    _assert_same_floats(widened_fast, widened_port, "half -> float on the GPU")


_GPU_REDUCE = r"""
extern "C" __global__ void reduce(const float* in, float* out, int mode, int unused) {
  __shared__ float scratch[1024];
  __shared__ kf::WelfordState<float> wscratch[1024];
  int t = kf::thread_rank();
  float v = in[t];
  float r;
  if (mode == 0) r = kf::block_reduce_x(v, kf::SumOp(), scratch);
  else if (mode == 1) r = kf::block_reduce_x(v, kf::MaxOp(), scratch);
  else if (mode == 2) r = kf::block_reduce(v, kf::SumOp(), scratch);
  else if (mode == 3) r = kf::block_reduce(v, kf::MinOp(), scratch);
  else {
    kf::WelfordState<float> s = kf::welford_identity<float>();
    kf::welford_update(s, v);
    kf::welford_update(s, v + 1.0f);
    s = kf::block_welford_x(s, wscratch);
    r = s.m2 / s.count + 1000.0f * kf::welford_mean(s);
  }
  // a second call right after checks that scratch is safe to reuse
  r += 0.0f * kf::block_reduce(r, kf::SumOp(), scratch);
  out[t] = r;
}
"""


@pytest.mark.gpu
@pytest.mark.parametrize(
    "block",
    [
        (32, 1, 1),
        (1, 1, 1),
        (7, 3, 1),
        (8, 3, 1),
        (16, 4, 2),
        (48, 3, 1),
        (64, 16, 1),
        (96, 2, 1),
        (100, 3, 1),
        (128, 8, 1),
        (256, 1, 1),
        (1024, 1, 1),
        (33, 31, 1),
        (4, 8, 4),
    ],
)
def test_gpu_block_reductions(nvrtc: _Nvrtc, driver: _Driver, block: tuple) -> None:
    cubin, _ = _compile_or_fail(
        nvrtc,
        HEADER_TEXT + _GPU_REDUCE,
        [f"--gpu-architecture={driver.arch}", "-std=c++17", "-DKFUSE_USE_PTX"],
    )
    bx, by, bz = block
    n = bx * by * bz
    rng = np.random.default_rng(n)
    x = rng.integers(-50, 50, n).astype(np.float32)  # integers: sums are exact in any order
    x[n // 2] = 77.0
    rows = x.reshape(bz * by, bx)
    for mode in range(5):
        d_in, d_out = driver.to_device(x), driver.to_device(np.zeros(n, np.float32))
        driver.launch(cubin, "reduce", (1, 1, 1), block, [d_in, d_out, mode, 0])
        driver.from_device(d_in, x)
        got = driver.from_device(d_out, np.zeros(n, np.float32)).reshape(bz * by, bx)
        if mode == 0:
            want = np.repeat(rows.sum(1, keepdims=True), bx, 1)
        elif mode == 1:
            want = np.repeat(rows.max(1, keepdims=True), bx, 1)
        elif mode == 2:
            want = np.full_like(rows, x.sum())
        elif mode == 3:
            want = np.full_like(rows, x.min())
        else:
            both = np.concatenate([rows, rows + 1], axis=1).astype(np.float64)
            want = np.repeat((both.var(1) + 1000 * both.mean(1))[:, None], bx, 1)
        np.testing.assert_allclose(got, want, rtol=1e-5, err_msg=f"mode {mode}, block {block}")

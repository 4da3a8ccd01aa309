"""Integer add, sub, mul, negation and abs wrap around as torch's do, in kernels on the GPU and
the emulator alike. They were written as C++ signed arithmetic, where an overflow is undefined,
and NVVM built on that: it took abs(x) as never negative, so remainder(m, abs(m) + 1) for
m = INT_MIN skipped its sign fix and a GPU campaign read INT_MIN where 1 was right (the emulator's
host compiler happened not to). kf_math.cuh now computes them in the unsigned type.

Two checks: the runtime header's integer functions, compiled for the host with the undefined-
behaviour sanitizer and run at the extremes (no signed overflow left, whatever an optimizer
would make of one); and fusions that overflow, against the reference on the emulator and the
GPU."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gpu_support import requires_gpu
from kfuse import FusionDefinition
from kfuse.dtypes import DataType
from kfuse.reference import evaluate
from kfuse.runtime.emulator.build import HEADER_DIR
from kfuse.runtime.runtime_header import runtime_header

torch = pytest.importorskip("torch")

# Every integer function of the runtime header, on both int types, at values that overflow.
_HOST_PROGRAM = r"""
#include <climits>
#include <cstdio>

static unsigned long long checksum = 0;

template <typename I>
void take(I v) {  // unsigned, so that the program's own arithmetic cannot overflow
  checksum = checksum * 31u + (unsigned long long)v;
}

template <typename I>
void exercise(I lo, I hi) {
  volatile I values[] = {lo, (I)(lo + 1), (I)-1, (I)0, (I)1, (I)(hi - 1), hi};
  for (I a : values) {
    take(kf::abs(a)), take(kf::neg(a)), take(kf::sign(a)), take(kf::ipow(a, (I)3));
    for (I b : values) {
      take(kf::add(a, b)), take(kf::sub(a, b)), take(kf::mul(a, b));
      take(kf::remainder(a, b)), take(kf::fmod(a, b));
      take(kf::remainder(a, kf::add(kf::abs(b), (I)1)));
      take(kf::SumOp()(a, b)), take(kf::ProdOp()(a, b));
    }
  }
  std::printf("%llu\n", checksum);
}

int main() {
  exercise<int>(INT_MIN, INT_MAX);
  exercise<long long>(LLONG_MIN, LLONG_MAX);
  return 0;
}
"""


def test_integer_functions_have_no_signed_overflow(tmp_path: Path) -> None:
    compiler = shutil.which("g++")
    if compiler is None:
        pytest.skip("needs g++ (the emulator's compiler)")
    source = tmp_path / "ints.cpp"
    source.write_text('#include "cuda_emu.h"\n' + runtime_header() + _HOST_PROGRAM)
    binary = tmp_path / "ints"
    sanitize = ["-fsanitize=signed-integer-overflow", "-fno-sanitize-recover=all"]
    built = subprocess.run(
        [
            compiler,
            "-std=c++17",
            "-O1",
            "-DKFUSE_EMULATOR",
            "-w",
            f"-I{HEADER_DIR}",
            *sanitize,
            str(source),
            "-o",
            str(binary),
        ],
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    ran = subprocess.run([str(binary)], capture_output=True, text=True, timeout=60)
    assert "runtime error" not in ran.stderr, ran.stderr[-2000:]
    assert ran.returncode == 0 and len(ran.stdout.split()) == 2


def _campaign_repro(fd: Any, x: Any) -> Any:
    """The campaign's: max over an empty axis is INT_MIN, then abs, + 1, remainder, abs."""
    m = fd.ops.broadcast(
        fd.ops.max(x, dims=[2], keepdim=False, dtype=x.dtype), is_broadcast_dim=[False, False, True]
    )
    return fd.ops.abs(fd.ops.remainder(m, fd.ops.add(fd.ops.abs(m), 1)))


def _remainder_by_abs_plus_one(fd: Any, x: Any) -> Any:
    return fd.ops.remainder(x, fd.ops.add(fd.ops.abs(x), 1))


def _negated_abs_is_never_positive(fd: Any, x: Any) -> Any:
    return fd.ops.le(fd.ops.neg(fd.ops.abs(x)), 0)


def _products_and_sums_wrap(fd: Any, x: Any) -> Any:
    return fd.ops.sub(fd.ops.mul(fd.ops.add(x, x), 3), x)


def _sum_wraps(fd: Any, x: Any) -> Any:
    return fd.ops.sum(x, dims=[1], keepdim=False, dtype=x.dtype)


def _prod_wraps(fd: Any, x: Any) -> Any:
    return fd.ops.prod(x, dims=[1], keepdim=False, dtype=x.dtype)


CASES = {
    "campaign_repro": (_campaign_repro, (1, 1, 0)),
    "remainder_by_abs_plus_one": (_remainder_by_abs_plus_one, (64, 33)),
    "negated_abs": (_negated_abs_is_never_positive, (64, 33)),
    "arithmetic": (_products_and_sums_wrap, (64, 33)),
    "sum": (_sum_wraps, (16, 300)),
    "prod": (_prod_wraps, (16, 300)),
}


@pytest.mark.parametrize(
    "device", ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, requires_gpu])]
)
@pytest.mark.parametrize("dtype", [DataType.Int32, DataType.Int])
@pytest.mark.parametrize("name", sorted(CASES))
def test_integer_overflow_wraps_as_the_reference_does(
    device: str, dtype: DataType, name: str
) -> None:
    build, shape = CASES[name]
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1] * len(shape), dtype=dtype)
        fd.add_output(build(fd, x))
    np_dtype = np.int32 if dtype == DataType.Int32 else np.int64
    info = np.iinfo(np_dtype)
    rng = np.random.default_rng(len(name))
    # The extremes and their neighbours among large values of both signs.
    pool = np.array([info.min, info.min + 1, -1, 0, 1, info.max - 1, info.max], dtype=np_dtype)
    pool = np.concatenate([pool, rng.integers(info.min, info.max, 64, dtype=np_dtype)])
    host = rng.choice(pool, size=shape)
    (got,) = fd.execute([torch.from_numpy(host).to(device)])
    (want,) = evaluate(fd, [host])
    np.testing.assert_array_equal(got.cpu().numpy(), want)

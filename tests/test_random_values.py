"""kfuse.ir.random_ops: the CUDA expression of a random generated value, in a kernel that
walks the elements as different schedules would (elements per thread, order, with and
without the Philox memo), equals kfuse.reference.philox bit for bit on the emulator."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from kfuse.dtypes import DataType
from kfuse.errors import DefinitionError
from kfuse.ir.random_ops import (
    check_random_dtype,
    check_seed_and_offset,
    random_cuda,
    values_per_philox_call,
)
from kfuse.reference import philox as ref
from kfuse.runtime.emulator import EmulatedKernel
from kfuse.runtime.runtime_header import runtime_header, with_optional_parts

pytestmark = pytest.mark.usefixtures("module_private_cache")

CASES = [
    (op, dtype, standard)
    for op, dtype, standard in itertools.product(
        ("uniform", "normal"),
        (DataType.Float, DataType.Double, DataType.Half, DataType.BFloat16),
        (True, False),
    )
]
PARAMS = {"uniform": (-0.75, 2.5), "normal": (1.25, 0.5)}


def walk_kernel(memo: bool, narrow_index: bool = False) -> str:
    """Thread t computes elements t * per_thread ... (+ per_thread - 1), ascending or
    descending, then strides by the grid; every case's expression writes its output
    (`narrow_index`: with the subsequence from the index's 32 bits, as int-indexed kernels
    take it)."""
    outs, lines = [], []
    for c, (op, dtype, standard) in enumerate(CASES):
        ctype = "double" if dtype == DataType.Double else "float"
        outs.append(f"kf::Tensor<{ctype}, 1, long long> out{c}")
        a, b = (f"{ctype[0]}a{op[0]}", f"{ctype[0]}b{op[0]}")
        expr = random_cuda(
            op,
            "e",
            [a, b, "seed", "offset"],
            dtype,
            standard=standard,
            memo=f"memo{c}" if memo else None,
            narrow_index=narrow_index,
        )
        lines.append(f"      out{c}.data[e] = {expr};")
    memos = "".join(f"  kf::PhiloxMemo memo{c};\n" for c in range(len(CASES))) if memo else ""
    scalars = (
        "float fau, float fbu, float fan, float fbn, double dau, double dbu, double dan, double dbn"
    )
    return (
        'extern "C" __global__ void walk(' + ", ".join(outs) + f", {scalars}, "
        "long long seed, long long offset, long long n, int per_thread, int descending) {\n"
        + memos
        + "  const long long threads = (long long)gridDim.x * blockDim.x;\n"
        "  const long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n"
        "  for (long long first = t * per_thread; first < n; first += threads * per_thread) {\n"
        "    for (int j = 0; j < per_thread; ++j) {\n"
        "      const long long e = first + (descending ? per_thread - 1 - j : j);\n"
        "      if (e >= n) continue;\n" + "\n".join(lines) + "\n    }\n  }\n}\n"
    )


@pytest.mark.parametrize("memo, narrow_index", [(True, False), (False, False), (False, True)])
def test_every_walk_gives_the_reference_numbers(memo: bool, narrow_index: bool) -> None:
    source = runtime_header() + walk_kernel(memo, narrow_index)
    assert ("(unsigned int)(e)" in source) is narrow_index
    kernel = EmulatedKernel(with_optional_parts(source), "walk")
    n, seed, offset = 1001, -5, 3
    expected = []
    for op, dtype, standard in CASES:
        # The standard form is the generator with a, b = 0, 1 (which it does not read).
        a_b = (0.0, 1.0) if standard else PARAMS[op]
        values = ref.generated_values(op, (n,), [*a_b, seed, offset], dtype)
        expected.append(values.astype(np.float64 if dtype == DataType.Double else np.float32))
    scalars = [*PARAMS["uniform"], *PARAMS["normal"]] * 2
    for per_thread, descending, block in ((1, 0, 128), (4, 0, 64), (8, 1, 32), (3, 1, 96)):
        outs = [np.full(n, np.nan, e.dtype) for e in expected]
        kernel.launch(
            (2,), (block, 1, 1), 0, [*outs, *scalars, seed, offset, n, per_thread, descending]
        )
        for (op, dtype, standard), got, want in zip(CASES, outs, expected):
            bits = np.dtype(f"u{want.itemsize}")
            assert (got.view(bits) == want.view(bits)).all(), (op, dtype, standard, per_thread)


def test_general_forms_at_zero_and_one_are_the_standard_forms() -> None:
    # nvFuser picks the standard form only for constant 0 and 1; a scalar input of those
    # values takes the general form, which must give the same numbers (0 + 1 * u is u, and
    # Half's "rounds to `to`, becomes `from`" is the standard fold of 1.0 to 0).
    kernel = EmulatedKernel(with_optional_parts(runtime_header() + walk_kernel(True)), "walk")
    n, seed, offset = 4099, 17, 1 << 35
    expected = []
    for op, dtype, _ in CASES:
        values = ref.generated_values(op, (n,), [0.0, 1.0, seed, offset], dtype)
        expected.append(values.astype(np.float64 if dtype == DataType.Double else np.float32))
    outs = [np.full(n, np.nan, e.dtype) for e in expected]
    kernel.launch((4,), (128, 1, 1), 0, [*outs, *([0.0, 1.0] * 4), seed, offset, n, 4, 0])
    for case, got, want in zip(CASES, outs, expected):
        bits = np.dtype(f"u{want.itemsize}")
        assert (got.view(bits) == want.view(bits)).all(), case


def test_expression_names_the_memo_and_the_per_call_count() -> None:
    e = random_cuda("uniform", "i", ["lo", "hi", "s", "o"], DataType.Double, memo="m0")
    assert e.startswith("kf::rng_uniform_range_double(m0.get(") and "/ 2" in e and "% 2" in e
    h = random_cuda("normal", "i", ["0", "1", "s", "o"], DataType.Half, standard=True)
    assert h.startswith("kf::to_float(kf::rng_normal_narrow<kf::half>(kf::philox(")
    assert values_per_philox_call(DataType.Float) == 4


def test_definition_rules() -> None:
    with pytest.raises(DefinitionError, match="Float, Double, Half or BFloat16"):
        check_random_dtype(DataType.Int, "uniform")
    with pytest.raises(DefinitionError, match="Float, Double, Half or BFloat16"):
        check_random_dtype(DataType.Float8_e4m3fn, "normal")
    with pytest.raises(DefinitionError, match="together"):
        check_seed_and_offset(object(), None, "uniform")
    check_seed_and_offset(None, None, "uniform")

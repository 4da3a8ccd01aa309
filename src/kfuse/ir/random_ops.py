"""Random-number ops (fd.ops.uniform, normal, rand_like, randn_like) as generated values: what
a kernel computes for one element from its linear index (the CUDA expression) and the rules
of their definition, nvFuser's (csrc/ops/arith.cpp, python_direct/ops.cpp).

An element's value depends on (seed, Philox offset, its linear index in the op's logical
output shape) alone (kf_philox.cuh's contract), so it plugs into the generated-value leaf of
the pointwise kernel as full and iota do: one generator row per op, whose parameters are
(a, b, seed, offset), with (a, b) = (minval, maxval) or (mean, std). Stateless ops take seed
and offset from Int scalars of the definition; stateful ones from
kfuse.runtime.rng_state.reserve at each launch (op k of a kernel at offset // 4 + k).
The reference computes the same numbers with kfuse.reference.philox.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kfuse.dtypes import DataType
from kfuse.errors import DefinitionError

RANDOM_DTYPES = (DataType.Float, DataType.Double, DataType.Half, DataType.BFloat16)


@dataclass(frozen=True)
class RandomOpInfo:
    """One random generator: its fd.ops name, its two distribution parameters' names, the
    values that make it the standard form, and its kf_philox.cuh function stem."""

    name: str
    params: tuple[str, str]
    standard: tuple[float, float]
    stem: str


RANDOM_OPS: dict[str, RandomOpInfo] = {
    "uniform": RandomOpInfo("uniform", ("minval", "maxval"), (0.0, 1.0), "uniform"),
    "normal": RandomOpInfo("normal", ("mean", "std"), (0.0, 1.0), "normal"),
}
"""The generators; rand_like and randn_like are uniform(0, 1) and normal(0, 1) with their
input's shape and dtype."""


def is_random(expr: Any) -> bool:
    """Whether `expr` (a GeneratedOp) draws random numbers."""
    return getattr(expr, "op", None) in RANDOM_OPS


def is_stateful(expr: Any) -> bool:
    """Whether random GeneratedOp `expr` takes its seed and offset from a generator at each
    launch: its params are (a, b) alone; a stateless op's are (a, b, rng_seed, rng_offset)."""
    return is_random(expr) and len(expr.params) == 2


def check_random_dtype(dtype: DataType, op: str) -> None:
    """nvFuser's rule: random distributions only create floating-point types (and kfuse
    generates no float8 values)."""
    if dtype not in RANDOM_DTYPES:
        raise DefinitionError(
            f"{op}: random numbers are Float, Double, Half or BFloat16, not {dtype.value}"
        )


def check_seed_and_offset(rng_seed: object, rng_offset: object, op: str) -> None:
    """Both or neither, as nvFuser's random ops take them."""
    if (rng_seed is None) != (rng_offset is None):
        raise DefinitionError(f"{op}: rng_seed and rng_offset must be given together")


def values_per_philox_call(dtype: DataType) -> int:
    """Elements one Philox call gives: 4 (one 32-bit word each), 2 for Double."""
    return 2 if dtype == DataType.Double else 4


def random_cuda(
    op: str,
    index: str,
    params: list[str],
    dtype: DataType,
    *,
    standard: bool = False,
    memo: str | None = None,
    narrow_index: bool = False,
) -> str:
    """The element at linear `index` (a CUDA expression) of generator `op` with `params` =
    [a, b, seed, offset] (CUDA expressions), in `dtype`'s compute type (float for Half and
    BFloat16, exactly the rounded value). `standard`: the form without a and b (they are 0
    and 1; the numbers are the same, with two operations fewer). `memo`: a kf::PhiloxMemo the
    kernel declares for this op, so that the elements of one subsequence a thread computes in
    turn pay for one Philox call. `narrow_index`: `index` is below 2^32 (the kernel indexes
    with int), so the subsequence's high word is zero and the compiler folds it (3% of the
    instructions of a dropout + layer norm forward's kernel)."""
    info = RANDOM_OPS[op]
    a, b, seed, offset = params
    per_call = values_per_philox_call(dtype)
    i = (
        f"(unsigned long long)((unsigned int)({index}))"
        if narrow_index
        else f"(unsigned long long)({index})"
    )
    args = f"(unsigned long long)({seed}), {i} / {per_call}, (unsigned long long)({offset})"
    block = f"{memo}.get({args})" if memo else f"kf::philox({args})"
    component = f"(int)({i} % {per_call})"
    general = "" if standard else ("_range" if op == "uniform" else "_general")
    if dtype == DataType.Double:
        extra = "" if standard else f", (double)({a}), (double)({b})"
        return f"kf::rng_{info.stem}{general}_double({block}, {component}{extra})"
    extra = "" if standard else f", (float)({a}), (float)({b})"
    if dtype == DataType.Float:
        return f"kf::rng_{info.stem}{general}_float({block}, {component}{extra})"
    narrow = f"kf::rng_{info.stem}{general}_narrow<{dtype.cuda_type}>"
    return f"kf::to_float({narrow}({block}, {component}{extra}))"

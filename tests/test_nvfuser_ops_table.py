"""docs/guides/nvfuser-ops.md lists every fd.ops name of nvFuser's direct bindings with
kfuse's status; this keeps it true against kfuse's fd.ops."""

from __future__ import annotations

import re
from pathlib import Path

from kfuse.frontend.ops import Ops

TABLE = Path(__file__).resolve().parents[1] / "docs" / "guides" / "nvfuser-ops.md"

# The fd.ops names nvFuser's python/python_direct/ops.cpp binds (134), read off its source.
NVFUSER_OPS = [
    "abs", "acos", "acosh", "add", "addcmul", "argsort", "asin", "asinh", "atan", "atan2",
    "atanh", "bitwise_and", "bitwise_left_shift", "bitwise_not", "bitwise_or",
    "bitwise_right_shift", "bitwise_xor", "broadcast", "broadcast_in_dim", "cast", "cat",
    "ceil", "clamp", "complex", "cos", "cosh", "cummax", "cummin", "cumprod", "cumsum",
    "cutlass_nvfp4_grouped_mm", "div", "embedding_fwd", "eq", "erf", "erfc", "erfcinv",
    "erfinv", "exp", "exp2", "expand", "expm1", "floor", "fmod", "frac", "full", "gather",
    "gcd", "ge", "grouped_mm", "gt", "imag", "index_select", "iota", "isfinite", "isinf",
    "isnan", "isneginf", "isposinf", "isreal", "le", "lerp", "lgamma", "linear", "log", "log10",
    "log1p", "log2", "logical_and", "logical_not", "logical_or", "logical_right_shift", "lt",
    "matmul", "max", "maximum", "min", "minimum", "mod", "mul", "ne", "neg", "nextafter",
    "normal", "nv_block_quantize", "nv_grouped_block_quantize", "pad", "permute", "pow",
    "preprocess_grouped_matmul_input_sf", "prod", "rand_like", "randn_like", "real",
    "reciprocal", "relu", "remainder", "reshape", "round", "rsqrt", "scaled_mm", "scatter",
    "sdpfa_bwd", "sdpfa_fwd", "segment_set", "select", "set", "shape", "sigmoid", "sign",
    "signbit", "silu", "sin", "sinh", "size", "slice", "sqrt", "squeeze", "stride_order", "sub",
    "sum", "take_along_axis", "tan", "tanh", "threshold", "topk", "triu", "truediv", "trunc",
    "uniform", "var", "var_mean", "welford", "where",
]  # fmt: skip


def _rows() -> dict[str, str]:
    rows = {}
    for line in TABLE.read_text().splitlines():
        match = re.fullmatch(r"\| `(\w+)` \| (supported|not yet) \|.*\|", line)
        if match:
            assert match.group(1) not in rows, f"{match.group(1)} has two rows"
            rows[match.group(1)] = match.group(2)
    return rows


def test_the_table_lists_every_nvfuser_op_once() -> None:
    assert len(NVFUSER_OPS) == len(set(NVFUSER_OPS)) == 134
    assert sorted(_rows()) == sorted(NVFUSER_OPS)


def test_each_rows_status_is_kfuses() -> None:
    wrong = {
        name: status
        for name, status in _rows().items()
        if (status == "supported") != callable(getattr(Ops, name, None))
    }
    assert not wrong, f"rows of docs/guides/nvfuser-ops.md to correct: {wrong}"

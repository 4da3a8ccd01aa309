"""docs/guides/nvfuser-ops.md lists every fd.ops name of nvFuser's direct bindings with
kfuse's status; this keeps it true against kfuse's fd.ops."""

from __future__ import annotations

import inspect
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


# The keyword names of each fd.ops binding in nvFuser's ops.cpp (the union over its overloads),
# read off its source at 81c4b22.
NVFUSER_KEYWORDS = {
    "argsort": ("arg", "descending", "dim", "stable"),
    "broadcast": ("arg", "is_broadcast_dim"),
    "broadcast_in_dim": ("arg", "broadcast_dims", "shape"),
    "cast": ("arg", "dtype"),
    "cat": ("dim", "manual_padding", "tensors"),
    "cummax": ("arg", "dim", "init"),
    "cummin": ("arg", "dim", "init"),
    "cumprod": ("arg", "dim", "init"),
    "cumsum": ("arg", "dim", "init"),
    "cutlass_nvfp4_grouped_mm": (
        "alpha",
        "dtype",
        "expert_offsets",
        "mat1",
        "mat2",
        "problem_sizes",
        "scale1",
        "scale2",
        "sf_offsets",
    ),
    "embedding_fwd": (
        "input",
        "max_norm",
        "norm_type",
        "padding_idx",
        "scale_grad_by_freq",
        "sparse",
        "weight",
    ),
    "expand": ("arg", "shape"),
    "full": ("dtype", "fill_value", "shape"),
    "gather": ("arg", "dim", "index"),
    "grouped_mm": (
        "alpha",
        "beta",
        "bias",
        "dtype",
        "mat1",
        "mat2",
        "offsets",
        "output_block_scale_dtype",
        "output_block_scale_size",
        "output_gamma",
        "scale1",
        "scale2",
    ),
    "index_select": ("arg", "dim", "index"),
    "iota": ("dtype", "length", "start", "step"),
    "linear": ("arg1", "arg2", "bias"),
    "matmul": ("arg1", "arg2"),
    "max": ("arg", "dim", "dims", "dtype", "keepdim"),
    "min": ("arg", "dim", "dims", "dtype", "keepdim"),
    "normal": ("dtype", "mean", "rng_offset", "rng_seed", "shape", "std"),
    "nv_block_quantize": ("block_size", "dtype", "global_scale", "input", "swizzle_block_scales"),
    "nv_grouped_block_quantize": (
        "block_size",
        "dtype",
        "global_scale",
        "input",
        "input_offsets",
        "output_offsets",
    ),
    "pad": ("arg", "pad_widths", "value"),
    "permute": ("arg", "dims"),
    "preprocess_grouped_matmul_input_sf": ("input", "input_offsets", "output_offsets"),
    "prod": ("arg", "dim", "dims", "dtype", "keepdim"),
    "reshape": ("arg", "new_shape"),
    "scaled_mm": (
        "alpha",
        "beta",
        "bias",
        "dtype",
        "mat1",
        "mat2",
        "output_block_scale_dtype",
        "output_block_scale_size",
        "output_gamma",
        "scale1",
        "scale2",
    ),
    "scatter": ("arg", "dim", "index", "src"),
    "sdpfa_bwd": (
        "dropout_p",
        "grad_output",
        "is_causal",
        "key",
        "logsumexp",
        "output",
        "philox_offset",
        "philox_seed",
        "query",
        "scale",
        "value",
    ),
    "sdpfa_fwd": ("bias", "dropout_p", "is_causal", "key", "mask", "query", "scale", "value"),
    "select": ("arg", "dim", "index"),
    "size": ("arg", "dim"),
    "slice": ("arg", "end_indices", "manual_normalization", "start_indices", "strides"),
    "squeeze": ("arg", "dims", "squeeze_expanded"),
    "stride_order": ("arg", "stride_order"),
    "sum": ("arg", "dim", "dims", "dtype", "keepdim"),
    "take_along_axis": ("arg", "dim", "index"),
    "topk": ("arg", "dim", "k", "largest", "sorted"),
    "triu": ("arg", "diagonal"),
    "uniform": ("dtype", "maxval", "minval", "rng_offset", "rng_seed", "shape"),
    "var": ("arg", "correction", "dims", "keepdim"),
    "var_mean": ("arg", "correction", "dims", "keepdim"),
    "welford": ("arg", "dims"),
}

# nvFuser keywords kfuse does not take, each with why.
KEYWORD_GAPS = {
    # nvFuser's second grouped_mm overload multiplies block-scaled narrow-precision operands
    # (scale1, scale2 required); kfuse has no block quantization (nvfuser-tests.md).
    "grouped_mm": {
        "alpha", "beta", "bias", "dtype", "output_block_scale_dtype", "output_block_scale_size",
        "output_gamma", "scale1", "scale2",
    },
}  # fmt: skip


def test_kfuse_ops_take_nvfusers_keywords() -> None:
    """A fusion written with nvFuser's keywords (fd.ops.sum(t, dim=-1), fd.ops.pad(t,
    pad_widths=...), ...) runs on kfuse unchanged: every keyword of an op kfuse has is one of
    its parameters."""
    missing = {}
    for op, keywords in NVFUSER_KEYWORDS.items():
        method = getattr(Ops, op, None)
        if method is None:
            continue  # an op kfuse lacks: its row in nvfuser-ops.md says so
        params = inspect.signature(method).parameters
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            continue
        lacking = set(keywords) - set(params) - KEYWORD_GAPS.get(op, set())
        if lacking:
            missing[op] = sorted(lacking)
    assert not missing, f"kfuse's fd.ops lack nvFuser's keywords: {missing}"

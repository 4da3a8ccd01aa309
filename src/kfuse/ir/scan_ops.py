"""fd.ops.cumsum, cumprod, cummax and cummin: the builder of ScanOp (kfuse.ir.exprs), with
nvFuser's definition rules.

nvFuser's `scan` (csrc/ops/arith.cpp) keeps the input's dtype (no promotion of integers to
Int as torch.cumsum does, no widening of Half or BFloat16 in the result), normalizes a
negative dim, rejects a 0-d tensor (it has no axis) and makes a scan along a broadcast axis
the value itself (one element along it). kfuse follows those rules; what nvFuser would
compute with a meaning no torch op has (a Bool scan, which its generated code makes a
logical or, or and) and float8 (which torch does not scan) are DefinitionErrors naming the cast that
gives the meaning the user wants.
"""

from __future__ import annotations

from typing import Any

from kfuse.dtypes import DataType
from kfuse.errors import DefinitionError
from kfuse.ir.builder import as_index, describe
from kfuse.ir.exprs import ScanOp
from kfuse.ir.values import TensorView

SCAN_DTYPES = (
    DataType.Int32,
    DataType.Int,
    DataType.Half,
    DataType.BFloat16,
    DataType.Float,
    DataType.Double,
    DataType.ComplexFloat,
    DataType.ComplexDouble,
)
"""The dtypes a scan takes (and returns); complex ones for cumsum and cumprod only."""


SCAN_OPS = {"cumsum": "sum", "cumprod": "prod", "cummax": "max", "cummin": "min"}
"""The fd.ops methods of scans and the ScanOp.op each builds."""


def build_scan(b: Any, method: str, arg: Any, dim: Any, init: Any = None) -> Any:
    """fd.ops.cumsum / cumprod / cummax / cummin(arg, dim): the inclusive prefix sums,
    products, maxima or minima of `arg` along axis `dim` (negative counts from the end), of
    arg's shape and dtype (cummax and cummin: the values only, as nvFuser's)."""
    v = b.tensor(arg, method)
    if v.ndim == 0:
        raise DefinitionError(f"{method}: {describe(v)} is 0-d: it has no axis to scan along")
    (d,) = b.dims(v, [as_index(dim, method, "dim")], method)
    if init is not None:
        raise DefinitionError(
            f"{method}: init={describe(init)} is not supported (the scan starts from the op's "
            "identity); combine the value with the result instead"
        )
    if v.dtype not in SCAN_DTYPES:
        hint = "Int (torch.cumsum's count)" if v.dtype is DataType.Bool else "Float"
        raise DefinitionError(
            f"{method}: {describe(v)} has dtype {v.dtype.value}, which kfuse does not scan; "
            f"cast it to {hint} first (scans take {', '.join(t.value for t in SCAN_DTYPES)})"
        )
    if v.dtype.is_complex and SCAN_OPS[method] in ("max", "min"):
        raise DefinitionError(
            f"{method}: {describe(v)} is {v.dtype.value}; complex values have no order "
            "(scan fd.ops.real or fd.ops.abs of it instead)"
        )
    if v.axes[d].is_broadcast:  # one element along the axis: each prefix is the element
        return b.pointwise("set", [v])
    out: TensorView = b.new_tensor(v.dtype, v.axes)
    b.add(ScanOp(inputs=(v,), outputs=(out,), op=SCAN_OPS[method], dim=d))
    return out


def scan_method(op: str) -> str:
    """The fd.ops method building a ScanOp of `op` (the printer's)."""
    return next(method for method, o in SCAN_OPS.items() if o == op)

"""The docstrings of the pointwise fd.ops methods, written from their op-table rows.

The methods are made from kfuse.ir.ops.OPS at import (kfuse.frontend.ops), so `help()` and an
editor can only show what a row says: its call and doc line, then what the row's category,
result and operand flags mean for a caller (the dtypes it takes, the dtype it gives), as the
builder applies them (kfuse.ir.builder.Builder.pointwise).
"""

from __future__ import annotations

from kfuse.ir.ops import OPS, OpInfo

_OPERAND = "x is a tensor, a scalar of the definition or a Python number."
_OPERANDS = (
    "Operands are tensors, scalars of the definition or Python numbers; they promote as in "
    "PyTorch and broadcast numpy-style."
)


def _accepted(row: OpInfo) -> str:
    """Which operand dtypes the op refuses (a DefinitionError), if any."""
    if not row.accepts_float:
        kinds = "Integer or Bool" if row.accepts_bool else "Integer"
        return f"{kinds} operands only: a floating operand is a DefinitionError."
    if row.full_precision_only:
        return "The operands must promote to Float or Double (a DefinitionError otherwise)."
    if not row.accepts_bool:
        return "Bool operands are a DefinitionError."
    return ""


def _result(row: OpInfo) -> str:
    """The dtype the op computes in and returns."""
    if row.has_condition:
        return "The condition must be Bool; the result has the dtype the values promote to."
    if row.category == "logical":
        return "The operands are read as Bool (nonzero is true); the result is Bool."
    if row.result == "bool":
        own = "" if row.casts_operands else " (the operand is read in its own dtype)"
        return f"The result is Bool{own}."
    if row.category == "float_math":
        return (
            "Integer and Bool operands are computed as Float; Half and BFloat16 are computed "
            "in float32 and rounded to their dtype."
        )
    if row.result == "float":
        return "Operands that promote to an integer dtype divide as integers (see above)."
    return "The result has the dtype the operands promote to."


def _keywords(row: OpInfo) -> str:
    """What each keyword's values other than the default select."""
    parts = []
    for key, choices in row.keywords.items():
        for value, op in list(choices.items())[1:]:
            parts.append(f"{key}={value!r} gives {OPS[op].doc}.")
    return " ".join(parts)


def pointwise_docstring(row: OpInfo) -> str:
    """The docstring of the fd.ops method that builds `row`'s op."""
    name = row.method_name or row.name
    keywords = "".join(f", {key}={next(iter(choices))!r}" for key, choices in row.keywords.items())
    head = f"{name}({', '.join(row.operand_names)}{keywords}): {row.doc}."
    operands = _OPERAND if row.arity == 1 else _OPERANDS
    parts = (operands, _accepted(row), _result(row), _keywords(row))
    body = " ".join(part for part in parts if part)
    return f"{head}\n\n{body}"

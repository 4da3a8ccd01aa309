"""DataType: kfuse's scalar types, their properties, framework mappings and type promotion.

NumPy has no bfloat16 of its own: a BFloat16 NumPy array is an `ml_dtypes.bfloat16` array (the
library JAX and others use for it), which `to_numpy_dtype(BFloat16)` gives. PyTorch bfloat16
tensors are used as is; CuPy has no bfloat16 arrays.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any

from kfuse.errors import DefinitionError


class DataType(enum.Enum):
    """An element type. The value is the canonical name used in printed fusions."""

    Bool = "Bool"
    Int32 = "Int32"
    Int = "Int"  # int64, as in nvFuser
    Half = "Half"
    BFloat16 = "BFloat16"
    Float = "Float"
    Double = "Double"

    @property
    def itemsize(self) -> int:
        """Size of one element in bytes."""
        return _ITEMSIZE[self]

    @property
    def is_floating(self) -> bool:
        """True for Half, BFloat16, Float and Double."""
        return self in _FLOATING

    @property
    def is_integral(self) -> bool:
        """True for Int32 and Int (Bool is not integral here)."""
        return self in (DataType.Int32, DataType.Int)

    @property
    def is_boolean(self) -> bool:
        """True for Bool."""
        return self is DataType.Bool

    @property
    def cuda_type(self) -> str:
        """The C++ type name the code generator uses for this dtype."""
        return _CUDA_TYPE[self]

    def __repr__(self) -> str:  # printed fusions say DataType.Float
        return f"DataType.{self.value}"


_ITEMSIZE = {
    DataType.Bool: 1,
    DataType.Int32: 4,
    DataType.Int: 8,
    DataType.Half: 2,
    DataType.BFloat16: 2,
    DataType.Float: 4,
    DataType.Double: 8,
}
_FLOATING = frozenset({DataType.Half, DataType.BFloat16, DataType.Float, DataType.Double})

INTEGER_RANGE = {DataType.Int32: (-(2**31), 2**31 - 1), DataType.Int: (-(2**63), 2**63 - 1)}
"""The values each integer dtype holds: constants and scalar inputs outside it are errors."""
_CUDA_TYPE = {
    DataType.Bool: "bool",
    DataType.Int32: "int",
    DataType.Int: "long long",
    DataType.Half: "kf::half",
    DataType.BFloat16: "kf::bfloat16",
    DataType.Float: "float",
    DataType.Double: "double",
}
_NUMPY_NAME = {
    DataType.Bool: "bool",
    DataType.Int32: "int32",
    DataType.Int: "int64",
    DataType.Half: "float16",
    DataType.Float: "float32",
    DataType.Double: "float64",
}
_TORCH_NAME = {
    DataType.Bool: "bool",
    DataType.Int32: "int32",
    DataType.Int: "int64",
    DataType.Half: "float16",
    DataType.BFloat16: "bfloat16",
    DataType.Float: "float32",
    DataType.Double: "float64",
}
ALL_DTYPES: tuple[DataType, ...] = tuple(DataType)


def as_dtype(value: Any, *, what: str = "dtype") -> DataType:
    """Coerce a DataType, its name ("Float"), or a NumPy/torch/CuPy dtype to DataType.

    Raises DefinitionError naming `what` for anything else.
    """
    if isinstance(value, DataType):
        return value
    if isinstance(value, str) and value in DataType.__members__:
        return DataType[value]
    try:
        return from_array_dtype(value)
    except DefinitionError:
        pass
    raise DefinitionError(
        f"{what}: {value!r} is not a kfuse DataType "
        f"(expected one of {', '.join(d.name for d in DataType)})"
    )


def to_numpy_dtype(dtype: DataType) -> Any:
    """The NumPy dtype for `dtype`; BFloat16's is ml_dtypes.bfloat16 (imported only then)."""
    import numpy as np

    if dtype is DataType.BFloat16:
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(_NUMPY_NAME[dtype])


def to_torch_dtype(dtype: DataType) -> Any:
    """The torch dtype for `dtype` (imports torch on first call only)."""
    import torch

    return getattr(torch, _TORCH_NAME[dtype])


def from_array_dtype(dt: Any) -> DataType:
    """The DataType of a NumPy, CuPy or torch dtype (duck-typed through its printed name)."""
    name = str(dt)
    if name.startswith("torch."):
        name = name[len("torch.") :]
    for dtype, tname in _TORCH_NAME.items():
        if name == tname:
            return dtype
    aliases = {
        "float": DataType.Float,
        "double": DataType.Double,
        "half": DataType.Half,
        "int": DataType.Int32,
        "long": DataType.Int,
        "bool_": DataType.Bool,
    }
    if name in aliases:
        return aliases[name]
    raise DefinitionError(f"unsupported array dtype {dt!r}")


def round_to_bfloat16(a: Any) -> Any:
    """Round a NumPy float array to bf16 precision (round-to-nearest-even), as float32.

    Works on the float32 bit pattern: add 0x7FFF plus the lowest kept bit, then clear the low
    16 bits. NaNs are kept NaN (the rounding could otherwise carry them into infinity).
    """
    import numpy as np

    f = np.asarray(a, dtype=np.float32)
    bits = f.view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    out = rounded.astype(np.uint32).view(np.float32)
    return np.where(np.isnan(f), f, out).astype(np.float32)


# ---- type promotion -------------------------------------------------------------------------

_CATEGORY = {
    DataType.Bool: 0,
    DataType.Int32: 1,
    DataType.Int: 1,
    DataType.Half: 2,
    DataType.BFloat16: 2,
    DataType.Float: 2,
    DataType.Double: 2,
}
# Ranks inside a category; Half and BFloat16 share a rank because neither holds the other.
_RANK = {
    DataType.Bool: 0,
    DataType.Int32: 1,
    DataType.Int: 2,
    DataType.Half: 1,
    DataType.BFloat16: 1,
    DataType.Float: 2,
    DataType.Double: 3,
}


def category(dtype: DataType) -> int:
    """0 for Bool, 1 for integers, 2 for floating types."""
    return _CATEGORY[dtype]


def promote_pair(a: DataType, b: DataType) -> DataType:
    """PyTorch's promote_types for two tensor dtypes (Half with BFloat16 gives Float)."""
    if a is b:
        return a
    ca, cb = _CATEGORY[a], _CATEGORY[b]
    if ca != cb:
        return a if ca > cb else b
    ra, rb = _RANK[a], _RANK[b]
    if ra == rb:  # only Half vs BFloat16
        return DataType.Float
    return a if ra > rb else b


def promote_types(
    tensor_dtypes: Sequence[DataType], weak_dtypes: Sequence[DataType] = ()
) -> DataType:
    """The result dtype of an op on tensors and weakly typed scalars, following PyTorch.

    Rules (those of torch.result_type, without complex numbers):

    * categories are ordered bool < integer < floating;
    * tensors promote pairwise by `promote_pair`: the higher category wins, inside a category
      the wider type wins, Half with BFloat16 gives Float;
    * scalars (Python numbers and every kfuse Scalar, constant or symbolic, like torch's 0-dim
      "wrapped numbers") are weak: they only matter when their category is higher than every
      tensor's, and then the result is that category's default: Int (int64) for an integer
      scalar with Bool tensors, Float for a floating scalar with Bool/integer tensors;
    * with no tensors at all (scalar-only arithmetic) the scalars promote among themselves like
      tensors do, so Int * Double gives Double.

    Op-specific rules (true division and float math give floating results, comparisons give
    Bool) are applied on top of this by the op table, see kfuse.ir.ops.
    """
    if not tensor_dtypes:
        if not weak_dtypes:
            raise DefinitionError("type promotion needs at least one operand")
        result = weak_dtypes[0]
        for d in weak_dtypes[1:]:
            result = promote_pair(result, d)
        return result
    result = tensor_dtypes[0]
    for d in tensor_dtypes[1:]:
        result = promote_pair(result, d)
    if weak_dtypes:
        weak_cat = max(_CATEGORY[d] for d in weak_dtypes)
        if weak_cat > _CATEGORY[result]:
            result = DataType.Int if weak_cat == 1 else DataType.Float
    return result


def python_scalar_dtype(value: Any) -> DataType:
    """The dtype kfuse gives a Python number: bool -> Bool, int -> Int, float -> Double."""
    if isinstance(value, bool):
        return DataType.Bool
    if isinstance(value, int):
        return DataType.Int
    if isinstance(value, float):
        return DataType.Double
    # NumPy scalars and the like: go through their dtype.
    dt = getattr(value, "dtype", None)
    if dt is not None and getattr(value, "ndim", 1) == 0:
        return from_array_dtype(dt)
    raise DefinitionError(f"{value!r} ({type(value).__name__}) is not a number")

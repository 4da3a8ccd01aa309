"""DataType: kfuse's scalar types, their properties, framework mappings and type promotion.

NumPy has no bfloat16 or float8 of its own: a BFloat16 NumPy array is an `ml_dtypes.bfloat16`
array (the library JAX and others use for it), a Float8_e4m3fn or Float8_e5m2 one an
`ml_dtypes.float8_e4m3fn` or `ml_dtypes.float8_e5m2` array, which `to_numpy_dtype` gives.
PyTorch bfloat16 and float8 tensors are used as is; CuPy has neither.

Half, BFloat16 and the two float8 types are storage types (`REDUCED_FLOATS`): their arithmetic
is done in float32 and each result is rounded back to its dtype, as in PyTorch. Conversions to
float8 round to nearest even as torch's do (torch 2.13): Float8_e4m3fn, which has no infinity,
saturates a finite overflow and an infinity to +-448 (ml_dtypes gives NaN there, the one
place where the two disagree); Float8_e5m2 overflows to infinity. NaN stays NaN.
"""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Sequence
from dataclasses import dataclass
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
    Float8_e4m3fn = "Float8_e4m3fn"  # 4 exponent bits, 3 mantissa bits; no infinity
    Float8_e5m2 = "Float8_e5m2"  # 5 exponent bits, 2 mantissa bits
    # nvFuser's other names, present so that programs written for nvFuser (Thunder's dtype
    # map) import; kfuse computes none of UInt64 and Float4_e2m1fn_x2 yet (DECLARED_ONLY
    # says why), and Null is nvFuser's "no dtype": the default where a dtype is optional
    # (optional_dtype). The complex types are computed (two floating parts, the real first).
    Null = "Null"
    ComplexFloat = "ComplexFloat"  # complex64: two Floats
    ComplexDouble = "ComplexDouble"  # complex128: two Doubles
    UInt64 = "UInt64"
    Float4_e2m1fn_x2 = "Float4_e2m1fn_x2"
    Float4_e2m1fn = "Float4_e2m1fn"
    Float8_e8m0fnu = "Float8_e8m0fnu"  # the block-scale type of MX formats: 8 exponent bits
    # nvFuser's index type (the type of sizes and positions, define_scalar(dtype=DataType.Index)
    # for a symbolic size): kfuse indexes in int64, so Index is another name for Int.
    Index = "Int"

    @property
    def itemsize(self) -> int:
        """Size of one element in bytes."""
        return _ITEMSIZE[self]

    @property
    def is_floating(self) -> bool:
        """True for Half, BFloat16, Float, Double and the float8 types."""
        return self in _FLOATING

    @property
    def is_float8(self) -> bool:
        """True for Float8_e4m3fn and Float8_e5m2."""
        return self in (DataType.Float8_e4m3fn, DataType.Float8_e5m2)

    @property
    def is_reduced_float(self) -> bool:
        """True for the storage types whose arithmetic is done in float32 (REDUCED_FLOATS)."""
        return self in REDUCED_FLOATS

    @property
    def is_integral(self) -> bool:
        """True for Int32 and Int (Bool is not integral here)."""
        return self in (DataType.Int32, DataType.Int)

    @property
    def is_complex(self) -> bool:
        """True for ComplexFloat and ComplexDouble (not floating: is_floating is False)."""
        return self in (DataType.ComplexFloat, DataType.ComplexDouble)

    @property
    def is_boolean(self) -> bool:
        """True for Bool."""
        return self is DataType.Bool

    @property
    def cuda_type(self) -> str:
        """The C++ type name the code generator uses for this dtype."""
        return _CUDA_TYPE[self]

    @property
    def label(self) -> str:
        """The name messages show users: the value, with its width for Int ("Int (int64)"),
        whose name alone misleads torch users (torch.int is int32) and NumPy users."""
        return "Int (int64)" if self is DataType.Int else self.value

    def __repr__(self) -> str:  # printed fusions say DataType.Float: Python that runs
        return f"DataType.{self.value}"

    def __str__(self) -> str:  # print(dtype), f"{dtype}": DataType.Int (int64)
        return f"DataType.{self.label}"


_ITEMSIZE = {
    DataType.Bool: 1,
    DataType.Int32: 4,
    DataType.Int: 8,
    DataType.Half: 2,
    DataType.BFloat16: 2,
    DataType.Float: 4,
    DataType.Double: 8,
    DataType.Float8_e4m3fn: 1,
    DataType.Float8_e5m2: 1,
    DataType.ComplexFloat: 8,
    DataType.ComplexDouble: 16,
    DataType.UInt64: 8,
    DataType.Float4_e2m1fn_x2: 1,
    DataType.Float4_e2m1fn: 1,
    DataType.Float8_e8m0fnu: 1,
}
REDUCED_FLOATS: tuple[DataType, ...] = (
    DataType.Half,
    DataType.BFloat16,
    DataType.Float8_e4m3fn,
    DataType.Float8_e5m2,
)
"""Floating storage types narrower than Float: computed in Float, rounded when stored."""
_FLOATING = frozenset({*REDUCED_FLOATS, DataType.Float, DataType.Double})

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
    DataType.Float8_e4m3fn: "kf::float8_e4m3fn",
    DataType.Float8_e5m2: "kf::float8_e5m2",
    DataType.ComplexFloat: "kf::complex<float>",
    DataType.ComplexDouble: "kf::complex<double>",
}
COMPLEX_OF = {DataType.Float: DataType.ComplexFloat, DataType.Double: DataType.ComplexDouble}
"""The complex dtype whose parts are of a floating dtype (nvFuser's getComplexTypeFromType)."""
REAL_OF = {c: r for r, c in COMPLEX_OF.items()}
"""The floating dtype of a complex dtype's real and imaginary parts."""
ML_DTYPES_NAME = {
    DataType.BFloat16: "bfloat16",
    DataType.Float8_e4m3fn: "float8_e4m3fn",
    DataType.Float8_e5m2: "float8_e5m2",
}
"""The dtypes NumPy holds only through ml_dtypes, by their ml_dtypes names."""
_NUMPY_NAME = {
    DataType.Bool: "bool",
    DataType.Int32: "int32",
    DataType.Int: "int64",
    DataType.Half: "float16",
    DataType.Float: "float32",
    DataType.Double: "float64",
    DataType.ComplexFloat: "complex64",
    DataType.ComplexDouble: "complex128",
}
_TORCH_NAME = {
    DataType.Bool: "bool",
    DataType.Int32: "int32",
    DataType.Int: "int64",
    DataType.Half: "float16",
    DataType.BFloat16: "bfloat16",
    DataType.Float: "float32",
    DataType.Double: "float64",
    DataType.Float8_e4m3fn: "float8_e4m3fn",
    DataType.Float8_e5m2: "float8_e5m2",
    DataType.ComplexFloat: "complex64",
    DataType.ComplexDouble: "complex128",
}
DECLARED_ONLY = {
    DataType.Null: "DataType.Null means no dtype (the default where a dtype is optional)",
    DataType.UInt64: "unsigned integers are not supported by kfuse yet",
    DataType.Float4_e2m1fn_x2: "packed float4 (e2m1) is not supported by kfuse yet",
    DataType.Float4_e2m1fn: "float4 (e2m1) is not supported by kfuse yet",
    DataType.Float8_e8m0fnu: "float8 e8m0 (MX block scales) is not supported by kfuse yet",
}
"""nvFuser's dtypes kfuse names but does not compute, each with the reason a user is told."""
_DECLARED_TORCH_NAME = {
    "uint64": DataType.UInt64,
    "float4_e2m1fn_x2": DataType.Float4_e2m1fn_x2,
    "float8_e8m0fnu": DataType.Float8_e8m0fnu,
}
"""Arrays of the declared-only dtypes are recognised, so that using one says which it is."""
ALL_DTYPES: tuple[DataType, ...] = tuple(d for d in DataType if d not in DECLARED_ONLY)
"""The dtypes kfuse computes in."""


def as_dtype(value: Any, *, what: str = "dtype") -> DataType:
    """Coerce a DataType, its name ("Float"), or a NumPy/torch/CuPy dtype to DataType: the
    one coercion behind every dtype= argument. NumPy's dtypes are taken as np.dtype takes
    them: np.dtype("float16"), the scalar types (np.float32, np.bool_), and the strings
    ("float32"), as are torch's (torch.float16).

    Raises DefinitionError naming `what` for anything else, and for the dtypes kfuse only
    names (DECLARED_ONLY: Null, UInt64 and the float4 and e8m0 types).
    """
    dtype = _named_dtype(value)
    if dtype is None:
        try:
            dtype = from_array_dtype(value)
        except DefinitionError:
            raise DefinitionError(
                f"{what}: {value!r} is not a kfuse DataType (expected one of "
                f"{', '.join(d.label for d in ALL_DTYPES)}, its name as a string, or a NumPy "
                "or torch dtype)"
            ) from None
    if dtype in DECLARED_ONLY:
        raise DefinitionError(f"{what}: DataType.{dtype.value}: {DECLARED_ONLY[dtype]}")
    return dtype


def optional_dtype(value: Any, *, what: str = "dtype") -> DataType | None:
    """None for None and DataType.Null (nvFuser's spelling of "the default"), else as_dtype."""
    if value is None or _named_dtype(value) is DataType.Null:
        return None
    return as_dtype(value, what=what)


def _named_dtype(value: Any) -> DataType | None:
    if isinstance(value, DataType):
        return value
    if isinstance(value, str) and value in DataType.__members__:
        return DataType[value]
    return None


def to_numpy_dtype(dtype: DataType) -> Any:
    """The NumPy dtype for `dtype`; BFloat16's and the float8 types' are ml_dtypes' (imported
    only then): ml_dtypes.bfloat16, float8_e4m3fn, float8_e5m2."""
    found = _NUMPY_DTYPES.get(dtype)
    if found is not None:  # every allocation asks: np.dtype() of a name costs a few us
        return found
    import numpy as np

    if dtype in ML_DTYPES_NAME:
        import ml_dtypes

        found = np.dtype(getattr(ml_dtypes, ML_DTYPES_NAME[dtype]))
    else:
        found = np.dtype(_NUMPY_NAME[dtype])
    _NUMPY_DTYPES[dtype] = found
    return found


_NUMPY_DTYPES: dict[DataType, Any] = {}
"""to_numpy_dtype's answers so far."""


def to_torch_dtype(dtype: DataType) -> Any:
    """The torch dtype for `dtype` (imports torch on first call only)."""
    import torch

    return getattr(torch, _TORCH_NAME[dtype])


def from_array_dtype(dt: Any) -> DataType:
    """The DataType of a NumPy, CuPy or torch dtype (duck-typed through its printed name),
    or of a NumPy scalar type (np.float32, np.bool_, ml_dtypes.bfloat16: CuPy's are NumPy's),
    which np.dtype turns into its dtype as NumPy's own functions do."""
    if isinstance(dt, type) and dt.__module__.partition(".")[0] in ("numpy", "ml_dtypes"):
        import numpy as np  # only when given one of its types, so NumPy is loaded already

        dt = np.dtype(dt)
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
        "cfloat": DataType.ComplexFloat,
        "cdouble": DataType.ComplexDouble,
    }
    if name in aliases:
        return aliases[name]
    if name in _DECLARED_TORCH_NAME:
        return _DECLARED_TORCH_NAME[name]
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


@dataclass(frozen=True)
class Float8Format:
    """What rounding to one float8 type needs: its mantissa bits, smallest normal exponent
    (2^min_exponent), largest finite value and what a larger magnitude becomes."""

    mantissa_bits: int
    min_exponent: int
    max_finite: float
    saturates: bool  # True: overflow gives +-max_finite (e4m3fn, as torch); False: +-inf


FLOAT8_FORMATS = {
    DataType.Float8_e4m3fn: Float8Format(3, -6, 448.0, saturates=True),
    DataType.Float8_e5m2: Float8Format(2, -14, 57344.0, saturates=False),
}


def round_to_float8(a: Any, dtype: DataType, xp: Any = None) -> Any:
    """Round a float array to `dtype`'s float8 values as torch converts float32 to it, as
    float64; `xp` is the array module (NumPy by default; CuPy and torch work the same).

    The value goes to float32 first: kfuse's kernels and torch convert Double to float8
    through Float. Then round to nearest even on the quantum of the value's binade (a power
    of two, so the scaling is exact and `rint` does the rounding), the subnormal quantum below
    the smallest normal; then overflow as the format says. NaN stays NaN.
    """
    if xp is None:
        import numpy

        xp = numpy
    fmt = FLOAT8_FORMATS[dtype]
    quiet = xp.errstate(all="ignore") if hasattr(xp, "errstate") else contextlib.nullcontext()
    is_torch = getattr(xp, "__name__", "") == "torch"
    with quiet:  # float32 overflow to inf and inf / quantum are meant
        if is_torch:  # torch tensors have `.to`, not `.astype`; torch.round rounds half to even
            x = xp.asarray(a).to(xp.float32).to(xp.float64)
        else:
            x = xp.asarray(a).astype(xp.float32).astype(xp.float64)
        mag = xp.abs(x)
        _, exp = xp.frexp(mag)  # mag = m * 2^exp, m in [0.5, 1): the binade is 2^(exp - 1)
        binade = xp.clip(exp - 1, fmt.min_exponent, None)
        quantum = xp.ldexp(xp.ones_like(mag), binade - fmt.mantissa_bits)
        rint = xp.round if is_torch else xp.rint
        rounded = rint(mag / quantum) * quantum
    overflow = xp.inf if not fmt.saturates else fmt.max_finite
    rounded = xp.where(rounded > fmt.max_finite, overflow, rounded)
    return xp.where(xp.isnan(x), x, xp.copysign(rounded, x))


# ---- type promotion -------------------------------------------------------------------------

_CATEGORY = {
    DataType.Bool: 0,
    DataType.Int32: 1,
    DataType.Int: 1,
    DataType.Half: 2,
    DataType.BFloat16: 2,
    DataType.Float: 2,
    DataType.Double: 2,
    DataType.Float8_e4m3fn: 2,
    DataType.Float8_e5m2: 2,
    DataType.ComplexFloat: 3,
    DataType.ComplexDouble: 3,
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
    DataType.Float8_e4m3fn: 0,  # never compared: float8 promotes with nothing else
    DataType.Float8_e5m2: 0,
    DataType.ComplexFloat: 2,  # the rank of its parts' dtype, Float
    DataType.ComplexDouble: 3,
}


def category(dtype: DataType) -> int:
    """0 for Bool, 1 for integers, 2 for floating types, 3 for complex types."""
    return _CATEGORY[dtype]


def promote_pair(a: DataType, b: DataType) -> DataType:
    """PyTorch's promote_types for two tensor dtypes (Half with BFloat16 gives Float).

    A float8 type promotes with itself only, as in torch (and so nvFuser, which promotes
    through c10::promoteTypes): any other pair with one is a DefinitionError.

    A complex type with a floating one gives the complex type as wide as the wider of the
    two (ComplexFloat with Double: ComplexDouble), as torch does; with Bool or an integer,
    the complex type itself."""
    if a is b:
        return a
    if a.is_float8 or b.is_float8:
        raise DefinitionError(
            f"type promotion of {a.value} with {b.value} is not supported for float8 types "
            "(as in torch): cast one operand to the other's dtype first"
        )
    if a.is_complex or b.is_complex:
        return _promote_complex(a, b)
    ca, cb = _CATEGORY[a], _CATEGORY[b]
    if ca != cb:
        return a if ca > cb else b
    ra, rb = _RANK[a], _RANK[b]
    if ra == rb:  # only Half vs BFloat16
        return DataType.Float
    return a if ra > rb else b


def _promote_complex(a: DataType, b: DataType) -> DataType:
    """promote_pair where one of a, b is complex: the complex type whose parts hold both."""
    parts = [REAL_OF.get(d, d) for d in (a, b) if d.is_complex or d.is_floating]
    widest = DataType.Double if DataType.Double in parts else DataType.Float
    return COMPLEX_OF[widest]


def promote_types(
    tensor_dtypes: Sequence[DataType], weak_dtypes: Sequence[DataType] = ()
) -> DataType:
    """The result dtype of an op on tensors and weakly typed scalars, following PyTorch.

    Rules (those of torch.result_type):

    * categories are ordered bool < integer < floating < complex;
    * tensors promote pairwise by `promote_pair`: the higher category wins, inside a category
      the wider type wins, Half with BFloat16 gives Float;
    * scalars (Python numbers and every kfuse Scalar, constant or symbolic, like torch's 0-dim
      "wrapped numbers") are weak: they only matter when their category is higher than every
      tensor's, and then the result is that category's default: Int (int64) for an integer
      scalar with Bool tensors, Float for a floating scalar with Bool/integer tensors; a
      complex scalar gives the tensors' complex counterpart (ComplexDouble for Double,
      ComplexFloat for the others: torch gives complex32 for Half, which kfuse lacks);
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
            if weak_cat == 3:
                if result.is_float8:
                    raise DefinitionError(
                        f"type promotion of {result.value} with a complex scalar is not "
                        "supported (as in torch): cast the tensor to Float first"
                    )
                wide = result is DataType.Double
                return DataType.ComplexDouble if wide else DataType.ComplexFloat
            result = DataType.Int if weak_cat == 1 else DataType.Float
    return result


def python_scalar_dtype(value: Any) -> DataType:
    """The dtype kfuse gives a Python number: bool -> Bool, int -> Int, float -> Double,
    complex -> ComplexDouble (as nvFuser's define_scalar)."""
    if isinstance(value, bool):
        return DataType.Bool
    if isinstance(value, int):
        return DataType.Int
    if isinstance(value, float):
        return DataType.Double
    if isinstance(value, complex):
        return DataType.ComplexDouble
    # NumPy scalars and the like: go through their dtype.
    dt = getattr(value, "dtype", None)
    if dt is not None and getattr(value, "ndim", 1) == 0:
        return from_array_dtype(dt)
    raise DefinitionError(f"{value!r} ({type(value).__name__}) is not a number")

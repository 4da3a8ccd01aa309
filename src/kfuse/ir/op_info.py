"""OpInfo: one row of the pointwise op table (kfuse.ir.ops), every fact about one op.

A row is read by every layer that handles pointwise ops, so that adding an op is adding a
row (docs/guides/add-an-op.md): the frontend makes its fd.ops method and checks its
arguments from it, the builder its dtypes, scalar folding calls its Python function, the
reference its array function, the code generator fills its CUDA template, the printer
spells its call, the docs' op list shows its doc line and the Hypothesis strategies draw it
with its domain guard and precision class.

This module holds the row type and the Python helpers the rows' scalar functions share; the
rows themselves are in kfuse.ir.ops_unary and kfuse.ir.ops_binary.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kfuse.errors import DefinitionError

PRECISIONS = ("exact", "rounded", "approximable")
"""How an op's result relates to its exact value, for operands that are exact:
* exact: the result is the exact value (abs, comparisons, min/max, rounding ops, ...);
  a chain of exact ops on inputs stays exact, so a kernel and the float64 reference agree
  bit for bit and a discontinuous op after them takes the same branch in both;
* rounded: the result is the exact value rounded (or within a few ulp: transcendentals);
* approximable: rounded, and the code generator may use a faster approximate form
  (cuda_fast) where the value only reaches BFloat16 outputs (kfuse.codegen.precision)."""

DOMAINS = ("pos", "nonneg", "ge1", "unit", "zero_two", "tan", "small", "moderate")
"""Where an op's operand must lie for a finite, well-conditioned result; the strategies
guard a drawn operand into it (log(|x| + 0.5), atanh(0.9 tanh(x)), erfcinv(1 + 0.9 tanh(x)),
exp(tanh(x)), ...)."""

BOUNDS = ("plus1", "unit", "two", "log", "exp", "sum", "product", "angle", "max")
"""How |result| grows with the operands' magnitude bound b, as the strategies estimate it:
plus1: b + 1; unit: <= 1; two: <= 2; log: b + 4; exp: 2 e^b + 1; sum: b1 + b2; product:
b1 b2; angle: pi; max: max(b1, b2)."""

DRAWS = ("plain", "divide", "where", "clamp", "floating", "integer")
"""How the strategies draw an op's operands: plain (pool values, constants, scalars),
divide (a denominator kept away from 0, pow's base positive), where (a Bool condition of
two exact values), clamp (constant bounds), floating (floating operands only), integer
(integer values, and for a shift counts about the width too)."""


@dataclass(frozen=True)
class OpInfo:
    """One pointwise op. Only name, arity, category, result, doc and scalar are required;
    the defaults fit most ops (see kfuse.ir.ops for the categories and results)."""

    name: str
    arity: int
    category: str  # 'float_math' | 'arith' | 'compare' | 'logical' | 'bitwise'
    result: str  # 'same' | 'float' | 'bool' | 'complex' (the complex type of its parts)
    doc: str  # one line for the docs' op list (docs/guides/ops.md)
    scalar: Callable[..., Any]  # Python numbers -> Python number (constant folding)
    # ---- arguments (the frontend's fd.ops method, the builder's checks) ----
    accepts_bool: bool = True
    accepts_float: bool = True
    casts_operands: bool = True  # False: the op reads the operand in its own dtype (isnan)
    full_precision_only: bool = False  # the promoted dtype must be Float or Double (nextafter)
    has_condition: bool = False  # operand 0 is a Bool condition, the others compute (where)
    operands: tuple[str, ...] = ()  # operand names for messages; x / a, b by default
    method: str | None = ""  # fd.ops method; "" = name, None = reached by another's keyword
    # keyword -> {accepted value -> the op it selects}: gelu's approximate.
    keywords: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    infix: str = ""  # the IR repr's infix operator (a + b), if any
    # ---- code generation: templates of operands in the compute C++ type {T} ----
    cuda: str | None = ""  # floating operands; "" = kf::name({0}); None = none (bitwise)
    cuda_int: str | None = None  # integer operands; None = as cuda
    cuda_bool: str | None = None  # Bool operands; None = as cuda
    cuda_fast: str | None = None  # the approximate form (precision 'approximable')
    # ---- complex operands (kfuse.ir.ops_complex fills these in) ----
    # None: the op refuses complex operands; "complex": computed in the complex dtype (a
    # 'bool' result stays Bool); "real": the result is the complex dtype's part (abs).
    on_complex: str | None = None
    complex_only: bool = False  # real operands are refused (imag)
    cuda_complex: str | None = None  # complex operands; None = as cuda
    scalar_complex: Callable[..., Any] | None = None  # Python complex numbers; None = scalar
    # ---- evaluation ----
    # Operand kinds ('int', 'bool') on which the op is the identity (floor of an integer).
    identity_on: tuple[str, ...] = ()
    scalar_int: Callable[..., Any] | None = None  # integer scalars, where they differ (div)
    # (the result's DataType, *numbers), where the result depends on the dtype's width (shifts)
    # or representation (nextafter: the next float32 after an infinity is float32's largest,
    # not float64's; the float64 reference computes such a Float op on tensors in float32).
    scalar_of_dtype: Callable[..., Any] | None = None
    # (backend, *arrays) -> array; None = the framework's function spelled numpy / torch.
    reference: Callable[..., Any] | None = None
    numpy: str = ""  # NumPy's (and CuPy's) function name; "" = name
    torch: str = ""  # torch's function name; "" = name
    # ---- precision and drawing ----
    precision: str = "rounded"  # one of PRECISIONS
    discontinuous: bool = False  # jumps (floor, comparisons): drawn with exact operands only
    shows_zero_sign: bool = False  # the sign of a zero changes the result (atan2, signbit)
    slope: float | None = None  # f(0) = 0 and |f(a) - f(b)| <= slope |a - b| (conditions)
    domain: str | None = None  # one of DOMAINS
    bound: str = "plus1"  # one of BOUNDS
    draw: str = "plain"  # one of DRAWS

    def __post_init__(self) -> None:
        assert self.precision in PRECISIONS, self
        assert self.domain is None or self.domain in DOMAINS, self
        assert self.bound in BOUNDS and self.draw in DRAWS, self
        assert (self.cuda_fast is not None) == (self.precision == "approximable"), self
        assert self.on_complex in (None, "complex", "real"), self

    @property
    def operand_names(self) -> tuple[str, ...]:
        if self.operands:
            return self.operands
        return {1: ("x",), 2: ("a", "b"), 3: ("a", "b", "c")}[self.arity]

    @property
    def method_name(self) -> str | None:
        """The fd.ops method that builds this op (None: another method's keyword does)."""
        return self.name if self.method == "" else self.method

    def template(self, operand_kind: str) -> str | None:
        """The CUDA template for operands of kind 'float', 'int', 'bool' or 'complex'."""
        base = f"kf::{self.name}({{0}})" if self.cuda == "" else self.cuda
        if operand_kind in self.identity_on:
            return "{0}"
        if operand_kind == "complex" and self.cuda_complex is not None:
            return self.cuda_complex
        if operand_kind == "int" and self.cuda_int is not None:
            return self.cuda_int
        if operand_kind == "bool" and self.cuda_bool is not None:
            return self.cuda_bool
        return base

    def bind(
        self, args: tuple[Any, ...], kwargs: Mapping[str, Any], method: str | None = None
    ) -> str:
        """Check an fd.ops call's arguments against the row: the operand count and the
        keywords. Returns the op the call builds (gelu's approximate='tanh': gelu_tanh);
        DefinitionError for anything else. The operands themselves are the builder's.
        `method`: the fd.ops method called, where it is not the row's own (truediv)."""
        method = method or self.method_name or self.name
        names = self.operand_names
        if len(args) != self.arity:
            wanted = f"{self.arity} operand{'s' if self.arity > 1 else ''} ({', '.join(names)})"
            missing = f"; missing {', '.join(names[len(args) :])}" if len(args) < self.arity else ""
            raise DefinitionError(f"{method} takes {wanted}, got {len(args)}{missing}")
        op = self.name
        for key, value in kwargs.items():
            choices = self.keywords.get(key)
            if choices is None:
                accepted = ", ".join(self.keywords) or "none"
                raise DefinitionError(
                    f"{method}: unexpected keyword argument {key!r} (keywords accepted: {accepted})"
                )
            if not isinstance(value, str) or value not in choices:
                shown = (
                    repr(value)
                    if isinstance(value, str)
                    else f"a value of type {type(value).__name__}"
                )
                raise DefinitionError(
                    f"{method}: {key} must be one of {', '.join(map(repr, choices))}, got {shown}"
                )
            op = choices[value]
        return op


# ---- helpers of the rows' scalar functions (Python numbers) ----
def div(a: Any, b: Any) -> float:
    """a / b as IEEE division: x / 0 is a signed infinity, 0 / 0 NaN (Python raises)."""
    a, b = float(a), float(b)
    if b == 0.0:
        if a == 0.0 or math.isnan(a):
            return math.nan
        return math.copysign(math.inf, a) * math.copysign(1.0, b)
    return a / b


def safe(fn: Callable[..., float]) -> Callable[..., float]:
    """fn with Python's domain errors turned into IEEE results (NaN, inf)."""

    def wrapped(*args: Any) -> float:
        try:
            return fn(*args)
        except (ValueError, ZeroDivisionError):
            return math.nan
        except OverflowError:
            return math.inf

    return wrapped


def is_nan(a: Any) -> bool:
    return isinstance(a, float) and math.isnan(a)


def nan_max(a: Any, b: Any) -> Any:
    return math.nan if is_nan(a) or is_nan(b) else max(a, b)


def nan_min(a: Any, b: Any) -> Any:
    return math.nan if is_nan(a) or is_nan(b) else min(a, b)


def float_only(fn: Callable[[float], Any]) -> Callable[[Any], Any]:
    """fn on finite floats; other values (integers, inf, NaN) as they are (floor, round)."""
    return lambda a: float(fn(a)) if isinstance(a, float) and math.isfinite(a) else a

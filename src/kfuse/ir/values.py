"""Values of the Fusion IR: TensorView (with its Axes) and Scalar.

Vals are created by the frontend (kfuse.frontend), which also makes Python operators on them
work: `x + y`, `x * 2.0`, `-x`, `x < y` call the owning FusionDefinition's `fd.ops`. `==` and
`!=` are *not* overloaded (Vals stay usable as dict keys and in `in` tests); use fd.ops.eq/ne.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kfuse.dtypes import DataType
from kfuse.errors import DefinitionError

if TYPE_CHECKING:
    from kfuse.ir.exprs import Expr


@dataclass(frozen=True)
class Axis:
    """One axis of a TensorView.

    is_broadcast: the extent is 1, known when the fusion is defined (it may meet any extent).
    extent: 1 for broadcast axes, an int for an axis whose size was given as a number (checked
    at run time), None for a symbolic axis (size known only from the inputs).
    """

    is_broadcast: bool = False
    extent: int | None = None

    def __str__(self) -> str:
        if self.is_broadcast:
            return "b1"
        return "?" if self.extent is None else str(self.extent)


class Val:
    """A value of the fusion: `name` (T0.., S0.., constants C0..), `dtype`, `definition`."""

    __slots__ = ("name", "dtype", "definition", "is_input", "owner", "serial", "__weakref__")

    def __init__(
        self,
        name: str,
        dtype: DataType,
        *,
        is_input: bool = False,
        owner: Any = None,
        serial: int = 0,
    ) -> None:
        self.name = name
        self.dtype = dtype
        self.definition: Expr | None = None
        self.is_input = is_input
        # The FusionDefinition that created this Val; used for operators and ownership checks.
        self.owner = owner
        # Creation order inside the fusion; keeps printing and equality deterministic.
        self.serial = serial

    @property
    def uses_ops(self) -> Any:
        """The `fd.ops` namespace of the owning definition (for Python operators)."""
        if self.owner is None:
            raise DefinitionError(f"{self.name} belongs to no FusionDefinition")
        return self.owner.ops

    # Python operators. Reflected forms swap operands so `2.0 - x` is sub(2.0, x).
    def __add__(self, o: Any) -> Val:
        return self.uses_ops.add(self, o)

    def __radd__(self, o: Any) -> Val:
        return self.uses_ops.add(o, self)

    def __sub__(self, o: Any) -> Val:
        return self.uses_ops.sub(self, o)

    def __rsub__(self, o: Any) -> Val:
        return self.uses_ops.sub(o, self)

    def __mul__(self, o: Any) -> Val:
        return self.uses_ops.mul(self, o)

    def __rmul__(self, o: Any) -> Val:
        return self.uses_ops.mul(o, self)

    # Python's `/` is true division, also of integer scalars (fd.ops.div divides those as
    # integers, as nvFuser does).
    def __truediv__(self, o: Any) -> Val:
        return self.uses_ops.truediv(self, o)

    def __rtruediv__(self, o: Any) -> Val:
        return self.uses_ops.truediv(o, self)

    def __mod__(self, o: Any) -> Val:
        return self.uses_ops.remainder(self, o)

    def __rmod__(self, o: Any) -> Val:
        return self.uses_ops.remainder(o, self)

    def __pow__(self, o: Any) -> Val:
        return self.uses_ops.pow(self, o)

    def __rpow__(self, o: Any) -> Val:
        return self.uses_ops.pow(o, self)

    def __and__(self, o: Any) -> Val:
        return self.uses_ops.bitwise_and(self, o)

    def __rand__(self, o: Any) -> Val:
        return self.uses_ops.bitwise_and(o, self)

    def __or__(self, o: Any) -> Val:
        return self.uses_ops.bitwise_or(self, o)

    def __ror__(self, o: Any) -> Val:
        return self.uses_ops.bitwise_or(o, self)

    def __xor__(self, o: Any) -> Val:
        return self.uses_ops.bitwise_xor(self, o)

    def __rxor__(self, o: Any) -> Val:
        return self.uses_ops.bitwise_xor(o, self)

    def __lt__(self, o: Any) -> Val:
        return self.uses_ops.lt(self, o)

    def __le__(self, o: Any) -> Val:
        return self.uses_ops.le(self, o)

    def __gt__(self, o: Any) -> Val:
        return self.uses_ops.gt(self, o)

    def __ge__(self, o: Any) -> Val:
        return self.uses_ops.ge(self, o)

    def __neg__(self) -> Val:
        return self.uses_ops.neg(self)

    def __abs__(self) -> Val:
        return self.uses_ops.abs(self)

    def __invert__(self) -> Val:
        return self.uses_ops.bitwise_not(self)

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return self.name


class TensorView(Val):
    """A tensor value: `axes` (tuple of Axis), `ndim`, and for inputs `contiguity` and
    `stride_order`.

    contiguity: None (unknown, any strides) or a tuple with one entry per axis: True/False for
    a non-broadcast axis (True: its stride equals the next inner axis' extent times stride),
    None for a broadcast axis. stride_order: None (row major) or a tuple where stride_order[i]
    is the rank of axis i's stride, 0 being the fastest (nvFuser's convention).
    """

    __slots__ = ("axes", "contiguity", "stride_order")

    def __init__(self, name: str, dtype: DataType, axes: tuple[Axis, ...], **kw: Any) -> None:
        super().__init__(name, dtype, **kw)
        self.axes = tuple(axes)
        self.contiguity: tuple[bool | None, ...] | None = None
        self.stride_order: tuple[int, ...] | None = None

    @property
    def ndim(self) -> int:
        """Number of axes."""
        return len(self.axes)

    # nvFuser's TensorView methods (Thunder's translations call them): fd.ops.size/shape.
    def size(self, dim: int) -> Any:
        """The extent of axis `dim`, an Int Scalar (fd.ops.size(self, dim))."""
        return self.uses_ops.size(self, dim)

    def shape(self) -> list[Any]:
        """Every extent, a list of Int Scalars (fd.ops.shape(self))."""
        return self.uses_ops.shape(self)

    def __str__(self) -> str:
        return f"{self.name}[{', '.join(str(a) for a in self.axes)}]:{self.dtype.value}"


class Scalar(Val):
    """A scalar value: a constant (`value` set), a symbolic input (`value` None, `is_input`),
    or the result of an Expr (SizeOp, scalar arithmetic).

    A constant's `value` is the exact Python number; consumers use it at the precision they
    compute in (a Float constant 1e-6 is 1e-6 rounded to float32 where the op runs in float32).
    """

    __slots__ = ("value",)

    def __init__(self, name: str, dtype: DataType, value: Any = None, **kw: Any) -> None:
        super().__init__(name, dtype, **kw)
        self.value = value

    @property
    def is_constant(self) -> bool:
        """True when the value is known at definition time."""
        return self.value is not None and self.definition is None

    @property
    def ndim(self) -> int:
        """Scalars have rank 0 for broadcasting purposes."""
        return 0

    def __str__(self) -> str:
        if self.is_constant:
            return repr(self.value)
        return f"{self.name}:{self.dtype.value}"

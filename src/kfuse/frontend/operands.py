"""The types of fd.ops' arguments, for signatures: what a type checker holds a user's call
to. kfuse checks the values themselves when the op is called (a DefinitionError naming the
operand): these types say which kinds of value an argument takes at all."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeAlias

from kfuse.ir.values import Scalar, Val

Number: TypeAlias = bool | int | float
"""A Python number: a constant operand (its dtype: bool Bool, int Int, float Double)."""
ScalarOperand: TypeAlias = Scalar | Number
"""A scalar operand: a kfuse Scalar (symbolic or constant) or a Python number."""
Operand: TypeAlias = Val | Number
"""Any operand of a pointwise op: a tensor (TensorView), a Scalar, a Val or a number."""
Extent: TypeAlias = int | Scalar
"""An entry of a shape, an index or a bound: an int, or an Int Scalar (fd.ops.size(x, 0))."""
Dims: TypeAlias = int | Sequence[int] | None
"""The axes a reduction takes: one, several, or None for every axis."""

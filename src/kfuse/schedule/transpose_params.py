"""TransposeParams: the transpose scheduler's parameters, a Python class with the API of the
C++ params (_C.PointwiseParams and the others): `scheduler_type` (SchedulerType.transpose),
`cparams`, `lparams`, editable fields checked on assignment (a wrong type or a value out of
range is a ParamsError), equality and a hash (the program cache keys pinned params by it),
`to_dict`.

It lives in Python rather than in _C because only this scheduler reads it: the C++ fast
path never looks inside params, it replays the launches a KernelProgram holds.

Fields (the kernel: kfuse.codegen.transpose):
* tile_a: elements of a tile along axis A, the outputs' innermost (merged) axis;
* tile_b: elements along axis B, the innermost axis of the transposed operands;
  both powers of two from 1 to 4096 (the kernel's thread mapping splits them in powers of
  two; a short axis takes a short tile, the other side a long one);
* tile_c: rows of axis C a tile takes, C being the axis just outside A in the outputs'
  order, where A is short and a tile holds it whole (1: no such rows, the default): the
  outputs' contiguous runs are then tile_c * A long instead of A (a power of two, 1 to 4096);
* vector_a: elements a thread computes along A, read and written as one access of every
  untiled operand contiguous along A (1, 2, 4, 8 or 16);
* vector_b: elements a thread loads or stores along B as one access of every tiled
  operand (1, 2, 4, 8 or 16);
  the scheduler checks, per call, that each divides its tile and its axis's extent (a
  SchedulerError naming the field); an operand not aligned for the vector (its pointer or
  another stride) is accessed element by element instead;
* block_y: warps of a block (its threads are 32 x block_y);
* grid_x: blocks; they stride over the tiles (tiles along A, or C, then B, then the other
  axes).
"""

from __future__ import annotations

from typing import Any

from kfuse.errors import ParamsError
from kfuse.schedule.types import SchedulerType

WARP = 32
MAX_THREADS = 1024
MAX_GRID_X = 2**31 - 1
MAX_TILE = 4096
VECTORS = (1, 2, 4, 8, 16)

_FIELDS = ("tile_a", "tile_b", "tile_c", "vector_a", "vector_b", "block_y", "grid_x")


class TransposeParams:
    """Parameters of the transpose scheduler (see the module docstring)."""

    scheduler_type = SchedulerType.transpose

    def __init__(
        self,
        *,
        tile_a: int = 32,
        tile_b: int = 32,
        tile_c: int = 1,
        vector_a: int = 1,
        vector_b: int = 1,
        block_y: int = 8,
        grid_x: int = 1,
    ) -> None:
        from kfuse._C import CompileParams, LaunchParams

        self.cparams = CompileParams(index_type="int32")
        self.lparams = LaunchParams()
        self.tile_a = tile_a
        self.tile_b = tile_b
        self.tile_c = tile_c
        self.vector_a = vector_a
        self.vector_b = vector_b
        self.block_y = block_y
        self.grid_x = grid_x

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _FIELDS:
            value = _checked(name, value)
        elif name == "scheduler_type":
            raise ParamsError("TransposeParams.scheduler_type is fixed (SchedulerType.transpose)")
        elif name not in ("cparams", "lparams"):
            raise ParamsError(f"TransposeParams has no field {name!r}; fields: {_FIELDS}")
        object.__setattr__(self, name, value)

    def to_dict(self) -> dict[str, Any]:
        """The fields, scheduler_type (by name), lparams and cparams (as the C++ params'
        to_dict)."""
        d: dict[str, Any] = {"scheduler_type": self.scheduler_type.value}
        d.update({name: getattr(self, name) for name in _FIELDS})
        d["lparams"] = self.lparams.to_dict() if hasattr(self.lparams, "to_dict") else None
        d["cparams"] = self.cparams.to_dict() if hasattr(self.cparams, "to_dict") else None
        return d

    def _key(self) -> tuple:
        return (*(getattr(self, name) for name in _FIELDS), self.cparams, self.lparams)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TransposeParams) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)}" for name in _FIELDS)
        return (
            f"TransposeParams(scheduler_type=SchedulerType.transpose, {fields}, "
            f"cparams={self.cparams})"
        )


def _checked(name: str, value: Any) -> int:
    """`value` as the int field `name`, or a ParamsError saying what it must be."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ParamsError(
            f"TransposeParams.{name} must be an int, got {type(value).__name__} {value!r}"
        )
    if name in ("tile_a", "tile_b", "tile_c") and not (
        1 <= value <= MAX_TILE and value & (value - 1) == 0
    ):
        raise ParamsError(
            f"TransposeParams.{name} must be a power of two in [1, {MAX_TILE}], got {value}"
        )
    if name in ("vector_a", "vector_b") and value not in VECTORS:
        raise ParamsError(f"TransposeParams.{name} must be one of {VECTORS}, got {value}")
    if name == "block_y" and not 1 <= value <= MAX_THREADS // WARP:
        raise ParamsError(f"TransposeParams.block_y must be in [1, 32] (warps), got {value}")
    if name == "grid_x" and not 1 <= value <= MAX_GRID_X:
        raise ParamsError(f"TransposeParams.grid_x must be in [1, 2**31 - 1], got {value}")
    return int(value)

"""TransposeParams: the transpose scheduler's parameters, a Python class with the API of the
C++ params (_C.PointwiseParams and the others): `scheduler_type`, `cparams`, `lparams`,
editable fields checked on assignment (a wrong type or a value out of range is a
ParamsError), equality and a hash (the program cache keys pinned params by it), `to_dict`.

It lives in Python rather than in _C because only this scheduler reads it: the C++ fast
path never looks inside params, it replays the launches a KernelProgram holds.

Fields (the kernel: kfuse.codegen.transpose):
* tile_a: elements of a tile along axis A, the outputs' innermost (merged) axis;
* tile_b: elements along axis B, the innermost axis of the transposed operands;
  both positive multiples of 32, so that a warp reads or writes 32 consecutive elements
  (full 32-byte sectors for every dtype) along each tensor's own fast axis;
* block_y: warps of a block (its threads are 32 x block_y);
* grid_x: blocks; they stride over the tiles (tiles along A, then B, then the other axes).
"""

from __future__ import annotations

from typing import Any

from kfuse.errors import ParamsError

WARP = 32
MAX_THREADS = 1024
MAX_GRID_X = 2**31 - 1

_FIELDS = ("tile_a", "tile_b", "block_y", "grid_x")


class TransposeParams:
    """Parameters of the transpose scheduler (see the module docstring)."""

    scheduler_type = "transpose"

    def __init__(
        self, *, tile_a: int = 32, tile_b: int = 32, block_y: int = 8, grid_x: int = 1
    ) -> None:
        from kfuse._C import CompileParams, LaunchParams

        self.cparams = CompileParams(index_type="int32")
        self.lparams = LaunchParams()
        self.tile_a = tile_a
        self.tile_b = tile_b
        self.block_y = block_y
        self.grid_x = grid_x

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _FIELDS:
            value = _checked(name, value)
        elif name == "scheduler_type":
            raise ParamsError("TransposeParams.scheduler_type is fixed ('transpose')")
        elif name not in ("cparams", "lparams"):
            raise ParamsError(f"TransposeParams has no field {name!r}; fields: {_FIELDS}")
        object.__setattr__(self, name, value)

    def to_dict(self) -> dict[str, Any]:
        """The fields, scheduler_type, lparams and cparams (as the C++ params' to_dict)."""
        d: dict[str, Any] = {"scheduler_type": self.scheduler_type}
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
        return f"TransposeParams(scheduler_type='transpose', {fields}, cparams={self.cparams})"


def _checked(name: str, value: Any) -> int:
    """`value` as the int field `name`, or a ParamsError saying what it must be."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ParamsError(
            f"TransposeParams.{name} must be an int, got {type(value).__name__} {value!r}"
        )
    if name in ("tile_a", "tile_b") and (value < WARP or value % WARP != 0):
        raise ParamsError(f"TransposeParams.{name} must be a positive multiple of 32, got {value}")
    if name == "block_y" and not 1 <= value <= MAX_THREADS // WARP:
        raise ParamsError(f"TransposeParams.block_y must be in [1, 32] (warps), got {value}")
    if name == "grid_x" and not 1 <= value <= MAX_GRID_X:
        raise ParamsError(f"TransposeParams.grid_x must be in [1, 2**31 - 1], got {value}")
    return int(value)

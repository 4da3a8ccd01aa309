"""Register arrays that hold loaded operands, declared the same way by every kernel kind."""

from __future__ import annotations

from kfuse.codegen.layout import BCAST, VEC


def register_array(
    name: str,
    ctype: str,
    kind: str,
    vector: int,
    count: int | str,
    indent: str = "",
    zero: bool = False,
) -> str:
    """`count` slots of one operand's loads: a kf::Vec per slot where the loads are
    vector-wide (VEC), one element where the operand is constant along the vector (BCAST),
    else `vector` elements loaded one by one. `zero`: value-initialise (slots a guard may
    leave unwritten)."""
    init = " = {}" if zero else ""
    if kind == VEC:
        return f"{indent}kf::Vec<{ctype}, {vector}> {name}[{count}]{init};"
    if kind == BCAST:
        return f"{indent}{ctype} {name}[{count}]{init};"
    return f"{indent}{ctype} {name}[{count}][{vector}]{init};"

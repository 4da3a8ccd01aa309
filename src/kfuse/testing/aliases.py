"""Checking a call that writes outputs into its inputs (fd.add_output(..., alias_input=)).

The reference must see the inputs as they were before the call (`before_call`), and every
output of the fusion is compared with it: an aliased output as the storage of its input after
the call (`every_output`), the others as execute returned them.
"""

from __future__ import annotations

from typing import Any


def before_call(fusion: Any, inputs: list[Any]) -> list[Any]:
    """`inputs` with a copy of each input the call writes into (the others as they are)."""
    fusion = getattr(fusion, "fusion", fusion)
    written = {in_pos for _, in_pos in fusion.output_aliases}
    return [_copy(a) if k in written else a for k, a in enumerate(inputs)]


def every_output(fusion: Any, returned: list[Any], inputs: list[Any]) -> list[Any]:
    """One array per output of the fusion, hidden ones included: an output written into an
    input is that input (after the call), the others what execute returned, in order."""
    fusion = getattr(fusion, "fusion", fusion)
    if not fusion.output_aliases:
        return returned
    target = dict(fusion.output_aliases)
    shown = iter(returned)
    out = []
    for k in range(len(fusion.outputs)):
        value = None if k in fusion.hidden_outputs else next(shown)
        if k in target:
            value = inputs[target[k]]
        out.append(value)
    return out


def _copy(a: Any) -> Any:
    clone = getattr(a, "clone", None)  # torch
    return clone() if callable(clone) else a.copy()

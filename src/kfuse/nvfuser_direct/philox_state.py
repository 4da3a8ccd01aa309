"""nvFuser's UInt64 tensor inputs, as Thunder defines them: flash attention's philox state.

With torch >= 2.7, Thunder types the dropout generator's state that sdpfa_fwd returns (seed
[2], offset []) as UInt64, and its backward's fusion defines them as UInt64 tensor inputs to
hand to sdpfa_bwd. kfuse computes in no unsigned dtype; its sdpfa_fwd returns those 64-bit
words as Int tensors and its sdpfa_bwd takes them so (kfuse.schedule.attention_calls). So a
UInt64 tensor input is defined as an Int tensor of the same words, and it may only be
sdpfa_bwd's philox_seed or philox_offset, or an output passed through: any other use would
compute on unsigned values as signed ones, a DefinitionError when the definition closes.
"""

from __future__ import annotations

from typing import Any

from kfuse.dtypes import DataType
from kfuse.errors import DefinitionError
from kfuse.ir.attention_ops import is_philox_state_use
from kfuse.ir.fusion import Fusion
from kfuse.ir.values import TensorView


def is_uint64(dtype: Any) -> bool:
    """Whether define_tensor was given nvFuser's UInt64 (the DataType or its name)."""
    return dtype is DataType.UInt64 or dtype == "UInt64"


def check_state_uses(fusion: Fusion, state_inputs: list[TensorView]) -> None:
    """Raise DefinitionError where a UInt64 input feeds anything but sdpfa_bwd's philox
    state (fusion finalized: its exprs are the live ones)."""
    for tv in state_inputs:
        for user in fusion.uses(tv):
            if not is_philox_state_use(user, tv):
                raise DefinitionError(
                    f"define_tensor: the UInt64 input {tv.name} is used by "
                    f"{type(user).__name__}; kfuse has no unsigned integers and takes a UInt64 "
                    "tensor only as flash attention's philox state (sdpfa_bwd's philox_seed "
                    "or philox_offset)"
                )

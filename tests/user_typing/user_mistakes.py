"""A user's script with mistakes a type checker must report: tests/test_user_typing.py runs
`mypy --strict` on it and expects exactly the error codes the comments name, on their lines.
(Never run: kfuse would raise a DefinitionError at the first of them.)"""

from __future__ import annotations

import numpy as np

from kfuse import DataType, FusionDefinition

with FusionDefinition() as fd:
    x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
    y = fd.from_array(np.zeros((2, 3), np.float32))
    fd.ops.exq(x)  # mypy: attr-defined (a misspelt op)
    fd.ops.add(x)  # mypy: call-overload (a missing operand)
    fd.ops.where(x, y)  # mypy: call-overload (a missing operand)
    fd.ops.exp(x, y)  # mypy: call-overload (an operand too many)
    fd.ops.mul(y, "2")  # mypy: call-overload (a string is not an operand)
    fd.ops.gelu(y, approximate="tan")  # mypy: call-overload (not one of gelu's choices)
    fd.ops.gelu(y, approx="tanh")  # mypy: call-overload (a wrong keyword)
    fd.ops.sum(y, dimz=[0])  # mypy: call-arg (a wrong keyword)
    fd.ops.softmax()  # mypy: call-arg (a missing operand)
    z: int = fd.ops.abs(y)  # mypy: assignment (the result is a TensorView)
    fd.ops.softmax(np.ones(3))  # mypy: arg-type (an array, not a value of the definition)
    fd.ops.cat(x, 0)  # mypy: arg-type (cat takes a list of tensors)
    fd.ops.reshape(x, [2, "3"])  # mypy: list-item (a string extent)
    s = fd.define_tensor([], is_cpu=True)
    rank = s.ndim  # mypy: attr-defined (a CPU scalar tensor is a Val, not a TensorView)
    fd.add_output(fd.ops.relu(y))

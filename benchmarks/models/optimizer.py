"""The model suite's case for outputs written into their inputs
(`tools/kernel_times.py adam_step --tc`): one Adam step over a float32 parameter, its
gradient and the two moments, the parameter and moments updated in place
(`fd.add_output(..., alias_input=...)`), as an optimizer's fused step writes it. One kernel
reads four arrays and writes three: issue 57 asks 90% of copy bandwidth.

The shape is (N,), the parameter's element count. Every call updates the arrays again;
the values stay finite (the moments converge, the parameter moves by about lr a step).
"""

from __future__ import annotations

from typing import Any

from kfuse import DataType, FusionDefinition
from models.case import Case, Shape

LR, BETA1, BETA2, EPS, STEP = 1e-3, 0.9, 0.999, 1e-8, 10
BIAS1, BIAS2 = 1 - BETA1**STEP, 1 - BETA2**STEP

ADAM = ((1 << 24,), (1 << 26,))
TEST_ADAM = (1003,)
GPU_TEST_ADAM = (1 << 20,)


def adam_definition(dtype: DataType) -> FusionDefinition:
    with FusionDefinition() as fd:
        p, g, m, v = (fd.define_tensor(shape=[-1], contiguity=[True], dtype=dtype) for _ in "pgmv")
        ops = fd.ops
        m_new = ops.add(ops.mul(m, BETA1), ops.mul(g, 1 - BETA1))
        v_new = ops.add(ops.mul(v, BETA2), ops.mul(ops.mul(g, g), 1 - BETA2))
        denominator = ops.add(ops.sqrt(ops.div(v_new, BIAS2)), EPS)
        p_new = ops.sub(p, ops.mul(ops.div(ops.div(m_new, BIAS1), denominator), LR))
        fd.add_output(p_new, alias_input=p)
        fd.add_output(m_new, alias_input=m)
        fd.add_output(v_new, alias_input=v)
    return fd


def adam_torch(p: Any, g: Any, m: Any, v: Any) -> tuple[()]:
    m.mul_(BETA1).add_(g, alpha=1 - BETA1)
    v.mul_(BETA2).addcmul_(g, g, value=1 - BETA2)
    p.sub_((m / BIAS1) / ((v / BIAS2).sqrt() + EPS) * LR)
    return ()


def adam_reference(p: Any, g: Any, m: Any, v: Any) -> tuple[Any, Any, Any]:
    p, g, m, v = (t.double() for t in (p, g, m, v))
    m = m * BETA1 + g * (1 - BETA1)
    v = v * BETA2 + g * g * (1 - BETA2)
    return (p - (m / BIAS1) / ((v / BIAS2).sqrt() + EPS) * LR, m, v)


def _inputs(torch: Any, shape: Shape, dtype: Any, device: str) -> list[Any]:
    p, g, m = (torch.randn(shape, device=device, dtype=dtype) for _ in range(3))
    v = torch.rand(shape, device=device, dtype=dtype) + 0.1
    return [p, g, m, v]


CASES = [
    Case(
        "optimizer",
        "adam_step",
        # torch.optim.Adam's update of one parameter (foreach=False); no nvFuser benchmark
        "torch/optim/adam.py::_single_tensor_adam",
        adam_definition,
        adam_torch,
        adam_reference,
        _inputs,
        ADAM,
        ADAM[:1],
        TEST_ADAM,
        GPU_TEST_ADAM,
        dtypes=("float32",),
        updates=(0, 2, 3),
    )
]

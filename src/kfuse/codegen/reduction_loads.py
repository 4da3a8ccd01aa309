"""Loading and accumulating a reduction kernel's inputs: index decomposition, vector and
broadcast loads of a block of U vectors, the accumulation of a loaded block (Welford a batch at
a time) and the scalar tail, and the block's shared memory."""

from __future__ import annotations

from kfuse.codegen.kernel import load_vector_block
from kfuse.codegen.layout import BCAST, VEC
from kfuse.codegen.reduction_functions import stage_call
from kfuse.codegen.reduction_plan import ReductionPlan
from kfuse.codegen.reduction_spec import (
    ReductionKernelSpec,
    accumulators,
)


def lane_value_bytes(plan: ReductionPlan) -> int:
    """Bytes of the largest value the outer persistent kernel combines a lane: each
    reduction's partial (a Welford's two passes combine plain sums of its value type)."""
    return max(a.size // len(a.partial_fields) for a in accumulators(plan))


def smem_bytes(plan: ReductionPlan, spec: ReductionKernelSpec) -> int:
    """Static shared memory the kernel declares for its combines."""
    accs = accumulators(plan)
    biggest = max(a.size for a in accs)
    per = spec.block_x * spec.block_y
    if spec.kind == "outer":
        per *= spec.vector
    if spec.kind == "outer_persistent":
        # per-lane partials; Welford's two passes combine plain sums of its value type
        per *= spec.vector
        biggest = lane_value_bytes(plan)
    if spec.kind == "persistent" and spec.block_x % 32 == 0:
        # Its only use is kf::block_reduce_x, which with rows of whole warps shuffles within
        # each warp and keeps one value a warp. Slots a thread would cost an inner-outer
        # layer norm backward [8192, 8192] its second block an SM (2 KB over the limit).
        per //= 32
    if spec.kind == "persistent" and (spec.smem_held or spec.columns):  # dynamic memory next
        return -(-max(16, per * biggest) // DYNAMIC_SMEM_ALIGN) * DYNAMIC_SMEM_ALIGN
    return max(16, per * biggest)


DYNAMIC_SMEM_ALIGN = 128
"""Where a kernel's dynamic shared memory (held rows, column accumulators) starts: declared
`__align__(128)`, so the compiler pads the static part (the driver counts the padding: a cubin's
.nv.shared section is that long), and a persistent kernel's static scratch (above) is rounded up to
it, so that the padding is nothing where the scratch is the only static array and the schedulers'
shared memory sums stay exact. A start 64 bytes past a 128-byte line (a slot a warp, unrounded) made
the warps' 16-byte cp.async copies of held rows 8-9% slower. Measured on the H200 (2026-12-04, at
ddde816, us, unaligned -> aligned): RMS norm backward [8192, 8192] 120.0 -> 111.4, dropout + RMS
norm backward [16384, 4096] 210.7 -> 193.2, layer norm backward [8192, 8192] 163.7 -> 153.9 (still
two blocks an SM), [2048, 16384] 94.3 -> 91.2."""


def _loaded(spec: ReductionKernelSpec, u: str, j: str) -> list[str]:
    """Per loop input, the expression of element j of unrolled vector u (an outer kernel's
    input constant along the reduced rows: its one vector, xc<i>, loaded before the rows)."""
    out = []
    for i, kind in enumerate(spec.loop_kinds):
        if spec.kind == "outer" and spec.red_constant and spec.red_constant[i]:
            out.append(f"xc{i}[0][{j}]")
        elif kind == VEC:
            out.append(f"x{i}[{u}][{j}]")
        elif kind == BCAST:
            out.append(f"x{i}[{u}]")
        else:
            out.append(f"x{i}[{u}][{j}]")
    return out


def load_block(
    plan: ReductionPlan, spec: ReductionKernelSpec, count: str, offset: str, indent: str
) -> list[str]:
    """Declare x{i}[count] and load `count` vectors: vector u starts at element offset
    `offset` (an expression of u) along the vectorized axis."""
    return load_vector_block(
        [u.val.dtype.cuda_type for u in plan.loop_inputs],
        spec.loop_kinds,
        spec.vector,
        count,
        indent,
        f"const Index i0 = {offset}",
        lambda i: (
            f"base_in{i} + i0 * step_in{i}",
            f"base_in{i} + (i0 + j) * step_in{i}",
            f"base_in{i}",
        ),
    )


def accumulate_block(
    plan: ReductionPlan,
    spec: ReductionKernelSpec,
    name: str,
    count: str,
    indent: str,
    acc_suffix: str = "",
) -> list[str]:
    """Run every stage on the loaded block and fold it into the accumulators.

    acc_suffix "[j]" (the outer kernel): lane j of each vector has an accumulator of its
    own; otherwise every loaded element goes to the one accumulator. Welford and softmax
    accumulators take their values a batch at a time (Accumulator.batched)."""
    accs = accumulators(plan)
    plain = [a for a in accs if not a.batched]
    lines = []
    if plain:
        lines += [
            "#pragma unroll",
            f"{indent}for (int u = 0; u < {count}; ++u) {{",
            "#pragma unroll",
            f"{indent}  for (int j = 0; j < {spec.vector}; ++j) {{",
        ]
        loaded = _loaded(spec, "u", "j")
        for acc in plain:
            target = f"acc{acc.k}{acc_suffix}"
            call = stage_call(plan, name, acc.k, loaded)
            lines.append(f"{indent}    {acc.update(target, call)}")
        lines += [f"{indent}  }}", f"{indent}}}"]
    per_lane = acc_suffix == "[j]"
    for acc in (a for a in accs if a.batched):
        size = count if per_lane else f"({count}) * {spec.vector}"
        slot = "u" if per_lane else f"u * {spec.vector} + j"
        call = stage_call(plan, name, acc.k, _loaded(spec, "u", "j"))

        def fill(ind: str, slot: str = slot, call: str = call) -> list[str]:
            return [
                "#pragma unroll",
                f"{ind}for (int u = 0; u < {count}; ++u) {{",
                f"{ind}  batch[{slot}] = {call};",
                f"{ind}}}",
            ]

        fold = f"{indent}  {acc.batch_update(f'acc{acc.k}{acc_suffix}', 'batch')}"
        declare = f"{indent}  {acc.value_type} batch[{size}];"
        if per_lane:  # a batch per lane: the lane's values of the loaded vectors
            lines += [
                "#pragma unroll",
                f"{indent}for (int j = 0; j < {spec.vector}; ++j) {{",
                declare,
                *fill(indent + "  "),
                fold,
                f"{indent}}}",
            ]
        else:  # one batch: every element loaded
            lines += [
                f"{indent}{{",
                declare,
                "#pragma unroll",
                f"{indent}  for (int j = 0; j < {spec.vector}; ++j) {{",
                *fill(indent + "    "),
                f"{indent}  }}",
                fold,
                f"{indent}}}",
            ]
    return lines


def scalar_accumulate(
    plan: ReductionPlan, name: str, offset: str, indent: str, acc_suffix: str = ""
) -> list[str]:
    """Load one element at `offset` along the vectorized axis and accumulate it."""
    loaded = [
        f"kf::load(in{i}, base_in{i} + ({offset}) * step_in{i})"
        for i in range(len(plan.loop_inputs))
    ]
    lines = [f"{indent}{{"]
    names = []
    for i, (u, arg) in enumerate(zip(plan.loop_inputs, loaded)):
        lines.append(f"{indent}  const {u.val.dtype.cuda_type} e{i} = {arg};")
        names.append(f"e{i}")
    for acc in accumulators(plan):
        call = stage_call(plan, name, acc.k, names)
        lines.append(f"{indent}  {acc.update(f'acc{acc.k}{acc_suffix}', call)}")
    lines.append(f"{indent}}}")
    return lines

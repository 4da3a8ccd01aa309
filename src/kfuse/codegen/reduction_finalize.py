"""The finalize kernel of a grid reduction (kfuse.codegen.reduction): where grid_parts > 1
the blocks along y each write a partial result to a workspace, and this second kernel
combines the partials of every kept element in a fixed order and runs the epilogue; and how
many threads it gives each kept element (the schedulers size its launch with these).

Apart from the first kernels because it reads none of the loop inputs: its own loads (the
partials, a batch a thread), its own block shape, and the inner_outer_persistent scheduler
launches it after a kernel of its own (kfuse.codegen.column_partials).
"""

from __future__ import annotations

from kfuse.codegen.block_combine import combine_over_y
from kfuse.codegen.kernel import Code, kernel_header, row_count, row_loop
from kfuse.codegen.reduction_functions import (
    epilogue_call,
    functions_source,
    kernel_name,
    tensor_params,
)
from kfuse.codegen.reduction_plan import ReductionPlan
from kfuse.codegen.reduction_spec import (
    FINALIZE_X,
    ReductionKernelSpec,
    accumulators,
    result_assignments,
)
from kfuse.runtime.runtime_header import runtime_header

FINALIZE_MIN_X = 8
"""The fewest: 8 floats of a partial are one 32-byte sector."""
FINALIZE_BATCH = 8
"""Partials a finalize thread loads before it combines them."""


def finalize_threads_y(parts: int) -> int:
    """Threads sharing one kept element's partials (threadIdx.y; partial p goes to thread
    p % y): 4, or more for many partials, so that each thread loads at most about two
    batches (few kept elements give few blocks, and each thread's batches wait in turn)."""
    y = 4
    while y < 32 and y * 2 * FINALIZE_BATCH < parts:
        y *= 2
    return y


def finalize_y(spec: ReductionKernelSpec) -> int:
    """The finalize kernel's threadIdx.y extent: the spec's, else finalize_threads_y's."""
    return spec.finalize_y or finalize_threads_y(spec.grid_parts)


def finalize_threads_x(n_rows: int, sm_count: int) -> int:
    """Kept elements a finalize block takes: FINALIZE_X, halved (down to FINALIZE_MIN_X)
    while the blocks would be fewer than the SMs. A batch norm over 256 channels combined
    its 264 partials a channel in 8 blocks, on 8 SMs of 132: 9.7 us, where torch.compile's
    two small kernels took 8.1 (H200)."""
    x = FINALIZE_X
    while x > FINALIZE_MIN_X and -(-n_rows // x) < sm_count:
        x //= 2
    return x


def emit_finalize(plan: ReductionPlan, spec: ReductionKernelSpec) -> tuple[str, str]:
    """Source and name of the kernel combining the partials and running the epilogue.

    A loop that loads one partial and combines it before loading the next waits a full
    memory latency per partial: with few kept elements (a batch norm over 512 channels has
    4 blocks of them) that took 40 us for 98 partials. So several threads share each kept
    element (finalize_threads_y), each loads FINALIZE_BATCH of its partials at a time, and
    their results are combined over threadIdx.y in a fixed tree (combine_over_y), so
    results stay deterministic.
    """
    fx, fy, batch = spec.finalize_x, finalize_y(spec), FINALIZE_BATCH
    suffix = ("_fin" if fx == FINALIZE_X else f"_fin{fx}") + (f"y{fy}" if spec.finalize_y else "")
    name = kernel_name(plan, spec, suffix)
    rank, parts = spec.rank, spec.grid_parts
    kept = range(rank - 1)
    accs = accumulators(plan)
    code = Code()
    code.extend([runtime_header(), ""])
    code.extend(functions_source(plan, name, stages=False, full=False, epilogue=True))
    params = tensor_params(plan, spec, loop=False, row=True, workspace=True)
    code.open_kernel(kernel_header(name, params, fx * fy, bounded=spec.launch_bounds))
    code(
        f"typedef {spec.index_type} Index;",
        # an accumulator a thread
        f"__shared__ __align__(16) unsigned char kf_smem[{fx * fy * max(a.size for a in accs)}];",
        f"const Index n_red = in0.size[{rank - 1}];",
        *row_count(kept),
    )
    # row0 is the same for the whole block, so every thread reaches the __syncthreads below.
    with row_loop(code, fx, "threadIdx.x"):
        code(*[f"{a.ctype} red{a.k} = {a.identity()};" for a in accs])
        with code.block("if (row_ok)"):
            with code.block(f"for (int p0 = threadIdx.y; p0 < {parts}; p0 += {fy * batch})"):
                code(*[f"{a.ctype} part{a.k}[{batch}];" for a in accs])
                with code.block(f"for (int u = 0; u < {batch}; ++u)", unroll=True):
                    code(
                        f"const int p = p0 + u * {fy};",
                        f"if (p >= {parts}) break;",
                        "const Index at = (Index)p * n_rows + row;",
                    )
                    for a in accs:
                        if a.struct:
                            code(
                                *[
                                    f"part{a.k}[u].{f} = kf::load(ws{a.k}{f}, at);"
                                    for f in a.partial_fields
                                ]
                            )
                        else:
                            code(f"part{a.k}[u] = kf::load(ws{a.k}, at);")
                with code.block(f"for (int u = 0; u < {batch}; ++u)", unroll=True):
                    code(f"if (p0 + u * {fy} >= {parts}) break;")
                    code(*[a.combine(f"red{a.k}", f"part{a.k}[u]") for a in accs])
        for a in accs:
            combine_over_y(code, a, fy, fx, None, f"red{a.k}")
        with code.block("if (threadIdx.y == 0 && row_ok)"):
            for a in accs:
                code(*result_assignments(plan, a.k, f"red{a.k}", "n_red"))
            epilogue_call(code, plan, name, "row", kept)
    return code.kernel_source(), name

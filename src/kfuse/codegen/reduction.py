"""Reduction kernels: CUDA source for a ReductionPlan under a ReductionKernelSpec.

Every kernel sees its tensors on the canonical domain (kept..., reduced) of
kfuse.codegen.reduction_plan; `rows` are the kept elements (flattened), `n_red` the reduced
extent. Three kernels:

* inner (reduced axis innermost in memory): block_x threads share a row, block_y rows per block,
  rows grid-strided over blockIdx.x. Each thread loads U vectors of V elements before
  accumulating them (bytes in flight), a scalar loop takes the ragged end, then
  kf::block_reduce_x combines the threads of a row;
* outer (a kept axis innermost): threadIdx.x walks vectors of V kept elements (coalesced),
  threadIdx.y splits the reduced axis (U rows loaded per step; the rows left one at a time,
  or in batches of halving powers of two where threads have few rows), and the block_y
  partial results are combined through shared memory in a fixed order (a tree for many);
* finalize (kfuse.codegen.reduction_finalize): when grid_parts (gridDim.y) > 1 the blocks
  along y each reduce a slice of the reduced axis and write a partial result to a workspace;
  this second kernel combines the partials of each output in a fixed order and runs the
  epilogue. No atomics, no spinning: results are deterministic for given parameters.

The pieces these kernels and the persistent ones (kfuse.codegen.persistent) share are in
reduction_spec (the spec, accumulators), reduction_functions (the device functions: prologue,
epilogue and full-size outputs emitted by kfuse.codegen.body, so an op means the same thing
under every scheduler; names and parameters), reduction_loads (loads and accumulation) and
block_combine (the fixed-order combine over threadIdx.y).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

from kfuse.codegen import generated
from kfuse.codegen.block_combine import combine_over_y
from kfuse.codegen.kernel import (
    Code,
    cluster_block_index,
    decompose,
    kernel_header,
    load_vector,
    load_vector_block,
    row_count,
    row_loop,
)
from kfuse.codegen.layout import INTERLEAVED, VEC
from kfuse.codegen.reduction_finalize import emit_finalize
from kfuse.codegen.reduction_functions import (
    epilogue_call,
    epilogue_operands,
    epilogue_statement,
    functions_source,
    kernel_name,
    stage_call,
    tensor_params,
)
from kfuse.codegen.reduction_loads import (
    accumulate_block,
    load_block,
    scalar_accumulate,
    smem_bytes,
)
from kfuse.codegen.reduction_plan import ReductionPlan
from kfuse.codegen.reduction_spec import (
    Accumulator,
    ReductionKernelSpec,
    accumulators,
    result_assignments,
)
from kfuse.codegen.registers import register_array
from kfuse.dtypes import DataType
from kfuse.runtime.runtime_header import runtime_header


def emit_inner(plan: ReductionPlan, spec: ReductionKernelSpec) -> tuple[str, str]:
    """Source and name of the inner-reduction kernel."""
    name = kernel_name(plan, spec)
    rank, vec = spec.rank, spec.vector
    bx, by, parts = spec.block_x, spec.block_y, spec.grid_parts
    kept = range(rank - 1)
    n_loop = len(plan.loop_inputs)
    accs = accumulators(plan)
    code = Code()
    code.extend([runtime_header(), ""])
    code.extend(functions_source(plan, name, stages=True, full=False, epilogue=parts == 1))
    params = tensor_params(plan, spec, loop=True, row=parts == 1, workspace=parts > 1)
    code.open_kernel(kernel_header(name, params, bx * by, bounded=spec.launch_bounds))
    code(*generated.loop_setup(plan, spec.index_type))  # generated reads' in<i>
    code(
        f"typedef {spec.index_type} Index;",
        f"__shared__ __align__(16) unsigned char kf_smem[{smem_bytes(plan, spec)}];",
        f"const Index n_red = in0.size[{rank - 1}];",
        *row_count(kept),
        f"const Index n_vec = n_red / {vec};",
        f"const Index vstride = (Index)gridDim.y * {bx};",
    )
    ins = [f"in{i}" for i in range(n_loop)]
    with row_loop(code, by, "threadIdx.y"):
        code(*[f"Index base_{op} = 0;" for op in ins])
        with code.block("if (row_ok)"):
            code.extend(decompose("row", kept, ins, code.indent))
        code(*[f"const Index step_in{i} = in{i}.stride[{rank - 1}];" for i in range(n_loop)])
        code(*[f"{a.ctype} acc{a.k} = {a.identity()};" for a in accs])
        with code.block("if (row_ok)"):
            _accumulate_row(code, plan, spec, name)
        for a in accs:
            combined = a.block_reduce(f"acc{a.k}", "kf_smem", spec.block_x)
            code(f"const {a.ctype} red{a.k} = {combined};")
        with code.block("if (threadIdx.x == 0 && row_ok)"):
            _row_results(code, plan, spec, name, "red{k}")
    return code.kernel_source(), name


def _accumulate_row(code: Code, plan: ReductionPlan, spec: ReductionKernelSpec, name: str) -> None:
    """This thread's share of its row: U vectors at a time while they fit, then one vector at
    a time, then the elements past the last whole vector."""
    vec, unroll, bx = spec.vector, spec.unroll, spec.block_x
    code(f"Index v = (Index)blockIdx.y * {bx} + threadIdx.x;")
    with code.block(
        f"for (; v + (Index)({unroll - 1}) * vstride < n_vec; v += {unroll} * vstride)"
    ):
        code.extend(
            load_block(plan, spec, str(unroll), f"(v + (Index)u * vstride) * {vec}", code.indent)
        )
        code.extend(accumulate_block(plan, spec, name, str(unroll), code.indent))
    if unroll > 1:
        with code.block("for (; v < n_vec; v += vstride)"):
            code.extend(load_block(plan, spec, "1", f"v * {vec}", code.indent))
            code.extend(accumulate_block(plan, spec, name, "1", code.indent))
    if vec > 1:
        code(
            f"for (Index i = n_vec * {vec} + (Index)blockIdx.y * {bx} + threadIdx.x;"
            " i < n_red; i += vstride)"
        )
        code.extend(scalar_accumulate(plan, name, "i", code.indent + "  "))


def _row_results(
    code: Code, plan: ReductionPlan, spec: ReductionKernelSpec, name: str, combined: str
) -> None:
    """What one row's combined accumulators become: a grid reduction's partials (the values
    red<k>) or, in one pass, the reductions' results and the epilogue (accumulator k is
    `combined` with {k} filled in)."""
    accs = accumulators(plan)
    if spec.grid_parts > 1:
        _store_partials(code, accs, "(Index)blockIdx.y * n_rows + row")
        return
    for a in accs:
        code(*result_assignments(plan, a.k, combined.format(k=a.k), "n_red"))
    epilogue_call(code, plan, name, "row", range(spec.rank - 1))


def _store_partials(code: Code, accs: list[Accumulator], index: str) -> None:
    """Each accumulator red<k> into its workspace arrays at `index`."""
    for a in accs:
        if a.struct:
            code(*[f"kf::store(ws{a.k}{f}, {index}, red{a.k}.{f});" for f in a.partial_fields])
        else:
            code(f"kf::store(ws{a.k}, {index}, red{a.k});")


SERIAL_COMBINE_MAX = 8
"""Outer kernels with at most this many threads along the reduced axis and no Welford
accumulator combine their partials by thread y == 0 in turn; the others go through the tree of
combine_over_y (with Welford's division a chain of 7 took 3 us more in a bf16 norm over dim 0
of [64, 65536], 12.4 against 9.0 us on an H200)."""


def emit_outer(plan: ReductionPlan, spec: ReductionKernelSpec) -> tuple[str, str]:
    """Source and name of the outer-reduction kernel."""
    constant = "".join("c" if c else "v" for c in spec.red_constant)
    name = kernel_name(plan, spec, f"_{constant}" if constant else "")
    vec, parts = spec.vector, spec.grid_parts
    accs = accumulators(plan)
    code = Code()
    code.extend([runtime_header(), ""])
    code.extend(functions_source(plan, name, stages=True, full=False, epilogue=parts == 1))
    params = tensor_params(plan, spec, loop=True, row=parts == 1, workspace=parts > 1)
    threads = spec.block_x * spec.block_y
    code.open_kernel(
        kernel_header(name, params, threads, bounded=spec.launch_bounds, min_blocks=spec.min_blocks)
    )
    code(*generated.loop_setup(plan, spec.index_type))  # generated reads' in<i>
    # One block along the reduced axis: the epilogue runs here, at the row operands' bases.
    epilogue = parts == 1 and bool(plan.row_outputs)
    row_ops = epilogue_operands(plan) if epilogue else []
    with outer_columns(code, plan, spec, "(Index)gridDim.y", [], row_ops):
        outer_accumulate(code, plan, spec, name, f"(Index)blockIdx.y * {spec.block_y}")
        outer_combine(code, plan, spec)
        with code.block("if (threadIdx.y == 0 && col_ok)"):
            if parts > 1:
                with code.block(f"for (int j = 0; j < {vec}; ++j)", unroll=True):
                    code("if (j >= nvalid) continue;", "const Index row = outer * n_in + c0 + j;")
                    code(*[f"const {a.ctype} red{a.k} = acc{a.k}[j];" for a in accs])
                    _row_results(code, plan, spec, name, "acc{k}[j]")
            elif epilogue:
                _outer_epilogue(code, plan, spec, name)
    return code.kernel_source(), name


def _outer_epilogue(code: Code, plan: ReductionPlan, spec: ReductionKernelSpec, name: str) -> None:
    """The results of a thread's V columns and the epilogue on them, at the row operands'
    bases and steps that outer_columns found with the loaded operands' (its columns are
    consecutive along the innermost kept axis), with the row outputs stored as one vector
    each where the group is whole and they take vectors (spec.output_kinds). Decomposing
    every column's index and storing it alone cost RoPE's sum over pairs, an output element
    per two loaded, about 30 instructions an element; decomposing the group's index a second
    time for the epilogue, four more integer divisions a thread."""
    vec, outs = spec.vector, plan.fusion.outputs
    lane = [
        line
        for a in accumulators(plan)
        for line in result_assignments(plan, a.k, f"acc{a.k}[j]", "n_red")
    ]
    lane += epilogue_statement(plan, name, lambda op: f"base_{op} + j * step_{op}")
    kinds = spec.output_kinds
    if kinds and all(kinds[k] == VEC for k in plan.row_outputs):
        with code.block(f"if (nvalid == {vec})"):
            code(*[f"kf::Vec<{outs[k].dtype.cuda_type}, {vec}> v{k};" for k in plan.row_outputs])
            with code.block(f"for (int j = 0; j < {vec}; ++j)", unroll=True):
                code(*lane, *[f"v{k}[j] = y{k};" for k in plan.row_outputs])
            code(*[f"kf::store_vec<{vec}>(out{k}, base_out{k}, v{k});" for k in plan.row_outputs])
            code.otherwise()
            _outer_epilogue_lanes(code, plan, vec, lane)
    else:
        _outer_epilogue_lanes(code, plan, vec, lane)


def _outer_epilogue_lanes(code: Code, plan: ReductionPlan, vec: int, lane: list[str]) -> None:
    """The epilogue column by column (`lane`: a column's statements), for the `nvalid` of the
    group's V columns that exist, each stored alone."""
    with code.block(f"for (int j = 0; j < {vec}; ++j)", unroll=True):
        code("if (j >= nvalid) continue;", *lane)
        code(
            *[f"kf::store(out{k}, base_out{k} + j * step_out{k}, y{k});" for k in plan.row_outputs]
        )


@contextlib.contextmanager
def outer_columns(
    code: Code,
    plan: ReductionPlan,
    spec: ReductionKernelSpec,
    splits: str,
    outputs: list[int],
    row_operands: Sequence[str] = (),
) -> Iterator[None]:
    """Within: the body of the loop over this block's groups of V columns, after an outer
    kernel's shared memory and extents, with each thread's column group (cv, outer, c0,
    nvalid), its operands' bases and steps, and its accumulators defined. `splits`: the blocks
    along the reduced axis (rstride = splits * block_y); `outputs`: fusion outputs on the full
    domain the kernel also addresses (out<k>: base, step along the columns, stride along the
    reduced axis); `row_operands`: tensors on the kept axes only (the epilogue's row inputs
    and outputs: base and step), found in the same decomposition of the group's index."""
    rank, vec, bx, by = spec.rank, spec.vector, spec.block_x, spec.block_y
    inner_axis = rank - 2
    n_loop = len(plan.loop_inputs)
    code(
        f"typedef {spec.index_type} Index;",
        f"__shared__ __align__(16) unsigned char kf_smem[{smem_bytes(plan, spec)}];",
        f"const Index n_red = in0.size[{rank - 1}];",
        f"const Index n_in = out0.size[{inner_axis}];",
        "Index n_rows = n_in;",
        *[f"n_rows *= out0.size[{d}];" for d in range(inner_axis)],
        f"const Index nvec_in = (n_in + {vec - 1}) / {vec};",
        "const Index n_cols = n_in == 0 ? 0 : n_rows / n_in * nvec_in;",
        f"const Index rstride = {splits} * {by};",
    )
    # A cluster's blocks (outer_persistent's split columns) share each column group: they
    # take the groups in step, by the cluster's index in the grid.
    block, blocks = cluster_block_index(spec.cluster)
    with code.block(
        f"for (Index col0 = (Index){block} * {bx}; col0 < n_cols; col0 += (Index){blocks} * {bx})"
    ):
        code(
            "const Index cv = col0 + threadIdx.x;",
            "const bool col_ok = cv < n_cols;",
            "Index outer = 0;",
            "Index c0 = 0;",
            "int nvalid = 0;",
        )
        ops = [f"in{i}" for i in range(n_loop)] + [f"out{k}" for k in outputs]
        addressed = ops + list(row_operands)
        code(*[f"Index base_{op} = 0;" for op in addressed])
        with code.block("if (col_ok)"):
            code(
                "outer = kf::index_div(cv, nvec_in);",
                f"c0 = (cv - outer * nvec_in) * {vec};",
                f"nvalid = (int)(n_in - c0 < {vec} ? n_in - c0 : {vec});",
            )
            code.extend(decompose("outer", range(inner_axis), addressed, code.indent))
            code(*[f"base_{op} += c0 * {op}.stride[{inner_axis}];" for op in addressed])
        code(*[f"const Index step_{op} = {op}.stride[{inner_axis}];" for op in addressed])
        code(*[f"const Index rs_{op} = {op}.stride[{rank - 1}];" for op in ops])
        for a in accumulators(plan):
            code(
                f"{a.ctype} acc{a.k}[{vec}];",
                f"for (int j = 0; j < {vec}; ++j) acc{a.k}[j] = {a.identity()};",
            )
        yield


def outer_accumulate(
    code: Code, plan: ReductionPlan, spec: ReductionKernelSpec, name: str, first: str
) -> None:
    """Fold this thread's rows (first + threadIdx.y, then every rstride) of its column group
    into its accumulators: whole batches of `unroll` rows, the rest (spec.tail_batches), and
    element by element for a group cut by the end of the columns."""
    vec, unroll = spec.vector, spec.unroll
    n_loop = len(plan.loop_inputs)
    with code.block("if (col_ok)"):
        code(f"Index r = {first} + threadIdx.y;")
        with code.block(f"if (nvalid == {vec})"):
            _load_red_constant(code, plan, spec)
            with code.block(
                f"for (; r + (Index)({unroll - 1}) * rstride < n_red; r += {unroll} * rstride)"
            ):
                code.extend(_outer_block(plan, spec, name, str(unroll), code.indent))
            if spec.tail_batches:
                # Fewer than `unroll` rows are left: take them in batches of halving powers of
                # two (4, 2, 1 after 8; 4, 2, 1 after 5), so that they cost about log2(unroll)
                # memory latencies rather than one each. Threads with few rows in all (a
                # finely split or short reduced axis) have nothing but this.
                count = 1 << ((unroll - 1).bit_length() - 1) if unroll > 1 else 0
                while count >= 1:
                    last = "r" if count == 1 else f"r + (Index)({count - 1}) * rstride"
                    with code.block(f"if ({last} < n_red)"):
                        code.extend(_outer_block(plan, spec, name, str(count), code.indent))
                        code(f"r += {'' if count == 1 else f'{count} * '}rstride;")
                    count //= 2
            elif unroll > 1:
                with code.block("for (; r < n_red; r += rstride)"):
                    code.extend(_outer_block(plan, spec, name, "1", code.indent))
            code.otherwise()
            with code.block("for (; r < n_red; r += rstride)"):
                with code.block(f"for (int j = 0; j < {vec}; ++j)", unroll=True):
                    code("if (j >= nvalid) continue;")
                    loaded = [
                        f"kf::load(in{i}, base_in{i} + r * rs_in{i} + j * step_in{i})"
                        for i in range(n_loop)
                    ]
                    for i, (u, arg) in enumerate(zip(plan.loop_inputs, loaded)):
                        code(f"const {u.val.dtype.cuda_type} e{i} = {arg};")
                    for a in accumulators(plan):
                        call = stage_call(plan, name, a.k, [f"e{i}" for i in range(n_loop)])
                        code(a.update(f"acc{a.k}[j]", call))


def _red_constant(spec: ReductionKernelSpec) -> list[int]:
    """The loop inputs an outer kernel loads once for all its rows (spec.red_constant)."""
    return [i for i, c in enumerate(spec.red_constant) if c]


def _load_red_constant(code: Code, plan: ReductionPlan, spec: ReductionKernelSpec) -> None:
    """xc<i>[0] = the column group's vector of each input constant along the reduced rows,
    where this thread has a row (an empty reduced axis leaves such an input empty)."""
    constant = _red_constant(spec)
    for i in constant:
        ctype, kind = plan.loop_inputs[i].val.dtype.cuda_type, spec.loop_kinds[i]
        code(register_array(f"xc{i}", ctype, kind, spec.vector, 1, zero=True))
    if not constant:
        return
    with code.block("if (r < n_red)"):
        for i in constant:
            code.extend(
                load_vector(
                    spec.loop_kinds[i],
                    f"xc{i}[0]",
                    f"in{i}",
                    spec.vector,
                    code.indent,
                    at=f"base_in{i}",
                    element_at=f"base_in{i} + j * step_in{i}",
                )
            )


def outer_combine(code: Code, plan: ReductionPlan, spec: ReductionKernelSpec) -> None:
    """Combine the block_y threads' accumulators of each column into thread y == 0's."""
    bx, by, vec = spec.block_x, spec.block_y, spec.vector
    accs = accumulators(plan)
    # Welford's combine divides, a softmax's takes two exps: a tree, not a serial chain.
    if by > SERIAL_COMBINE_MAX or (by > 1 and any(a.struct for a in accs)):
        for a in accs:
            combine_over_y(code, a, by, bx, vec, f"acc{a.k}")
    elif by > 1:
        # Few cheap partials: thread y == 0 combines them in turn, which costs fewer
        # registers than the tree (W3's kernel keeps 32 and 8 blocks an SM).
        other = f"scratch[(t * {bx} + threadIdx.x) * {vec} + j]"
        code(f"const int slot = (threadIdx.y * {bx} + threadIdx.x) * {vec};")
        for a in accs:
            with code.block():
                code(
                    f"{a.ctype}* scratch = reinterpret_cast<{a.ctype}*>(kf_smem);",
                    f"for (int j = 0; j < {vec}; ++j) scratch[slot + j] = acc{a.k}[j];",
                    "__syncthreads();",
                )
                with code.block("if (threadIdx.y == 0)"):
                    with code.block(f"for (int t = 1; t < {by}; ++t)"):
                        with code.block(f"for (int j = 0; j < {vec}; ++j)"):
                            code(a.combine(f"acc{a.k}[j]", other))
                code("__syncthreads();")


def _outer_block(
    plan: ReductionPlan, spec: ReductionKernelSpec, name: str, count: str, indent: str
) -> list[str]:
    """Load `count` reduced rows (r + u * rstride) of V columns and accumulate them.

    INTERLEAVED operands (their rows adjacent in each column) are one vector of V * unroll
    elements in the batch of all `unroll` rows, spread into x<i>[u][j] in registers; in
    smaller batches (which such a kernel never runs: its rows are exactly one batch) they are
    read element by element."""
    vec, unroll = spec.vector, spec.unroll
    ctypes = [u.val.dtype.cuda_type for u in plan.loop_inputs]
    one_batch = count == str(unroll)  # `count`: a C++ expression, here a literal
    blocked = [i for i, k in enumerate(spec.loop_kinds) if k == INTERLEAVED and one_batch]
    lines = []
    for i in blocked:
        block = f"kf::Vec<{ctypes[i]}, {vec * unroll}>"
        lines += [
            f"{indent}const {block} xb{i} = kf::load_vec<{vec * unroll}>(in{i}, base_in{i} + r);",
            f"{indent}{ctypes[i]} x{i}[{unroll}][{vec}];",
            "#pragma unroll",
            f"{indent}for (int u = 0; u < {unroll}; ++u)",
            "#pragma unroll",
            f"{indent}  for (int j = 0; j < {vec}; ++j) x{i}[u][j] = xb{i}[j * {unroll} + u];",
        ]

    def addresses(i: int) -> tuple[str, str, str]:
        at = f"base_in{i} + rr * rs_in{i}"
        return at, f"{at} + j * step_in{i}", at

    lines += load_vector_block(
        ctypes,
        spec.loop_kinds,
        vec,
        count,
        indent,
        "const Index rr = r + (Index)u * rstride",
        addresses,
        skip=[*blocked, *_red_constant(spec)],
    )
    lines += accumulate_block(plan, spec, name, count, indent, acc_suffix="[j]")
    return lines


def emit_reduction(plan: ReductionPlan, spec: ReductionKernelSpec) -> list[tuple[str, str]]:
    """(source, name) of every kernel the spec needs, in launch order."""
    first = emit_inner(plan, spec) if spec.kind == "inner" else emit_outer(plan, spec)
    if spec.grid_parts > 1:
        return [first, emit_finalize(plan, spec)]
    return [first]


__all__ = [
    "ReductionKernelSpec",
    "emit_reduction",
    "emit_inner",
    "emit_outer",
    "accumulators",
    "DataType",
]

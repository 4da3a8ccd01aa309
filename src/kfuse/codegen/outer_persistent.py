"""The outer persistent kernel: normalizations over the outer (slow) axes, one pass over memory.

Layout of the work (canonical domain of kfuse.codegen.reduction_plan, reduced axis last, the
innermost kept axis contiguous in memory), as the outer reduction kernel lays it out
(kfuse.codegen.reduction.outer_columns):

    columns  groups of V adjacent kept elements along the contiguous kept axis; threadIdx.x
             walks them (a warp's loads of one reduced row are contiguous), grid-strided over
             blockIdx.x by block_x groups
    column   the block's block_y threads along y share it: thread y holds reduced rows
             y, y + block_y, ..., y + (B - 1) * block_y (B = persistent batch) of its V
             columns in registers. block_y * B >= the column length; or, split over the C
             blocks of a thread-block cluster (spec.cluster), block k holds the rows from
             k * block_y * B (kf_row0) on, and block_y * B * C >= the column length.

Per column group: load the held rows of every loop input once, then for each reduction in
order compute its input from the held values (and earlier results), fold it per lane, combine
the block_y partials per lane in a fixed tree through shared memory (and, split over a
cluster, the blocks' totals in rank order through distributed shared memory) and hand the
result to every thread of the column (all threads then read the combined value back), then
compute the full-size outputs from the held values and store them, and thread y == 0 (of the
cluster's first block) writes the column's outputs on the kept axes. Welford reductions take
two passes over the held values (mean from the column's first value as shift, then the sum of
squared deviations), as the inner persistent kernel does. Inputs no reduction reads (weight,
bias) are not held: they are loaded where the full-size outputs are computed.

Inputs the same for every reduced row (stride 0 along the reduced axis: an instance norm
backward's per-(n, c) mean, a weight) are loaded once a thread (slot 0), and what the stages
and the full-size outputs compute from them, the Scalars and the results alone (the inverse
std from the variance, a mean times a weight) is computed once a lane before the loops over
the slots (kfuse.codegen.row_invariant, along the reduced axis): inlined, it was computed for
every held element (a channels-last instance norm forward of [256, 2048, 7, 7] bf16: 171
MUFU instructions in its sm_90 SASS for 56 elements a thread, a division and a reciprocal
square root each).
"""

from __future__ import annotations

import dataclasses

from kfuse.codegen import generated
from kfuse.codegen.block_combine import combine_over_y
from kfuse.codegen.expressions import compute_ctype, literal
from kfuse.codegen.kernel import Code, kernel_header, load_vector, store_vector
from kfuse.codegen.layout import BCAST, VEC
from kfuse.codegen.reduction import outer_columns
from kfuse.codegen.reduction_functions import (
    epilogue_call,
    functions_source,
    kernel_name,
    loop_arguments,
    regenerated_inputs,
    result_args,
    row_hoists,
    scalar_names,
    stage_call,
    stage_dependencies,
    streamed_inputs,
    tensor_params,
)
from kfuse.codegen.reduction_loads import lane_value_bytes
from kfuse.codegen.reduction_plan import ReductionPlan
from kfuse.codegen.reduction_spec import (
    Accumulator,
    ReductionKernelSpec,
    accumulators,
    result_assignments,
)
from kfuse.codegen.registers import register_array
from kfuse.codegen.row_invariant import Hoisted, prelude_call
from kfuse.ir.exprs import WelfordOp

KIND = "outer_persistent"


def held_inputs(plan: ReductionPlan, constant: tuple[bool, ...] = ()) -> list[int]:
    """Loop inputs a reduction reads: held in registers across the reductions, but generated
    reads that vary along the reduced axis (`constant`: the kernel's red_constant), which
    every pass computes again at its element (regenerated)."""
    streamed = streamed_inputs(plan)
    return [
        i
        for i in range(len(plan.loop_inputs))
        if i not in streamed and i not in regenerated(plan, constant)
    ]


def regenerated(plan: ReductionPlan, constant: tuple[bool, ...]) -> set[int]:
    """Generated reads a reduction reads, not constant along the reduced axis: computed at
    each element where it is read (regenerated_inputs). One constant along it is held in
    one slot, as a loaded one is (the lanes' preludes read it outside the slots)."""
    return {i for i in regenerated_inputs(plan) if not (constant and constant[i])}


def _placeholder(ctype: str) -> str:
    """A value-initialised `ctype` for the inputs a stage does not read ("long long{}" is no
    C++: multi-word types are cast)."""
    return f"static_cast<{ctype}>(0)" if " " in ctype else f"{ctype}{{}}"


def red_constant(spec: ReductionKernelSpec, i: int) -> bool:
    """Whether loop input i is the same for every reduced row: held in one slot."""
    return bool(spec.red_constant) and spec.red_constant[i]


def _element(spec: ReductionKernelSpec, i: int, b: str) -> str:
    """Lane j of loop input i's slot b (a broadcast operand holds one element a slot; an
    input constant along the reduced axis holds only slot 0)."""
    b = "0" if red_constant(spec, i) else b
    return f"x{i}[{b}]" if spec.loop_kinds[i] == BCAST else f"x{i}[{b}][j]"


def _computed(spec: ReductionKernelSpec, i: int) -> str:
    """Lane j of generated read i at reduced row r, computed there (regenerated): at the
    offset _load_slot would load it from."""
    at = f"base_in{i} + r * rs_in{i}"
    return (
        f"kf::load(in{i}, {at})"
        if spec.loop_kinds[i] == BCAST
        else (f"kf::load(in{i}, {at} + j * step_in{i})")
    )


def _declare(
    code: Code, plan: ReductionPlan, spec: ReductionKernelSpec, i: int, count: int
) -> None:
    ctype = plan.loop_inputs[i].val.dtype.cuda_type
    code.extend(
        [
            register_array(
                f"x{i}", ctype, spec.loop_kinds[i], spec.vector, count, code.indent, zero=True
            )
        ]
    )


def _load_slot(code: Code, spec: ReductionKernelSpec, i: int, slot: str, row: str) -> None:
    """Load input i's V columns of reduced row `row` into x<i>[slot]: one vector access
    where the group is whole (and the operand allows), lane by lane where the group is cut
    by the end of the columns."""
    vec = spec.vector
    at = f"base_in{i} + {row} * rs_in{i}"
    with code.block(f"if (nvalid == {vec})"):
        code.extend(
            load_vector(
                spec.loop_kinds[i],
                f"x{i}[{slot}]",
                f"in{i}",
                vec,
                code.indent,
                at=at,
                element_at=f"{at} + j * step_in{i}",
                bcast_at=at,
            )
        )
        code.otherwise()
        if spec.loop_kinds[i] == BCAST:
            code(f"x{i}[{slot}] = kf::load(in{i}, {at});")
        else:
            with code.block(f"for (int j = 0; j < {vec}; ++j)", unroll=True):
                code(f"if (j < nvalid) x{i}[{slot}][j] = kf::load(in{i}, {at} + j * step_in{i});")


def _row(spec: ReductionKernelSpec) -> str:
    """The reduced row of this thread's slot b: a cluster's block k holds the k-th part of the
    column (kf_row0 is its first row)."""
    row = f"(Index)threadIdx.y + (Index)b * {spec.block_y}"
    return row if spec.cluster == 1 else f"kf_row0 + {row}"


def _slots(code: Code, spec: ReductionKernelSpec, body: list[str]) -> None:
    """`body` for every held element of this thread inside the data: slot b (reduced row r),
    lane j."""
    with code.block(f"for (int b = 0; b < {spec.unroll}; ++b)", unroll=True):
        code(f"const Index r = {_row(spec)};")
        with code.block(f"for (int j = 0; j < {spec.vector}; ++j)", unroll=True):
            with code.block("if (col_ok && r < n_red && j < nvalid)"):
                code(*body)


def _results(plan: ReductionPlan, ks: range | list[int]) -> list[str]:
    """Lane j's result variables of reductions `ks` (r<k>, or r<k>_avg/_m2/_n) from their
    per-lane arrays."""
    lines = []
    for k in ks:
        red = plan.reductions[k]
        if isinstance(red, WelfordOp):
            t = compute_ctype(red.inputs[0].dtype)
            nan = literal(float("nan"), red.inputs[0].dtype)
            lines += [
                f"const {t} r{k}_avg = avg{k}[j];",
                f"const {t} r{k}_m2 = n_red == 0 ? {nan} : m2_{k}[j];",
                f"const long long r{k}_n = (long long)n_red;",
            ]
        else:
            lines += result_assignments(plan, k, f"acc{k}[j]", "n_red")
    return lines


def _combined_everywhere(
    code: Code, acc: Accumulator, spec: ReductionKernelSpec, values: str
) -> None:
    """Combine the per-lane array `values` over threadIdx.y (a fixed tree: deterministic) and
    give every thread of the column the total, read back from thread y == 0's slots."""
    bx, vec = spec.block_x, spec.vector
    combine_over_y(code, acc, spec.block_y, bx, vec, values)
    if spec.cluster > 1:
        _combined_over_cluster(code, acc, spec, values)
        return
    with code.block():
        code(f"const {acc.ctype}* scratch = reinterpret_cast<const {acc.ctype}*>(kf_smem);")
        code(f"for (int j = 0; j < {vec}; ++j) {values}[j] = scratch[threadIdx.x * {vec} + j];")
    code("__syncthreads();")  # the scratch is free for the next combine


def _combined_over_cluster(
    code: Code, acc: Accumulator, spec: ReductionKernelSpec, values: str
) -> None:
    """After the block's combine (its totals in its scratch's first row): the totals of the
    cluster's blocks combined in rank order, so that every block gets the same bits, by the
    threads of row y == 0 (a lane's C values through distributed shared memory), and handed
    to every thread of the column through kf_cluster_total. Two cluster barriers: the first
    makes every block's totals visible, the second keeps each block's scratch until the
    others have read it."""
    vec, ctype = spec.vector, acc.ctype
    lane = f"threadIdx.x * {vec} + j"
    code("kf::cluster_sync();")
    with code.block():
        code(
            f"const {ctype}* scratch = reinterpret_cast<const {ctype}*>(kf_smem);",
            f"{ctype}* total = reinterpret_cast<{ctype}*>(kf_cluster_total);",
        )
        with code.block("if (threadIdx.y == 0)"):
            with code.block(f"for (int j = 0; j < {vec}; ++j)", unroll=True):
                code(f"{ctype} v = kf::cluster_load(&scratch[{lane}], 0u);")
                with code.block(f"for (unsigned q = 1; q < {spec.cluster}u; ++q)", unroll=True):
                    code(f"const {ctype} other = kf::cluster_load(&scratch[{lane}], q);")
                    code(acc.combine("v", "other"))
                code(f"total[{lane}] = v;")
        code("__syncthreads();")
        code(f"for (int j = 0; j < {vec}; ++j) {values}[j] = total[{lane}];")
    code("kf::cluster_sync();")


def cluster_total_bytes(plan: ReductionPlan, spec: ReductionKernelSpec) -> int:
    """Shared memory of kf_cluster_total (a cluster's combined totals, one a lane of the
    block's columns); 0 without a cluster."""
    if spec.cluster == 1:
        return 0
    return -(-spec.block_x * spec.vector * lane_value_bytes(plan) // 16) * 16


def column_hoists(plan: ReductionPlan, spec: ReductionKernelSpec) -> dict[str, Hoisted]:
    """What each stage ("stage<k>") and the full-size outputs ("full") compute from values
    the same along the reduced axis: the inputs constant along it, the Scalars and the
    results (row_hoists with invariance taken along the reduced axis, not the vector's)."""
    kinds = tuple(BCAST if red_constant(spec, i) else VEC for i in range(len(plan.loop_inputs)))
    return row_hoists(plan, dataclasses.replace(spec, loop_kinds=kinds, kept=()))


def _lane_preludes(
    code: Code,
    plan: ReductionPlan,
    spec: ReductionKernelSpec,
    function: str,
    hoist: Hoisted,
    prefix: str,
    ks: range | list[int],
) -> tuple[str, ...]:
    """Compute `hoist`'s values once a lane (arrays <prefix>h<n>[V]) from the inputs constant
    along the reduced axis, the Scalars and the results of reductions `ks` (the prelude
    function's result parameters); the arguments that hand lane j's values to the
    per-element function."""
    if not hoist.uses:
        return ()
    vec = spec.vector
    code(*[f"{compute_ctype(u.val.dtype)} {prefix}h{n}[{vec}];" for n, u in enumerate(hoist.uses)])
    with code.block(f"for (int j = 0; j < {vec}; ++j)", unroll=True):
        code(*_results(plan, ks))
        lanes = {i: _element(spec, i, "0") for i in hoist.inputs}
        args = list(scalar_names(plan).values()) + result_args(plan, ks)
        code(*prelude_call(function, hoist, f"{prefix}t", lanes, args))
        code(*[f"{prefix}h{n}[j] = {prefix}th{n};" for n in range(len(hoist.uses))])
    return tuple(f"{prefix}h{n}[j]" for n in range(len(hoist.uses)))


def _stage(
    plan: ReductionPlan,
    name: str,
    spec: ReductionKernelSpec,
    k: int,
    b: str,
    hoisted: tuple[str, ...] = (),
) -> str:
    streamed = streamed_inputs(plan)
    computed = regenerated(plan, spec.red_constant)
    loaded = [
        _placeholder(u.val.dtype.cuda_type)
        if i in streamed
        else _computed(spec, i)
        if i in computed
        else _element(spec, i, b)
        for i, u in enumerate(plan.loop_inputs)
    ]
    return stage_call(plan, name, k, loaded, hoisted)


def _dependencies(plan: ReductionPlan, k: int) -> list[str]:
    return _results(plan, range(k))


def _reduce(
    code: Code, plan: ReductionPlan, spec: ReductionKernelSpec, name: str, k: int, hoist: Hoisted
) -> None:
    """Reduction k over the held column: per-lane partials, combined over the block."""
    acc = accumulators(plan)[k]
    red = plan.reductions[k]
    vec = spec.vector
    earlier = _dependencies(plan, k)
    deps = stage_dependencies(plan, k)
    hoisted = _lane_preludes(code, plan, spec, f"{name}_stage{k}_row", hoist, f"st{k}_", deps)
    if not isinstance(red, WelfordOp):
        # acc<k>[V] is declared (identity) by outer_columns
        value = _stage(plan, name, spec, k, "b", hoisted)
        _slots(code, spec, [*earlier, acc.update(f"acc{k}[j]", value)])
        _combined_everywhere(code, acc, spec, f"acc{k}")
        return
    t = acc.value_type
    total = Accumulator(k, False, t, "sum")
    zero = ", ".join([f"({t})0"] * vec)
    streamed = streamed_inputs(plan)
    # The shift: the column's first value where finite (as in the inner persistent kernel),
    # which every thread loads itself (row 0 of its columns).
    first = [
        _placeholder(u.val.dtype.cuda_type)
        if i in streamed
        else f"kf::load(in{i}, base_in{i})"
        if spec.loop_kinds[i] == BCAST
        else f"kf::load(in{i}, base_in{i} + j * step_in{i})"
        for i, u in enumerate(plan.loop_inputs)
    ]
    code(f"{t} shift{k}[{vec}] = {{{zero}}};", f"{t} sum{k}[{vec}] = {{{zero}}};")
    with code.block(f"for (int j = 0; j < {vec}; ++j)", unroll=True):
        with code.block("if (col_ok && n_red > 0 && j < nvalid)"):
            code(*earlier, f"const {t} v0 = {stage_call(plan, name, k, first, hoisted)};")
            code(f"shift{k}[j] = kf::isfinite(v0) ? v0 : ({t})0;")
    _slots(
        code,
        spec,
        [*earlier, f"sum{k}[j] += {_stage(plan, name, spec, k, 'b', hoisted)} - shift{k}[j];"],
    )
    _combined_everywhere(code, total, spec, f"sum{k}")
    code(f"{t} avg{k}[{vec}];", f"{t} m2_{k}[{vec}] = {{{zero}}};")
    code(f"for (int j = 0; j < {vec}; ++j) avg{k}[j] = shift{k}[j] + sum{k}[j] / ({t})n_red;")
    _slots(
        code,
        spec,
        [
            *earlier,
            f"const {t} d = {_stage(plan, name, spec, k, 'b', hoisted)} - avg{k}[j];",
            f"m2_{k}[j] += d * d;",
        ],
    )
    _combined_everywhere(code, total, spec, f"m2_{k}")


def _store_full(
    code: Code, plan: ReductionPlan, spec: ReductionKernelSpec, name: str, hoist: Hoisted
) -> None:
    """The full-size outputs of every held element, stored a vector a slot where the group is
    whole."""
    vec = spec.vector
    outs = plan.fusion.outputs
    streamed = sorted(streamed_inputs(plan))
    kinds = dict(zip(plan.loop_outputs, spec.output_kinds))
    n_red = len(plan.reductions)
    # Streamed inputs constant along the reduced axis (a weight): loaded once, not every slot.
    constant = [i for i in streamed if red_constant(spec, i)]
    for i in constant:
        _declare(code, plan, spec, i, 1)
    if constant:
        with code.block("if (col_ok && n_red > 0)"):
            for i in constant:
                _load_slot(code, spec, i, "0", "0")
    hoisted = _lane_preludes(code, plan, spec, f"{name}_full_row", hoist, "fu_", range(n_red))
    computed = regenerated(plan, spec.red_constant)
    loaded = [
        _computed(spec, i) if i in computed else _element(spec, i, "0" if i in streamed else "b")
        for i in range(len(plan.loop_inputs))
    ]
    args = loop_arguments(plan, loaded)
    args += list(scalar_names(plan).values()) + result_args(plan, range(n_red))
    args += list(hoisted)
    args += [f"y{k}[j]" for k in plan.loop_outputs]
    with code.block(f"for (int b = 0; b < {spec.unroll}; ++b)", unroll=True):
        code(f"const Index r = {_row(spec)};")
        with code.block("if (col_ok && r < n_red)"):
            for i in streamed:
                if i not in constant:
                    _declare(code, plan, spec, i, 1)
                    _load_slot(code, spec, i, "0", "r")
            code(*[f"kf::Vec<{outs[k].dtype.cuda_type}, {vec}> y{k};" for k in plan.loop_outputs])
            with code.block(f"for (int j = 0; j < {vec}; ++j)", unroll=True):
                code(*_results(plan, range(n_red)), f"{name}_full({', '.join(args)});")
            with code.block(f"if (nvalid == {vec})"):
                for k in plan.loop_outputs:
                    at = f"base_out{k} + r * rs_out{k}"
                    code.extend(
                        store_vector(
                            kinds[k],
                            f"out{k}",
                            f"y{k}",
                            vec,
                            code.indent,
                            at=at,
                            element_at=f"{at} + j * step_out{k}",
                        )
                    )
                code.otherwise()
                with code.block(f"for (int j = 0; j < {vec}; ++j)", unroll=True):
                    with code.block("if (j < nvalid)"):
                        code(
                            *[
                                f"kf::store(out{k}, base_out{k} + r * rs_out{k} + "
                                f"j * step_out{k}, y{k}[j]);"
                                for k in plan.loop_outputs
                            ]
                        )


def emit_outer_persistent(plan: ReductionPlan, spec: ReductionKernelSpec) -> tuple[str, str]:
    """Source and name of the outer persistent kernel (see the module docstring)."""
    from kfuse.runtime.runtime_header import runtime_header

    constant = "".join("c" if c else "v" for c in spec.red_constant)
    name = kernel_name(plan, spec, f"_{constant}" if constant else "")
    vec = spec.vector
    code = Code()
    code.extend([runtime_header(), ""])
    hoists = column_hoists(plan, spec)
    code.extend(functions_source(plan, name, stages=True, full=True, epilogue=True, hoists=hoists))
    params = tensor_params(plan, spec, loop=True, row=True, workspace=False)
    threads = spec.block_x * spec.block_y
    code.open_kernel(
        kernel_header(name, params, threads, bounded=spec.launch_bounds, cluster=spec.cluster)
    )
    code(*generated.loop_setup(plan, spec.index_type))  # generated reads' in<i>
    if spec.cluster > 1:
        code(
            f"__shared__ __align__(16) unsigned char "
            f"kf_cluster_total[{cluster_total_bytes(plan, spec)}];",
            f"const unsigned kf_rank = blockIdx.x % {spec.cluster}u;",
        )
    with outer_columns(code, plan, spec, "(Index)1", list(plan.loop_outputs)):
        if spec.cluster > 1:
            code(f"const Index kf_row0 = (Index)kf_rank * {spec.block_y * spec.unroll};")
        held = held_inputs(plan, spec.red_constant)
        for i in held:
            _declare(code, plan, spec, i, 1 if red_constant(spec, i) else spec.unroll)
        with code.block("if (col_ok)"):
            if any(red_constant(spec, i) for i in held):
                with code.block("if (n_red > 0)"):
                    for i in held:
                        if red_constant(spec, i):
                            _load_slot(code, spec, i, "0", "0")
            with code.block(f"for (int b = 0; b < {spec.unroll}; ++b)", unroll=True):
                code(f"const Index r = {_row(spec)};")
                with code.block("if (r < n_red)"):
                    for i in held:
                        if not red_constant(spec, i):
                            _load_slot(code, spec, i, "b", "r")
        for k in range(len(plan.reductions)):
            _reduce(code, plan, spec, name, k, hoists[f"stage{k}"])
        if plan.loop_outputs:
            _store_full(code, plan, spec, name, hoists["full"])
        if plan.row_outputs:  # by one thread of the column (of the cluster's first block)
            first = " && kf_rank == 0" if spec.cluster > 1 else ""
            with code.block(f"if (threadIdx.y == 0 && col_ok{first})"):
                with code.block(f"for (int j = 0; j < {vec}; ++j)", unroll=True):
                    code("if (j >= nvalid) continue;", "const Index row = outer * n_in + c0 + j;")
                    code(*_results(plan, range(len(plan.reductions))))
                    epilogue_call(code, plan, name, "row", range(spec.rank - 1))
    if spec.cluster > 1:  # no block may exit while another still reads its shared memory
        code("kf::cluster_sync();")
    return code.kernel_source(), name


__all__ = ["KIND", "cluster_total_bytes", "emit_outer_persistent", "held_inputs"]

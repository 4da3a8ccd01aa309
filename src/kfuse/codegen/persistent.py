"""The inner persistent kernel: each row is read once, held on chip, reduced, reused.

Layout of the work (canonical domain of kfuse.codegen.reduction_plan, reduced axis last):

    rows   walked by (blockIdx.x, threadIdx.y), grid-strided; block_y rows per block
    row    block_x threads share it; thread x holds vectors x, x + block_x, ...,
           x + (B - 1) * block_x of V elements each (B = persistent batch), so the loads of a
           warp are contiguous. block_x * B * V >= the row length.

Every loop over the lanes of a vector has a constant trip count (guards inside), so the held
arrays stay in registers (a data-dependent index would put them in local memory). With
spec.smem_held the held vectors go to dynamic shared memory instead, one slot per (row of the
block, b, thread x), copied there by cp.async where they are 16-byte vectors; each thread
reads back only its own slots, so no barrier is needed.
With spec.reload > 0 only the first H = B - reload vectors are held; the rest (the row's tail)
are read again from global memory by every pass, which L2 serves after the first. Held and
reloaded slots are walked by separate loops so that every index stays a constant.

Per row: load the held vectors of every loop input (16-byte loads where aligned), then for each
reduction in order compute its input from the held values (and earlier results), reduce
per thread, combine with kf::block_reduce_x (every thread of the row gets the result), and
finally compute the full-size outputs from the held values and the row outputs (thread 0).
Welford reductions are done in two passes over the held values (mean, then the sum of squared
deviations), which is exact where the streaming update is not and needs no division per
element.

How the held row is loaded, reloaded and walked slot by slot is kfuse.codegen.persistent_loads;
where it is kept (registers, shared memory regions, slots) is kfuse.codegen.persistent_memory.
"""

from __future__ import annotations

from typing import Any

from kfuse.codegen import column_partials, early_outputs, generated
from kfuse.codegen.expressions import compute_ctype, literal
from kfuse.codegen.kernel import (
    Code,
    cluster_block_index,
    decompose,
    kernel_header,
    row_count,
    row_loop,
)
from kfuse.codegen.layout import BCAST, VEC
from kfuse.codegen.persistent_loads import (
    IN_ROW_CHOICE,
    declare_input_array,
    held_element,
    in_row,
    load_held,
    load_input_vector,
    load_input_vector_or_zero,
    regenerate_slot,
    slot_bodies,
    slot_views,
    store_slot_vectors,
    valid_element_loop,
)
from kfuse.codegen.persistent_memory import (
    CLUSTER_SLOTS_BYTES,
    WARP,
    prefetched_inputs,
    regenerated_slots,
    shift_source,
    slot_loops,
    smem_bytes_held,
    smem_regions,
    smem_slot,
)
from kfuse.codegen.reduction_functions import (
    epilogue_call,
    functions_source,
    kernel_name,
    loop_arguments,
    prelude_lines,
    result_args,
    row_hoists,
    scalar_names,
    stage_call,
    stage_dependencies,
    stage_value,
    streamed_inputs,
    tensor_params,
)
from kfuse.codegen.reduction_loads import DYNAMIC_SMEM_ALIGN, smem_bytes
from kfuse.codegen.reduction_plan import ReductionPlan
from kfuse.codegen.reduction_spec import (
    ReductionKernelSpec,
    accumulators,
    result_assignments,
)
from kfuse.codegen.row_invariant import Hoisted, call_args
from kfuse.codegen.row_split import row_extent
from kfuse.ir.exprs import WelfordOp
from kfuse.runtime.runtime_header import runtime_header


def min_blocks_per_sm(threads: int, target: int | None = None) -> int:
    """__launch_bounds__' second argument: enough resident blocks that a thread keeps at most
    `target` (REGISTER_TARGET) registers (the compiler otherwise keeps every held value
    converted to float and runs at a fraction of the occupancy bandwidth needs)."""
    return max(1, min(16, 65536 // ((target or REGISTER_TARGET) * threads)))


REGISTER_TARGET = 64

REGENERATED_REGISTER_TARGET = 64
"""REGISTER_TARGET of a kernel that computes generated reads again every pass (its Philox
calls' registers beside the held row). As REGISTER_TARGET until measured: at 80, the dropout
+ norm forwards with the mask drawn that hold four vectors a thread no longer spill (sm_90,
h200 profile: layer norm [8192, 8192] 2448 instructions and 32 bytes of local memory a
thread with its row-end tests -> 1736 and none without; RMS norm 2280 -> 1432), at three
blocks of 256 threads an SM instead of four. The A/B: `--ab
kfuse.codegen.persistent.REGENERATED_REGISTER_TARGET=80` (kfuse.switches.REGENERATED_READS
has the cases)."""


def emit_persistent(plan: ReductionPlan, spec: ReductionKernelSpec) -> tuple[str, str]:
    """Source and name of the inner persistent kernel: the device functions, the kernel's
    shared memory (_shared_memory), then per row: its coordinates, the row loaded once into
    registers or shared memory (load_held), each reduction over the held values, the
    full-size outputs and the row's outputs."""
    prefetched = prefetched_inputs(plan, spec)
    early = early_outputs.early_outputs(plan, spec)
    name = _name(plan, spec, bool(prefetched), bool(early))
    rank, vec, batch = spec.rank, spec.vector, spec.unroll
    by, kept, cluster = spec.block_y, range(rank - 1), spec.cluster
    code = Code()
    code.extend([runtime_header(), ""])
    if spec.full_slots:
        code.extend([IN_ROW_CHOICE, ""])
    hoists = row_hoists(plan, spec)
    code.extend(
        functions_source(
            plan, name, stages=True, full=True, epilogue=True, kept=spec.kept, hoists=hoists
        )
    )
    if early:
        code.extend(early_outputs.early_function(plan, name))
    params = tensor_params(plan, spec, loop=True, row=True, workspace=False)
    params += column_partials.workspace_params(spec)
    threads = spec.block_x * by
    code.open_kernel(
        kernel_header(
            name,
            params,
            threads,
            bounded=spec.launch_bounds,
            min_blocks=column_partials.min_blocks_per_sm(spec)
            if spec.columns
            else min_blocks_per_sm(
                threads, REGENERATED_REGISTER_TARGET if regenerated_slots(plan, spec) else None
            ),
            cluster=cluster,
        )
    )
    # generated reads' in<i>; the regenerated ones a vector at a time (regenerate_slot)
    code(*generated.loop_setup(plan, spec.index_type, frozenset(regenerated_slots(plan, spec))))
    code(f"typedef {spec.index_type} Index;")
    _shared_memory(code, plan, spec)
    n_red = row_extent("in0", rank - 1, spec.loop_rank(0) - rank + 1)
    code(f"const Index n_red = {n_red};", *row_count(kept))
    column_partials.declare(code, spec, -(-smem_bytes_held(plan, spec) // 16) * 16)
    block, blocks = cluster_block_index(cluster)
    if prefetched:  # whether this thread's slots of its row were copied by the last row
        code("bool kf_prefetched = false;")
    with row_loop(code, by, "threadIdx.y", block, blocks, spec.rows_whole):
        _row_offsets(code, plan, spec, prefetched, blocks)
        # No L2 prefetch of the next row here (prefetch.global.L2 before this row's
        # reductions, from bb6bfaa to e57f505): measured on an H200 it cost the backward
        # norms of [32768, 1024] bf16 a third (RMS norm 62.3 -> 95.1 us, layer norm 70.8 ->
        # 99.9) and bought nothing at 4096 to 16384 columns once the column partials were in
        # registers.
        load_held(code, plan, spec)
        for k in spec.kept:
            ctype = compute_ctype(stage_value(plan, k).val.dtype)
            code(f"{ctype} c{k}[{batch}][{vec}] = {{}};")
        for n, acc in enumerate(accumulators(plan)):
            # the first pass over the row also stores the outputs that need no result
            first_early = early if n == 0 else ()
            _reduce_held(code, plan, spec, name, acc.k, hoists[f"stage{acc.k}"], first_early)
        if plan.loop_outputs:  # with every output early, still the next row's prefetch
            _store_full(code, plan, spec, name, hoists["full"], early)
        if plan.row_outputs:  # one thread of the row's (first) block writes them
            first = " && kf_rank == 0" if cluster > 1 else ""
            with code.block(f"if (threadIdx.x == 0{first} && row_ok)"):
                epilogue_call(code, plan, name, "row", kept)
    if spec.columns:
        column_partials.store(code, spec)
    if cluster > 1:  # no block may exit while another still reads its shared memory
        code("kf::cluster_sync();")
    return code.kernel_source(), name


def _name(plan: ReductionPlan, spec: ReductionKernelSpec, prefetched: bool, early: bool) -> str:
    """The kernel's name: its hash and suffixes that say which variant of it this is."""
    suffix = (
        spec.whole_suffix() + ("_pf" if prefetched else "") + ("_g" if spec.grouped_reads else "")
    )
    suffix += column_partials.name_suffix(spec) + spec.split_suffix()
    return kernel_name(plan, spec, suffix + (early_outputs.SUFFIX if early else ""))


def _row_offsets(
    code: Code, plan: ReductionPlan, spec: ReductionKernelSpec, prefetched: list[int], blocks: str
) -> None:
    """Each operand's offset of this thread's row and its step along the row; with
    prefetched inputs, their offsets of the block's next row too (next_ok: there is one)."""
    rank, by, kept = spec.rank, spec.block_y, range(spec.rank - 1)
    ops = [f"in{i}" for i in range(len(plan.loop_inputs))]
    summed = column_partials.accumulated(spec)
    ops += [f"out{k}" for k in plan.loop_outputs if k not in summed]
    code(*[f"Index base_{op} = 0;" for op in ops])
    with code.block("if (row_ok)"):
        code.extend(decompose("row", kept, ops, code.indent))
    code(*[f"const Index step_{op} = {op}.stride[{rank - 1}];" for op in ops])
    if prefetched:
        nexts = [f"in{i}" for i in prefetched]
        code(
            f"const bool next_ok = row + (Index){blocks} * {by} < n_rows;",
            *[f"Index next_{op} = 0;" for op in nexts],
        )
        with code.block("if (next_ok)"):
            code.extend(
                decompose(f"(row + (Index){blocks} * {by})", kept, nexts, code.indent, "next_")
            )


def _shared_memory(code: Code, plan: ReductionPlan, spec: ReductionKernelSpec) -> None:
    """The kernel's shared memory: the block reductions' scratch, a cluster's slots, and the
    held rows (dynamic shared memory) where they are not in registers."""
    code(f"__shared__ __align__(16) unsigned char kf_smem[{smem_bytes(plan, spec)}];")
    if spec.cluster > 1:  # the blocks of a cluster share a row: see kf::cluster_reduce
        code(
            f"__shared__ __align__(16) unsigned char kf_cluster_slots[{CLUSTER_SLOTS_BYTES}];",
            "int kf_phase = 0;",
            f"const Index kf_rank = (Index)(blockIdx.x % {spec.cluster});",
        )
    if spec.smem_held:
        code(f"extern __shared__ __align__({DYNAMIC_SMEM_ALIGN}) unsigned char kf_held[];")
        for i, offset in smem_regions(plan, spec):
            vtype = f"kf::Vec<{plan.loop_inputs[i].val.dtype.cuda_type}, {spec.vector}>"
            code(f"{vtype}* const h{i} = reinterpret_cast<{vtype}*>(kf_held + {offset});")


def _combined(spec: ReductionKernelSpec, block_reduce: str, functor: str) -> str:
    """The row's reduction from this block's `block_reduce` expression: combined over the
    blocks of the cluster when the row is split over one."""
    if spec.cluster == 1:
        return block_reduce
    return (
        f"kf::cluster_reduce<{spec.cluster}>({block_reduce}, {functor}(), "
        "kf_cluster_slots, kf_phase)"
    )


def _placeholder(ctype: str) -> str:
    """A value-initialised `ctype` ("long long{}" is no C++: multi-word types are cast)."""
    return f"static_cast<{ctype}>(0)" if " " in ctype else f"{ctype}{{}}"


def _reduce_held(
    code: Code,
    plan: ReductionPlan,
    spec: ReductionKernelSpec,
    name: str,
    k: int,
    hoist: Hoisted,
    early: tuple[int, ...] = (),
) -> None:
    """Reduction k over the held row. `early`: the outputs its first pass also stores
    (kfuse.codegen.early_outputs; the first reduction's first pass only)."""
    acc = accumulators(plan)[k]
    streamed = streamed_inputs(plan)
    regenerated = regenerated_slots(plan, spec)  # valid_element_loop computes them a slot
    deps = result_args(plan, stage_dependencies(plan, k))
    code.extend(prelude_lines(plan, f"{name}_stage{k}_row", hoist, f"st{k}_", deps, code.indent))
    hoisted = tuple(call_args(hoist, f"st{k}_"))

    def loaded(reloaded: bool) -> list[str]:
        # Stages do not read streamed inputs; they get a placeholder value.
        return [
            _placeholder(u.val.dtype.cuda_type)
            if i in streamed
            else held_element(spec, i, "0", "j", streamed=True)
            if i in regenerated
            else held_element(spec, i, "b", "j", reloaded=reloaded)
            for i, u in enumerate(plan.loop_inputs)
        ]

    def value(reloaded: bool) -> str:
        return stage_call(plan, name, k, loaded(reloaded), hoisted)

    def staged(reloaded: bool) -> tuple[list[str], str]:
        """(statements, the element's stage value) for the first pass: a kept stage is
        computed into c<k> once, for the later passes and the full-size outputs; the early
        outputs are computed beside it."""
        stores = early_outputs.compute(plan, name, early, loaded(reloaded)) if early else []
        if k in spec.kept:
            return [f"c{k}[b][j] = {value(reloaded)};", *stores], f"c{k}[b][j]"
        return stores, value(reloaded)

    hooks = early_outputs.lane_hooks(plan, spec, early)  # around each slot's lanes

    def again(reloaded: bool) -> str:
        """The element's stage value in a later pass."""
        return f"c{k}[b][j]" if k in spec.kept else value(reloaded)

    red = plan.reductions[k]
    if not isinstance(red, WelfordOp):
        code(f"{acc.ctype} acc{k} = {acc.identity()};")

        def body(reloaded: bool) -> list[str]:
            keep, v = staged(reloaded)
            return [*keep, acc.update(f"acc{k}", v)]

        valid_element_loop(code, plan, spec, body, **hooks)
        total = _combined(spec, acc.block_reduce(f"acc{k}", "kf_smem", spec.block_x), acc.functor)
        code(f"const {acc.ctype} red{k} = {total};")
        code(*result_assignments(plan, k, f"red{k}", "n_red"))
        return
    _welford_held(code, plan, spec, name, k, hoisted, staged, again, hooks)


def _welford_held(
    code: Code,
    plan: ReductionPlan,
    spec: ReductionKernelSpec,
    name: str,
    k: int,
    hoisted: tuple[str, ...],
    staged: Any,
    again: Any,
    hooks: dict[str, Any],
) -> None:
    """Welford k over the held row in two passes (mean, then squared deviations); staged and
    again give an element's stage value in the first pass and in the second."""
    red = plan.reductions[k]
    t = compute_ctype(red.inputs[0].dtype)
    nan = literal(float("nan"), red.inputs[0].dtype)
    total = _combined(
        spec,
        f"kf::block_reduce_x({{}}, kf::SumOp(), reinterpret_cast<{t}*>(kf_smem), {spec.block_x})",
        "kf::SumOp",
    )
    # The mean is measured from the row's first value (when finite, as in
    # kf::welford_update_batch): shift + sum(v - shift) / n. A row of equal values then gets
    # exactly that value as its mean, so x - mean is exactly 0, as with torch's Welford, where
    # sum / n rounds for most n and 1 / sqrt(var + eps) magnifies the residue (an infinite
    # weight turns it into +-inf instead of NaN); integer-valued rows keep their exact sums.
    # Then the second pass sums squared deviations from that mean.
    code(*_row_shift(plan, spec, name, k, t, hoisted), f"{t} sum{k} = ({t})0;")

    def mean_pass(reloaded: bool) -> list[str]:
        keep, v = staged(reloaded)
        return [*keep, f"sum{k} += {v} - shift{k};"]

    valid_element_loop(code, plan, spec, mean_pass, **hooks)
    code(f"const {t} r{k}_avg = shift{k} + {total.format(f'sum{k}')} / ({t})n_red;")
    code(f"{t} sq{k} = ({t})0;")
    valid_element_loop(
        code, plan, spec, lambda r: [f"const {t} d = {again(r)} - r{k}_avg;", f"sq{k} += d * d;"]
    )
    code(
        f"const {t} m2_{k} = {total.format(f'sq{k}')};",
        f"const {t} r{k}_m2 = n_red == 0 ? {nan} : m2_{k};",
        f"const long long r{k}_n = (long long)n_red;",
    )


def _row_shift(
    plan: ReductionPlan,
    spec: ReductionKernelSpec,
    name: str,
    k: int,
    t: str,
    hoisted: tuple[str, ...],
) -> list[str]:
    """Statements that set shift<k>: stage k's value at the row's first element where finite,
    else 0, the same in every thread of the row.

    Thread 0 of a row held in registers holds that element already (slot 0, lane 0): a row in
    one warp gets it by a shuffle ("lane"), a longer one through shared memory and a barrier
    ("shared"; the slot is written again only after the row's block reductions, whose
    barriers every reader passes after reading it). Each thread loading it itself ("loaded")
    had ptxas issue those loads and the value's math before the row's vector loads, two
    memory latencies a row. Measured on an H200 (bf16, us): dropout + layer norm forward
    [32768, 1024] 72.4 loaded, 64.7 shared; [16384, 4096] 145.2, 129.5; instance norm forward
    [64, 256, 56, 56] 57.3, 56.3; [256, 2048, 7, 7] (lane) 61.6, 56.9. Rows held in shared
    memory (their loads are asynchronous copies) keep the loads: layer norm forward
    [2048, 16384] 41.1 loaded, 45.4 shared; so do a cluster's blocks (only rank 0 holds the
    element). A warp measured from its own first lane, its sum moved to the row's shift as
    the warps' sums combine (no barrier, a count a thread), was slower than both (68.5 us and
    137.6 us for the dropout + layer norms)."""
    source = shift_source(spec)
    streamed = streamed_inputs(plan)
    regenerated = regenerated_slots(plan, spec)  # held by no thread: computed here
    first = f"first{k}"
    values = [
        _placeholder(u.val.dtype.cuda_type)
        if i in streamed
        else held_element(spec, i, "0", "0")
        if spec.loop_kinds[i] == BCAST
        else f"kf::load(in{i}, base_in{i})"
        if source == "loaded" or i in regenerated
        else f"x{i}[0][0]"
        for i, u in enumerate(plan.loop_inputs)
    ]
    # Shared or by a lane, the element is the row's thread 0's alone: only it computes the
    # value (a drawn random number is a whole Philox call, about 120 instructions, that every
    # other thread of the row paid for nothing).
    only_first = "threadIdx.x == 0 && " if source in ("lane", "shared") else ""
    lines = [
        f"{t} {first} = ({t})0;",
        f"if ({only_first}row_ok && {in_row(spec, 'n_red > 0')}) {first} = "
        f"{stage_call(plan, name, k, values, hoisted)};",
    ]
    bx, by = spec.block_x, spec.block_y
    if source == "lane":  # threadIdx.x == 0 of the row is lane (threadIdx.y * block_x) % 32
        lane = f"(int)((threadIdx.y * {bx}) & {WARP - 1})"
        lines.append(f"{first} = __shfl_sync(0xffffffffu, {first}, {lane});")
    elif source == "shared":
        lines += [
            f"__shared__ {t} kf_first{k}[{by}];",
            f"if (threadIdx.x == 0) kf_first{k}[threadIdx.y] = {first};",
            "__syncthreads();",
            f"{first} = kf_first{k}[threadIdx.y];",
        ]
    return [*lines, f"const {t} shift{k} = kf::isfinite({first}) ? {first} : ({t})0;"]


def _store_full(
    code: Code,
    plan: ReductionPlan,
    spec: ReductionKernelSpec,
    name: str,
    hoist: Hoisted,
    early: tuple[int, ...] = (),
) -> None:
    """The output pass: the full-size outputs but the `early` ones (stored already)."""
    every = result_args(plan, range(len(plan.reductions)))
    with code.block("if (row_ok)"):
        code.extend(prelude_lines(plan, f"{name}_full_row", hoist, "fu_", every, code.indent))
        for first, end, reloaded in slot_loops(spec):
            with slot_bodies(code, plan, spec, first, end, reloaded):
                hoisted = call_args(hoist, "fu_")
                _store_slot(code, plan, spec, name, reloaded, first, hoisted, early)
        if prefetched_inputs(plan, spec):
            code("kf_prefetched = next_ok;")


def _store_slot(
    code: Code,
    plan: ReductionPlan,
    spec: ReductionKernelSpec,
    name: str,
    reloaded: bool,
    first: int,
    hoisted: list[str],
    early: tuple[int, ...] = (),
) -> None:
    """The full-size outputs of one slot of this thread: computed lane by lane from the row
    values and the reductions' results, stored as one vector where the row allows.
    `first`: the first slot of the slot's loop (a group of reloaded slots). The `early`
    outputs are computed too but not stored (the first pass stored them): the compiler drops
    them and whatever only they read."""
    vec = spec.vector
    outs = plan.fusion.outputs
    streamed = streamed_inputs(plan)
    regenerated = regenerated_slots(plan, spec)  # computed again for the slot, as streamed
    summed = column_partials.accumulated(spec)
    stored = [k for k in plan.loop_outputs if k not in summed and k not in early]
    kinds = dict(zip(plan.loop_outputs, spec.output_kinds))
    loaded = [
        held_element(spec, i, "0", "j", streamed=True)
        if i in streamed or i in regenerated
        else held_element(spec, i, "b", "j", reloaded=reloaded)
        for i in range(len(plan.loop_inputs))
    ]
    args = loop_arguments(plan, loaded)
    args += list(scalar_names(plan).values()) + result_args(plan, range(len(plan.reductions)))
    args += [f"c{k}[b][j]" for k in spec.kept]
    args += hoisted
    args += [f"y{k}[j]" for k in plan.loop_outputs]
    with code.block(f"if ({in_row(spec, 'i0 < n_red')})"):
        code(*[f"kf::Vec<{outs[k].dtype.cuda_type}, {vec}> y{k};" for k in plan.loop_outputs])
        for i in sorted(streamed):
            if spec.loop_kinds[i] == VEC:
                declare_input_array(code, plan, spec, i, f"x{i}", 1, zero=False)
                load_input_vector_or_zero(code, spec, i, f"x{i}[0]", "true")
            elif spec.loop_kinds[i] != BCAST:
                declare_input_array(code, plan, spec, i, f"x{i}", 1)
                load_input_vector(code, spec, i, f"x{i}[0]")
        regenerate_slot(code, plan, spec, regenerated)
        slot_views(code, plan, spec, reloaded, first)
        with code.block(f"for (int j = 0; j < {vec}; ++j)", unroll=True):
            code(f"{name}_full({', '.join(args)});")
            code(
                *[line for k in summed for line in column_partials.accumulate(spec, k, f"y{k}[j]")]
            )
        prefetched = prefetched_inputs(plan, spec)
        if prefetched and not reloaded:  # the slot is read (hv<i>): the next row's copy
            with code.block("if (next_ok)"):
                for i in prefetched:
                    target = smem_slot(spec, i, "b")
                    code(f"kf::copy_async(&{target}, in{i}, next_in{i} + i0);")
        store_slot_vectors(code, spec, kinds, stored, "y")


__all__ = ["emit_persistent"]

"""The inner persistent kernel's held row (kfuse.codegen.persistent), slot by slot: each
thread's vectors loaded once into registers or shared memory (asynchronous copies where they
can be), the unheld tail loaded again by every pass in groups, a slot's values read back for
a pass, and the loops over the slots and lanes that lie inside the row.

Apart from the kernel's emission (the reductions, the Welford shift, the outputs) because
every pass walks the row through these same statements, and the choices they make (a
whole vector or lane by lane, zeros past the row end, the row-end tests KF_IN_ROW may drop)
read best in one place.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from kfuse.codegen.kernel import Code, load_lanes, load_vector_statement, store_vector
from kfuse.codegen.layout import BCAST, SPLIT, STRIDED, VEC
from kfuse.codegen.persistent_memory import (
    async_copied,
    held_inputs,
    prefetched_inputs,
    regenerated_slots,
    slot_loops,
    slot_start,
    smem_slot,
)
from kfuse.codegen.reduction_plan import ReductionPlan
from kfuse.codegen.reduction_spec import ReductionKernelSpec
from kfuse.codegen.registers import register_array
from kfuse.codegen.row_split import split_lane_loads


def held_element(
    spec: ReductionKernelSpec,
    i: int,
    b: str,
    j: str,
    streamed: bool = False,
    reloaded: bool = False,
) -> str:
    """The value of loop input i at batch slot b, lane j: from its registers, from the
    vector _held_views read out of shared memory for slot b, or (reloaded slots) from the
    vector _reload_group loaded again for slot b (rv<i>, slot_views)."""
    kind = spec.loop_kinds[i]
    if kind == BCAST:
        return f"x{i}[0]"
    if reloaded and not streamed:
        return f"rv{i}[{j}]"
    if spec.smem_held and not streamed:
        return f"hv{i}[{j}]"
    return f"x{i}[{b}][{j}]"


def _held_views(code: Code, plan: ReductionPlan, spec: ReductionKernelSpec, b: str) -> None:
    """In shared-memory mode: read this thread's vector of slot b of every held input."""
    if not spec.smem_held:
        return
    for i in held_inputs(plan, spec):
        ctype = plan.loop_inputs[i].val.dtype.cuda_type
        code(f"const kf::Vec<{ctype}, {spec.vector}> hv{i} = {smem_slot(spec, i, b)};")


def _reload_group(
    code: Code, plan: ReductionPlan, spec: ReductionKernelSpec, first: int, end: int
) -> None:
    """Load slots [first, end) of every held input again, all before any is used, into
    rg<i>[b - first] (lanes past the row end stay zero, so every lane holds a defined
    value)."""
    held = held_inputs(plan, spec)
    for i in held:
        init = "" if spec.loop_kinds[i] == VEC else " = {}"  # VEC: every lane written below
        ctype = plan.loop_inputs[i].val.dtype.cuda_type
        code(f"kf::Vec<{ctype}, {spec.vector}> rg{i}[{end - first}]{init};")
    with _slot_loop(code, spec, first, end):
        for i in held:
            _load_in_row(code, spec, i, f"rg{i}[b - {first}]")


def slot_views(
    code: Code, plan: ReductionPlan, spec: ReductionKernelSpec, reloaded: bool, first: int
) -> None:
    """What starts each slot of a pass: the reloaded vectors of its group (loaded by
    _reload_group before the slot loop whose first slot is `first`), or the shared-memory
    reads."""
    if not reloaded:
        _held_views(code, plan, spec, "b")
        return
    for i in held_inputs(plan, spec):
        ctype = plan.loop_inputs[i].val.dtype.cuda_type
        code(f"const kf::Vec<{ctype}, {spec.vector}>& rv{i} = rg{i}[b - {first}];")


def _element_loads(
    code: Code, spec: ReductionKernelSpec, i: int, target: str, guarded: bool
) -> None:
    """Load input i's elements i0 .. i0 + V - 1 into target[j] one by one; guarded: only
    those inside the row (a vector cut by the row end)."""
    at = f"base_in{i} + (i0 + j) * step_in{i}"
    guard = "i0 + j < n_red" if guarded else None
    if spec.loop_kinds[i] == SPLIT:
        walked, first = spec.row_splits[i], spec.rank - 1
        uniform = bool(spec.split_uniform) and spec.split_uniform[i]
        code.extend(
            split_lane_loads(
                target,
                f"in{i}",
                first,
                walked,
                spec.vector,
                f"base_in{i}",
                code.indent,
                guard,
                uniform,
            )
        )
        return
    code.extend(load_lanes(target, f"in{i}", spec.vector, at, code.indent, guard))


def load_input_vector(code: Code, spec: ReductionKernelSpec, i: int, target: str) -> None:
    """Load input i's vector at element i0 of the row into `target` (a Vec or an array of
    V), element by element where the vector is cut by the row end."""
    vec = spec.vector
    whole = (
        load_vector_statement(target, f"in{i}", vec, f"base_in{i} + i0")
        if spec.loop_kinds[i] == VEC
        else None
    )
    if spec.exact and whole is not None:
        code(f"if ({in_row(spec, 'i0 < n_red')}) {whole}")
        return
    if spec.exact:
        with code.block(f"if ({in_row(spec, 'i0 < n_red')})"):
            _element_loads(code, spec, i, target, guarded=False)
        return
    with code.block(f"if (i0 + {vec} <= n_red)"):
        if whole is not None:
            code(whole)
        else:
            _element_loads(code, spec, i, target, guarded=False)
        code.otherwise()
        _element_loads(code, spec, i, target, guarded=True)


def _load_in_row(code: Code, spec: ReductionKernelSpec, i: int, target: str) -> None:
    """Input i's vector at i0 into `target` where the thread's row exists (row_ok): a VEC
    input as whole words (zeros elsewhere), any other lane by lane into a zeroed target."""
    if spec.loop_kinds[i] == VEC:
        load_input_vector_or_zero(code, spec, i, target, "row_ok")
        return
    with code.block("if (row_ok)"):
        load_input_vector(code, spec, i, target)


def load_input_vector_or_zero(
    code: Code, spec: ReductionKernelSpec, i: int, target: str, row_ok: str
) -> None:
    """`target` = input i's vector at element i0 where `row_ok` holds and the vector lies in
    the row, else zeros (a vector cut by the row end: zeros, then its lanes inside the row
    one by one). Only for VEC inputs: every lane of `target` is written, so it needs no
    zero-initialised declaration (kf::load_vec_or_zero says why that matters)."""
    vec = spec.vector
    inside = in_row(spec, "i0 < n_red") if spec.exact else f"i0 + {vec} <= n_red"
    code(f"{target} = kf::load_vec_or_zero<{vec}>(in{i}, base_in{i} + i0, {row_ok} && {inside});")
    if not spec.exact:
        with code.block(f"if ({row_ok} && i0 < n_red && i0 + {vec} > n_red)"):
            _element_loads(code, spec, i, target, guarded=True)


def declare_input_array(
    code: Code,
    plan: ReductionPlan,
    spec: ReductionKernelSpec,
    i: int,
    name: str,
    count: int,
    zero: bool = True,
) -> None:
    # Broadcast inputs are declared apart (one element); here every other kind holds V lanes.
    kind = VEC if spec.loop_kinds[i] == VEC else STRIDED
    ctype = plan.loop_inputs[i].val.dtype.cuda_type
    code.extend([register_array(name, ctype, kind, spec.vector, count, code.indent, zero=zero)])


def load_held(code: Code, plan: ReductionPlan, spec: ReductionKernelSpec) -> None:
    """The row's values this thread holds, loaded once: broadcast inputs as one element,
    the others as held_batch vectors in registers or in shared memory (asynchronous copies
    where they can be), zero-initialised so that lanes past the row end hold defined values."""
    held = held_inputs(plan, spec)
    for i, (u, kind) in enumerate(zip(plan.loop_inputs, spec.loop_kinds)):
        if kind == BCAST:
            code(f"{u.val.dtype.cuda_type} x{i}[1] = {{}};")
            test = f"row_ok && {in_row(spec, 'n_red > 0')}"
            code(f"if ({test}) x{i}[0] = kf::load(in{i}, base_in{i});")
        elif i in held and not spec.smem_held and spec.held_batch:
            declare_input_array(code, plan, spec, i, f"x{i}", spec.held_batch, zero=kind != VEC)
    if not spec.held_batch:
        return
    with code.block(f"for (int b = 0; b < {spec.held_batch}; ++b)", unroll=True):
        code(f"const Index i0 = {slot_start(spec)};")
        if spec.smem_held:
            prefetched = prefetched_inputs(plan, spec)
            with code.block("if (row_ok)"):
                for i in held_inputs(plan, spec):
                    if i not in prefetched:
                        _fill_slot(code, plan, spec, i, smem_slot(spec, i, "b"))
                if prefetched:
                    with code.block("if (!kf_prefetched)"):
                        for i in prefetched:
                            _fill_slot(code, plan, spec, i, smem_slot(spec, i, "b"))
        else:
            for i in held_inputs(plan, spec):
                _load_in_row(code, spec, i, f"x{i}[b]")
    copied = any(async_copied(plan, spec, i) for i in held_inputs(plan, spec))
    if spec.smem_held and (copied or prefetched_inputs(plan, spec)):
        code("kf::copy_async_wait();")


@contextlib.contextmanager
def _slot_loop(code: Code, spec: ReductionKernelSpec, first: int, end: int) -> Iterator[None]:
    """Within: the body of `for b in [first, end)`, after i0 (the slot's first element in
    the row)."""
    with code.block(f"for (int b = {first}; b < {end}; ++b)", unroll=True):
        code(f"const Index i0 = {slot_start(spec)};")
        yield


@contextlib.contextmanager
def slot_bodies(
    code: Code, plan: ReductionPlan, spec: ReductionKernelSpec, first: int, end: int, reloaded: bool
) -> Iterator[None]:
    """Within: the body of slot b of `for b in [first, end)` (_slot_loop); a group of
    reloaded slots in a scope of its own, its vectors loaded before the loop
    (_reload_group)."""
    if not reloaded:
        with _slot_loop(code, spec, first, end):
            yield
        return
    with code.block():
        _reload_group(code, plan, spec, first, end)
        with _slot_loop(code, spec, first, end):
            yield


def _fill_slot(
    code: Code, plan: ReductionPlan, spec: ReductionKernelSpec, i: int, target: str
) -> None:
    """Fill input i's shared-memory slot `target` for the vector at i0; lanes past the row end
    must hold defined values."""
    vec = spec.vector
    empty = f"{target} = kf::Vec<{plan.loop_inputs[i].val.dtype.cuda_type}, {vec}>{{}};"
    if not async_copied(plan, spec, i):
        if not spec.exact:
            code(empty)
        load_input_vector(code, spec, i, target)
        return
    copy = f"kf::copy_async(&{target}, in{i}, base_in{i} + i0);"
    if spec.exact:
        code(f"if ({in_row(spec, 'i0 < n_red')}) {copy}")
        return
    with code.block(f"if (i0 + {vec} <= n_red)"):
        code(copy)
        code.otherwise()
        code(empty)
        _element_loads(code, spec, i, target, guarded=True)


def valid_element_loop(
    code: Code,
    plan: ReductionPlan,
    spec: ReductionKernelSpec,
    body_of: Any,
    before_lanes: Any = None,
    after_lanes: Any = None,
) -> None:
    """Run `body_of(reloaded)` (statements) for every element of this thread that lies inside
    the row, over the held slots and then the reloaded ones (which load their vectors first).
    before_lanes(reloaded) gives statements ahead of a slot's lanes; after_lanes(code) emits
    what follows them (the first pass's early output stores: kfuse.codegen.early_outputs).

    The test is an element's even where rows are whole vectors, and ptxas keeps a branch an
    element for it (BSSY, BRA, BSYNC around each element's few instructions in sm_90 SASS).
    Measured and not taken (H200, bf16, us): one test a whole vector, around its elements:
    the dropout + layer norm forward [8192, 8192], whose kernel ncu finds issuing an
    instruction 86% of its cycles, 1968 -> 1792 instructions and 141.1 -> 132.2 us; but the
    layer norm forward [32768, 1024] 35.0 -> 37.2, the dropout + RMS norm forward 56.8 ->
    58.8, the RMS norm forward [8192, 8192]'s kernel 62.6 -> 64.4."""
    lane = "0" if spec.exact else "j"
    test = "row_ok && " + in_row(spec, f"i0 + {lane} < n_red")
    for first, end, reloaded in slot_loops(spec):
        with slot_bodies(code, plan, spec, first, end, reloaded):
            slot_views(code, plan, spec, reloaded, first)
            regenerate_slot(code, plan, spec, regenerated_slots(plan, spec))
            if before_lanes is not None:
                code(*before_lanes(reloaded))
            with code.block(f"for (int j = 0; j < {spec.vector}; ++j)", unroll=True):
                with code.block(f"if ({test})"):
                    code(*body_of(reloaded))
            if after_lanes is not None:
                after_lanes(code)


def regenerate_slot(
    code: Code, plan: ReductionPlan, spec: ReductionKernelSpec, inputs: list[int]
) -> None:
    """Compute the vector at i0 of each generated read of `inputs` (regenerated_slots) into
    x<i>[0] where the thread's row exists (zeros elsewhere), as a reloaded slot is loaded:
    its lanes are then held_element(spec, i, "0", j, streamed=True)."""
    for i in inputs:
        declare_input_array(code, plan, spec, i, f"x{i}", 1, zero=spec.loop_kinds[i] != VEC)
        if i in spec.grouped_reads:  # VEC, rows of whole vectors of a multiple of four
            inside = f"row_ok && {in_row(spec, 'i0 < n_red')}"
            code(f"x{i}[0] = kf::load_vec_groups<{spec.vector}>(in{i}, base_in{i} + i0, {inside});")
        else:
            _load_in_row(code, spec, i, f"x{i}[0]")


def store_slot_vectors(
    code: Code, spec: ReductionKernelSpec, kinds: dict[int, str], outputs: list[int], array: str
) -> None:
    """Store the slot's vector <array><k> of each output k in `outputs` at i0: one vector
    access where the slot lies inside the row, else lane by lane up to the row's end (the
    output pass's stores, and the first pass's early ones)."""
    vec = spec.vector
    with code.block(f"if ({in_row(spec, f'i0 + {vec} <= n_red')})"):
        for k in outputs:
            at, element_at = f"base_out{k} + i0", f"base_out{k} + (i0 + j) * step_out{k}"
            code.extend(
                store_vector(
                    kinds[k],
                    f"out{k}",
                    f"{array}{k}",
                    vec,
                    code.indent,
                    at=at,
                    element_at=element_at,
                )
            )
        if not spec.exact:
            code.otherwise()
            with code.block(f"for (int j = 0; j < {vec}; ++j)", unroll=True):
                with code.block("if (i0 + j < n_red)"):
                    at = "base_out{k} + (i0 + j) * step_out{k}"
                    code(*[f"kf::store(out{k}, {at.format(k=k)}, {array}{k}[j]);" for k in outputs])


def in_row(spec: ReductionKernelSpec, test: str) -> str:
    """`test` (a row-end test; never row_ok's) where it can fail; where every slot of every
    thread lies inside its row (spec.full_slots), KF_IN_ROW(test): true, or the test again
    where ptxas spilled without the tests (IN_ROW_CHOICE). ptxas keeps a branch an element
    for a test it cannot prove (BSSY, BRA, BSYNC in sm_90 SASS)."""
    return f"KF_IN_ROW({test})" if spec.full_slots else test


# Dropping the row-end tests cut the dropout + layer norm forward [8192, 8192] bf16 from 1784
# to 872 SASS instructions (125.0 -> 110.0 us on an H200); but the softmax backward [4096,
# 16384] then spilled (93.1 -> 109.7 us), so the tests are the spill fallback
# (kfuse.runtime.backends.spill_fallback).
IN_ROW_CHOICE = """#undef KF_IN_ROW
#ifndef KF_SPILL_FALLBACK
#define KF_IN_ROW(test) true
#else
#define KF_IN_ROW(test) (test)
#endif"""

"""The pointwise scheduler: any DAG of elementwise ops, casts and broadcasts, in one kernel.

Heuristics, from the device and the actual inputs:
* merge the reference axes that every operand walks contiguously (kfuse.codegen.layout);
* vector width: 16 bytes of the narrowest unit-stride operand, halved until the output rows
  stay aligned (operands that are not aligned enough are read with scalar loads, so the vector
  width never exceeds what an operand's alignment allows);
* unroll: once the problem fills the device several times, UNROLL_ROWS vectors per thread
  in the 2-D schedule and UNROLL_FLAT in the 1-D one (their notes say what was measured);
  or, in the 2-D schedule, two consecutive rows per thread (unroll_factor_outer) where
  inputs the same along those rows (stride 0 along the rows' innermost axis, a
  normalization's statistics broadcast over an NHWC tensor's positions) move at least as
  many bytes an element as the others and the outputs: those are then read once for both
  rows (rows_per_thread);
* blocks of 128-512 threads shaped (x along the inner axis, y along rows) so that short rows
  still fill a block: the 2-D schedule whenever a broadcast or a stride stops the merge;
  rows read through an index take a tile that covers a row exactly where one exists
  (gather_row_tile, switches.WHOLE_GATHER_ROWS; 96 threads where those are a row's);
* int32 indexing unless an offset or the element count needs int64.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from kfuse import switches
from kfuse.codegen import windowed
from kfuse.codegen.domain import PaddedRead, PartRead, UnsupportedExpr, Use
from kfuse.codegen.layout import (
    BCAST,
    GENERATED,
    INDEXED,
    INDEXED_VEC,
    VEC,
    WINDOWED,
    WINDOWED_VEC,
    OperandLayout,
    access_kind,
    contiguous_strides,
    in_memory_order,
    merge_axes,
    needs_int64,
    output_layout,
    ref_strides,
)
from kfuse.codegen.pointwise import PointwiseKernelSpec, PointwisePlan, plan_pointwise
from kfuse.codegen.row_split import lanes_read_one_element, lanes_read_two_elements
from kfuse.errors import SchedulerError
from kfuse.ir.exprs import ReductionOp, ReshapeOp, WelfordOp
from kfuse.ir.fusion import Fusion
from kfuse.ir.ops import OPS
from kfuse.ir.values import TensorView
from kfuse.runtime.backends import register_fit
from kfuse.runtime.info import RuntimeInfo
from kfuse.schedule.gather_rows import gather_row_tile, has_indexed_rows, whole_gather_rows
from kfuse.schedule.short_rows import split_short_rows
from kfuse.schedule.types import Rejection, SchedulerType

MAX_GRID_Y = 65535
MAX_GRID_X = 2**31 - 1
UNROLL_ROWS = 2
"""Vectors a thread in the 2-D schedule (rows kept apart by a broadcast or a stride) once
the work fills the device four times: W1 (bias + GELU, bf16 [16384, 8192]) ran 133.4 us
with 2 and 146.3 with 1 on the H200 (2026-11-30-h200-sweep.json)."""
UNROLL_FLAT = 2
"""Vectors a thread in the 1-D schedule (every operand merged into one axis), likewise.
Against 1 (128 threads of one vector, torch.compile's Triton shape), bf16 [16384, 8192] on the H200,
whole calls in us, torch.compile in brackets (2026-12-05, at 0b57a68, tools/kernel_times.py): x * y
129.2 against 124.9 (125.1); SiLU-and-multiply forward 184.5 against 197.8 (183.3), backward 310.4
against 309.0 (309.9). One vector a thread wins only where there is no arithmetic to overlap with
the loads, and loses 7% where there is, so 2 stays."""

COSTLY_OPS = frozenset(
    {name for name, info in OPS.items() if info.category == "float_math"}
    | {"div", "fmod", "remainder", "pow"}
)
"""Ops whose latency a thread's second vector of loads hides: transcendentals and divisions."""


def has_costly_math(fusion: Fusion) -> bool:
    """Whether any of the fusion's pointwise ops is one of COSTLY_OPS."""
    return any(getattr(expr, "op", None) in COSTLY_OPS for expr in fusion.exprs)


@dataclass(frozen=True)
class PointwiseLayout:
    """One call's operands over the merged reference domain (inputs first, then outputs)."""

    sizes: tuple[int, ...]
    inputs: list[OperandLayout]
    outputs: list[OperandLayout]

    @property
    def rank(self) -> int:
        return len(self.sizes)

    @property
    def n_inner(self) -> int:
        return self.sizes[-1]

    @property
    def n_rows(self) -> int:
        rows = 1
        for n in self.sizes[:-1]:
            rows *= n
        return rows

    @property
    def numel(self) -> int:
        return self.n_rows * self.n_inner


class PointwiseScheduler:
    """Schedules fusions with no reduction into one pointwise kernel."""

    scheduler_type = SchedulerType.pointwise
    generates_kernels = True

    def check(self, fusion: Fusion, info: RuntimeInfo | None) -> None:
        for expr in fusion.exprs:
            if isinstance(expr, (ReductionOp, WelfordOp)):
                raise Rejection(
                    f"fusion has a reduction ({_describe(expr)}); pointwise "
                    "kernels compute each output element independently"
                )
            if isinstance(expr, ReshapeOp):
                raise Rejection(
                    f"fusion has a reshape ({expr.outputs[0].name}), which the "
                    "pointwise kernel does not generate"
                )
        try:
            plan = plan_pointwise(fusion)
        except UnsupportedExpr as exc:
            raise Rejection(str(exc)) from None
        if info is None:
            return
        ref_shape = info.shape(plan.reference)
        for out in fusion.outputs:
            # A smaller output would be written by every thread that maps to it: correct but
            # wasteful, so such fusions are left to the segmenter (one kernel per shape).
            if info.shape(out) != ref_shape:
                raise Rejection(
                    f"outputs have different shapes ({out.name} is "
                    f"{info.shape(out)}, {plan.reference.name} is {ref_shape})"
                )
        read = {id(v) for e in fusion.exprs for v in e.inputs}
        for select in plan.domain.cats.values():
            cat = select.expr
            joined = cat.outputs[0]
            if (
                len({info.shape(cast(TensorView, p))[cat.dim] for p in cat.inputs}) == 1
                and joined in fusion.outputs
                and id(joined) not in read
            ):
                # Those are written part by part into their windows (boundary_views), each
                # a kernel output stored in vectors, where this kernel would select per element.
                # A cat that other ops read (RoPE's rotated halves times sin) has no windows
                # to be written into: this kernel computes it, or a library call would make it.
                raise Rejection(
                    f"cat {joined.name}: its parts are of one size along its axis, and it is an "
                    "output that nothing else reads (written part by part into its windows)"
                )

    def kernels(self, fusion: Fusion, info: RuntimeInfo, params: Any) -> list[Any]:
        """The kernel `params` generate for this call (GeneratedKernel; not compiled)."""
        return [pointwise_kernel(fusion, info, params)]

    def heuristics(self, fusion: Fusion, info: RuntimeInfo) -> Any:
        from kfuse._C import PointwiseParams

        plan = plan_pointwise(fusion)
        layout = pointwise_layout(plan, info, output_ptrs=None, split=True)
        device = info.device
        params = PointwiseParams()
        vector = _vector_width(layout)
        work = -(-layout.n_inner // vector) * layout.n_rows
        waves = work / max(1, device.sm_count * device.max_threads_per_sm)
        threads = 128  # measured best on the H200 for W1/W1f (benchmarks/sweep.py)
        vecs_per_row = -(-layout.n_inner // vector)
        many = UNROLL_ROWS if layout.rank > 1 else UNROLL_FLAT
        if switches.ONE_VECTOR_WITHOUT_MATH and not has_costly_math(fusion):
            many = 1
        unroll = many if waves >= 4 and vecs_per_row >= many else 1
        rows = rows_per_thread(layout) if waves >= 4 else 1
        if rows > 1 or (unroll > 1 and heavy_part_slots(plan, layout, vector)):
            unroll = 1
        # The widest block_x (a power of two, at most `threads`) whose unrolled vectors fit
        # in a row, so that threads are not left with vectors past its end: with 32 threads
        # along a row of 32 vectors (a bf16 batch norm over 256 channels), every thread's
        # second vector was out of range and the whole kernel ran 4x slower.
        block_x = 1
        while block_x < threads and block_x * 2 * unroll <= vecs_per_row:
            block_x *= 2
        if switches.WHOLE_GATHER_ROWS and rows == 1 and has_indexed_rows(layout):
            block_x, unroll = gather_row_tile(vecs_per_row, threads, block_x, unroll)
        block_y = max(1, threads // block_x)
        params.vectorization_factor = vector
        params.unroll_factor = unroll
        params.unroll_factor_outer = rows
        params.break_point = layout.rank - 1 if layout.rank > 1 else -1
        params.block_x, params.block_y = block_x, block_y
        grid_x = max(1, min(MAX_GRID_X, -(-vecs_per_row // (block_x * unroll))))
        grid_y_needed = max(1, -(-layout.n_rows // (block_y * rows)))
        params.grid_x = grid_x
        params.grid_y = min(MAX_GRID_Y, grid_y_needed)
        params.split_grid_y = grid_y_needed > MAX_GRID_Y
        params.lparams.grid_x, params.lparams.grid_y = params.grid_x, params.grid_y
        params.lparams.block_x, params.lparams.block_y = block_x, block_y
        params.cparams.index_type = (
            "int64" if needs_int64(layout.sizes, layout.inputs + layout.outputs) else "int32"
        )
        return params

    def kernel_spec(
        self, plan: PointwisePlan, layout: PointwiseLayout, params: Any
    ) -> PointwiseKernelSpec:
        """The compile-time description of `params` applied to this call's layout."""
        vector = int(params.vectorization_factor)
        index_type = (
            "long long"
            if (
                params.cparams.index_type == "int64"
                or needs_int64(layout.sizes, layout.inputs + layout.outputs)
            )
            else "int"
        )
        split = any(op.inner_split for op in layout.inputs)
        rows = int(params.unroll_factor_outer)
        if rows != 1:
            _check_row_groups(layout, params, split)

        def per_split_input(read: Any) -> tuple[bool, ...]:
            if not split:
                return ()
            return tuple(
                bool(op.inner_split) and read(op.inner_split, vector) for op in layout.inputs
            )

        kinds = input_kinds(plan, layout, vector)
        indexed_by = _indexed_by(plan)
        windows = tuple(tuple(axis for axis, _, _ in op.window) for op in layout.inputs)
        bounded = params.cparams.maxrregcount is None
        one_vector = int(params.unroll_factor) == 1 and rows == 1
        threads = int(params.block_x) * int(params.block_y)
        slotted = bounded and one_vector and heavy_part_slots(plan, layout, vector)
        return PointwiseKernelSpec(
            rank=layout.rank,
            vector=vector,
            unroll=int(params.unroll_factor),
            block_x=int(params.block_x),
            block_y=int(params.block_y),
            index_type=index_type,
            input_kinds=tuple(kinds),
            output_kinds=tuple(access_kind(op, vector) for op in layout.outputs),
            launch_bounds=bounded,
            min_blocks=part_slot_blocks(threads) if slotted else None,
            input_splits=(
                tuple(tuple(s != 0 for _, s in op.inner_split) for op in layout.inputs)
                if split
                else ()
            ),
            split_uniform=per_split_input(lanes_read_one_element),
            split_two=per_split_input(lanes_read_two_elements),
            split_sizes_of=split_sizes_of(layout) if split else (),
            rows=rows,
            row_bcast=row_constant_inputs(layout) if rows > 1 else (),
            indexed_by=indexed_by if any(j >= 0 for j in indexed_by) else (),
            windows=windows if any(windows) else (),
            whole_rows=rows == 1 and whole_gather_rows(layout, params),
        )


def input_kinds(plan: PointwisePlan, layout: PointwiseLayout, vector: int) -> tuple[str, ...]:
    """Each input's access kind (kfuse.codegen.layout) at vectors of `vector` elements."""
    kinds = [access_kind(op, vector) for op in layout.inputs]
    for k, j in enumerate(_indexed_by(plan)):
        if j >= 0:
            kinds[k] = indexed_kind(layout.inputs[k], kinds[j], vector, kinds[k])
    for k, op in enumerate(layout.inputs):
        if op.window:
            # A cat's part read whose window along the inner axis is whole vectors: a
            # vector is inside it or not, whole (not for pads: their sources stay).
            part = isinstance(plan.domain.padded.get(plan.domain.input_uses[k]), PartRead)
            kinds[k] = windowed_kind(op, layout.rank, kinds[k], vector if part else 0)
        if op.generated:
            kinds[k] = GENERATED
    return tuple(kinds)


def heavy_part_slots(plan: PointwisePlan, layout: PointwiseLayout, vector: int) -> bool:
    """Whether the kernel loads a cat's part-local slots (kfuse.codegen.windowed.PartSlots)
    that two vectors a thread would hold in more than half of PART_SLOT_REGISTERS, so that it
    takes one vector a thread (switches.PART_SLOTS_ONE_VECTOR): a thread holds each
    vector's slots until it computes it, and the rest of the kernel (each read's base, the
    loops, the output vector, the lanes' values) takes the other half. rope_partial's four
    slots of 16 bytes took 76 registers and 24 warps an H100 SM with two vectors, 48 and 40
    with one; a cat of one to three slots (8 to 24 registers for two vectors) keeps two (a
    float rotary's three spilled 16 bytes under the 48-register bound, sm_90)."""
    if not switches.PART_SLOTS_ONE_VECTOR:
        return False
    held = windowed.slot_bytes(input_kinds(plan, layout, vector), plan.domain, vector) // 4
    return 2 * held > PART_SLOT_REGISTERS // 2


PART_SLOT_REGISTERS = 48
"""Registers a thread that a kernel with heavy part slots (heavy_part_slots) at one vector a
thread is compiled to, as its launch bounds' blocks an SM: torch.compile's Triton kernel for
rope_partial [8, 32, 4096, 128] bf16 has 48 (Nsight Compute, H100). sm_90 SASS of kfuse's:
bounded to 10 blocks of 128 threads an SM, 48 (472 instructions); unbounded, 48 as well
(480), but ptxas took 56 for it when its window checks were written inline, so the bound
keeps what the register fit would not; bounded to 12 blocks, 40, no spill (472)."""


def part_slot_blocks(threads: int) -> int:
    """The blocks of `threads` an SM that leave each thread PART_SLOT_REGISTERS."""
    return max(1, register_fit.REGISTERS_PER_SM // (threads * PART_SLOT_REGISTERS))


def _indexed_by(plan: PointwisePlan) -> tuple[int, ...]:
    """PointwiseKernelSpec.indexed_by: per input, the input that holds its positions (an
    indexed read's index), -1 for the others."""
    uses = plan.domain.input_uses
    return tuple(
        uses.index(plan.domain.indexed[u].index) if u in plan.domain.indexed else -1 for u in uses
    )


ROWS_PER_THREAD = 2  # measured against 4 on the NHWC instance norm backward: 68.6 against 70.4 us
# Measured and not taken (2026-12-04, at 270f2c1, H200, bf16): a thread with ROWS_PER_THREAD rows
# taking two vectors along the row in turn, as the hand-written probe above had it (block 16 x 8):
# the NHWC batch and instance norms within 2% either way of one vector.


def split_sizes_of(layout: PointwiseLayout) -> tuple[int, ...]:
    """PointwiseKernelSpec.split_sizes_of: per input, the first SPLIT input whose sub-axes
    have its extents (itself where none before it has; itself for the other inputs)."""
    first: dict[tuple[int, ...], int] = {}
    return tuple(
        first.setdefault(tuple(extent for extent, _ in op.inner_split), k) if op.inner_split else k
        for k, op in enumerate(layout.inputs)
    )


def row_constant_inputs(layout: PointwiseLayout) -> tuple[bool, ...]:
    """Per input, whether it is the same on consecutive rows: a stride of 0 along the rows'
    innermost axis (rank - 2)."""
    return tuple(op.strides[layout.rank - 2] == 0 for op in layout.inputs)


def rows_per_thread(layout: PointwiseLayout) -> int:
    """Consecutive rows a thread of the 2-D schedule takes (the module docstring): 1, or
    ROWS_PER_THREAD where they divide the rows' innermost axis, no input is SPLIT and the
    inputs the same along the rows, read along them (a stride along the row: not one value a
    row), move at least the bytes an element that the others and the outputs do."""
    if layout.rank < 2 or layout.sizes[-2] % ROWS_PER_THREAD != 0:
        return 1
    if any(op.inner_split or op.indexed or op.window or op.generated for op in layout.inputs):
        return 1
    constant = row_constant_inputs(layout)
    shared = sum(
        op.itemsize for op, same in zip(layout.inputs, constant) if same and op.strides[-1] != 0
    )
    moving = sum(op.itemsize for op, same in zip(layout.inputs, constant) if not same)
    moving += sum(op.itemsize for op in layout.outputs)
    return ROWS_PER_THREAD if shared > 0 and shared >= moving else 1


def _check_row_groups(layout: PointwiseLayout, params: Any, split: bool) -> None:
    """SchedulerError naming unroll_factor_outer where its rows cannot run here."""
    rows = int(params.unroll_factor_outer)
    why = None
    if rows < 1:
        why = "must be at least 1"
    elif layout.rank < 2:
        why = "needs rows: the fusion's axes merge into one"
    elif int(params.unroll_factor) != 1:
        why = f"needs unroll_factor 1 (got {int(params.unroll_factor)})"
    elif split:
        why = "cannot take rows whose inputs read a row through sub-axes (SPLIT)"
    elif layout.sizes[-2] % rows != 0:
        why = f"does not divide the rows' innermost axis ({layout.sizes[-2]} rows)"
    if why is not None:
        raise SchedulerError(f"PointwiseParams.unroll_factor_outer = {rows} {why}")


def pointwise_layout(
    plan: PointwisePlan, info: RuntimeInfo, output_ptrs: list[int] | None, split: bool = False
) -> PointwiseLayout:
    """Operands of this call over the merged reference domain; with `split`, short rows
    lengthened by SPLIT inputs where they can be (split_short_rows: the pointwise kernel's
    layout, not the transpose kernel's).

    Outputs are laid out contiguously (kfuse allocates them); `output_ptrs` gives their
    addresses once allocated (None while planning: fresh allocations are 256-byte aligned).
    """
    rank = plan.ref_rank
    sizes = info.shape(plan.reference)
    operands = [_input_layout(plan, use, info) for use in plan.domain.input_uses]
    for k, (out, view) in enumerate(zip(plan.fusion.outputs, plan.output_views)):
        strides, offset = output_layout(info, out)
        ptr = (256 if output_ptrs is None else output_ptrs[k]) + offset
        operands.append(OperandLayout(ptr, out.dtype.itemsize, ref_strides(view, strides, rank)))
    merged_sizes, merged = merge_axes(*in_memory_order(tuple(sizes), operands))
    n_in = len(plan.domain.input_uses)
    result = PointwiseLayout(merged_sizes, merged[:n_in], merged[n_in:])
    return split_short_rows(result) if split else result


def _input_layout(plan: PointwisePlan, use: Use, info: RuntimeInfo) -> OperandLayout:
    """Input `use` over the reference axes. An indexed read (IndexedRead) is its tensor,
    stride 0 along the indexed axis (the position comes from the index) and with that axis'
    (extent, stride) kept aside; the index it reads is laid out as any input. Both take an
    axis of size 1 as stride 0: take_along_axis broadcasts such an axis of either, where any
    other op would have found the sizes unequal (a gather's coordinates there are all 0)."""
    rank = plan.ref_rank
    if use in plan.domain.generated:  # no memory: its own shape's contiguous strides
        made = cast(TensorView, use.val)
        own = contiguous_strides(tuple(info.shape(made)))
        return OperandLayout(
            0, made.dtype.itemsize, ref_strides(use.view, own, rank), generated=True
        )
    padded = plan.domain.padded.get(use)
    if isinstance(padded, PartRead):
        return _part_layout(padded, use, info, rank)
    if padded is not None:
        return _padded_layout(padded, use, info, rank)
    read = plan.domain.indexed.get(use)
    tensor = read.table if read is not None else cast(TensorView, use.val)
    layout = info.layouts[tensor]
    sized = read is not None or any(use == r.index for r in plan.domain.indexed.values())
    strides = [0 if sized and n == 1 else s for n, s in zip(layout.shape, layout.strides)]
    if read is None:
        view = use.view
        indexed = None
    else:
        d = read.expr.dim
        view, indexed = read.table_view, (layout.shape[d], layout.strides[d])
    return OperandLayout(
        layout.data_ptr,
        tensor.dtype.itemsize,
        ref_strides(view, tuple(strides), rank),
        indexed=indexed,
    )


def _padded_layout(padded: PaddedRead, use: Use, info: RuntimeInfo, rank: int) -> OperandLayout:
    """A padded read over the reference axes: its tensor's strides on the pad output's axes,
    the pointer moved past what negative widths crop (a slice's start), and per axis padded
    at either end (its reference axis, the low width, the extent left) this call's. An axis
    only cropped reads every coordinate: it has no window, and merges as any axis."""
    layout = info.layouts[padded.tensor]
    expr = padded.expr
    window, offset = [], 0
    for i, (lo, hi) in enumerate(zip(expr.lows, expr.highs)):
        low, high = (int(w.value if w.is_constant else info.extents[w]) for w in (lo, hi))
        start = max(0, -low)  # cropped before
        extent = max(0, layout.shape[i] - start - max(0, -high))
        if extent > 0:
            offset += start * layout.strides[i]
        r = use.view[i]
        if (low > 0 or high > 0) and r is not None:
            window.append((r, max(0, low), extent))
    return OperandLayout(
        layout.data_ptr + offset * padded.tensor.dtype.itemsize,
        padded.tensor.dtype.itemsize,
        ref_strides(use.view, layout.strides, rank),
        window=tuple(window),
    )


def _part_layout(read: PartRead, use: Use, info: RuntimeInfo, rank: int) -> OperandLayout:
    """A read inside a cat's part: its tensor's strides on the reference axes, and along the
    cat's axis the part's window of the cat's output (its offset there, its extent)."""
    layout = info.layouts[read.tensor]
    cat, index = read.part.cat, read.part.index
    offset = sum(info.shape(cast(TensorView, p))[cat.dim] for p in cat.inputs[:index])
    window = tuple((r, offset, n) for r, n in zip(use.view, layout.shape) if r == read.part.axis)
    return OperandLayout(
        layout.data_ptr,
        read.tensor.dtype.itemsize,
        ref_strides(use.view, layout.strides, rank),
        window=window,
    )


def windowed_kind(op: OperandLayout, rank: int, kind: str, whole: int = 0) -> str:
    """A padded read's access kind: WINDOWED_VEC where its inner axis is not padded (a row is
    inside its window or not, whole), or (`whole`, a vector width) its window there starts
    and ends at multiples of `whole` (a vector is inside it or not, whole), and the tensor
    allows vectors (`kind`, access_kind's), else WINDOWED."""
    inner = [(low, extent) for axis, low, extent in op.window if axis == rank - 1]
    whole_vectors = all(whole and low % whole == 0 and n % whole == 0 for low, n in inner)
    return WINDOWED_VEC if kind == VEC and whole_vectors else WINDOWED


def indexed_kind(op: OperandLayout, index_kind: str, vector: int, kind: str = "") -> str:
    """An indexed read's access kind: INDEXED_VEC where a vector's elements share one
    position (its index is BCAST along the inner axis) and every position keeps the vector
    as the tensor's layout allows (VEC, and the indexed stride a multiple of the vector),
    else INDEXED."""
    assert op.indexed is not None
    plain = kind or access_kind(op, vector)
    whole = plain == VEC and index_kind == BCAST and op.indexed[1] % vector == 0
    return INDEXED_VEC if whole else INDEXED


def _vector_width(layout: PointwiseLayout) -> int:
    unit = [op for op in layout.inputs + layout.outputs if op.strides[-1] == 1 and not op.generated]
    if not unit:
        return 1
    vector = 16 // min(op.itemsize for op in unit)
    vector = min(vector, 8)  # more than 8 elements buys nothing but registers
    while vector > 1 and layout.rank > 1 and layout.n_inner % vector != 0:
        vector //= 2
    while vector > 1 and layout.numel < vector:
        vector //= 2
    return vector


def _describe(expr: Any) -> str:
    op = getattr(expr, "op", None) or type(expr).__name__
    return f"{op} of {expr.inputs[0].name}"


def pointwise_kernel(fusion: Fusion, info: RuntimeInfo, params: Any) -> Any:
    """The kernel for `params` and its launch for these inputs (a GeneratedKernel)."""
    from kfuse.codegen import generated
    from kfuse.codegen.pointwise import emit_pointwise
    from kfuse.runtime.index_checks import IndexChecks, describe_read
    from kfuse.runtime.launch import (
        GeneratedKernel,
        GeneratedOperand,
        IndexCheckOperand,
        InputOperand,
        OutputOperand,
        RngStateOperand,
        ScalarOperand,
    )
    from kfuse.schedule import warm_inputs

    plan = plan_pointwise(fusion)
    layout = pointwise_layout(plan, info, output_ptrs=None, split=True)
    spec = PointwiseScheduler().kernel_spec(plan, layout, params)
    spec = warm_inputs.for_rereads(spec, plan, info)
    source, name = emit_pointwise(plan, spec)
    positions = {v: i for i, v in enumerate(fusion.inputs)}
    operands: list[Any] = []
    reads: list[tuple[str, int] | None] = []
    for use, op in zip(plan.domain.input_uses, layout.inputs):
        reads.append(None)
        if op.generated:  # sizes and strides, no data (kfuse.codegen.generated)
            operands.append(GeneratedOperand(layout.sizes, op.strides))
        elif op.indexed is not None:  # the domain's axes, then its indexed axis
            read = plan.domain.indexed[use]
            extent, stride = op.indexed
            operands.append(
                InputOperand(positions[read.table], (*layout.sizes, extent), (*op.strides, stride))
            )
            reads[-1] = (describe_read(read.expr), extent)
        else:
            operands.append(_read_operand(plan, info, layout, use, op, positions))
    operands += [ScalarOperand(s) for s in plan.domain.scalars]
    if stateful := len(generated.stateful_ops(plan.domain)):  # kernel_params' RNG_PARAMS
        operands += [RngStateOperand(stateful, "seed"), RngStateOperand(stateful, "offset")]
    for k, op in enumerate(layout.outputs):
        operands.append(OutputOperand(k, layout.sizes, op.strides))
    if spec.indexed_by:  # the reads' flags, after the outputs (kfuse.runtime.index_checks)
        operands.append(IndexCheckOperand(IndexChecks(tuple(reads))))
    grid = (int(params.grid_x), int(params.grid_y), 1)
    block = (int(params.block_x), int(params.block_y), 1)
    return GeneratedKernel(name, source, grid, block, 0, operands, SchedulerType.pointwise, spec)


def _read_operand(
    plan: PointwisePlan,
    info: RuntimeInfo,
    layout: PointwiseLayout,
    use: Use,
    op: OperandLayout,
    positions: dict[Any, int],
) -> Any:
    """The launch operand of an input read from memory: the domain's axes (a SPLIT read: the
    row axes, then its own sub-axes, kfuse.codegen.row_split), then (extent, low) per pad
    window; from past what a pad crops. A pad only cropped has no window and may be split
    like any read: its operand keeps the crop's offset all the same."""
    from kfuse.runtime.launch import InputOperand

    padded = plan.domain.padded.get(use)
    tensor = padded.tensor if padded is not None else cast(TensorView, use.val)
    offset = op.data_ptr - info.layouts[tensor].data_ptr  # 0 for a plain read
    if op.inner_split:
        sub_sizes, sub_strides = zip(*op.inner_split)
        shape, strides = (*layout.sizes[:-1], *sub_sizes), (*op.strides[:-1], *sub_strides)
    else:
        shape = (*layout.sizes, *(extent for _, _, extent in op.window))
        strides = (*op.strides, *(low for _, low, _ in op.window))
    return InputOperand(positions[tensor], shape, strides, offset)

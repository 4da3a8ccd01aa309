"""The spec of a reduction-shaped kernel (inner, outer, finalize, persistent) and its
accumulators: what each reduction accumulates, in which C++ type, and how its result variables
are read from the combined accumulator."""

from __future__ import annotations

from dataclasses import dataclass, field

from kfuse.codegen.body import round_to_dtype
from kfuse.codegen.domain import DomainMap, Use
from kfuse.codegen.expressions import compute_ctype, literal
from kfuse.codegen.reduction_plan import ReductionPlan
from kfuse.codegen.softmax_fold import SoftmaxStatsOp
from kfuse.dtypes import DataType
from kfuse.ir.exprs import ReductionOp, WelfordOp

FINALIZE_X = 32
"""Kept elements a finalize block takes (threadIdx.x), unless that leaves SMs without a
block (kfuse.codegen.reduction.finalize_threads_x)."""

_FUNCTORS = {"sum": "kf::SumOp", "prod": "kf::ProdOp", "max": "kf::MaxOp", "min": "kf::MinOp"}


@dataclass(frozen=True)
class ReductionKernelSpec:
    """Everything the source depends on (sizes are run-time arguments).

    kind: "inner" | "outer" | "persistent". rank: canonical rank (merged kept axes + 1).
    vector: V elements per access along the vectorized axis (the reduced axis for inner and
    persistent, the innermost kept axis for outer). unroll: inner/outer: vectors loaded per
    thread before accumulating; persistent: vectors held per thread (the batch).
    grid_parts: blocks along y splitting the reduced axis (> 1 means partials + finalize).
    loop_kinds: VEC/BCAST/STRIDED per loop input along the vectorized axis; output_kinds: the
    same for outputs (persistent full-size outputs along the reduced axis). exact: rows are
    whole vectors (no vector is cut by the row end), so no element-wise tail code is emitted.
    """

    kind: str
    rank: int
    vector: int
    unroll: int
    block_x: int
    block_y: int
    grid_parts: int
    index_type: str
    loop_kinds: tuple[str, ...]
    output_kinds: tuple[str, ...]
    exact: bool = False  # persistent: the row length is a multiple of `vector`
    # persistent: reductions whose per-element input values are kept in registers for the
    # full-size outputs instead of being computed again (kfuse.codegen.reduction_functions.keepable)
    kept: tuple[int, ...] = ()
    # persistent: the held row lives in dynamic shared memory (smem_bytes_held) rather than
    # in registers; each thread reads back only the slots it wrote, so no barrier is needed
    smem_held: bool = False
    # persistent: the last `reload` of the `unroll` vectors per thread are not held; every pass
    # over the row reads them again from global memory (the first pass from DRAM, later ones
    # mostly from L2), so a row longer than the chip holds per block still moves once
    reload: int = 0
    # persistent: the row is split over the `cluster` blocks of a thread-block cluster (sm_90+),
    # whose reductions combine through distributed shared memory; 1: one block per row.
    # outer_persistent: likewise each column, block k of the cluster holding its k-th part
    cluster: int = 1
    # outer: the rows a thread has left after its whole batches are loaded in batches of
    # halving powers of two rather than one at a time. For threads with few rows in all; it
    # costs registers (W3's kernel went from 32 to 34, 8 blocks an SM to 6, 8% slower).
    tail_batches: bool = False
    # __launch_bounds__ on the kernels; False where a register limit decides the registers
    # (CompileParams.maxrregcount: see kfuse.codegen.kernel). Not in the repr, which names
    # kernels: the source differs by the attribute alone.
    launch_bounds: bool = field(default=True, repr=False)
    # outer: __launch_bounds__' second argument (blocks an SM), where the grid is sized for it
    # (kfuse.schedule.reduction_heuristics.outer_welford_blocks_per_sm); None: no such bound.
    # Not in the repr, like launch_bounds.
    min_blocks: int | None = field(default=None, repr=False)
    # grid_parts > 1: kept elements a finalize block takes (threadIdx.x;
    # kfuse.codegen.reduction.finalize_threads_x). Not in the repr: emit_finalize names a
    # kernel with another value by a suffix, so the others keep their names.
    finalize_x: int = field(default=FINALIZE_X, repr=False)
    # grid_parts > 1: threads sharing a kept element's partials (threadIdx.y); 0 for
    # kfuse.codegen.reduction.finalize_threads_y's. Not in the repr: emit_finalize names a
    # kernel with another value by a suffix.
    finalize_y: int = field(default=0, repr=False)
    # persistent, inner_outer_persistent: main outputs accumulated per column instead of
    # stored (kfuse.codegen.column_partials.ColumnPartial). Left out of the repr, so the
    # other kernels' names stay as they were; column_partials.name_suffix names them.
    columns: tuple = field(default=(), repr=False)
    # inner_outer_persistent: each thread's column accumulators are registers until the last
    # row, then go to shared memory for the block's combine (column_partials.fit_in_registers).
    # Named by column_partials.name_suffix, not the repr.
    columns_in_registers: bool = field(default=False, repr=False)
    # outer_persistent: per loop input, whether it is the same for every reduced row (stride
    # 0 along the reduced axis: a per-column mean or scale), held once a thread instead of
    # once a slot. Empty: none is. Named by kfuse.codegen.outer_persistent (kernel-name
    # suffix), not the repr.
    red_constant: tuple[bool, ...] = field(default=(), repr=False)
    # persistent: per loop input, for each of its own row sub-axes (SPLIT operands:
    # reduction_plan.Operand.row_split) whether it is walked (a non-zero stride); () for the
    # others. Left out of the repr, so the other kernels' names stay; split_suffix names them.
    row_splits: tuple[tuple[bool, ...], ...] = field(default=(), repr=False)
    # persistent: per loop input, whether a SPLIT operand's vectors read one element each
    # (kfuse.codegen.row_split: its unwalked inner sub-axes span a multiple of the vector).
    # Left out of the repr like row_splits; split_suffix names it ("u").
    split_uniform: tuple[bool, ...] = field(default=(), repr=False)

    # persistent: every slot of every thread lies inside the row (the row is exactly
    # block_x * unroll * vector elements, one block a row), so no row-end test is emitted;
    # rows_whole: the rows are a multiple of block_y, so every row of a block exists and
    # row_ok is the constant true. Both hold for the shapes they were planned for only (a
    # Program is planned for its exact shapes: kfuse.engine.signature). Named by
    # whole_suffix, not the repr. Measured on an H200: see kfuse.schedule.persistent_spec.
    full_slots: bool = field(default=False, repr=False)
    rows_whole: bool = field(default=False, repr=False)
    # persistent, rows held in shared memory and grid-strided: each thread copies its slots
    # of the block's next row (asynchronously) as soon as the last pass has read them, so
    # that the next row's loads overlap this row's outputs (kfuse.codegen.persistent
    # prefetched_inputs). Named by emit_persistent ("_pf", where it prefetches), not the repr.
    prefetch_next: bool = field(default=False, repr=False)
    # persistent: the regenerated reads (kfuse.codegen.persistent_memory.regenerated_slots)
    # whose every vector starts at a multiple of four elements, as the scheduler found on the
    # shapes planned for: computed in whole groups of four (kf::load_vec_groups), with no
    # code for a vector across groups. Named by emit_persistent ("_g"), not the repr.
    grouped_reads: tuple[int, ...] = field(default=(), repr=False)

    def loop_rank(self, i: int) -> int:
        """The rank loop input i is passed with: the kept axes, then the row's axis or, for a
        SPLIT operand, its own row sub-axes."""
        split = self.row_splits[i] if self.row_splits else ()
        return self.rank - 1 + len(split) if split else self.rank

    def split_suffix(self) -> str:
        """A kernel-name suffix naming the SPLIT operands' walked sub-axes ("" for none)."""
        if not any(self.row_splits):
            return ""
        uniform = self.split_uniform or (False,) * len(self.row_splits)
        walked = (
            ("".join("1" if w else "0" for w in s) or "x") + ("u" if u else "")
            for s, u in zip(self.row_splits, uniform)
        )
        return "_rs_" + "_".join(walked)

    def whole_suffix(self) -> str:
        """A kernel-name suffix naming full_slots ("_fs") and rows_whole ("_rw")."""
        return ("_fs" if self.full_slots else "") + ("_rw" if self.rows_whole else "")

    @property
    def held_batch(self) -> int:
        """persistent: the vectors per thread held on chip (the rest are reloaded)."""
        return self.unroll - self.reload


@dataclass(frozen=True)
class Accumulator:
    """How reduction k accumulates: C++ types, identity, update and combine statements."""

    k: int
    welford: bool
    value_type: str  # compute type of the reduction's input
    op: str  # sum|prod|max|min|welford|softmax|softmax_fast (a folded softmax pair)

    @property
    def softmax(self) -> bool:
        """Online softmax statistics (kfuse.codegen.softmax_fold): a max and a sum."""
        return self.op.startswith("softmax")

    @property
    def struct(self) -> bool:
        """The state is a struct of partial_fields (stored and loaded field by field)."""
        return self.welford or self.softmax

    @property
    def ctype(self) -> str:
        if self.softmax:
            return f"kf::SoftmaxState<{self.value_type}>"
        return f"kf::WelfordState<{self.value_type}>" if self.welford else self.value_type

    @property
    def functor(self) -> str:
        if self.softmax:
            return "kf::SoftmaxOp"
        return "kf::WelfordOp" if self.welford else _FUNCTORS[self.op]

    def identity(self) -> str:
        if self.softmax:
            return f"kf::softmax_identity<{self.value_type}>()"
        if self.welford:
            return f"kf::welford_identity<{self.value_type}>()"
        return f"{self.functor}::identity<{self.value_type}>()"

    @property
    def _fast(self) -> str:
        """The softmax functions' Fast template argument (exp_fast for the sum's exp)."""
        return "true" if self.op == "softmax_fast" else "false"

    def update(self, acc: str, value: str) -> str:
        if self.softmax:
            return f"kf::softmax_update<{self._fast}>({acc}, {value});"
        if self.welford:
            return f"kf::welford_update({acc}, {value});"
        return f"{acc} = {self.functor}()({acc}, {value});"

    @property
    def batched(self) -> bool:
        """It takes the values loaded together a batch at a time (batch_update): Welford, one
        division a batch; softmax statistics, one rescale a batch and no branch."""
        return self.struct

    def batch_update(self, acc: str, batch: str) -> str:
        """The statement folding an array of values loaded together into `acc` (batched
        accumulators only)."""
        if self.softmax:
            return f"kf::softmax_update_batch<{self._fast}>({acc}, {batch});"
        assert self.welford, f"accumulator {self.op} takes values one at a time"
        return f"kf::welford_update_batch({acc}, {batch});"

    def combine(self, acc: str, other: str) -> str:
        if self.softmax:
            return f"{acc} = kf::softmax_combine({acc}, {other});"
        if self.welford:
            return f"{acc} = kf::welford_combine({acc}, {other});"
        return f"{acc} = {self.functor}()({acc}, {other});"

    def block_reduce(self, acc: str, smem: str, block_x: int) -> str:
        """The combine of `acc` over the block_x threads of a row (block_x is blockDim.x: a
        literal lets NVRTC fold the branches for other row lengths)."""
        scratch = f"reinterpret_cast<{self.ctype}*>({smem})"
        if self.welford:
            return f"kf::block_welford_x({acc}, {scratch}, {block_x})"
        return f"kf::block_reduce_x({acc}, {self.functor}(), {scratch}, {block_x})"

    @property
    def size(self) -> int:
        """Bytes of one accumulator."""
        base = _CTYPE_SIZE[self.value_type]
        return len(self.partial_fields) * base

    @property
    def partial_fields(self) -> tuple[str, ...]:
        """Workspace arrays this accumulator needs (one per field)."""
        if self.softmax:
            return ("max", "sum")
        return ("shift", "sum", "m2", "count") if self.welford else ("",)

    @property
    def partial_type(self) -> str:
        return self.value_type


_CTYPE_SIZE = {
    "float": 4,
    "double": 8,
    "int": 4,
    "long long": 8,
    "bool": 1,
    DataType.ComplexFloat.cuda_type: 8,
    DataType.ComplexDouble.cuda_type: 16,
}
"""Bytes of one value of each accumulator compute type."""


def accumulators(plan: ReductionPlan) -> list[Accumulator]:
    """One Accumulator per reduction of the plan."""
    out = []
    for k, r in enumerate(plan.reductions):
        vt = compute_ctype(r.inputs[0].dtype)
        if isinstance(r, WelfordOp):
            out.append(Accumulator(k, True, vt, "welford"))
        elif isinstance(r, SoftmaxStatsOp):
            out.append(Accumulator(k, False, vt, "softmax_fast" if r.fast else "softmax"))
        else:
            assert isinstance(r, ReductionOp)
            out.append(Accumulator(k, False, vt, r.op))
    return out


def result_vars(plan: ReductionPlan, k: int) -> list[tuple[str, str]]:
    """(C++ type, name) of the result variables of reduction k."""
    r = plan.reductions[k]
    if isinstance(r, WelfordOp):
        t = compute_ctype(r.inputs[0].dtype)
        return [(t, f"r{k}_avg"), (t, f"r{k}_m2"), ("long long", f"r{k}_n")]
    if isinstance(r, SoftmaxStatsOp):
        t = compute_ctype(r.inputs[0].dtype)
        return [(t, f"r{k}_max"), (t, f"r{k}_sum")]
    return [(compute_ctype(r.outputs[0].dtype), f"r{k}")]


def result_assignments(plan: ReductionPlan, k: int, acc: str, n_red: str) -> list[str]:
    """Statements defining reduction k's result variables from its combined accumulator."""
    r = plan.reductions[k]
    if isinstance(r, WelfordOp):
        t = compute_ctype(r.inputs[0].dtype)
        nan = literal(float("nan"), r.inputs[0].dtype)
        return [
            f"const {t} r{k}_avg = {acc}.count == ({t})0 ? {nan} : kf::welford_mean({acc});",
            f"const {t} r{k}_m2 = {acc}.count == ({t})0 ? {nan} : {acc}.m2;",
            f"const long long r{k}_n = (long long){n_red};",
        ]
    if isinstance(r, SoftmaxStatsOp):
        t = compute_ctype(r.inputs[0].dtype)
        return [
            f"const {t} r{k}_max = {acc}.max;",
            f"const {t} r{k}_sum = kf::softmax_sum({acc}, (long long){n_red});",
        ]
    return [
        f"const {compute_ctype(r.outputs[0].dtype)} r{k} = "
        f"{round_to_dtype(acc, r.outputs[0].dtype)};"
    ]


def _result_leaves(plan: ReductionPlan, dm: DomainMap) -> dict[Use, str]:
    """Leaves for the reduction results a domain map reads."""
    where = plan.reduction_outputs()
    leaves = {}
    for u in dm.uses:
        if u.val in where:
            k, j = where[u.val]
            leaves[u] = result_vars(plan, k)[j][1]
    return leaves

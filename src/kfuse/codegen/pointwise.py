"""The pointwise kernel: plan (what to compute) and CUDA source (how to walk it).

Loop structure (2-D, the break point being the innermost merged axis):

    rows  = the outer merged axes, walked by (blockIdx.y, threadIdx.y), grid-strided;
            each thread turns its row into one base offset per operand (one div/mod chain
            per row, not per element)
    inner = the innermost merged axis, in vectors of V elements, walked by
            (blockIdx.x, threadIdx.x) with U vectors per thread per step, grid-strided.

A step whose U vectors are all full loads everything first (bytes in flight), then computes
and stores; the ragged end of a row takes a scalar path. When all axes merge into one, there
is a single row: the 1-D schedule.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kfuse.codegen import (
    bf16_words,
    generated,
    indexed,
    outlined_math,
    pointwise_names,
    shared_math,
    windowed,
)
from kfuse.codegen.body import emit_body, from_storage
from kfuse.codegen.contraction import products
from kfuse.codegen.domain import DomainMap, UnsupportedExpr, Use, map_to_domain
from kfuse.codegen.expressions import compute_ctype
from kfuse.codegen.kernel import (
    Code,
    decompose,
    kernel_header,
    load_vector_block,
    row_count,
    store_vector,
    vector_addresses,
)
from kfuse.codegen.layout import BCAST, INDEXED_VEC, SPLIT, STRIDED, VEC, WINDOWED_VEC
from kfuse.codegen.precision import approximable
from kfuse.codegen.registers import register_array
from kfuse.codegen.row_split import split_vector_loads
from kfuse.codegen.whole_rows import whole_row_loop
from kfuse.ir.fusion import Fusion
from kfuse.ir.values import TensorView
from kfuse.runtime.runtime_header import runtime_header


@dataclass(frozen=True)
class PointwisePlan:
    """What a pointwise kernel computes, independent of the inputs' sizes."""

    fusion: Fusion
    reference: TensorView
    domain: DomainMap
    output_views: tuple[tuple, ...]

    @property
    def ref_rank(self) -> int:
        """Rank of the reference domain before merging."""
        return self.reference.ndim


def plan_pointwise(fusion: Fusion) -> PointwisePlan:
    """Map the fusion's outputs onto the reference output's domain.

    The reference is the first output of the highest rank (then most non-broadcast axes).
    Another output takes the view it already has inside the reference's computation (an input
    or intermediate that feeds it), else, at equal rank, the reference's axes; the scheduler
    then requires every output to have the reference's shape.

    Raises UnsupportedExpr when an expr or an output cannot be generated here; the scheduler
    checks the rest (output shapes) against the actual inputs.
    """
    reference = max(
        fusion.outputs, key=lambda t: (t.ndim, sum(not ax.is_broadcast for ax in t.axes))
    )
    rank = reference.ndim
    ref_view = tuple(None if ax.is_broadcast else r for r, ax in enumerate(reference.axes))
    ref_map = map_to_domain([(reference, ref_view)], rank, kernel_reads=True)
    output_views = []
    for out in fusion.outputs:
        known = {u.view for u in ref_map.uses if u.val is out}
        if len(known) == 1:
            output_views.append(known.pop())
        elif out.ndim == rank:
            output_views.append(
                tuple(None if ax.is_broadcast else r for r, ax in enumerate(out.axes))
            )
        elif all(ax.is_broadcast for ax in out.axes):
            output_views.append((None,) * out.ndim)  # one element, whatever the rank
        else:
            raise UnsupportedExpr(
                f"output {out.name} (rank {out.ndim}) cannot be placed on "
                f"the domain of {reference.name} (rank {rank})"
            )
    domain = map_to_domain(
        [(o, v) for o, v in zip(fusion.outputs, output_views)], rank, kernel_reads=True
    )
    return PointwisePlan(fusion, reference, domain, tuple(output_views))


@dataclass(frozen=True)
class PointwiseKernelSpec:
    """Everything the CUDA source depends on: the compile-time half of a launch."""

    rank: int  # merged rank
    vector: int
    unroll: int
    block_x: int
    block_y: int
    index_type: str  # "int" | "long long"
    input_kinds: tuple[str, ...]
    output_kinds: tuple[str, ...]
    # __launch_bounds__ (False under a register limit: kfuse.codegen.kernel) and its second
    # argument (a register target; None: the register fit's); not in the repr, which names it
    launch_bounds: bool = field(default=True, repr=False)
    min_blocks: int | None = field(default=None, repr=False)
    # Per input, for a SPLIT one (kfuse.schedule.short_rows.split_short_rows) whether each of
    # its inner sub-axes is walked (a non-zero stride), () for the others; () when no input
    # is SPLIT. Out of the repr (the kernel's name has a suffix for them instead), so that
    # the names of kernels without SPLIT inputs stay what they were.
    input_splits: tuple[tuple[bool, ...], ...] = field(default=(), repr=False)
    # Per input, whether a SPLIT input's vectors read one element each (row_split's uniform),
    # and whether they read at most two (row_split's two).
    split_uniform: tuple[bool, ...] = field(default=(), repr=False)
    split_two: tuple[bool, ...] = field(default=(), repr=False)
    # Per input, for a SPLIT one the input whose sub-axis sizes it divides by: the first SPLIT
    # input whose sub-axes have its extents (often itself), so that inputs of the same
    # sub-axes share one decomposition of the row index. The batch norm backward's NCHW
    # [256, 2048, 7, 7] pointwise kernel (five per-channel inputs) went from 1800 to 1096
    # sm_90 instructions, 72 registers and a 16-byte stack frame to 48 and none. Out of the
    # repr; kernel_name adds a suffix where an input takes another's.
    split_sizes_of: tuple[int, ...] = field(default=(), repr=False)
    # Consecutive rows a thread takes (PointwiseParams.unroll_factor_outer; with unroll 1, no
    # SPLIT input, and rows that divide the rows' innermost axis, which the scheduler checks),
    # and per input whether it is the same along them (a stride of 0 along that axis): loaded
    # once for them all. Out of the repr (kernel_name adds a suffix), like input_splits.
    rows: int = field(default=1, repr=False)
    row_bcast: tuple[bool, ...] = field(default=(), repr=False)
    # Per input, for an indexed read (INDEXED or INDEXED_VEC: kfuse.codegen.indexed) the input
    # that holds its positions, -1 for the others; () when no input is one. Out of the repr
    # (kernel_name adds a suffix), like input_splits.
    indexed_by: tuple[int, ...] = field(default=(), repr=False)
    # The rows' blocks taken from the last (blockIdx.y counted from gridDim.y's end): a
    # second pass over an input the kernel before it read last reads that input's tail, which
    # L2 may still hold, first (switches.REREAD_REVERSED). Out of the repr (kernel_name adds
    # a suffix).
    reverse_rows: bool = field(default=False, repr=False)
    # Per input, for a padded read (WINDOWED or WINDOWED_VEC: kfuse.codegen.windowed) the
    # merged axes it is padded along, () for the others; () when no input is one. Out of the
    # repr (kernel_name adds a suffix).
    windows: tuple[tuple[int, ...], ...] = field(default=(), repr=False)
    # The launch covers a row with its vectors exactly (kfuse.codegen.whole_rows). Out of the
    # repr (kernel_name adds a suffix).
    whole_rows: bool = field(default=False, repr=False)

    def input_rank(self, k: int) -> int:
        """Rank of input k's kf::Tensor: the merged rank, for a SPLIT input the row axes
        followed by its own inner sub-axes, for an indexed read the merged axes followed by
        its tensor's indexed axis, for a padded read by one axis per padded axis."""
        split = self.input_splits[k] if self.input_splits else ()
        if split:
            return self.rank - 1 + len(split)
        if self.windows and self.windows[k]:
            return self.rank + len(self.windows[k])
        return self.rank + 1 if self.indexed_by and self.indexed_by[k] >= 0 else self.rank


def _block_y(spec: PointwiseKernelSpec) -> str:
    """The block's index along the rows: blockIdx.y, or counted from the end (reverse_rows)."""
    return "(gridDim.y - 1u - blockIdx.y)" if spec.reverse_rows else "blockIdx.y"


def emit_pointwise(plan: PointwisePlan, spec: PointwiseKernelSpec) -> tuple[str, str]:
    """CUDA source and kernel name for `plan` compiled as `spec`: the element body as a device
    function, then the kernel: rows over blockIdx.y / threadIdx.y, along each row U vectors of
    V elements per thread, loaded all before any is computed where they lie inside the row
    (_whole_vectors), element by element at the row's ragged end (_ragged_end)."""
    name = pointwise_names.kernel_name(plan, spec)
    rank, vec, unroll = spec.rank, spec.vector, spec.unroll
    n_in, n_out = len(plan.domain.input_uses), len(plan.fusion.outputs)
    code, call = open_domain_kernel(
        plan,
        name,
        spec.rank,
        spec.index_type,
        spec.block_x * spec.block_y,
        spec.launch_bounds,
        [spec.input_rank(k) for k in range(n_in)],
        index_checks=bool(spec.indexed_by),
        min_blocks=spec.min_blocks,
    )
    code(
        f"typedef {spec.index_type} Index;",
        f"const Index n_inner = out0.size[{rank - 1}];",
        *row_count(range(rank - 1)),
        f"const Index n_vec = (n_inner + {vec - 1}) / {vec};",
        *generated.memo_declarations(spec, plan.domain),
    )
    operands = [f"in{k}" for k in range(n_in)] + [f"out{k}" for k in range(n_out)]
    if spec.rows > 1:
        _row_groups(code, plan, spec, call, operands)
        return code.kernel_source(), name
    if spec.whole_rows:
        whole_row_loop(code, plan, spec, call, operands, _compute_and_store)
        return code.kernel_source(), name
    with code.block(
        f"for (Index row = (Index){_block_y(spec)} * blockDim.y + threadIdx.y; row < n_rows;",
        "     row += (Index)gridDim.y * blockDim.y)",
    ):
        code(*[f"Index base_{op} = 0;" for op in operands])
        if spec.windows:  # padded reads: each row checked against their windows
            code(*windowed.row_declarations(spec))
            code.extend(
                decompose(
                    "row",
                    range(rank - 1),
                    operands,
                    code.indent,
                    coordinate=lambda d: windowed.row_checks(spec, d),
                )
            )
            code(*windowed.row_offsets(spec))
        else:
            code.extend(decompose("row", range(rank - 1), operands, code.indent))
        code(*[f"const Index step_{op} = {op}.stride[{rank - 1}];" for op in operands])
        with code.block(
            f"for (Index v0 = (Index)blockIdx.x * (blockDim.x * {unroll}) + threadIdx.x;"
            " v0 < n_vec;",
            f"     v0 += (Index)gridDim.x * blockDim.x * {unroll})",
        ):
            with code.block(
                f"if ((v0 + (Index)({unroll - 1}) * blockDim.x + 1) * {vec} <= n_inner)"
            ):
                _whole_vectors(code, plan, spec, call)
                code.otherwise()
                _ragged_end(code, plan, spec, call)
    return code.kernel_source(), name


def _row_groups(
    code: Code,
    plan: PointwisePlan,
    spec: PointwiseKernelSpec,
    call: Callable[..., str],
    operands: list[str],
) -> None:
    """The row loop where a thread takes spec.rows consecutive rows (a multiple of them from
    the first, all with the same outer coordinates: the scheduler checks that the rows'
    innermost axis is a multiple of them), one vector of each along the row at a time: the
    inputs that differ between the rows loaded for each, the ones that are the same once, so
    a normalization's statistics broadcast over the positions of an NHWC tensor are read
    once every spec.rows rows instead of every row (instance norm backward, NHWC [64, 256, 56,
    56] bf16 on an H200: 87 -> 69 us)."""
    rank, vec, rows = spec.rank, spec.vector, spec.rows
    with code.block(
        f"for (Index row = ((Index){_block_y(spec)} * blockDim.y + threadIdx.y) * {rows};"
        " row < n_rows;",
        f"     row += (Index)gridDim.y * blockDim.y * {rows})",
    ):
        code(*[f"Index base_{op} = 0;" for op in operands])
        code.extend(decompose("row", range(rank - 1), operands, code.indent))
        code(*[f"const Index step_{op} = {op}.stride[{rank - 1}];" for op in operands])
        code(*[f"const Index rstep_{op} = {op}.stride[{rank - 2}];" for op in operands])
        with code.block(
            "for (Index v0 = (Index)blockIdx.x * blockDim.x + threadIdx.x; v0 < n_vec;",
            "     v0 += (Index)gridDim.x * blockDim.x)",
        ):
            with code.block(f"if ((v0 + 1) * {vec} <= n_inner)"):
                _row_group_vectors(code, plan, spec, call)
                code.otherwise()
                with code.block(f"for (int r = 0; r < {rows}; ++r)"):
                    code(f"const Index i0 = v0 * {vec};")
                    _elements(code, plan, spec, plan.fusion.outputs, call, row="r")


def _row_group_vectors(
    code: Code, plan: PointwisePlan, spec: PointwiseKernelSpec, call: Callable[..., str]
) -> None:
    """One vector of each of a thread's rows: the inputs that differ between them loaded for
    every row (first: they come from DRAM), the others once, then each row computed and
    stored."""
    vec, rows = spec.vector, spec.rows
    ctypes = [u.val.dtype.cuda_type for u in plan.domain.input_uses]
    once = [k for k, same in enumerate(spec.row_bcast) if same]
    each = [k for k, same in enumerate(spec.row_bcast) if not same]
    index = f"const Index i0 = v0 * {vec}"

    code.extend(
        load_vector_block(
            ctypes,
            spec.input_kinds,
            vec,
            str(rows),
            code.indent,
            index,
            lambda k: vector_addresses(f"base_in{k} + (Index)u * rstep_in{k}", k),
            skip=once,
        )
    )
    code.extend(
        load_vector_block(
            ctypes,
            spec.input_kinds,
            vec,
            "1",
            code.indent,
            index,
            lambda k: vector_addresses(f"base_in{k}", k),
            skip=each,
        )
    )
    with code.block(f"for (int u = 0; u < {rows}; ++u)", unroll=True):
        code(f"{index};")
        vectors = ["0" if same else "u" for same in spec.row_bcast]
        _compute_and_store(
            code, plan, spec, call, vectors, lambda k: f"base_out{k} + (Index)u * rstep_out{k}"
        )


def _compute_and_store(
    code: Code,
    plan: PointwisePlan,
    spec: PointwiseKernelSpec,
    call: Callable[..., str],
    vectors: list[str],
    out_base: Callable[[int], str],
    slots: windowed.PartSlots | None = None,
) -> None:
    """Inside a loop that set i0: the element body over one vector of lanes j, input k read
    from its register vector x<k>[vectors[k]] (or, for a cat part's read held in `slots`,
    from its slot in that part's lanes, its fill value in the other parts', which never read
    it), then each output stored as one vector (or element by element) from out_base(k), its
    row's first element."""
    vec, outputs = spec.vector, plan.fusion.outputs
    code(*[f"kf::Vec<{o.dtype.cuda_type}, {vec}> y{k};" for k, o in enumerate(outputs)])
    loaded = [
        f"x{k}[{vectors[k]}]" + ("" if kind == BCAST else "[j]")
        for k, kind in enumerate(spec.input_kinds)
    ]
    outs = [f"y{k}[j]" for k in range(len(outputs))]

    def lane(parts: tuple[str, ...]) -> str:
        if slots is None:
            return call(loaded, outs, parts)
        mine = slots.members[int(parts[0])]
        args = [
            loaded[k]
            if k not in slots.slot_of
            else f"{slots.slot_of[k]}[{vectors[k]}][j]"
            if k in mine
            else windowed.fill(plan.domain, k)
            for k in range(len(loaded))
        ]
        return call(args, outs, parts)

    windowed.lane_loops(
        code, spec, plan.domain, lane, part_at=None if slots is None else "kf_parts[u]"
    )
    for k, kind in enumerate(spec.output_kinds):
        base = out_base(k)
        code.extend(
            store_vector(
                kind,
                f"out{k}",
                f"y{k}",
                vec,
                code.indent,
                at=f"{base} + i0",
                element_at=f"{base} + (i0 + j) * step_out{k}",
            )
        )


def open_domain_kernel(
    plan: PointwisePlan,
    name: str,
    rank: int,
    index: str,
    threads: int,
    launch_bounds: bool,
    input_ranks: list[int] | None = None,
    index_checks: bool = False,
    min_blocks: int | None = None,
) -> tuple[Code, Callable[..., str]]:
    """A new Code holding the runtime header, the plan's per-element body function and the
    opened kernel `name` over the plan's domain (pointwise and transpose kernels), and the
    call of the body function. `index_checks`: the kernel has indexed reads, whose flags
    come last (kfuse.codegen.indexed); `min_blocks`: its launch bounds' second argument."""
    body, call = element_body_function(plan, name)
    code = Code()
    code.extend([runtime_header(), "", *body, ""])
    params = kernel_params(plan, rank, index, input_ranks)
    if index_checks:
        params.append(indexed.FLAGS_PARAM.format(index=index))
    header = kernel_header(name, params, threads, bounded=launch_bounds, min_blocks=min_blocks)
    code.open_kernel(header)
    return code, call


def kernel_params(
    plan: PointwisePlan, rank: int, index: str, input_ranks: list[int] | None = None
) -> list[str]:
    """The parameters of a kernel over the plan's domain (pointwise and transpose): inputs,
    scalars, outputs (the kernel ABI's order), tensors of `rank` (inputs: of input_ranks
    where given) indexed by `index`."""
    ranks = input_ranks or [rank] * len(plan.domain.input_uses)
    params = [
        f"kf::Tensor<{u.val.dtype.cuda_type}, {ranks[k]}, {index}> in{k}"
        for k, u in enumerate(plan.domain.input_uses)
    ]
    # Kernel ABI: Half and BFloat16 scalars travel as float (their compute type).
    params += [f"{compute_ctype(s.dtype)} s{k}" for k, s in enumerate(plan.domain.scalars)]
    if generated.stateful_ops(plan.domain):  # filled per launch (RngStateOperand)
        params += generated.RNG_PARAMS
    params += [
        f"kf::Tensor<{o.dtype.cuda_type}, {rank}, {index}> out{k}"
        for k, o in enumerate(plan.fusion.outputs)
    ]
    return params


def element_body_function(plan: PointwisePlan, name: str) -> tuple[list[str], Callable[..., str]]:
    """The element body as a device function of the loaded input values (and the scalars),
    writing each output through a reference; and call(loaded, outs), the statement calling it."""
    domain = plan.domain
    inputs = domain.input_uses
    outputs = list(zip(plan.fusion.outputs, plan.output_views))
    scalar_params = {s: f"s{k}" for k, s in enumerate(domain.scalars)}
    leaves_compute = {u: from_storage(f"x{k}", u.val.dtype) for k, u in enumerate(inputs)}
    selectors = {use: f"part{c}" for c, use in enumerate(domain.cats)}
    fast, fused = approximable(plan.fusion), products(plan.fusion)
    body = emit_body(domain.uses, leaves_compute, scalar_params, "v", fast, selectors, fused)
    body_params = [f"{bf16_words.param_type(u.val.dtype)} x{k}" for k, u in enumerate(inputs)]
    body_params += [f"{compute_ctype(s.dtype)} s{k}" for k, s in enumerate(domain.scalars)]
    body_params += [f"int {name}" for name in selectors.values()]  # the part of each cat
    body_params += [f"{o.dtype.cuda_type}& y{k}" for k, (o, _) in enumerate(outputs)]
    body_lines = list(body.lines)
    for k, (o, view) in enumerate(outputs):
        body_lines.append(f"y{k} = {body.store(Use(o, view))};")
    scalar_args = [f"s{k}" for k in range(len(domain.scalars))]

    def call(loaded: list[str], outs: list[str], parts: tuple[str, ...] = ()) -> str:
        args = [bf16_words.argument(e, u.val.dtype) for e, u in zip(loaded, inputs, strict=True)]
        return f"{name}_body({', '.join(args + scalar_args + list(parts) + outs)});"

    wrappers, body_lines = outlined_math.outlined(shared_math.paired(body_lines))
    lines = [*wrappers, f"__device__ __forceinline__ void {name}_body({', '.join(body_params)}) {{"]
    lines += [f"  {line}" for line in body_lines]
    return lines + ["}"], call


def _whole_vectors(
    code: Code,
    plan: PointwisePlan,
    spec: PointwiseKernelSpec,
    call: Callable[..., str],
    unroll: int | None = None,
    offset: str | None = None,
) -> None:
    """`unroll` (default U) vectors of a thread that lie inside the row, the u-th at element
    `offset` (default the thread's u-th vector): loads for all of them, then compute and
    store each."""
    vec = spec.vector
    unroll = spec.unroll if unroll is None else unroll
    offset = offset or f"(v0 + (Index)u * blockDim.x) * {vec}"
    inputs = plan.domain.input_uses
    split = [k for k, kind in enumerate(spec.input_kinds) if kind == SPLIT]
    reads, windows, made = indexed.reads(spec), windowed.reads(spec), generated.reads(spec)
    slots = windowed.part_slots(spec, plan.domain)
    in_slots = [k for k in windows if slots is not None and k in slots.slot_of]
    code.extend(
        load_vector_block(
            [u.val.dtype.cuda_type for u in inputs],
            spec.input_kinds,
            vec,
            str(unroll),
            code.indent,
            f"const Index i0 = {offset}",
            lambda k: vector_addresses(f"base_in{k}", k),
            skip=split + reads + windows + made,
        )
    )
    for ks, load in (
        (reads, lambda k, indent: indexed.vector_load(spec, k, indent)),  # after their indexes
        (
            [k for k in windows if k not in in_slots],
            lambda k, indent: windowed.vector_load(spec, plan.domain, k, indent),
        ),
        (split, lambda k, indent: split_vector_loads(spec, k, f"x{k}[u]", vec, indent)),
        (made, lambda k, indent: generated.vector_load(spec, plan.domain, k, indent)),
    ):
        _unrolled_loads(code, spec, plan, ks, unroll, offset, load)
    if slots is not None:
        windowed.slot_loads(code, spec, plan.domain, slots, unroll, offset)
    with code.block(f"for (int u = 0; u < {unroll}; ++u)", unroll=True):
        code(f"const Index i0 = {offset};")
        _compute_and_store(
            code, plan, spec, call, ["u"] * len(inputs), lambda k: f"base_out{k}", slots
        )


def _unrolled_loads(
    code: Code,
    spec: PointwiseKernelSpec,
    plan: PointwisePlan,
    ks: list[int],
    unroll: int,
    offset: str,
    load: Callable[[int, str], list[str]],
) -> None:
    """Declare x<k>[unroll] for the inputs `ks` that load_vector_block leaves out (indexed,
    padded, split and generated reads), then load their u-th vectors in one unrolled loop, at
    element `offset` of the row: `load(k, indent)` gives one input's lines."""
    if not ks:
        return
    vec, kinds = spec.vector, spec.input_kinds
    ctypes = [plan.domain.input_uses[k].val.dtype.cuda_type for k in ks]
    arrays = [VEC if kinds[k] in (INDEXED_VEC, WINDOWED_VEC) else STRIDED for k in ks]
    code(*[register_array(f"x{k}", t, a, vec, unroll) for k, t, a in zip(ks, ctypes, arrays)])
    with code.block(f"for (int u = 0; u < {unroll}; ++u)", unroll=True):
        code(f"const Index i0 = {offset};")
        for k in ks:
            code.extend(load(k, code.indent))


def _ragged_end(
    code: Code, plan: PointwisePlan, spec: PointwiseKernelSpec, call: Callable[..., str]
) -> None:
    """The U vectors of a thread when its last one reaches past the row end: each vector that
    lies inside the row whole, as a vector; the one the row end cuts, element by element.
    Rows of a few unrolled vectors are mostly here: a bf16 batch norm's rows of 56 x 56 (392
    vectors, two blocks of 128 threads x 2) sent a third of its elements through 2-byte
    loads and stores when this path went element by element throughout."""
    vec, outputs = spec.vector, plan.fusion.outputs
    with code.block(f"for (int w = 0; w < {spec.unroll}; ++w)"):
        code(f"const Index kf_iv = (v0 + (Index)w * blockDim.x) * {vec};")
        with code.block(f"if (kf_iv + {vec} <= n_inner)"):
            _whole_vectors(code, plan, spec, call, unroll=1, offset="kf_iv")
            code.otherwise()
            code("const Index i0 = kf_iv;")
            _elements(code, plan, spec, outputs, call)


def _elements(
    code: Code,
    plan: PointwisePlan,
    spec: PointwiseKernelSpec,
    outputs: list[Any],
    call: Callable[..., str],
    row: str | None = None,
) -> None:
    """The elements i0 .. i0 + V - 1 that lie inside the row, one by one; `row`: of a
    thread's row that many rows after its first (_row_groups)."""
    vec, n_in = spec.vector, len(plan.domain.input_uses)

    def base(op: str) -> str:
        return f"base_{op}" if row is None else f"base_{op} + (Index){row} * rstep_{op}"

    with code.block(f"for (int j = 0; j < {vec} && i0 + j < n_inner; ++j)"):
        code("const Index i = i0 + j;")
        code(*[f"{o.dtype.cuda_type} y{k};" for k, o in enumerate(outputs)])
        loaded = [f"kf::load(in{k}, {base(f'in{k}')} + i * step_in{k})" for k in range(n_in)]
        for k in indexed.reads(spec):  # at the position its index's element gives
            loaded[k] = indexed.element_load(spec, k, f"{base(f'in{k}')} + i * step_in{k}", loaded)
        for k in windowed.reads(spec):  # inside its window, else its pad value
            at = f"{base(f'in{k}')} + i * step_in{k}"
            loaded[k] = windowed.element_load(spec, plan.domain, k, at, "i")
        for k in generated.reads(spec):  # computed from its linear index
            at = f"{base(f'in{k}')} + i * step_in{k}"
            loaded[k] = generated.value(plan.domain, k, at, spec.index_type == "int")
        for k, kind in enumerate(spec.input_kinds):
            if kind == SPLIT:  # its element i through its sub-axes, into xs<k>[0]
                code(f"{plan.domain.input_uses[k].val.dtype.cuda_type} xs{k}[1];")
                with code.block():
                    code("const Index i0 = i;")
                    code.extend(split_vector_loads(spec, k, f"xs{k}", 1, code.indent))
                loaded[k] = f"xs{k}[0]"
        parts = windowed.part_selectors(spec, plan.domain, "i")
        code(call(loaded, [f"y{k}" for k in range(len(outputs))], parts))
        code(
            *[
                f"kf::store(out{k}, {base(f'out{k}')} + i * step_out{k}, y{k});"
                for k in range(len(outputs))
            ]
        )

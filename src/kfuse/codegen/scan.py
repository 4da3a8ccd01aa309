"""The scan kernel: one inclusive scan (fd.ops.cumsum, cumprod, cummax, cummin) with its
pointwise prologue and epilogue, generated as one kernel.

The reference domain is the scan's output (its axes; the scanned one, `dim`, need not be
the innermost: every operand is read at its own strides, so a scan along an outer axis reads
across rows, uncoalesced but in place). A *row* is one position of the other axes; the
kernel walks rows grid-strided, `block_y` of them a block, each row scanned by `block_x`
threads (whole warps) in chunks of block_x * unroll elements:

1. each thread computes the prologue (the scan's input, from the fusion inputs) at its
   `unroll` consecutive elements in the accumulator type and scans them serially;
2. the threads' totals are scanned across the warp with shuffles, the warps' totals are
   put in shared memory, and each thread adds the totals of the warps before it and the
   row's carry (the chunks before, combined) to its exclusive prefix;
3. each element's prefix, rounded to the scan's dtype, feeds the epilogue, which
   computes and stores every output at that element;
4. the last thread of the row moves the carry past the chunk.

A scan along an outer axis of many rows takes the serial layout instead (block_x 1): each
thread scans a row of its own element after element (torch's order), the threads of a warp
on consecutive rows, which lie side by side in memory there, so every access is coalesced.

Two barriers a chunk order the shared totals and the carry; every thread of the block
reaches them (rows past the end and elements past the row's end compute nothing), so the
loops' bounds are the same for all threads of a block. Half and BFloat16 are accumulated in
float (torch's), Float in float, Double in double, integers in their own type, combined by
the runtime's reduction functors (SCAN_FUNCTORS: wrapping integer adds and products,
NaN-propagating max and min). Each prefix depends only on the elements it combines, so NaN
and infinities propagate as in torch's sequential scan; the order of the float additions and
products differs from it, which is rounding (the comparison's tolerance grows with the
scanned extent).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from kfuse.codegen import contraction
from kfuse.codegen.body import emit_body, from_storage, round_to_dtype
from kfuse.codegen.domain import DomainMap, UnsupportedExpr, Use, View, map_to_domain
from kfuse.codegen.expressions import compute_ctype, literal
from kfuse.codegen.kernel import Code, kernel_header
from kfuse.dtypes import DataType
from kfuse.ir.exprs import ScanOp
from kfuse.ir.fusion import Fusion
from kfuse.ir.values import Scalar, TensorView
from kfuse.runtime.runtime_header import runtime_header

WARP = 32


@dataclass
class ScanPlan:
    """What the kernel computes: the scan, the prologue computing its input, the epilogue
    computing the outputs from its result, and the kernel's operands (the input uses of
    both, each once, and their non-constant Scalars)."""

    fusion: Fusion
    scan: ScanOp
    view: View
    prologue: DomainMap
    epilogue: DomainMap
    input_uses: list[Use] = field(default_factory=list)
    scalars: list[Scalar] = field(default_factory=list)

    @property
    def rank(self) -> int:
        return len(self.view)

    @property
    def dim(self) -> int:
        return self.scan.dim

    @property
    def result(self) -> TensorView:
        out = self.scan.outputs[0]
        assert isinstance(out, TensorView)
        return out

    def output_view(self, out: TensorView) -> View:
        """An output's view: its axes on the reference domain's (an output has the scan's
        shape; the scheduler checks the extents per call)."""
        return own_view(out)


def own_view(tv: TensorView) -> View:
    """A value of the domain's rank read at its own axes (broadcast ones at index 0)."""
    return tuple(None if ax.is_broadcast else i for i, ax in enumerate(tv.axes))


def plan_scan(fusion: Fusion) -> ScanPlan:
    """The plan of a fusion of one ScanOp with pointwise work (and views) before and after
    it; UnsupportedExpr naming what does not fit."""
    scans = [e for e in fusion.exprs if isinstance(e, ScanOp)]
    if len(scans) != 1:
        raise UnsupportedExpr(f"the scan kernel computes one scan; this fusion has {len(scans)}")
    scan = scans[0]
    result = scan.outputs[0]
    assert isinstance(result, TensorView)
    view = own_view(result)
    rank = len(view)
    prologue = map_to_domain([(scan.inputs[0], view)], rank)
    outputs: list[tuple[TensorView, View]] = []
    for out in fusion.outputs:
        if not isinstance(out, TensorView) or out.ndim != rank:
            raise UnsupportedExpr(
                f"output {out.name} is not of the scan's rank: the scan kernel writes "
                "outputs of the scan's shape"
            )
        outputs.append((out, own_view(out)))
    epilogue = map_to_domain(list(outputs), rank, stop_at={result: view})
    for use in epilogue.uses:
        if use.val is result and use.view != view:
            raise UnsupportedExpr(
                f"the scan's result {result.name} is read through a view of other axes "
                "(a permute or broadcast of it): the scan kernel reads it where it computes it"
            )
    plan = ScanPlan(fusion, scan, view, prologue, epilogue)
    for use in [*prologue.input_uses, *epilogue.input_uses]:
        if use not in plan.input_uses:
            plan.input_uses.append(use)
    for s in [*prologue.scalars, *epilogue.scalars]:
        if all(s is not t for t in plan.scalars):
            plan.scalars.append(s)
    return plan


@dataclass(frozen=True)
class ScanKernelSpec:
    """How the kernel is laid out: `block_x` threads a row (whole warps; 1: each thread
    scans its row alone, `serial`), `block_y` rows a block, `unroll` consecutive elements a
    thread scans serially in each chunk, indices of `index_type`."""

    rank: int
    dim: int
    index_type: str
    block_x: int
    block_y: int
    unroll: int

    @property
    def serial(self) -> bool:
        """Each thread scans a row of its own, element after element."""
        return self.block_x == 1

    @property
    def chunk(self) -> int:
        """Elements of a row a block scans between two moves of the carry."""
        return self.block_x * self.unroll


def accumulator_ctype(dtype: DataType) -> str:
    """The C++ type a scan of `dtype` accumulates in (float for Half and BFloat16)."""
    return compute_ctype(dtype)


SCAN_FUNCTORS = {"sum": "SumOp", "prod": "ProdOp", "max": "MaxOp", "min": "MinOp"}
"""The runtime's combine functor of each ScanOp.op (kf_reductions.cuh: wrapping integer adds
and products, NaN-propagating max and min)."""


def scan_identity(op: str, dtype: DataType) -> str:
    """The C++ value a scan of `op` over `dtype` starts from, in its accumulator type. A
    floating sum starts from -0.0, which x + -0.0 leaves as x even where x is -0.0 (from +0.0,
    a row of -0.0 would sum to +0.0, where torch's sequential sum keeps -0.0)."""
    acc = accumulator_ctype(dtype)
    if op == "sum":
        return {"float": "-0.0f", "double": "-0.0"}.get(acc, literal(0, dtype))
    if op == "prod":
        return "1.0f" if acc == "float" else literal(1, dtype)
    return f"kf::{SCAN_FUNCTORS[op]}::identity<{acc}>()"


def kernel_name(plan: ScanPlan, spec: ScanKernelSpec) -> str:
    """A stable name: the fusion's structure and the spec, hashed."""
    digest = hashlib.sha1(f"{plan.fusion.structure()!r}|{spec!r}".encode()).hexdigest()[:16]
    return f"kfuse_scan_{digest}"


def emit_scan(plan: ScanPlan, spec: ScanKernelSpec) -> tuple[str, str]:
    """CUDA source and kernel name of `plan` laid out as `spec` (the module docstring)."""
    name = kernel_name(plan, spec)
    acc = accumulator_ctype(plan.result.dtype)
    identity = scan_identity(plan.scan.op, plan.result.dtype)
    code = Code()
    code.extend([runtime_header(), ""])
    code.open_kernel(kernel_header(name, _params(plan, spec), spec.block_x * spec.block_y))
    by, d = spec.block_y, spec.dim
    others = [a for a in range(spec.rank) if a != d]
    code(
        f"typedef {spec.index_type} Index;",
        f"const Index n_scan = out0.size[{d}];",
        "Index n_rows = 1;",
        *[f"n_rows *= out0.size[{a}];" for a in others],
        "const int tx = threadIdx.x, ty = threadIdx.y;",
        f"const kf::{SCAN_FUNCTORS[plan.scan.op]} scan_op{{}};",
    )
    with code.block(
        f"for (Index row0 = (Index)blockIdx.x * {by}; row0 < n_rows;"
        f" row0 += (Index)gridDim.x * {by})"
    ):
        code("const Index row = row0 + ty;", "const bool row_ok = row < n_rows;")
        operands = [f"in{k}" for k in range(len(plan.input_uses))]
        operands += [f"out{k}" for k in range(len(plan.fusion.outputs))]
        code(*[f"Index base_{op} = 0;" for op in operands])
        with code.block("if (row_ok)"):  # the row's coordinates, innermost first
            code("Index rest = row;")
            for a in reversed(others):
                code(f"const Index c{a} = rest % out0.size[{a}];", f"rest /= out0.size[{a}];")
                code(*[f"base_{op} += c{a} * {op}.stride[{a}];" for op in operands])
        if spec.serial:
            _serial_row(code, plan, acc, identity)
        else:
            _chunked_row(code, plan, spec, acc, identity)
    return code.kernel_source(), name


def _serial_row(code: Code, plan: ScanPlan, acc: str, identity: str) -> None:
    """The thread's row scanned element after element, in torch's order: the threads of a
    warp take consecutive rows, which lie side by side in memory where the scanned axis is an
    outer one (no barrier: rows past the end skip the loop)."""
    code(f"{acc} prefix = {identity};", f"{acc} v[1];", "const int k = 0;")
    with code.block("for (Index j = 0; row_ok && j < n_scan; ++j)"):
        with code.block():
            _prologue(code, plan, acc)
        with code.block():
            _epilogue(code, plan, acc)
        code("prefix = scan_op(prefix, v[0]);")


def _chunked_row(code: Code, plan: ScanPlan, spec: ScanKernelSpec, acc: str, identity: str) -> None:
    """The row scanned by the block_x threads of the block's row ty, chunk after chunk (the
    module docstring)."""
    bx, by, u = spec.block_x, spec.block_y, spec.unroll
    code(
        f"__shared__ {acc} kf_warp_total[{by}][{bx // WARP}];",
        f"__shared__ {acc} kf_carry[{by}];",
        "const int lane = tx & 31, warp = tx >> 5;",
        # The carry is reset and moved by one thread only, so no barrier orders the two.
        f"if (tx == {bx - 1}) kf_carry[ty] = {identity};",
    )
    with code.block(f"for (Index c0 = 0; c0 < n_scan; c0 += {spec.chunk})"):
        code(f"{acc} v[{u}];")
        with code.block(f"for (int k = 0; k < {u}; ++k)", unroll=True):
            code(f"const Index j = c0 + (Index)tx * {u} + k;", f"v[k] = {identity};")
            with code.block("if (row_ok && j < n_scan)"):
                _prologue(code, plan, acc)
            code("if (k > 0) v[k] = scan_op(v[k - 1], v[k]);")
        _combine(code, acc, identity, u, bx, plan.result.dtype.is_complex)
        with code.block(f"for (int k = 0; k < {u}; ++k)", unroll=True):
            code(f"const Index j = c0 + (Index)tx * {u} + k;")
            with code.block("if (row_ok && j < n_scan)"):
                _epilogue(code, plan, acc)
        code(
            "__syncthreads();",
            f"if (tx == {bx - 1}) kf_carry[ty] = scan_op(prefix, v[{u - 1}]);",
        )


def _params(plan: ScanPlan, spec: ScanKernelSpec) -> list[str]:
    """Inputs, scalars, outputs (the kernel ABI's order), all tensors over the domain."""
    rank, index = spec.rank, spec.index_type
    params = [
        f"kf::Tensor<{u.val.dtype.cuda_type}, {rank}, {index}> in{k}"
        for k, u in enumerate(plan.input_uses)
    ]
    params += [f"{compute_ctype(s.dtype)} s{k}" for k, s in enumerate(plan.scalars)]
    params += [
        f"kf::Tensor<{o.dtype.cuda_type}, {rank}, {index}> out{k}"
        for k, o in enumerate(plan.fusion.outputs)
    ]
    return params


def _loads(code: Code, plan: ScanPlan, domain: DomainMap) -> dict[Use, str]:
    """Load the inputs `domain` reads at element j of the row; their compute-typed names."""
    leaves = {}
    d = plan.dim
    for use in domain.input_uses:
        k = plan.input_uses.index(use)
        code(f"const auto x{k} = kf::load(in{k}, base_in{k} + j * in{k}.stride[{d}]);")
        leaves[use] = from_storage(f"x{k}", use.val.dtype)
    return leaves


def _scalar_names(plan: ScanPlan) -> dict[Scalar, str]:
    return {s: f"s{k}" for k, s in enumerate(plan.scalars)}


def _prologue(code: Code, plan: ScanPlan, acc: str) -> None:
    """v[k] = the scan's input at element j, computed from the loaded inputs."""
    domain = plan.prologue
    leaves = _loads(code, plan, domain)
    fused = contraction.products(plan.fusion)
    body = emit_body(domain.uses, leaves, _scalar_names(plan), prefix="p", fused=fused)
    code(*body.lines)
    code(f"v[k] = ({acc})({body.names[Use(plan.scan.inputs[0], plan.view)]});")


def _epilogue(code: Code, plan: ScanPlan, acc: str) -> None:
    """Every output at element j, from the prefix sum and the loaded inputs."""
    domain = plan.epilogue
    result = plan.result
    code(f"const {acc} scanned = scan_op(prefix, v[k]);")
    leaves = _loads(code, plan, domain)
    leaves[Use(result, plan.view)] = round_to_dtype("scanned", result.dtype)
    fused = contraction.products(plan.fusion)
    body = emit_body(domain.uses, leaves, _scalar_names(plan), prefix="e", fused=fused)
    code(*body.lines)
    for k, out in enumerate(plan.fusion.outputs):
        assert isinstance(out, TensorView)
        value = body.store(Use(out, plan.output_view(out)))
        code(f"kf::store(out{k}, base_out{k} + j * out{k}.stride[{plan.dim}], {value});")


def _combine(
    code: Code, acc: str, identity: str, unroll: int, block_x: int, complex_values: bool
) -> None:
    """`prefix`: the sum of the row's elements before this thread's first one in the chunk
    (the carry, the warps before, the lanes before), from the threads' totals v[unroll-1]."""
    full = "0xffffffffu"
    # A complex accumulator moves part by part (the runtime's shuffled); the others, which
    # the shuffle takes whole, keep the intrinsic.
    shfl_up = "kf::detail::shfl_up" if complex_values else "__shfl_up_sync"
    code(f"{acc} total = v[{unroll - 1}];")
    with code.block("for (int o = 1; o < 32; o <<= 1)"):
        code(
            f"const {acc} below = {shfl_up}({full}, total, o);",
            "if (lane >= o) total = scan_op(below, total);",
        )
    # The lanes before this one, exactly (total - own total would round, and make NaN of an
    # infinite total).
    code(
        f"{acc} before = {shfl_up}({full}, total, 1);",
        f"if (lane == 0) before = {identity};",
        "if (lane == 31) kf_warp_total[ty][warp] = total;",
        "__syncthreads();",
        f"{acc} prefix = kf_carry[ty];",
    )
    if block_x > WARP:
        with code.block("for (int w = 0; w < warp; ++w)"):
            code("prefix = scan_op(prefix, kf_warp_total[ty][w]);")
    code("prefix = scan_op(prefix, before);")

"""What every generated kernel is built from, written once for the pointwise, reduction
(inner, outer, finalize) and persistent kernels: the signature (attributes, name, parameters),
a row's coordinates (decompose), and the loads and stores of vectors by access kind."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection, Iterator

from kfuse.codegen.layout import BCAST, VEC
from kfuse.codegen.registers import register_array
from kfuse.runtime.runtime_header import with_optional_parts


def kernel_header(
    name: str,
    params: list[str],
    threads: int,
    *,
    bounded: bool = True,
    min_blocks: int | None = None,
    cluster: int = 1,
) -> list[str]:
    """The lines opening kernel `name` (up to its body's brace).

    bounded: __launch_bounds__(threads[, min_blocks]), which lets NVVM budget registers for
    the block size; a kernel compiled with a register limit (CompileParams.maxrregcount) has
    none, because NVRTC does not apply --maxrregcount to a kernel with launch bounds (one
    bounded to 128 threads kept 40 to 48 registers under --maxrregcount=32; unbounded, 32).
    cluster: thread-block cluster size along x (sm_90+), > 1 adds __cluster_dims__."""
    attributes = []
    if bounded:
        blocks = "" if min_blocks is None else f", {min_blocks}"
        attributes.append(f"__launch_bounds__({threads}{blocks})")
    if cluster > 1:
        attributes.append(f"__cluster_dims__({cluster}, 1, 1)")
    prefix = "".join(f"{a} " for a in attributes)
    return [
        f'extern "C" __global__ void {prefix}{name}(',
        "    " + ",\n    ".join(params) + ") {",
    ]


# ---------------------------------------------------------------------------------------------
# Loads and stores of one vector of V lanes, by access kind (kfuse.codegen.layout): VEC is one
# aligned vector access, BCAST one element (the operand is broadcast along the vectorized
# axis), anything else (STRIDED, or a VEC operand where only an element-wise access is
# allowed) V element accesses. Every kernel kind loads and stores through these, with the
# address expressions of its own iteration.
# ---------------------------------------------------------------------------------------------


def load_vector_statement(target: str, tensor: str, vec: int, at: str) -> str:
    """`target` = the V-lane vector of `tensor` starting at element offset `at`."""
    return f"{target} = kf::load_vec<{vec}>({tensor}, {at});"


def load_lanes(
    target: str, tensor: str, vec: int, element_at: str, indent: str, guard: str | None = None
) -> list[str]:
    """target[j] = element `element_at` (an expression of lane j) of `tensor`, lane by lane;
    guard: a condition on j, where only some lanes lie inside the data."""
    load = f"{target}[j] = kf::load({tensor}, {element_at});"
    loop = f"{indent}for (int j = 0; j < {vec}; ++j)"
    if guard is None:
        return ["#pragma unroll", f"{loop} {load}"]
    return ["#pragma unroll", f"{loop} {{", f"{indent}  if ({guard}) {load}", f"{indent}}}"]


def load_vector(
    kind: str,
    target: str,
    tensor: str,
    vec: int,
    indent: str,
    *,
    at: str,
    element_at: str,
    bcast_at: str | None = None,
) -> list[str]:
    """Lines loading one vector of an operand of access `kind` into `target`: at `at` (VEC),
    element `bcast_at` into `target` itself (BCAST), or lane by lane at `element_at`."""
    if kind == VEC:
        return [f"{indent}{load_vector_statement(target, tensor, vec, at)}"]
    if kind == BCAST:
        return [f"{indent}{target} = kf::load({tensor}, {bcast_at});"]
    return load_lanes(target, tensor, vec, element_at, indent)


def store_vector(
    kind: str, tensor: str, value: str, vec: int, indent: str, *, at: str, element_at: str
) -> list[str]:
    """Lines storing the V lanes of `value` (a kf::Vec) into `tensor`: one vector access at
    `at` (VEC), else lane by lane at `element_at`."""
    if kind == VEC:
        return [f"{indent}kf::store_vec<{vec}>({tensor}, {at}, {value});"]
    return [
        "#pragma unroll",
        f"{indent}for (int j = 0; j < {vec}; ++j) kf::store({tensor}, {element_at}, {value}[j]);",
    ]


def vector_addresses(base: str, k: int) -> tuple[str, str, str]:
    """Input k's offsets (vector, lane j, broadcast) for load_vector_block from `base`, its
    row's first element."""
    return f"{base} + i0", f"{base} + (i0 + j) * step_in{k}", base


def load_vector_block(
    ctypes: list[str],
    kinds: tuple[str, ...],
    vec: int,
    count: str,
    indent: str,
    index: str,
    addresses: Callable[[int], tuple[str, str, str]],
    skip: Collection[int] = (),
) -> list[str]:
    """Declare x{i}[count] for every loop operand i (element type ctypes[i], access kinds[i])
    and load `count` vectors into them: iteration u declares `index` (e.g. "const Index i0 =
    ..."), then loads operand i from in{i} at addresses(i) = (vector, lane j, broadcast)
    offsets, as load_vector takes them. `skip`: operands the caller loads itself."""
    chosen = [i for i in range(len(kinds)) if i not in skip]
    lines = [register_array(f"x{i}", ctypes[i], kinds[i], vec, count, indent) for i in chosen]
    lines += [
        "#pragma unroll",
        f"{indent}for (int u = 0; u < {count}; ++u) {{",
        f"{indent}  {index};",
    ]
    for i in chosen:
        kind = kinds[i]
        at, element_at, bcast_at = addresses(i)
        lines += load_vector(
            kind,
            f"x{i}[u]",
            f"in{i}",
            vec,
            indent + "  ",
            at=at,
            element_at=element_at,
            bcast_at=bcast_at,
        )
    return lines + [f"{indent}}}"]


def decompose(
    index: str,
    axes: range,
    operands: list[str],
    indent: str,
    prefix: str = "base_",
    coordinate: Callable[[int], list[str]] | None = None,
) -> list[str]:
    """Add to `<prefix><op>` (base_<op> by default) the offsets of flattened index `index`
    over the canonical `axes` (outermost first), using out0's sizes: the coordinates of a row
    (the kept elements of a reduction, the outer axes of a pointwise kernel). `coordinate(d)`:
    lines that use coordinate c<d> once it is known (a padded read's window check)."""
    axes_l = list(axes)
    if not axes_l or not operands:
        return []
    lines = [f"{indent}{{", f"{indent}  Index rem = {index};"]
    for n, d in enumerate(reversed(axes_l)):
        last = n == len(axes_l) - 1
        coord = "rem" if last else f"kf::index_mod(rem, out0.size[{d}])"
        lines.append(f"{indent}  const Index c{d} = {coord};")
        if not last:
            lines.append(f"{indent}  rem = kf::index_div(rem, out0.size[{d}]);")
        lines += [f"{indent}  {prefix}{op} += c{d} * {op}.stride[{d}];" for op in operands]
        if coordinate is not None:
            lines += [f"{indent}  {line}" for line in coordinate(d)]
    lines.append(f"{indent}}}")
    return lines


# ---------------------------------------------------------------------------------------------
# Building a kernel's body
# ---------------------------------------------------------------------------------------------


class Code:
    """The lines of a kernel's source, built in nested blocks instead of hand-indented strings:

        code = Code()
        with code.block("for (int u = 0; u < 4; ++u)", unroll=True):
            code("x[u] = 0;")

    gives "#pragma unroll", "for (int u = 0; u < 4; ++u) {", "  x[u] = 0;", "}". Lines are
    indented two spaces a level; preprocessor lines (#pragma) stay at column 0, as NVRTC and
    the emulator's host compiler both take them. `indent` is the current indentation, for the
    helpers above that take one."""

    def __init__(self, depth: int = 0) -> None:
        self.lines: list[str] = []
        self.depth = depth

    @property
    def indent(self) -> str:
        return "  " * self.depth

    def __call__(self, *lines: str) -> None:
        """Append statements at the current depth."""
        for line in lines:
            self.lines.append(line if line.startswith("#") else self.indent + line)

    def extend(self, lines: list[str]) -> None:
        """Append lines that are indented already (from the helpers that take an indent)."""
        self.lines += lines

    @contextlib.contextmanager
    def block(self, *head: str, unroll: bool = False) -> Iterator[None]:
        """A braced block: `head` (its lines; the brace follows the last; none: a bare
        scope), its body one level deeper, the closing brace. unroll: "#pragma unroll"
        before it."""
        if unroll:
            self("#pragma unroll")
        self(*head[:-1])
        self(f"{head[-1]} {{" if head else "{")
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1
        self("}")

    def open_kernel(self, header: list[str]) -> None:
        """Append a kernel's header (kernel_header: its signature, up to the brace) and go
        into its body."""
        self.extend(header)
        self.depth = 1

    def kernel_source(self) -> str:
        """Close the kernel opened by open_kernel; the whole source (with the runtime's
        float8 part where the kernel uses a float8 type)."""
        self.depth = 0
        self("}", "")
        return with_optional_parts("\n".join(self.lines))

    def otherwise(self, head: str = "else") -> None:
        """Close the innermost block and open its `else` (or `else if (...)`) branch."""
        self.depth -= 1
        self(f"}} {head} {{")
        self.depth += 1


def row_count(axes: range) -> list[str]:
    """Statements defining n_rows: the product of out0's extents over `axes` (the kept axes
    of a reduction, a pointwise kernel's outer axes)."""
    return ["Index n_rows = 1;", *[f"n_rows *= out0.size[{d}];" for d in axes]]


@contextlib.contextmanager
def row_loop(
    code: Code,
    per_block: int,
    thread: str,
    block: str = "blockIdx.x",
    blocks: str = "gridDim.x",
    rows_whole: bool = False,
) -> Iterator[None]:
    """Within: the body of the grid-strided loop over rows, `per_block` rows a block (block
    index `block` of `blocks`), this thread's row `row` (row0 + `thread`) and `row_ok`.
    rows_whole: the caller knows the rows are a multiple of `per_block`, so that every row
    of a block exists (row0 is a multiple of per_block below n_rows) and row_ok is the
    constant true, which the compiler folds out of every test that names it."""
    with code.block(
        f"for (Index row0 = (Index){block} * {per_block}; row0 < n_rows;"
        f" row0 += (Index){blocks} * {per_block})"
    ):
        row_ok = "true" if rows_whole or per_block == 1 else "row < n_rows"
        code(f"const Index row = row0 + {thread};", f"const bool row_ok = {row_ok};")
        yield


def cluster_block_index(cluster: int) -> tuple[str, str]:
    """C++ for the block's index among the grid's work units and their count: a cluster's
    blocks (sm_90 __cluster_dims__(cluster, 1, 1)) share one unit, so both are counted in
    clusters."""
    if cluster == 1:
        return "blockIdx.x", "gridDim.x"
    return f"(blockIdx.x / {cluster})", f"(gridDim.x / {cluster})"

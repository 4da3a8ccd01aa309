"""Row operands that do not walk a persistent kernel's row in one stride (SPLIT: a group
norm's per-channel weight over the row [C/G, H, W]): the element offset of row index e is
decomposed over the operand's own row sub-axes, which it is passed with after its kept axes
(kf::Tensor of rank kept + sub-axes; reduction_plan.Operand.row_split).

A vector's first element is decomposed once (a division and a modulo per sub-axis but the
outermost); its other lanes step the coordinates like an odometer (an increment and a
compare a lane), since a division an element would cost more than the memory traffic of a
bf16 element. Sub-axes whose stride is 0 in this layout (the weight's [H * W]) still count,
but never change the offset.

Where the host saw that every vector's lanes read one element (`uniform`: the unwalked
sub-axes at the inner end of the row span a multiple of the vector, as a group norm's H * W
does for vectors of 8), the vector's element is loaded once and copied to every lane, and
only the walked sub-axes' coordinates are computed: one load and no odometer a vector instead
of V loads and V steps. sm_90 SASS of the bf16 group norm [64, 256, 56, 56] (H200 params):
G = 32 from 2,496 to 1,688 instructions (121 loads to 23), G = 8 from 8,080 to 5,232, G = 1
(cluster blocks) from 15,728 to 10,056 (806 loads to 120)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kfuse.codegen.pointwise import PointwiseKernelSpec


def _unwalked_span(split: tuple[tuple[int, int], ...]) -> int | None:
    """Elements of the unwalked (stride 0) sub-axes inside the innermost walked one: how many
    consecutive lanes read one element; None when no sub-axis is walked."""
    span = 1
    for extent, stride in reversed(split):
        if stride != 0:
            return span
        span *= extent
    return None


def _div(index: str, extent: str) -> str:
    """C++ for index / extent, both non-negative, divided unsigned (kf::index_div): fewer
    instructions than signed `/`; a group norm forward [64, 256, 56, 56] ran 67.3 -> 64.4 us
    on the H200 with its per-channel loads' divisions unsigned (2026-12-05, at a8bfd39)."""
    return f"kf::index_div({index}, (Index)({extent}))"


def _mod(index: str, extent: str) -> str:
    """C++ for index % extent, unsigned as in _div."""
    return f"kf::index_mod({index}, (Index)({extent}))"


def lanes_read_one_element(split: tuple[tuple[int, int], ...], vector: int) -> bool:
    """Whether every vector of `vector` lanes (starting at a multiple of `vector` in the row)
    of an operand read through these (extent, stride) sub-axes reads one element: the
    unwalked sub-axes at the inner end span a multiple of the vector (`uniform` below), or
    nothing is walked (every element of the row is the same one)."""
    span = _unwalked_span(split)
    return span is None or span % vector == 0


def lanes_read_two_elements(split: tuple[tuple[int, int], ...], vector: int) -> bool:
    """Whether every vector of `vector` lanes reads at most two elements (`two` below): some
    sub-axis is walked and the unwalked ones inside the innermost walked one span at least
    the vector, so its lanes cross into the next element at most once (a batch norm's
    per-channel statistics over rows of C x H x W, H x W = 49, vectors of 8)."""
    span = _unwalked_span(split)
    return span is not None and span >= vector


def split_lane_loads(
    target: str,
    tensor: str,
    first: int,
    walked: tuple[bool, ...],
    vec: int,
    base: str,
    indent: str,
    guard: str | None = None,
    uniform: bool = False,
    two: bool = False,
    sizes_of: str | None = None,
) -> list[str]:
    """target[j] = `tensor`'s element of row index i0 + j, j < vec (guard: a condition on j
    for the lanes inside the row); the row sub-axes are dims first .. first + len(walked) - 1
    of `tensor`, outermost first; walked[k]: sub-axis k has a non-zero stride; uniform: the
    vec lanes of a vector starting at i0 (a multiple of vec) read one element; two: they read
    at most two (lanes_read_two_elements), loaded once each and selected per lane;
    sizes_of: the tensor whose sizes of those dims to divide by (default `tensor`): another
    operand whose sub-axes have the same extents, so that the compiler computes the
    coordinates once for both (it cannot know that two tensors' size fields agree)."""
    dims = list(range(first, first + len(walked)))
    size = [f"{sizes_of or tensor}.size[{d}]" for d in dims]
    stride = [f"{tensor}.stride[{d}]" for d in dims]
    inner = indent + "  "
    lines = [f"{indent}{{", f"{inner}Index kf_rem = i0;"]
    if uniform and guard is None:  # a cut vector (never uniform: see _uniform_lanes) steps
        uniform_lines = _uniform_lanes(target, tensor, walked, vec, base, size, stride, inner)
        return [*lines, *uniform_lines, f"{indent}}}"]
    for k in reversed(range(len(dims))):
        if k == 0:
            lines.append(f"{inner}Index kf_c0 = kf_rem;")
        else:
            lines += [
                f"{inner}Index kf_c{k} = {_mod('kf_rem', size[k])};",
                f"{inner}kf_rem = {_div('kf_rem', size[k])};",
            ]
    terms = [f"kf_c{k} * {stride[k]}" for k in range(len(dims)) if walked[k]]
    lines.append(f"{inner}Index kf_off = {' + '.join(terms) if terms else '0'};")
    if two and guard is None and any(walked):
        return [
            *lines,
            *_two_lanes(target, tensor, walked, vec, base, size, stride, inner),
            f"{indent}}}",
        ]
    load = f"{target}[j] = kf::load({tensor}, {base} + kf_off);"
    lines += [
        "#pragma unroll",
        f"{inner}for (int j = 0; j < {vec}; ++j) {{",
        f"{inner}  {f'if ({guard}) ' if guard else ''}{load}",
        *_step(len(dims) - 1, walked, size, stride, inner + "  "),
        f"{inner}}}",
        f"{indent}}}",
    ]
    return lines


def _uniform_lanes(
    target: str,
    tensor: str,
    walked: tuple[bool, ...],
    vec: int,
    base: str,
    size: list[str],
    stride: list[str],
    ind: str,
) -> list[str]:
    """The vector's one element, copied to its lanes: the walked sub-axes' coordinates of i0
    (an unwalked one only divides what is left; nothing outside the outermost walked one is
    computed). A uniform row's length is a multiple of the vector, so no vector is
    cut by the row's end and no lane needs a guard."""
    lines: list[str] = []
    terms = []
    outermost = walked.index(True) if any(walked) else len(walked)
    for k in reversed(range(outermost, len(walked))):
        if k == 0:  # the row ends before the outermost sub-axis wraps
            lines.append(f"{ind}Index kf_c{k} = kf_rem;")
        elif k == outermost:
            lines.append(f"{ind}Index kf_c{k} = {_mod('kf_rem', size[k])};")
        elif walked[k]:
            lines += [
                f"{ind}Index kf_c{k} = {_mod('kf_rem', size[k])};",
                f"{ind}kf_rem = {_div('kf_rem', size[k])};",
            ]
        else:
            lines.append(f"{ind}kf_rem = {_div('kf_rem', size[k])};")
        if walked[k]:
            terms.append(f"kf_c{k} * {stride[k]}")
    offset = " + ".join(reversed(terms)) if terms else "0"
    return [
        *lines,
        f"{ind}const auto kf_one = kf::load({tensor}, {base} + {offset});",
        "#pragma unroll",
        f"{ind}for (int j = 0; j < {vec}; ++j) {target}[j] = kf_one;",
    ]


def _two_lanes(
    target: str,
    tensor: str,
    walked: tuple[bool, ...],
    vec: int,
    base: str,
    size: list[str],
    stride: list[str],
    ind: str,
) -> list[str]:
    """The vector's first element, and where its lanes cross into the next position of the
    innermost walked sub-axis, the element there (the odometer stepped once); each lane
    takes one of the two. The coordinates kf_c<k> and kf_off of i0 are already computed."""
    walk = max(k for k, w in enumerate(walked) if w)
    inside = range(walk + 1, len(walked))  # the unwalked sub-axes inside it
    position, span = "0", "1"
    for k in inside:
        position = f"({position}) * {size[k]} + kf_c{k}"
        span = f"{span} * {size[k]}"
    return [
        f"{ind}const Index kf_in = {position};",
        f"{ind}const Index kf_span = {span};",
        f"{ind}const auto kf_first = kf::load({tensor}, {base} + kf_off);",
        f"{ind}auto kf_next = kf_first;",
        f"{ind}if (kf_in + {vec - 1} >= kf_span) {{",
        *_step(walk, walked, size, stride, ind + "  "),
        f"{ind}  kf_next = kf::load({tensor}, {base} + kf_off);",
        f"{ind}}}",
        "#pragma unroll",
        f"{ind}for (int j = 0; j < {vec}; ++j)",
        f"{ind}  {target}[j] = kf_in + j < kf_span ? kf_first : kf_next;",
    ]


def _step(
    k: int, walked: tuple[bool, ...], size: list[str], stride: list[str], ind: str
) -> list[str]:
    """Advance sub-axis k by one, carrying into the outer ones (the outermost never wraps:
    the row ends first)."""
    lines = [f"{ind}++kf_c{k};"]
    if walked[k]:
        lines.append(f"{ind}kf_off += {stride[k]};")
    if k == 0:
        return lines
    wrap = [f"{ind}  kf_c{k} = 0;"]
    if walked[k]:
        wrap.append(f"{ind}  kf_off -= {size[k]} * {stride[k]};")
    wrap += _step(k - 1, walked, size, stride, ind + "  ")
    return [*lines, f"{ind}if (kf_c{k} == {size[k]}) {{", *wrap, f"{ind}}}"]


def row_extent(tensor: str, first: int, count: int) -> str:
    """The row's length from `tensor`'s sizes: its one row axis, or its sub-axes' product."""
    return " * ".join(f"{tensor}.size[{d}]" for d in range(first, first + count))


def split_vector_loads(
    spec: PointwiseKernelSpec, k: int, target: str, vec: int, indent: str
) -> list[str]:
    """A pointwise kernel's target[j] = SPLIT input k's element i0 + j of the row, j < vec
    (its sub-axes follow its row axes)."""
    whole = vec == spec.vector  # else one element at a ragged row end
    walked = spec.input_splits[k]
    return split_lane_loads(
        target,
        f"in{k}",
        spec.rank - 1,
        walked,
        vec,
        f"base_in{k}",
        indent,
        None,
        whole and spec.split_uniform[k],
        whole and spec.split_two[k],
        f"in{spec.split_sizes_of[k]}" if spec.split_sizes_of else None,
    )

"""Padded reads in the pointwise kernel: a pad of an input, read by the kernel that consumes it
(kfuse.codegen.domain.PaddedRead), the pad value wherever the output's element is not one of
the tensor's.

A padded read is input k of the kernel: its tensor over the merged domain (the pointer moved
past what negative widths crop), then one more axis per axis w padded at an end
(`in<k>.size[rank + w]` the tensor's extent along it, `in<k>.stride[rank + w]` its low width;
PointwiseKernelSpec.input_rank). Padded axes never merge with others
(kfuse.codegen.layout.merge_axes), so the kernel knows each one's coordinate: a row's padded
axes are checked once a row (`win_in<k>`), the inner one element by element. The row's base
offset is moved back by the low widths, so that coordinate c reads the tensor's element
c - low; outside the window nothing is read and the element is the pad value. A whole vector
at a time (WINDOWED_VEC) where the inner axis is not padded or, for a cat's part, its window
there is whole vectors, else element by element.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kfuse import switches
from kfuse.codegen.expressions import scalar_operand
from kfuse.codegen.layout import WINDOWED_VEC

if TYPE_CHECKING:
    from kfuse.codegen.domain import DomainMap
    from kfuse.codegen.kernel import Code
    from kfuse.codegen.pointwise import PointwiseKernelSpec
    from kfuse.dtypes import DataType


def reads(spec: PointwiseKernelSpec) -> list[int]:
    """The inputs of `spec` that are padded reads."""
    return [k for k, axes in enumerate(spec.windows) if axes]


def _low(spec: PointwiseKernelSpec, k: int, w: int) -> str:
    return f"(Index)in{k}.stride[{spec.rank + w}]"


def _extent(spec: PointwiseKernelSpec, k: int, w: int) -> str:
    return f"(Index)in{k}.size[{spec.rank + w}]"


def row_declarations(spec: PointwiseKernelSpec) -> list[str]:
    """Before a row's decomposition: each padded read's flag of a row inside its window."""
    return [f"bool win_in{k} = true;" for k in reads(spec)]


def row_checks(spec: PointwiseKernelSpec, d: int) -> list[str]:
    """Inside the decomposition, once coordinate c<d> of row axis d is known: each padded
    read padded along d checks it against its window."""
    lines = []
    for k in reads(spec):
        for w, axis in enumerate(spec.windows[k]):
            if axis == d:
                inside = window_check(spec, f"c{d}", _low(spec, k, w), _extent(spec, k, w))
                lines.append(f"win_in{k} = win_in{k} && {inside};")
    return lines


def row_offsets(spec: PointwiseKernelSpec) -> list[str]:
    """After the decomposition: each padded read's base moved back by its low widths."""
    return [
        f"base_in{k} -= {_low(spec, k, w)} * in{k}.stride[{axis}];"
        for k in reads(spec)
        for w, axis in enumerate(spec.windows[k])
    ]


def _inside(spec: PointwiseKernelSpec, k: int, i: str) -> str:
    """Whether read k's element at inner coordinate `i` of a row is inside its window."""
    inner = spec.rank - 1
    checks = [f"win_in{k}"] if any(a != inner for a in spec.windows[k]) else []
    checks += [
        window_check(spec, i, _low(spec, k, w), _extent(spec, k, w))
        for w, axis in enumerate(spec.windows[k])
        if axis == inner
    ]
    return " && ".join(checks)


def window_check(spec: PointwiseKernelSpec, c: str, low: str, extent: str) -> str:
    """Whether coordinate `c` is in the window [low, low + extent): c - low compared unsigned
    (a negative difference is a large unsigned one), in 32 bits where the kernel indexes in
    int (kf::window_in32, switches.WINDOW_CHECK_32), else in 64 (kf::window_in)."""
    if spec.index_type == "int" and switches.WINDOW_CHECK_32:
        return f"kf::window_in32({c}, {low}, {extent})"
    return f"kf::window_in({c}, {low}, {extent})"


def fill(domain: DomainMap, k: int) -> str:
    """Read k's pad value in its storage type."""
    use = domain.input_uses[k]
    value = domain.padded[use].fill
    param = f"s{domain.scalars.index(value)}" if not value.is_constant else None
    return f"kf::cast<{use.val.dtype.cuda_type}>({scalar_operand(value, param)})"


def vector_load(spec: PointwiseKernelSpec, domain: DomainMap, k: int, indent: str) -> list[str]:
    """Load the padded read k's u-th vector into x<k>[u], at element i0 of the row."""
    vec, value = spec.vector, fill(domain, k)
    if spec.input_kinds[k] == WINDOWED_VEC:  # the whole vector is inside or not: i0 decides
        return [
            f"{indent}x{k}[u] = kf::window_load_vec<{vec}>(in{k}, base_in{k} + i0, "
            f"{_inside(spec, k, 'i0')}, {value});"
        ]
    return [
        "#pragma unroll",
        f"{indent}for (int j = 0; j < {vec}; ++j) {{",
        f"{indent}  x{k}[u][j] = kf::window_load(in{k}, base_in{k} + (i0 + j) * step_in{k}, "
        f"{_inside(spec, k, 'i0 + j')}, {value});",
        f"{indent}}}",
    ]


def element_load(spec: PointwiseKernelSpec, domain: DomainMap, k: int, at: str, i: str) -> str:
    """Read k's element at offset `at` of the row, inner coordinate `i`."""
    return f"kf::window_load(in{k}, {at}, {_inside(spec, k, i)}, {fill(domain, k)})"


def part_selectors(spec: PointwiseKernelSpec, domain: DomainMap, i: str) -> tuple[str, ...]:
    """Per cat the kernel computes (DomainMap.cats), the part that the element at inner
    coordinate `i` of the row falls in: the first part whose guard (a read with a window
    along the cat's axis) is inside its window, the default part (CatSelect.default) where
    none is. The windows of a cat's parts tile its axis, so exactly one holds."""
    out = []
    for select in domain.cats.values():
        chain = "".join(f"{_inside(spec, k, i)} ? {p} : " for p, k in select.checked)
        out.append(f"({chain}{select.default})")
    return tuple(out)


def vector_part_selector(spec: PointwiseKernelSpec, domain: DomainMap) -> str | None:
    """The part of the kernel's one cat that a whole vector at row coordinate i0 falls in,
    where every guard of that cat is a WINDOWED_VEC read (each vector is inside its window
    or outside it, whole: the lanes share the part); None where the kernel computes no cat,
    several, or one whose windows split vectors. The kernel then computes each vector's part
    alone, its lanes' loop once per part, instead of selecting per lane among every part's
    values (rope_partial: 481 -> 374 us on an H100, the hand edit of the same form)."""
    if not _whole_vector_cat(spec.input_kinds, domain):
        return None
    return part_selectors(spec, domain, "i0")[0]


def _whole_vector_cat(input_kinds: tuple[str, ...], domain: DomainMap) -> bool:
    """Whether the kernel computes one cat and every guard but the last of it is a
    WINDOWED_VEC read (vector_part_selector's condition)."""
    if len(domain.cats) != 1:
        return False
    (select,) = domain.cats.values()
    return all(input_kinds[k] == WINDOWED_VEC for _, k in select.checked)


@dataclass(frozen=True)
class PartSlots:
    """Register slots that the parts of the kernel's one cat share (switches.PART_LOCAL_LOADS).

    A vector lies in one part (vector_part_selector), so it needs only that part's windowed
    reads: each part loads its own into the slots, inside a branch on the vector's part,
    and a slot holds a different input in each part. RoPE with a partial rotary width
    (rope_partial: three parts reading four, four and one vectors) held all nine reads'
    vectors for each of a thread's two vectors, 72 registers of 107, which left an H100 SM
    four blocks of 128 threads, too few loads in flight for the memory.

    members[p]: part p's inputs (WINDOWED_VEC reads inside it), in order; slot_of: each
    member's slot array; slots: (array name, storage type) of every slot."""

    members: tuple[tuple[int, ...], ...]
    slot_of: dict[int, str]
    slots: tuple[tuple[str, str], ...]


def _part_members(
    input_kinds: tuple[str, ...], domain: DomainMap
) -> tuple[tuple[int, ...], ...] | None:
    """PartSlots.members for a kernel of these input kinds, or None where its cat does not
    select a part per vector, the switches are off, or no two parts' reads would share a
    slot."""
    if not switches.PART_LOCAL_LOADS or not switches.CAT_PART_PER_VECTOR:
        return None
    if not _whole_vector_cat(input_kinds, domain):
        return None
    (cat,) = domain.cats.values()
    members = tuple(
        tuple(
            k
            for k, u in enumerate(domain.input_uses)
            if u.part is not None
            and u.part.cat is cat.expr
            and u.part.index == p
            and input_kinds[k] == WINDOWED_VEC
        )
        for p in range(len(cat.expr.inputs))
    )
    if sum(map(len, members)) <= max(map(len, members), default=0):
        return None
    return members


def slot_bytes(input_kinds: tuple[str, ...], domain: DomainMap, vector: int) -> int:
    """The bytes of the part slots a thread holds for each of its vectors (part_slots'),
    0 where the kernel has none: the scheduler's question, before there is a spec."""
    members = _part_members(input_kinds, domain)
    if members is None:
        return 0
    keys, _ = _slot_keys(members, domain)
    return sum(dtype.itemsize * vector for dtype, _ in keys)


def part_slots(spec: PointwiseKernelSpec, domain: DomainMap) -> PartSlots | None:
    """The slots of a kernel whose cat selects a part per vector, or None where it does not,
    the switches are off, or no two parts' reads would share a slot."""
    members = _part_members(spec.input_kinds, domain)
    if members is None:
        return None
    keys, slot_of = _slot_keys(members, domain)
    slots = tuple((f"kf_slot{n}", dtype.cuda_type) for n, (dtype, _) in enumerate(keys))
    return PartSlots(members, {k: f"kf_slot{n}" for k, n in slot_of.items()}, slots)


def _slot_keys(
    members: tuple[tuple[int, ...], ...], domain: DomainMap
) -> tuple[list[tuple[DataType, int]], dict[int, int]]:
    """The slots, as (storage type, n-th read of that type in a part), and each member's
    slot: a part's reads of one type take that type's slots in order."""
    keys: list[tuple[DataType, int]] = []
    slot_of: dict[int, int] = {}
    for ks in members:
        seen: dict[DataType, int] = {}
        for k in ks:
            dtype = domain.input_uses[k].val.dtype
            key = (dtype, seen.get(dtype, 0))
            seen[dtype] = key[1] + 1
            if key not in keys:
                keys.append(key)
            slot_of[k] = keys.index(key)
    return keys, slot_of


def slot_loads(
    code: Code,
    spec: PointwiseKernelSpec,
    domain: DomainMap,
    slots: PartSlots,
    unroll: int,
    offset: str,
) -> None:
    """Declare the slots and kf_parts[unroll], then per vector u (at element `offset` of the
    row) its part and that part's reads into the slots."""
    vec = spec.vector
    code(f"int kf_parts[{unroll}];")
    code(*[f"kf::Vec<{ctype}, {vec}> {name}[{unroll}];" for name, ctype in slots.slots])
    selector = vector_part_selector(spec, domain)
    with code.block(f"for (int u = 0; u < {unroll}; ++u)", unroll=True):
        code(f"const Index i0 = {offset};")
        code(f"kf_parts[u] = {selector};")
        loading = [(p, ks) for p, ks in enumerate(slots.members) if ks]
        for n, (p, ks) in enumerate(loading):
            head = "if" if n == 0 else "else if"
            with code.block(f"{head} (kf_parts[u] == {p})"):
                for k in ks:
                    code(f"{slots.slot_of[k]}[u] = {_slot_load(spec, domain, k)};")


def _slot_load(spec: PointwiseKernelSpec, domain: DomainMap, k: int) -> str:
    """Part member k's vector at element i0 of the row, in a branch of the part the vector
    lies in. Each member's window along the cat's axis is that part's (its offset, and its
    extent, which the runtime checks against the other operands': an InputError names the
    two that differ), so the windows that picked the part put every member inside its own,
    and a kernel of one vector a thread loads it unchecked (switches.PART_LOADS_UNCHECKED):
    no compare, no fill merged."""
    if switches.PART_LOADS_UNCHECKED and spec.unroll == 1:
        return f"kf::load_vec<{spec.vector}>(in{k}, base_in{k} + i0)"
    return (
        f"kf::window_load_vec<{spec.vector}>(in{k}, base_in{k} + i0, "
        f"{_inside(spec, k, 'i0')}, {fill(domain, k)})"
    )


def lane_loops(
    code: Code,
    spec: PointwiseKernelSpec,
    domain: DomainMap,
    call: Callable[[tuple[str, ...]], str],
    part_at: str | None = None,
) -> None:
    """The loop over a vector's lanes j, `call(parts)` the statement of one lane given the
    part of each cat (part_selectors): one loop choosing per lane, or where the kernel's
    cat has whole-vector windows (vector_part_selector, switches.CAT_PART_PER_VECTOR) the
    vector's part chosen once (`part_at`: where slot_loads keeps it) and one loop per part,
    the part a constant in it."""
    vec = spec.vector
    per_vector = vector_part_selector(spec, domain)
    if per_vector is None or not switches.CAT_PART_PER_VECTOR:
        with code.block(f"for (int j = 0; j < {vec}; ++j)", unroll=True):
            code(call(part_selectors(spec, domain, "i0 + j")))
        return
    (cat,) = domain.cats.values()
    count = len(cat.expr.inputs)
    with code.block():
        code(f"const int kf_part = {part_at or per_vector};")
        for p in range(count):
            head = "if" if p == 0 else "else if"
            with code.block(f"{head} (kf_part == {p})" if p < count - 1 else "else"):
                with code.block(f"for (int j = 0; j < {vec}; ++j)", unroll=True):
                    code(call((str(p),)))

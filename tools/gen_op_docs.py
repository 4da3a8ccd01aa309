"""Writes docs/ops.md, the op reference of the documentation site, from kfuse itself.

    python3 tools/gen_op_docs.py            # rewrite docs/ops.md
    python3 tools/gen_op_docs.py --check    # exit 1 if docs/ops.md is not what it would write

Every public method of fd.ops (kfuse.frontend.ops.Ops) gets a row: its call, the dtypes it
takes, whether nvFuser's fd.ops has the same name, and one line of meaning. The pointwise
methods are made from the op table (kfuse.ir.ops.OPS), so their call and meaning are the
row's; the others' are their signature and the first sentence of their docstring. The dtypes
are not written down anywhere to go stale: each op is defined once per dtype (PROBES below)
and the dtypes whose definition raises no DefinitionError are the ones listed.
tests/test_op_docs.py fails when docs/ops.md differs from what this writes.
"""

from __future__ import annotations

import inspect
import re
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kfuse import DataType, FusionDefinition
from kfuse.errors import ComplexCastWarning, DefinitionError
from kfuse.frontend.ops import Ops
from kfuse.ir.ops import OPS, OpInfo

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "docs" / "ops.md"
NVFUSER_TABLE = ROOT / "docs" / "guides" / "nvfuser-ops.md"

# The dtypes each op is probed with, in the groups the table names them by.
GROUPS = {
    "Bool": (DataType.Bool,),
    "integers": (DataType.Int32, DataType.Int),
    "floats": (DataType.Half, DataType.BFloat16, DataType.Float, DataType.Double),
    "Float8": (DataType.Float8_e4m3fn, DataType.Float8_e5m2),
    "complex": (DataType.ComplexFloat, DataType.ComplexDouble),
}
PROBED = tuple(dt for group in GROUPS.values() for dt in group)

Probe = Callable[[Any, Any], Any]


def _index(fd: Any, ndim: int) -> Any:
    return fd.define_tensor(shape=[-1] * ndim, dtype=DataType.Int)


def _sdpfa_bwd(fd: Any, t: Any) -> Any:
    q = fd.define_tensor(shape=[-1, -1, -1, -1], dtype=t.dtype)
    out, lse, seed, offset = fd.ops.sdpfa_fwd(q, q, q)
    return fd.ops.sdpfa_bwd(q, q, q, q, out, lse, 0.0, False, seed, offset, None)


def _attention(fd: Any, t: Any) -> Any:
    q = fd.define_tensor(shape=[-1, -1, -1, -1], dtype=t.dtype)
    return fd.ops.sdpfa_fwd(q, q, q)


# (section, how to define the op on a 2-D tensor t of the probed dtype) for every fd.ops
# method that is not a row of the op table. For factories the probed dtype is the one asked
# for. A method missing here stops the generator, so the reference cannot leave one out.
SECTIONS = (
    "Pointwise",
    "Factories and random numbers",
    "Shapes, indexing and layout",
    "Reductions and scans",
    "Normalizations",
    "Library ops",
)
PROBES: dict[str, tuple[str, Probe]] = {
    "truediv": ("Pointwise", lambda fd, t: fd.ops.truediv(t, t)),
    "cast": ("Pointwise", lambda fd, t: fd.ops.cast(t, DataType.Float)),
    "addcmul": ("Pointwise", lambda fd, t: fd.ops.addcmul(t, t, t, 2)),
    "triu": ("Pointwise", lambda fd, t: fd.ops.triu(t)),
    "full": ("Factories and random numbers", lambda fd, t: fd.ops.full([2, 3], 1, t.dtype)),
    "zeros": ("Factories and random numbers", lambda fd, t: fd.ops.zeros([2, 3], t.dtype)),
    "ones": ("Factories and random numbers", lambda fd, t: fd.ops.ones([2, 3], t.dtype)),
    "iota": ("Factories and random numbers", lambda fd, t: fd.ops.iota(4, dtype=t.dtype)),
    "uniform": (
        "Factories and random numbers",
        lambda fd, t: fd.ops.uniform(0, 1, [4], dtype=t.dtype),
    ),
    "normal": (
        "Factories and random numbers",
        lambda fd, t: fd.ops.normal(0, 1, [4], dtype=t.dtype),
    ),
    "rand_like": ("Factories and random numbers", lambda fd, t: fd.ops.rand_like(t)),
    "randn_like": ("Factories and random numbers", lambda fd, t: fd.ops.randn_like(t)),
    "broadcast": (
        "Shapes, indexing and layout",
        lambda fd, t: fd.ops.broadcast(t, [True, False, False]),
    ),
    "broadcast_in_dim": (
        "Shapes, indexing and layout",
        lambda fd, t: fd.ops.broadcast_in_dim(t, [2, *fd.ops.shape(t)], [1, 2]),
    ),
    "expand": (
        "Shapes, indexing and layout",
        lambda fd, t: fd.ops.expand(fd.ops.broadcast(t, [True, False, False]), [4, -1, -1]),
    ),
    "squeeze": (
        "Shapes, indexing and layout",
        lambda fd, t: fd.ops.squeeze(fd.ops.broadcast(t, [True, False, False]), [0]),
    ),
    "permute": ("Shapes, indexing and layout", lambda fd, t: fd.ops.permute(t, [1, 0])),
    "reshape": ("Shapes, indexing and layout", lambda fd, t: fd.ops.reshape(t, [-1])),
    "slice": ("Shapes, indexing and layout", lambda fd, t: fd.ops.slice(t, [0, 0], [1, 1])),
    "select": ("Shapes, indexing and layout", lambda fd, t: fd.ops.select(t, 0, 0)),
    "pad": ("Shapes, indexing and layout", lambda fd, t: fd.ops.pad(t, [1, 1])),
    "cat": ("Shapes, indexing and layout", lambda fd, t: fd.ops.cat([t, t], 0)),
    "index_select": (
        "Shapes, indexing and layout",
        lambda fd, t: fd.ops.index_select(t, _index(fd, 1), 0),
    ),
    "gather": ("Shapes, indexing and layout", lambda fd, t: fd.ops.gather(t, _index(fd, 2), 0)),
    "take_along_axis": (
        "Shapes, indexing and layout",
        lambda fd, t: fd.ops.take_along_axis(t, _index(fd, 2), 0),
    ),
    "embedding_fwd": (
        "Shapes, indexing and layout",
        lambda fd, t: fd.ops.embedding_fwd(_index(fd, 1), t),
    ),
    "stride_order": ("Shapes, indexing and layout", lambda fd, t: fd.ops.stride_order(t, [0, 1])),
    "segment_set": ("Shapes, indexing and layout", lambda fd, t: fd.ops.segment_set(t)),
    "size": ("Shapes, indexing and layout", lambda fd, t: fd.ops.size(t, 0)),
    "shape": ("Shapes, indexing and layout", lambda fd, t: fd.ops.shape(t)),
    "sum": ("Reductions and scans", lambda fd, t: fd.ops.sum(t, [0])),
    "prod": ("Reductions and scans", lambda fd, t: fd.ops.prod(t, [0])),
    "max": ("Reductions and scans", lambda fd, t: fd.ops.max(t, [0])),
    "min": ("Reductions and scans", lambda fd, t: fd.ops.min(t, [0])),
    "mean": ("Reductions and scans", lambda fd, t: fd.ops.mean(t, [0])),
    "var": ("Reductions and scans", lambda fd, t: fd.ops.var(t, [0])),
    "var_mean": ("Reductions and scans", lambda fd, t: fd.ops.var_mean(t, [0])),
    "welford": ("Reductions and scans", lambda fd, t: fd.ops.welford(t, [0])),
    "cumsum": ("Reductions and scans", lambda fd, t: fd.ops.cumsum(t, 0)),
    "cumprod": ("Reductions and scans", lambda fd, t: fd.ops.cumprod(t, 0)),
    "cummax": ("Reductions and scans", lambda fd, t: fd.ops.cummax(t, 0)),
    "cummin": ("Reductions and scans", lambda fd, t: fd.ops.cummin(t, 0)),
    "softmax": ("Normalizations", lambda fd, t: fd.ops.softmax(t, 1)),
    "log_softmax": ("Normalizations", lambda fd, t: fd.ops.log_softmax(t, 1)),
    "layer_norm": ("Normalizations", lambda fd, t: fd.ops.layer_norm(t)),
    "rms_norm": ("Normalizations", lambda fd, t: fd.ops.rms_norm(t)),
    "matmul": ("Library ops", lambda fd, t: fd.ops.matmul(t, t)),
    "linear": ("Library ops", lambda fd, t: fd.ops.linear(t, t)),
    "topk": ("Library ops", lambda fd, t: fd.ops.topk(t, 1)),
    "argsort": ("Library ops", lambda fd, t: fd.ops.argsort(t)),
    "scatter": ("Library ops", lambda fd, t: fd.ops.scatter(t, _index(fd, 2), t, 0)),
    "sdpfa_fwd": ("Library ops", _attention),
    "sdpfa_bwd": ("Library ops", _sdpfa_bwd),
    "grouped_mm": (
        "Library ops",
        lambda fd, t: fd.ops.grouped_mm(
            t, fd.define_tensor(shape=[-1, -1, -1], dtype=t.dtype), _index(fd, 1)
        ),
    ),
}


def _pointwise_probe(row: OpInfo) -> Probe:
    def probe(fd: Any, t: Any) -> Any:
        condition = fd.define_tensor(shape=[-1, -1], dtype=DataType.Bool)
        operands = [condition if row.has_condition and i == 0 else t for i in range(row.arity)]
        return getattr(fd.ops, row.method_name or row.name)(*operands)

    return probe


def accepted_dtypes(probe: Probe) -> list[DataType]:
    """The probed dtypes whose definition of the op raises no DefinitionError."""
    accepted = []
    for dtype in PROBED:
        try:
            with FusionDefinition() as fd, warnings.catch_warnings():
                warnings.simplefilter("ignore", ComplexCastWarning)  # cast's complex probe
                t = fd.define_tensor(shape=[-1, -1], dtype=dtype)
                probe(fd, t)
                fd.add_output(t)  # the probe's result may be a scalar or a list
        except DefinitionError:
            continue
        accepted.append(dtype)
    return accepted


def describe_dtypes(dtypes: list[DataType]) -> str:
    """The groups a whole of which is accepted by name, the other dtypes one by one."""
    parts = []
    for name, members in GROUPS.items():
        taken = [dt for dt in members if dt in dtypes]
        if len(taken) == len(members):
            parts.append(name)
        else:
            parts.extend(dt.value for dt in taken)
    return ", ".join(parts) or "none"


def first_sentence(doc: str | None) -> str:
    """The docstring's first sentence, on one line: up to the first period that ends a
    sentence outside brackets (so "(ints. -1 keeps an axis)", "e.g." and "..." do not end it)."""
    text = " ".join((doc or "").split("\n\n")[0].split())
    depth = 0
    for i, char in enumerate(text):
        depth += (char in "([") - (char in ")]")
        ends = i + 1 == len(text) or text[i + 1] == " "
        ellipsis = text[i - 1 : i] == "."
        if (
            char == "."
            and depth <= 0
            and ends
            and not ellipsis
            and not text[: i + 1].endswith("e.g.")
        ):
            return text[:i]
    return text


def nvfuser_names() -> set[str]:
    """The fd.ops names nvFuser binds (tests/test_nvfuser_ops_table.py keeps that page true)."""
    names = set()
    for line in NVFUSER_TABLE.read_text().splitlines():
        match = re.fullmatch(r"\| `(\w+)` \| (supported|not yet) \|.*\|", line)
        if match:
            names.add(match.group(1))
    return names


def _written_call(name: str) -> tuple[str, str]:
    """(call, meaning) of a method written in kfuse.frontend.ops: its signature without
    annotations, or the one its docstring opens with ("truediv(a, b): ...") where the
    method takes *args."""
    doc = getattr(Ops, name).__doc__ or ""
    opening = re.match(rf"{name}(\(.*?\)): (.*)", doc, re.S)
    if opening:
        return name + opening.group(1), first_sentence(opening.group(2))
    signature = inspect.signature(getattr(Ops, name))
    params = [
        p.replace(annotation=inspect.Parameter.empty)
        for p in list(signature.parameters.values())[1:]  # self
    ]
    plain = signature.replace(parameters=params, return_annotation=inspect.Signature.empty)
    return f"{name}{plain}", first_sentence(doc)


def rows() -> dict[str, list[tuple[str, str, str, str]]]:
    """Per section, (name, call, dtypes, meaning) of every fd.ops method."""
    methods = sorted(n for n in dir(Ops) if not n.startswith("_") and callable(getattr(Ops, n)))
    table: dict[str, list[tuple[str, str, str, str]]] = {section: [] for section in SECTIONS}
    pointwise = {row.method_name: row for row in OPS.values() if row.method_name}
    missing = [n for n in methods if n not in pointwise and n not in PROBES]
    if missing:
        raise SystemExit(f"fd.ops.{', '.join(missing)}: no probe in tools/gen_op_docs.py; add one")
    for name in [*pointwise, *PROBES]:
        if name in pointwise:
            row = pointwise[name]
            keywords = "".join(f", {k}={next(iter(c))!r}" for k, c in row.keywords.items())
            call = f"{name}({', '.join(row.operand_names)}{keywords})"
            section, probe, meaning = "Pointwise", _pointwise_probe(row), row.doc
        else:
            section, probe = PROBES[name]
            call, meaning = _written_call(name)
        dtypes = describe_dtypes(accepted_dtypes(probe))
        table[section].append((name, call, dtypes, meaning))
    return table


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render() -> str:
    """The text of docs/ops.md."""
    nvfuser = nvfuser_names()
    lines = [
        "# Op reference",
        "",
        "<!-- Generated by tools/gen_op_docs.py from kfuse's fd.ops: edit that, or the",
        "op's docstring or op-table row, and run it; tests/test_op_docs.py fails while this",
        "is stale. -->",
        "",
        "Every method of `fd.ops`. **dtypes**: the dtypes of the tensor operand that the op",
        "accepts when it is defined (for factories, the dtype asked for); integers are Int32 and",
        "Int (int64), floats Half, BFloat16, Float and Double. Pointwise ops also take Python",
        "numbers and scalars, and promote their operands as PyTorch does",
        "([Pointwise ops in detail](guides/ops.md)). **nvFuser**: whether nvFuser's `fd.ops` has",
        "the op under the same name (a program written for nvFuser calls it so; see",
        "[Programs written for nvFuser](guides/nvfuser-ops.md) for nvFuser's ops kfuse lacks).",
        "",
    ]
    for section, entries in rows().items():
        lines += [
            f"## {section}",
            "",
            "| op | call | dtypes | nvFuser | meaning |",
            "|---|---|---|---|---|",
        ]
        for name, call, dtypes, meaning in entries:
            same = "same" if name in nvfuser else "kfuse only"
            cells = [f"`{name}`", f"`fd.ops.{call}`", dtypes, same, _cell(meaning)]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    lines += [
        "`gelu(x, approximate='tanh')` is the tanh approximation of GELU (the op table's",
        "`gelu_tanh`); `approximate='none'` is the exact erf form.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if OUTPUT.read_text() != text:
            print(f"{OUTPUT.relative_to(ROOT)} is stale: run python3 tools/gen_op_docs.py")
            return 1
        return 0
    OUTPUT.write_text(text)
    print(f"wrote {OUTPUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

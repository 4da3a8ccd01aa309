"""docs/ops.md, the site's op reference, is what tools/gen_op_docs.py writes from fd.ops: an
op added, removed or changed (its signature, docstring, op-table row or accepted dtypes)
fails here until the page is regenerated."""

from __future__ import annotations

from kfuse import DataType
from kfuse.frontend.ops import Ops
from tools_support import load_tool

gen_op_docs = load_tool("gen_op_docs.py")


def test_docs_ops_md_is_up_to_date() -> None:
    written = gen_op_docs.OUTPUT.read_text()
    assert written == gen_op_docs.render(), "docs/ops.md is stale: run python3 tools/gen_op_docs.py"


def test_every_fd_ops_method_has_a_row() -> None:
    table = gen_op_docs.rows()
    listed = [name for entries in table.values() for name, *_ in entries]
    public = [n for n in dir(Ops) if not n.startswith("_") and callable(getattr(Ops, n))]
    assert sorted(listed) == sorted(public)


def test_the_dtypes_column_is_what_a_definition_accepts() -> None:
    """The probe sees the builder's checks: bitwise ops take no floats, the attention ops
    Half and BFloat16 only, the composites floats only, casts everything, imag complex
    values only and the comparisons of an order no complex ones."""
    dtypes = {name: d for entries in gen_op_docs.rows().values() for name, _, d, _ in entries}
    assert dtypes["bitwise_and"] == "Bool, integers"
    assert dtypes["sdpfa_fwd"] == "Half, BFloat16"
    assert dtypes["softmax"].startswith("floats")
    assert dtypes["cast"] == "Bool, integers, floats, Float8, complex"
    assert dtypes["imag"] == "complex"
    assert dtypes["lt"] == "Bool, integers, floats, Float8"
    assert dtypes["nextafter"] == "Float, Double"


def test_the_first_sentence_stops_at_a_period_outside_brackets() -> None:
    text = "Slice it (ints. or scalars; e.g. 1). The rest... of it. Then more."
    assert gen_op_docs.first_sentence(text) == "Slice it (ints. or scalars; e.g. 1)"
    assert gen_op_docs.first_sentence("One ... two. Three.") == "One ... two"
    assert gen_op_docs.describe_dtypes([DataType.Half, DataType.Int32, DataType.Int]) == (
        "integers, Half"
    )


def test_pointwise_methods_document_their_row() -> None:
    """help(fd.ops.exp) shows the row's call and meaning and what its dtype rules mean."""
    from kfuse.ir.ops import OPS

    for row in OPS.values():
        if row.method_name is None:
            continue
        doc = getattr(Ops, row.method_name).__doc__
        assert doc.startswith(f"{row.method_name}(") and f"): {row.doc}." in doc, row.name
    assert "a floating operand is a DefinitionError" in Ops.bitwise_and.__doc__
    assert "computed as Float" in Ops.exp.__doc__
    assert "The result is Bool" in Ops.lt.__doc__
    assert "approximate='tanh' gives GELU, tanh approximation" in Ops.gelu.__doc__

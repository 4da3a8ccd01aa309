"""fd.ops' typed pointwise signatures (src/kfuse/frontend/pointwise_ops.pyi) are generated
from the op table by tools/gen_ops_stub.py: the checked-in stub must be what the table
gives today, or a type checker would miss a new op or reject a valid call."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from kfuse.frontend.ops import Ops
from kfuse.ir.ops import OPS

GENERATOR = Path(__file__).resolve().parent.parent / "tools" / "gen_ops_stub.py"


def _generator() -> Any:
    spec = importlib.util.spec_from_file_location("gen_ops_stub", GENERATOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_stub_is_the_one_the_op_table_gives() -> None:
    gen = _generator()
    assert gen.STUB.read_text() == gen.render(), (
        "src/kfuse/frontend/pointwise_ops.pyi is stale: run "
        "PYTHONPATH=src python3 tools/gen_ops_stub.py"
    )
    assert gen.main(["--check"]) == 0


def test_the_stub_declares_every_method_made_from_the_table() -> None:
    text = (GENERATOR.parent.parent / "src/kfuse/frontend/pointwise_ops.pyi").read_text()
    methods = {row.method_name for row in OPS.values() if row.method_name is not None}
    methods |= set(_generator().CHECKED_BY_ROW)  # truediv: written by hand, checked by div's row
    declared = {line.split("(")[0].split()[-1] for line in text.splitlines() if " def " in line}
    assert declared == methods
    assert all(callable(getattr(Ops, name)) for name in methods)
    assert "gelu_tanh" not in declared  # reached through gelu(approximate="tanh")


def test_a_changed_table_makes_the_check_fail(tmp_path: Path) -> None:
    gen = _generator()
    stale = tmp_path / "pointwise_ops.pyi"
    stale.write_text(gen.render().replace("def exp(", "def exq("))
    gen.STUB = stale  # this copy of the generator's module only
    assert gen.main(["--check"]) == 1

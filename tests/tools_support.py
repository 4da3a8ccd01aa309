"""Loading a script of tools/ as a module, for the tests of its functions."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

TOOLS = Path(__file__).resolve().parent.parent / "tools"


def load_tool(filename: str) -> ModuleType:
    """tools/<filename> imported as a module (its main() not run)."""
    spec = importlib.util.spec_from_file_location(Path(filename).stem, TOOLS / filename)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

"""The site's API reference (docs/api/*.md, rendered by mkdocstrings) documents every name
`kfuse` exports: a name added to kfuse.__all__ fails here until a page shows it."""

from __future__ import annotations

import re
from pathlib import Path

import kfuse
import kfuse.errors

API_PAGES = Path(__file__).resolve().parent.parent / "docs" / "api"


def documented() -> set[str]:
    """The objects the pages' `::: path` directives render, by dotted path."""
    paths = set()
    for page in API_PAGES.glob("*.md"):
        paths.update(re.findall(r"^::: ([\w.]+)$", page.read_text(), re.M))
    return paths


def _entry_for(name: str, paths: set[str]) -> bool:
    if {f"kfuse.{name}", f"kfuse._C.{name}"} & paths:
        return True
    # `::: kfuse.errors` renders the module's Python classes (the extension's, which it
    # re-exports, are not: their pages name them as kfuse._C's).
    python_class = not getattr(kfuse, name).__module__.startswith("kfuse._C")
    return "kfuse.errors" in paths and name in kfuse.errors.__all__ and python_class


def test_every_exported_name_has_an_api_entry() -> None:
    paths = documented()
    missing = [name for name in kfuse.__all__ if not _entry_for(name, paths)]
    assert not missing, f"not on any docs/api page: {missing}"
    assert {"kfuse.reference", "kfuse.nvfuser_direct"} <= paths

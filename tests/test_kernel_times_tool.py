"""tools/kernel_times.py's settings (--ab): parsed as module attributes and Python literals,
set for a block and restored after it, whatever happens in the block."""

from __future__ import annotations

from pathlib import Path

import pytest

from kfuse.schedule import reduction_heuristics
from tools_support import load_tool


def _tool() -> object:
    return load_tool("kernel_times.py")


def test_settings_are_module_attributes_and_literals() -> None:
    tool = _tool()
    parsed = tool.parse_settings(  # type: ignore[attr-defined]
        "kfuse.schedule.reduction_heuristics.OUTER_WAVES=3 kfuse.knobs.X=(1,2)"
    )
    assert parsed == [
        ("kfuse.schedule.reduction_heuristics", "OUTER_WAVES", 3),
        ("kfuse.knobs", "X", (1, 2)),
    ]
    for bad in (
        "OUTER_WAVES=3",
        "kfuse.schedule.reduction_heuristics.OUTER_WAVES",
        "a.B=not_a_literal",
    ):
        with pytest.raises(ValueError):
            tool.parse_settings(bad)  # type: ignore[attr-defined]


def test_settings_hold_for_the_block_and_are_restored() -> None:
    tool = _tool()
    before = reduction_heuristics.OUTER_MIN_BLOCKS_PER_SM
    entries = tool.parse_settings("kfuse.schedule.reduction_heuristics.OUTER_MIN_BLOCKS_PER_SM=0")  # type: ignore[attr-defined]
    with pytest.raises(RuntimeError):
        with tool.settings(entries):  # type: ignore[attr-defined]
            assert reduction_heuristics.OUTER_MIN_BLOCKS_PER_SM == 0
            raise RuntimeError("a failing run")
    assert reduction_heuristics.OUTER_MIN_BLOCKS_PER_SM == before
    missing = tool.parse_settings("kfuse.schedule.reduction_heuristics.NO_SUCH_CONSTANT=1")  # type: ignore[attr-defined]
    with pytest.raises(AttributeError, match="NO_SUCH_CONSTANT"):
        with tool.settings(missing):  # type: ignore[attr-defined]
            pass


def test_source_edit_rewrites_sources_for_the_block_only(tmp_path: Path, monkeypatch) -> None:
    from kfuse.runtime.backends import cuda

    compiled: list[tuple[str, str]] = []

    def recorder(self: object, source: str, name: str, *args: object) -> str:
        compiled.append((name, source))
        return "kernel"

    monkeypatch.setattr(cuda.CudaBackend, "compile", recorder)
    edit_file = tmp_path / "edit.py"
    edit_file.write_text(
        "def edit(name, source):\n"
        "    return source.replace('a + b', 'a - b') if name == 'k1' else source\n"
    )
    tool = _tool()
    backend = cuda.CudaBackend()
    with tool.source_edit(str(edit_file)) as changed:  # type: ignore[attr-defined]
        backend.compile("y = a + b;", "k1", 0, "sm_90")
        backend.compile("y = a + b;", "k2", 0, "sm_90")
    backend.compile("y = a + b;", "k1", 0, "sm_90")
    assert compiled == [("k1", "y = a - b;"), ("k2", "y = a + b;"), ("k1", "y = a + b;")]
    assert changed == {"k1"}


def test_the_summary_names_every_column() -> None:
    """The summary lines up each case's runs under v0, v1, ... with a legend saying which
    variant each is (as is, then the --ab settings, then the --edit files, in that order),
    torch.compile's time or a dash, and a failed check in place of a time."""
    tool = _tool()
    text = tool.summary_table(  # type: ignore[attr-defined]
        ["as is", "kfuse.schedule.transpose.TILE_BYTES=16384", "edit whole_tiles.py"],
        [
            ("transpose_02 256x512x512", 190.1, ["202.9", "195.9", "202.9"]),
            ("bcast_add 16384x8192", None, ["133.5", "mismatch", "133.2"]),
        ],
    )
    lines = text.splitlines()
    assert lines[1:4] == [
        "  v0: as is",
        "  v1: kfuse.schedule.transpose.TILE_BYTES=16384",
        "  v2: edit whole_tiles.py",
    ]
    assert lines[4].split() == ["case", "tc", "v0", "v1", "v2"]
    assert lines[5].split() == ["transpose_02", "256x512x512", "190.1", "202.9", "195.9", "202.9"]
    assert lines[6].split() == ["bcast_add", "16384x8192", "-", "133.5", "mismatch", "133.2"]

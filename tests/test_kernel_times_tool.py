"""tools/kernel_times.py's settings (--ab): parsed as module attributes and Python literals,
set for a block and restored after it, whatever happens in the block."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from kfuse.schedule import reduction

TOOL = Path(__file__).resolve().parent.parent / "tools" / "kernel_times.py"


def _tool() -> object:
    spec = importlib.util.spec_from_file_location("kernel_times", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_settings_are_module_attributes_and_literals() -> None:
    tool = _tool()
    parsed = tool.parse_settings(  # type: ignore[attr-defined]
        "kfuse.schedule.reduction.OUTER_WAVES=3 kfuse.knobs.X=(1,2)"
    )
    assert parsed == [("kfuse.schedule.reduction", "OUTER_WAVES", 3), ("kfuse.knobs", "X", (1, 2))]
    for bad in ("OUTER_WAVES=3", "kfuse.schedule.reduction.OUTER_WAVES", "a.B=not_a_literal"):
        with pytest.raises(ValueError):
            tool.parse_settings(bad)  # type: ignore[attr-defined]


def test_settings_hold_for_the_block_and_are_restored() -> None:
    tool = _tool()
    before = reduction.OUTER_MIN_BLOCKS_PER_SM
    entries = tool.parse_settings("kfuse.schedule.reduction.OUTER_MIN_BLOCKS_PER_SM=0")  # type: ignore[attr-defined]
    with pytest.raises(RuntimeError):
        with tool.settings(entries):  # type: ignore[attr-defined]
            assert reduction.OUTER_MIN_BLOCKS_PER_SM == 0
            raise RuntimeError("a failing run")
    assert reduction.OUTER_MIN_BLOCKS_PER_SM == before
    missing = tool.parse_settings("kfuse.schedule.reduction.NO_SUCH_CONSTANT=1")  # type: ignore[attr-defined]
    with pytest.raises(AttributeError, match="NO_SUCH_CONSTANT"):
        with tool.settings(missing):  # type: ignore[attr-defined]
            pass

"""docs/guides/nvfuser-tests.md: every nvFuser tests/python/direct test with its status. The
rows that name a kfuse test stay true: the test exists, and a "fails" row's test is a strict
xfail (so fixing kfuse turns it into a failure until the row says "ported")."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TABLE = ROOT / "docs" / "guides" / "nvfuser-tests.md"
ROW = re.compile(r"^\| `(test_\w+)` \| (test_\w+\.py) \| ([^|]+) \| (.+) \|$")
STATUSES = (
    "ported",
    "fails: ",
    "left out: multi-device",
    "left out: matmul code generation",
    "left out: schedule language",
    "differs by design",
    "not ported",
)


def rows() -> list[tuple[str, str, str, str]]:
    found = []
    for line in TABLE.read_text().splitlines():
        match = ROW.match(line)
        if match:
            found.append(tuple(part.strip() for part in match.groups()))
    return found  # type: ignore[return-value]


def named_test(where: str) -> tuple[Path, str]:
    match = re.fullmatch(r"`(tests/test_\w+\.py)::(test_\w+)`", where)
    assert match, f"{where!r} does not name a kfuse test as `tests/file.py::test_name`"
    return ROOT / match.group(1), match.group(2)


@functools.cache  # a port file is parsed once, not once for each of its rows
def top_level_tests(path: Path) -> dict[str, ast.FunctionDef]:
    tree = ast.parse(path.read_text())
    return {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}


def is_strict_xfail(func: ast.FunctionDef) -> bool:
    for mark in func.decorator_list:
        if isinstance(mark, ast.Call) and ast.unparse(mark.func) == "pytest.mark.xfail":
            return any(
                k.arg == "strict" and isinstance(k.value, ast.Constant) and k.value.value is True
                for k in mark.keywords
            )
    return False


def test_every_row_has_a_known_status_and_each_test_is_listed_once() -> None:
    table = rows()
    assert len(table) > 200  # nvFuser's direct tests number over two hundred
    keys = [(name, file) for name, file, _, _ in table]
    assert len(keys) == len(set(keys))
    for name, _, status, _ in table:
        assert status.startswith(STATUSES), f"{name}: unknown status {status!r}"


@pytest.mark.parametrize(
    "row", [r for r in rows() if r[2] == "ported" or r[2].startswith("fails: ")], ids=lambda r: r[0]
)
def test_a_row_naming_a_kfuse_test_stays_true(row: tuple[str, str, str, str]) -> None:
    name, _, status, where = row
    path, func_name = named_test(where)
    assert path.exists(), f"{name}: {path} does not exist"
    funcs = top_level_tests(path)
    assert func_name in funcs, f"{name}: {path.name} has no {func_name}"
    if status.startswith("fails: "):
        assert path.name == "test_nvfuser_direct_ports.py"
        assert is_strict_xfail(funcs[func_name]), f"{name}: the port is not a strict xfail"
    else:
        assert not is_strict_xfail(funcs[func_name]), f"{name} fails: say so in the table"


def test_every_strict_xfail_port_is_a_fails_row() -> None:
    failing = {name for name, _, status, _ in rows() if status.startswith("fails: ")}
    ports = top_level_tests(ROOT / "tests" / "test_nvfuser_direct_ports.py")
    xfailed = {name for name, func in ports.items() if is_strict_xfail(func)}
    assert xfailed == failing

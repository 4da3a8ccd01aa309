"""kfuse's package layers, measured with the standard library (ast): which package imports
which, whether any import climbs from a lower layer to a higher one or closes a cycle between
packages, and which modules and functions have grown past the sizes a reader takes in at once.

    python3 tools/layers.py            # the report; exit status 1 if a rule is broken
    python3 tools/layers.py --graph    # also every package-to-package import

The layers, lowest first (a package imports only packages of lower layers and its own
modules; imports under `if TYPE_CHECKING:` are for annotations and are not counted):

    core      errors, dtypes, knobs, switches, the C++ extension _C
    ir        the Fusion IR
    runtime   the floor that loads and launches: arrays, devices, backends (CUDA, emulator),
              caches, the device runtime's headers
    reference the eager float64 evaluation (beside runtime: neither imports the other)
    codegen   CUDA source of a kernel from its plan
    schedule  one module per scheduler: check, heuristics, kernels
    engine    the stages from a definition to its launches, and a call's path
    frontend  FusionDefinition, fd.ops, fd.execute
    profiler  kfuse.PythonProfiler
    kfuse     the package root: the public API (kfuse/__init__.py)
    testing   strategies, inputs, comparisons
    campaign  property campaigns
    cli       the command line
    main      python -m kfuse (kfuse/__main__.py)
    nvfuser_direct  kfuse under nvFuser's module name (Thunder's drop-in); nothing imports it
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "kfuse"

LAYERS: tuple[tuple[str, ...], ...] = (
    ("core",),
    ("ir",),
    ("runtime", "reference"),
    ("codegen",),
    ("schedule",),
    ("engine",),
    ("frontend",),
    ("profiler",),
    ("kfuse",),
    ("testing",),
    ("campaign",),
    ("cli",),
    ("main",),
    ("nvfuser_direct",),
)
CORE_MODULES = {"errors", "_errors_base", "dtypes", "knobs", "switches", "_C"}

MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80


def rank_of(package: str) -> int:
    for rank, names in enumerate(LAYERS):
        if package in names:
            return rank
    raise KeyError(f"package {package!r} has no layer: add it to LAYERS in tools/layers.py")


def package_of(module: str) -> str:
    """'kfuse.engine.compiler' -> 'engine'; a root module is core or 'kfuse' (the root)."""
    parts = module.split(".")
    if len(parts) == 1:
        return "kfuse"
    if parts[1] in CORE_MODULES:
        return "core"
    if parts[1] == "__main__":
        return "main"
    return parts[1]


def module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    hidden: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            hidden.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return hidden


def imports_of(path: Path, module: str, package: Path = PACKAGE) -> set[str]:
    """The kfuse modules `module` imports at run time (absolute and relative imports; `from
    kfuse import x` counts as an import of kfuse.x)."""
    tree = ast.parse(path.read_text())
    hidden = _type_checking_nodes(tree)
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in hidden:
            continue
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "kfuse")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                if path.name != "__init__.py":
                    base.pop()
                base = base[: len(base) - node.level + 1]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            if target.split(".")[0] != "kfuse":
                continue
            if target == "kfuse":
                found.update(_root_import(a.name, package) for a in node.names)
            else:
                found.add(target)
    return found


def _root_import(name: str, package: Path) -> str:
    """`from kfuse import name`: of the module kfuse.name where there is one, else of the root."""
    is_module = name == "_C" or (package / f"{name}.py").exists() or (package / name).is_dir()
    return f"kfuse.{name}" if is_module else "kfuse"


@dataclass
class Report:
    edges: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    upward: list[str] = field(default_factory=list)
    cycles: list[list[str]] = field(default_factory=list)
    long_modules: list[str] = field(default_factory=list)
    long_functions: list[str] = field(default_factory=list)

    @property
    def broken(self) -> bool:
        return bool(self.upward or self.cycles or self.long_modules or self.long_functions)


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected set of more than one package (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def _long_functions(path: Path, module: str) -> list[str]:
    long = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            if lines > MAX_FUNCTION_LINES:
                long.append(f"{module}.{node.name} ({lines} lines, line {node.lineno})")
    return long


def measure(package: Path = PACKAGE) -> Report:
    report = Report()
    for path in sorted(package.rglob("*.py")):
        module = module_name(path, package)
        source = package_of(module)
        for target in imports_of(path, module, package):
            destination = package_of(target)
            if destination == source:
                continue
            report.edges[source].add(destination)
            if rank_of(destination) >= rank_of(source):
                report.upward.append(f"{module} -> {target} ({source} -> {destination})")
        lines = len(path.read_text().splitlines())
        if lines > MAX_MODULE_LINES:
            report.long_modules.append(f"{module} ({lines} lines)")
        report.long_functions.extend(_long_functions(path, module))
    report.cycles = _cycles(report.edges)
    return report


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--graph", action="store_true", help="print every package's imports")
    args = parser.parse_args(argv)
    report = measure()
    if args.graph:
        for source in sorted(report.edges, key=rank_of):
            print(f"{source} -> {', '.join(sorted(report.edges[source], key=rank_of))}")
    sections = (
        ("imports from a lower layer to a higher one", report.upward),
        ("import cycles between packages", [" <-> ".join(c) for c in report.cycles]),
        (f"modules over {MAX_MODULE_LINES} lines", report.long_modules),
        (f"functions over {MAX_FUNCTION_LINES} lines", report.long_functions),
    )
    for title, rows in sections:
        print(f"{len(rows)} {title}")
        for row in rows:
            print(f"  {row}")
    return 1 if report.broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The packages are layered: no circle of imports, function-local ones included (docs/architecture.md).

The graph is read from the source (``ast``), not from an import: a module-level import and one inside a function
are both an edge, so a lazy import cannot hide a circle. ``import a.b`` and ``from a import b`` (b a module) are
edges to the module named; ``from a.b import name`` (name not a module) is an edge to ``a.b``. A parent package's
``__init__`` runs first on any import of its submodules, but is not an edge: it is in every module's way.
An import under ``if TYPE_CHECKING:`` never runs (it names a type for the annotations): ``types=False`` leaves it out.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def modules(package: str, root: Path = ROOT) -> dict[str, Path]:
    """{dotted name: file} of every module of ``package`` (a package by its ``__init__``)."""
    out = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def type_only(tree: ast.Module) -> set[ast.stmt]:
    """The import statements of a module under ``if TYPE_CHECKING:`` (never run: annotations only)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            found |= {n for stmt in node.body for n in ast.walk(stmt) if isinstance(n, ast.Import | ast.ImportFrom)}
    return found


def import_graph(package: str, root: Path = ROOT, types: bool = True) -> dict[str, set[str]]:
    """{module: the modules of ``package`` it imports}, from every import statement in its syntax tree (those
    under ``if TYPE_CHECKING:`` only if ``types``)."""
    mods = modules(package, root)

    def owner(name: str) -> str | None:  # the longest prefix that is a module of the package
        parts = name.split(".")
        while parts and ".".join(parts) not in mods:
            parts.pop()
        return ".".join(parts) or None

    graph: dict[str, set[str]] = {}
    for module, path in mods.items():
        here = module if path.name == "__init__.py" else module.rpartition(".")[0]
        edges = set()
        tree = ast.parse(path.read_text(), str(path))
        skip = set() if types else type_only(tree)
        for node in ast.walk(tree):
            if node in skip:
                continue
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = here.split(".")[: len(here.split(".")) - (node.level - 1)]
                    base = ".".join(up + ([node.module] if node.module else []))
                names = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            else:
                continue
            edges |= {o for o in map(owner, names) if o and o != module}
        graph[module] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted; a self-import counts."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph[v]:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_graph_sees_function_level_imports_and_finds_a_circle(tmp_path):
    """Oracle by hand: a -> b at module level, b -> c inside a function, c -> a by a relative import: one circle
    of three; d imports a, outside the circle."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg import b\n")
    (pkg / "b.py").write_text("def f():\n    from .c import thing\n    return thing\n")
    (pkg / "c.py").write_text("from . import a\nthing = 1\n")
    (pkg / "d.py").write_text("import pkg.a\n")
    graph = import_graph("pkg", tmp_path)
    assert graph["pkg.b"] == {"pkg.c"} and graph["pkg.d"] == {"pkg.a"}
    assert cycles(graph) == [["pkg.a", "pkg.b", "pkg.c"]]
    (pkg / "b.py").write_text("def f():\n    return 1\n")
    assert cycles(import_graph("pkg", tmp_path)) == []


@pytest.mark.parametrize("package", ["hbvm_core", "hbvm_workflow"])
def test_no_import_circle(package):
    """Every module of the package sits below what imports it: the graph is acyclic."""
    graph = import_graph(package)
    assert len(graph) > 10 and sum(map(len, graph.values())) > len(graph), "the graph read nothing"
    assert cycles(graph) == [], "import circles (a lazy import counts): " + "; ".join(map(" <-> ".join, cycles(graph)))


def reachable(graph: dict[str, set[str]], start: set[str]) -> set[str]:
    """The modules ``start`` imports, directly or through others, and ``start`` itself."""
    seen, todo = set(start), list(start)
    while todo:
        for w in graph[todo.pop()] - seen:
            seen.add(w)
            todo.append(w)
    return seen


def test_a_type_only_import_is_no_edge_when_types_are_left_out(tmp_path):
    """Oracle by hand: a imports b at run time and c for its annotations only; b imports nothing."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text(
        "from typing import TYPE_CHECKING\nfrom . import b\nif TYPE_CHECKING:\n    from . import c\n"
    )
    (pkg / "b.py").write_text("")
    (pkg / "c.py").write_text("")
    assert import_graph("pkg", tmp_path)["pkg.a"] == {"pkg.b", "pkg.c"}
    assert import_graph("pkg", tmp_path, types=False)["pkg.a"] == {"pkg.b"}
    assert reachable({"x": {"y"}, "y": {"z"}, "z": set()}, {"y"}) == {"y", "z"}


def test_kernels_are_a_layer():
    """hbvm_core.kernels sits below the rest: what its modules import at run time (lazily included), directly or
    through others, imports no kernels module back -- the time loop (integrate), the ensemble, the problem and
    the methods all sit above it. Annotations may name a type from above (``if TYPE_CHECKING:``)."""
    graph = import_graph("hbvm_core", types=False)
    kernels = {m for m in graph if m.startswith("hbvm_core.kernels.")} | {"hbvm_core.kernels"}
    below = reachable(graph, {w for m in kernels for w in graph[m]} - kernels) - kernels
    assert below, "the kernels import nothing of hbvm_core: the graph read nothing"
    back = sorted(f"{m} -> {', '.join(sorted(graph[m] & kernels))}" for m in below if graph[m] & kernels)
    assert back == [], "kernels import modules that import them back: " + "; ".join(back)

"""The canonical form of a set of Python sources: what their code computes, not what its names and files are.

``canonical_digest(sources, package, root)`` hashes the numerics of a method
(``fingerprint.numerics_digest``): the files ``sources`` (paths relative to the
package folder ``package``) read as one program.

- Each file is parsed; docstrings, comments, formatting and the annotations of
  arguments and returns do not count, nor the class-level declarations that
  describe a method and compute nothing (``DESCRIPTIVE``: its files, summary,
  examples, cost model and claims) or a module's ``__all__``.
- Every top-level statement of every file (a function, a class, an
  assignment) is a node of one graph. Within a node, the names it binds
  (arguments, locals, nested functions, comprehension variables) are numbered
  by order of first appearance; a name defined at module level by one of the
  files, and an import of such a name from any of the files (followed through
  re-exports), is an edge to the node that defines it; an import from elsewhere
  is what it binds (``numpy.linalg.solve`` however it was imported; a module
  of the package outside the files by the imported name alone,
  ``<package>:ConfigError``); a builtin is its name. A top-level statement
  that binds no name (a registration, a call) has an edge to the one before
  it in its file: the order of such effects counts.
- A node's label is the hash of its syntax tree so written (constants by
  ``repr``, so a float coefficient at full precision; the order of operations
  and of statements as written), with each edge replaced by the label of its
  target, refined until the partition of the nodes into equal labels is stable
  (Weisfeiler-Lehman). The digest is the hash of the sorted labels and of the
  label of ``root`` (the method's class). The tree is written field by field
  with empty fields left out (not ``ast.dump``, whose text changes with the
  Python version): the same digest from Python 3.10 to 3.13.

So a renamed local variable, argument, function, class or file, a helper moved
from one of the files to another, or top-level definitions reordered, leave
the digest as it is; a changed constant, operation, order of operations or
order of statements changes it. What is reached by attribute (``self.rule``,
methods, dataclass fields) and keyword arguments keep their names: they are
interfaces the files share with code outside them; so do strings, which the
code may compute with (a solver's name, a file it reads).

Why this and not the source of the expanded kernel (``kernels.registry.expand_inline``,
which pastes the ``@inline_source`` helpers into a template): that covers the
compiled templates only, while a method's numbers also come from the numpy
path, the tableau and the solvers; the edges above give every file the same
freedom to move a helper, with no list of which files paste into which.
A method's coefficient tables count as the code that holds or computes them:
a literal coefficient by its ``repr`` (every bit of the double); the Gauss
tableau, computed from (k, s) by ``legendre.py``, by that code, not by its
values (those are the host's round-off, and k, s are in the run's entry).
Cost: some 0.1-0.3 s a method (``fingerprint`` caches it on disk by the
sources' bytes).
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

#: class-level names of a method that describe it and compute nothing: dropped from a class body
DESCRIPTIVE = frozenset({"numerics_sources", "SUMMARY", "EXAMPLES", "STEP_SECONDS", "orders", "conserves", "summary"})
#: what an import from a module of the package outside the files is written as (with the name it imports)
OUTSIDE = "<package>"
#: what a module of the files is written as where it is a value (not reached through for one of its names)
MODULE = "<module>"
_EDGE = re.compile(r"@@edge(\d+)@@")
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)


@dataclass
class _Module:
    name: str
    package: str  # what relative imports are relative to
    bindings: dict = field(default_factory=dict)  # name -> ("node", index, slot) | ("import", module, name | None)


@dataclass
class _Scope:
    kind: str  # "function" or "class"
    bound: set
    imports: dict  # name -> (module, name | None): imports within a function or class
    key: int = 0  # which scope of its node, by order of opening


def canonical_digest(sources: dict[str, bytes | None], package: str, root: str | None = None) -> str:
    """The hex digest of the sources ``{path relative to the package folder: bytes}`` (None: unreadable) of the
    package named ``package``, and of ``root`` ('path:Class', its class), as the module docstring says."""
    graph = _Graph(package)
    unreadable = 0
    for rel in sorted(sources):
        tree = _tree(sources[rel])
        if tree is None:
            unreadable += 1
            continue
        graph.add(rel, tree)
    labels = graph.labels()
    root_label = ""
    if root is not None:
        rel, _, name = root.partition(":")
        binding = graph.modules.get(_module_name(package, rel), _Module("", "")).bindings.get(name)
        if binding is not None and binding[0] == "node":
            root_label = labels[binding[1]]
    text = "\n".join(["hbvm-numerics/3", f"unreadable {unreadable}", f"root {root_label}", *sorted(labels)])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@functools.lru_cache(maxsize=128)
def _tree(data: bytes | None) -> ast.Module | None:
    """The syntax tree of a source, stripped (``_strip``; read, never changed, after), or None if it has none;
    cached per process (the methods share files)."""
    try:
        tree = ast.parse(data) if data is not None else None
    except (SyntaxError, ValueError):
        return None
    if tree is not None:
        _strip(tree)
    return tree


def _module_name(package: str, rel: str) -> str:
    parts = [package, *Path(rel).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _strip(tree: ast.AST) -> None:
    """Drop docstrings, the annotations of arguments and returns, and the ``DESCRIPTIVE`` statements of classes."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            node.returns = None
            for arg in _arguments(node.args):
                arg.annotation = None
        if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        body = node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            if isinstance(body[0].value.value, str):
                body = body[1:]
        dropped = (
            DESCRIPTIVE if isinstance(node, ast.ClassDef) else {"__all__"} if isinstance(node, ast.Module) else set()
        )
        if dropped:
            body = [s for s in body if not set(_statement_names(s)) & dropped]
        node.body = body or [ast.Pass()]


def _arguments(args: ast.arguments) -> list[ast.arg]:
    found = [*args.posonlyargs, *args.args, *args.kwonlyargs]
    return found + [a for a in (args.vararg, args.kwarg) if a is not None]


def _statement_names(stmt: ast.stmt) -> list[str]:
    """The names a statement binds in its own scope, in order of appearance (not those of nested scopes)."""
    return _scope_names([stmt])[0]


def _scope_names(body: list[ast.stmt]) -> tuple[list[str], list[ast.stmt], set[str]]:
    """(the names the statements bind in their scope, in order of appearance; the import statements among them;
    the names they declare global or nonlocal): one walk, not into nested scopes."""
    names: list[str] = []
    imports: list[ast.stmt] = []
    declared: set[str] = set()
    stack = list(reversed(body))
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
            continue
        if isinstance(node, (ast.Lambda, *_COMPREHENSIONS)):
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            imports.append(node)
            names += [(a.asname or a.name).partition(".")[0] for a in node.names if a.name != "*"]
            continue
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            declared.update(node.names)
            continue
        if isinstance(node, ast.Name):
            if not isinstance(node.ctx, ast.Load):
                names.append(node.id)
            continue
        if isinstance(node, ast.ExceptHandler) and node.name:
            names.append(node.name)
        stack.extend(reversed(list(ast.iter_child_nodes(node))))
    return list(dict.fromkeys(names)), imports, declared


def _imports(stmt: ast.Import | ast.ImportFrom, module: _Module) -> dict:
    """{bound name: (absolute module, imported name or None for a module)} of an import statement."""
    out = {}
    if isinstance(stmt, ast.Import):
        for a in stmt.names:
            out[a.asname or a.name.partition(".")[0]] = (a.name if a.asname else a.name.partition(".")[0], None)
        return out
    base = stmt.module or ""
    if stmt.level:
        try:
            base = importlib.util.resolve_name("." * stmt.level + base, module.package)
        except (ImportError, ValueError):
            base = "." * stmt.level + base
    for a in stmt.names:
        if a.name != "*" and base != "__future__":
            out[a.asname or a.name] = (base, a.name)
    return out


class _Graph:
    """The top-level statements of the files as nodes, each with its canonical text and its edges."""

    def __init__(self, package: str):
        self.package = package
        self.modules: dict[str, _Module] = {}
        self.nodes: list[tuple[ast.stmt, _Module]] = []
        #: a top-level statement that binds no name (an effect: a registration, a call) -> the file's effect before
        #: it, an edge: the order of effects counts, as that of statements within a function
        self.after: dict[int, int] = {}

    def add(self, rel: str, tree: ast.Module) -> None:
        name = _module_name(self.package, rel)
        is_package = Path(rel).name == "__init__.py"
        module = self.modules[name] = _Module(name, name if is_package else name.rpartition(".")[0])
        effect = None
        for stmt in tree.body:
            if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                for bound, target in _imports(stmt, module).items():
                    module.bindings[bound] = ("import", *target)
                continue
            if isinstance(stmt, ast.Pass):
                continue
            index = len(self.nodes)
            self.nodes.append((stmt, module))
            names = _statement_names(stmt)
            for slot, bound in enumerate(names):
                module.bindings[bound] = ("node", index, slot)
            if not names:
                if effect is not None:
                    self.after[index] = effect
                effect = index

    # ------------------------------------------------------------------ resolution
    def target(self, module: str, name: str | None, depth: int = 0):
        """What ``from module import name`` (``import module``: name None) binds: ("edge", node, slot),
        ("module", module of the files) or ("outside", text)."""
        if name is None:
            if module in self.modules:
                return ("module", module)
            return ("outside", OUTSIDE if self._in_package(module) else module)
        found = self.modules.get(module)
        if found is not None and depth < 32:
            binding = found.bindings.get(name)
            if binding is not None and binding[0] == "node":
                return ("edge", binding[1], binding[2])
            if binding is not None:
                return self.target(binding[1], binding[2], depth + 1)
            if f"{module}.{name}" in self.modules:
                return ("module", f"{module}.{name}")
        if self._in_package(module):
            return ("outside", f"{OUTSIDE}:{name}")
        return ("outside", f"{module}.{name}")

    def _in_package(self, module: str) -> bool:
        return module == self.package or module.startswith(self.package + ".") or module.startswith(".")

    # ------------------------------------------------------------------ labels
    def labels(self) -> list[str]:
        """Each node's label: its canonical text with the edges replaced by their targets' labels, refined until
        the partition of the nodes by label is stable."""
        texts = [_Writer(self, module).node(stmt, self.after.get(i)) for i, (stmt, module) in enumerate(self.nodes)]
        labels = [_hash(pieces, edges, None) for pieces, edges in texts]
        for _ in range(len(labels) + 1):
            refined = [_hash(pieces, edges, labels) for pieces, edges in texts]
            if len(set(refined)) == len(set(labels)):
                return refined
            labels = refined
        return labels


def _hash(pieces: list[str], edges: list[tuple[int, int]], labels: list[str] | None) -> str:
    out = [pieces[0]]
    for (node, slot), text in zip(edges, pieces[1:]):
        out.append(f"@{'' if labels is None else labels[node]}#{slot}")
        out.append(text)
    return hashlib.sha256("".join(out).encode()).hexdigest()


class _Writer:
    """The canonical text of one node: its syntax tree with names written as the module docstring says."""

    def __init__(self, graph: _Graph, module: _Module):
        self.graph, self.module = graph, module
        self.locals: dict[tuple[int, str], str] = {}
        self.edges: list[tuple[int, int]] = []
        self.opened = 0

    def node(self, stmt: ast.stmt, after: int | None) -> tuple[list[str], list[tuple[int, int]]]:
        """(the text of a top-level statement split at its edges, the edges); ``after``: the effect before it."""
        text = self.write(stmt, [], top=True)
        if after is not None:
            text += "after:" + self.bound(("edge", after, 0))[1]
        pieces = _EDGE.split(text)
        return pieces[0::2], [self.edges[int(i)] for i in pieces[1::2]]

    # names
    def local(self, scope: _Scope, name: str) -> str:
        """A local's canonical name, ``$n`` by first appearance in the node (as no builtin's name reads)."""
        return self.locals.setdefault((scope.key, name), f"${len(self.locals)}")

    def resolve(self, name: str, scopes: list[_Scope]) -> tuple[str, str]:
        """(kind, text) of a name read or bound where ``scopes`` are open: kind is local, class, edge, module,
        outside or builtin."""
        for i in range(len(scopes) - 1, -1, -1):
            scope = scopes[i]
            if scope.kind == "class" and i != len(scopes) - 1:
                continue
            if name in scope.imports:
                return self.bound(self.graph.target(*scope.imports[name]))
            if name in scope.bound:
                return ("class", name) if scope.kind == "class" else ("local", self.local(scope, name))
        binding = self.module.bindings.get(name)
        if binding is None:
            return ("builtin", name)
        if binding[0] == "node":
            return self.bound(("edge", binding[1], binding[2]))
        return self.bound(self.graph.target(binding[1], binding[2]))

    def bound(self, target: tuple) -> tuple[str, str]:
        """(kind, text) of a target: an edge's placeholder, a module of the files, or ``ext:`` and the dotted name
        of what is imported from outside (as no builtin's name reads)."""
        if target[0] == "edge":
            self.edges.append((target[1], target[2]))
            return ("edge", f"@@edge{len(self.edges) - 1}@@")
        if target[0] == "module":
            return ("module", target[1])
        return ("outside", "ext:" + target[1])

    # the tree
    def write(self, node, scopes: list[_Scope], top: bool = False) -> str:
        if isinstance(node, list):
            return "[" + ",".join(self.write(n, scopes) for n in node) + "]"
        if not isinstance(node, ast.AST):
            return f"{type(node).__name__}:{node!r}"
        if isinstance(node, ast.Name):
            kind, text = self.resolve(node.id, scopes)
            return "N(" + (MODULE if kind == "module" else text) + ")"
        if isinstance(node, ast.Attribute):
            return self.attribute(node, scopes)
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            bound = _imports(node, self.module)
            return "I(" + ",".join(self.bound(self.graph.target(*t))[1] for t in bound.values()) + ")"
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            return type(node).__name__ + "(" + ",".join(self.resolve(n, scopes[:-1])[1] for n in node.names) + ")"
        if isinstance(node, (*_SCOPES, *_COMPREHENSIONS)):
            return self.scope(node, scopes, top)
        if isinstance(node, ast.ExceptHandler):
            name = self.resolve(node.name, scopes)[1] if node.name else ""
            return f"EH({self.write(node.type, scopes)},{name},{self.write(node.body, scopes)})"
        return self.fields(node, scopes)

    def fields(self, node: ast.AST, scopes: list[_Scope], skip: tuple[str, ...] = ()) -> str:
        parts = []
        for key, value in ast.iter_fields(node):
            if key in skip or key == "ctx" or value is None or value == []:
                continue
            if isinstance(node, ast.Constant) and key == "kind":
                continue
            parts.append(f"{key}={self.write(value, scopes)}")
        return f"{type(node).__name__}(" + ",".join(parts) + ")"

    def attribute(self, node: ast.Attribute, scopes: list[_Scope]) -> str:
        """An attribute of a module of the files is what that module binds; of something outside, its dotted
        name (``np.linalg.solve`` and ``from numpy.linalg import solve`` alike)."""
        chain, base = [node.attr], node.value
        while isinstance(base, ast.Attribute):
            chain.insert(0, base.attr)
            base = base.value
        if isinstance(base, ast.Name):
            kind, text = self.resolve(base.id, scopes)
            while kind == "module" and chain:
                kind, text = self.bound(self.graph.target(text, chain.pop(0)))
            if kind == "outside":
                return "N(" + ".".join([text, *chain]) + ")"
            out = "N(" + (MODULE if kind == "module" else text) + ")"
        else:
            out = self.write(base, scopes)
        for attr in chain:
            out = f"A({out},{attr})"
        return out

    def scope(self, node, scopes: list[_Scope], top: bool) -> str:
        """A function, lambda, class or comprehension: what it evaluates where it stands, then its own scope."""
        kind = type(node).__name__
        if isinstance(node, _COMPREHENSIONS):
            bound = {n.id for g in node.generators for n in ast.walk(g.target) if isinstance(n, ast.Name)}
            inner = [*scopes, self.open("function", [])]
            inner[-1].bound |= bound
            return f"{kind}(" + self.fields(node, inner) + ")"
        name = ""
        if not top and not isinstance(node, ast.Lambda):
            name = self.resolve(node.name, scopes)[1]  # a method's name, in its class, stays
        if isinstance(node, ast.ClassDef):
            outer = ",".join(self.write(x, scopes) for x in (node.bases, node.keywords, node.decorator_list))
            inner = [*scopes, self.open("class", node.body)]
            return f"{kind}({name},{outer},{self.write(node.body, inner)})"
        args = node.args
        outer = ",".join(self.write(x, scopes) for x in (args.defaults, args.kw_defaults))
        decorators = "" if isinstance(node, ast.Lambda) else self.write(node.decorator_list, scopes)
        scope = self.open("function", node.body if isinstance(node.body, list) else [])
        scope.bound |= {a.arg for a in _arguments(args)}
        if isinstance(node.body, ast.AST):  # a lambda's expression: its walrus targets
            scope.bound |= set(_statement_names(ast.Expr(node.body)))
        inner = [*scopes, scope]
        signature = ",".join(
            f"{part}:" + ",".join(self.local(scope, a.arg) for a in getattr(args, part) or ())
            for part in ("posonlyargs", "args", "kwonlyargs")
        )
        signature += "".join(f",{p}:{self.local(scope, a.arg)}" for p in ("vararg", "kwarg") if (a := getattr(args, p)))
        return f"{kind}({name},{decorators},{outer},{signature},{self.write(node.body, inner)})"

    def open(self, kind: str, body: list[ast.stmt]) -> _Scope:
        names, statements, declared = _scope_names(body)
        imports = {}
        for stmt in statements:
            imports.update(_imports(stmt, self.module))
        self.opened += 1
        return _Scope(kind, set(names) - declared - set(imports), imports, self.opened)


def read_sources(package: str | os.PathLike, rels) -> dict[str, bytes | None]:
    """{rel: the bytes of package/rel, or None where unreadable}."""
    out: dict[str, bytes | None] = {}
    for rel in sorted(set(rels)):
        try:
            out[rel] = Path(package, rel).read_bytes()
        except OSError:
            out[rel] = None
    return out

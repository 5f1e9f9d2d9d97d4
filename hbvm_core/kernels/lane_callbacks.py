"""A problem's compiled callbacks with a params row per point, for lockstep blocks whose lanes differ in params.

A callback ``f(Q, [V,] out, params)`` (``kernels/__init__.py``) reads one params row for all the points of Q.
In a lockstep block (``kernels/lanes.py``) the points of Q are the stage points of LANES runs, and where the runs
differ in their params each point needs its own lane's row. ``per_point(f)`` is f rewritten so that ``params``
is a matrix [n, P] with a row per point: inside each loop over the points (``for i in range(Q.shape[0])``, any
of the array arguments), ``params[j]`` reads ``params[i, j]``; a statement before the loops that reads params
(``c_0 = params[0]``, as the kernels generated from expressions begin) is moved into the start of each outermost
loop over the points. The arithmetic is f's own, statement for statement; only where each param is read from
changes, so the loop over points stays one that LLVM vectorises along the lanes.

Where f does anything else with params (passes it on, takes its shape or a slice, reads it in a loop that is
not over the points, ...), or has no readable source, or is a closure, ``per_point`` gives None and the block
calls f once per lane on that lane's points (``lanes.LaneRewriter._callback``).
"""

from __future__ import annotations

import ast
import copy
import functools
import hashlib
import textwrap
import types
from pathlib import Path

from .modules import callback_source


def _source_tree(f) -> ast.FunctionDef | None:
    """The syntax tree of a dispatcher's Python function (decorators dropped), or None."""
    text = callback_source(f)
    try:
        tree = ast.parse(textwrap.dedent(text))
    except SyntaxError:
        return None
    fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef)), None)
    if fn is None or len(fn.args.args) < 2 or fn.args.vararg or fn.args.kwarg or fn.args.kwonlyargs:
        return None
    return fn


def reads_params(f) -> bool:
    """Whether the callback reads its params argument (its last); True where its source cannot be read."""
    fn = _source_tree(f)
    if fn is None:
        return True
    name = fn.args.args[-1].arg
    return any(isinstance(n, ast.Name) and n.id == name for stmt in fn.body for n in ast.walk(stmt))


class _PointParams(ast.NodeTransformer):
    """``params[e]`` -> ``params[i, e]`` inside the loops over the points (i: the innermost one's variable)."""

    def __init__(self, params: str, arrays: set[str]):
        self.params, self.arrays = params, arrays
        self.point: str | None = None
        self.failed = False

    def is_point_loop(self, node: ast.For) -> bool:
        """``for i in range(X.shape[0])`` or ``range(len(X))`` with X an array argument."""
        call = node.iter
        if not (isinstance(node.target, ast.Name) and isinstance(call, ast.Call) and len(call.args) == 1):
            return False
        if getattr(call.func, "id", None) != "range" or node.orelse:
            return False
        arg = call.args[0]
        shape0 = (
            isinstance(arg, ast.Subscript)
            and isinstance(arg.value, ast.Attribute)
            and arg.value.attr == "shape"
            and getattr(arg.value.value, "id", None) in self.arrays
            and isinstance(arg.slice, ast.Constant)
            and arg.slice.value == 0
        )
        length = (
            isinstance(arg, ast.Call)
            and getattr(arg.func, "id", None) == "len"
            and len(arg.args) == 1
            and getattr(arg.args[0], "id", None) in self.arrays
        )
        return shape0 or length

    def visit_For(self, node: ast.For):
        outer = self.point
        if self.is_point_loop(node):
            self.point = node.target.id
        self.generic_visit(node)
        self.point = outer
        return node

    def visit_Subscript(self, node: ast.Subscript):
        if isinstance(node.value, ast.Name) and node.value.id == self.params:
            if (
                self.point is None
                or not isinstance(node.ctx, ast.Load)
                or isinstance(node.slice, (ast.Slice, ast.Tuple))
            ):
                self.failed = True
                return node
            index = self.visit(node.slice)
            node.slice = ast.Tuple([ast.Name(self.point, ast.Load()), index], ast.Load())
            return node
        self.generic_visit(node)
        return node

    def visit_Name(self, node: ast.Name):
        if node.id == self.params:  # params other than as params[j] (a call, its shape, a store, ...)
            self.failed = True
        return node


def _names(node: ast.AST, ctx=ast.Load) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ctx)}


def per_point_tree(fn: ast.FunctionDef) -> ast.FunctionDef | None:
    """The rewritten tree of a callback's function (module docstring), or None where the rewrite does not apply."""
    fn = copy.deepcopy(fn)
    fn.decorator_list = []
    params = fn.args.args[-1].arg
    arrays = {a.arg for a in fn.args.args[:-1]}
    # statements before the loops that read params (or a name such a statement made), and no array (which the
    # loops before may have written): moved into the loops
    derived: set[str] = {params}
    moved: list[ast.stmt] = []
    kept: list[ast.stmt] = []
    for stmt in fn.body:
        reads = _names(stmt) & derived
        simple = isinstance(stmt, ast.Assign) and all(isinstance(t, ast.Name) for t in stmt.targets)
        if reads and simple and not isinstance(stmt.value, ast.Name) and not _names(stmt) & arrays:
            moved.append(stmt)
            derived |= {t.id for t in stmt.targets}
        else:
            kept.append(stmt)
    made = derived - {params}
    if any(_names(stmt, ast.Store) & made for stmt in kept):
        return None  # a moved name assigned again elsewhere
    rewriter = _PointParams(params, arrays)

    def sink(body: list[ast.stmt]) -> list[ast.stmt]:
        out = []
        for stmt in body:
            if isinstance(stmt, ast.For) and rewriter.is_point_loop(stmt):
                stmt.body = [copy.deepcopy(s) for s in _needed(moved, stmt.body)] + stmt.body
            elif isinstance(stmt, (ast.For, ast.While, ast.If)):
                stmt.body, stmt.orelse = sink(stmt.body), sink(stmt.orelse)
            out.append(stmt)
        return out

    fn.body = sink(kept)
    # every read of a moved name must now sit inside a loop over the points
    if any(_loose_reads(stmt, rewriter) & made for stmt in fn.body):
        return None
    fn = rewriter.visit(fn)
    if rewriter.failed:
        return None
    return ast.fix_missing_locations(fn)


def _needed(moved: list[ast.stmt], body: list[ast.stmt]) -> list[ast.stmt]:
    """The moved statements that ``body`` reads, directly or through another moved statement, in their order."""
    needed = set().union(*(_names(stmt) for stmt in body))
    keep = []
    for stmt in reversed(moved):
        if _names(stmt, ast.Store) & needed:
            keep.append(stmt)
            needed |= _names(stmt)
    return keep[::-1]


def _loose_reads(stmt: ast.stmt, rewriter: _PointParams) -> set[str]:
    """The names a statement reads outside any loop over the points."""
    if isinstance(stmt, ast.For) and rewriter.is_point_loop(stmt):
        return set()
    found = set()
    for child in ast.iter_child_nodes(stmt):
        if isinstance(child, ast.stmt):
            found |= _loose_reads(child, rewriter)
        else:
            found |= _names(child)
    return found


@functools.cache
def version() -> str:
    """A hash of this module's source: the lockstep module's constants hold it (``lanes.constants_of``)."""
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


def per_point(f):
    """The Python function of callback ``f`` with a params row per point (module docstring), in f's own globals;
    None where the rewrite does not apply."""
    py_func = getattr(f, "py_func", None)
    if py_func is None or py_func.__code__.co_freevars:
        return None
    fn = _source_tree(f)
    if fn is None:
        return None
    tree = per_point_tree(fn)
    if tree is None:
        return None
    module = ast.Module([tree], [])
    code = compile(ast.fix_missing_locations(module), f"<{py_func.__qualname__} per point>", "exec")
    body = next(c for c in code.co_consts if isinstance(c, types.CodeType))
    return types.FunctionType(body, py_func.__globals__, f"{py_func.__name__}_per_point")

"""Branches on compile-time constants taken out of a generated module's text before numba sees it.

A template branches on the constants the generator binds (``M_SIZE``, ``NU_SIZE``, ``HAS_M``, ``SOLVER``,
``K_SIZE``, ...): the fixed-point loop carries the blended solver's Newton iteration behind ``if SOLVER ==
FIXED_POINT``, a problem with M = I the Cholesky solves behind ``if HAS_M``. numba's own pruning removes such a
branch only after it has built, typed and analysed the whole function, and its front end costs more than
linearly in the size of a function: most of a loop's compile time. ``fold_constants`` keeps only the branch
taken, in the text, so numba compiles the loop the constants select and nothing else.

A test is folded when it is made of literals and module-level names bound once to a number, bool or string that
no function assigns (the constants, which override the template's placeholders, and the template's own codes such
as ``FIXED_POINT, BLENDED = 0, 1``) with ``==``,
``!=``, ``<``, ``<=``, ``>``, ``>=``, ``not``, ``and``, ``or``; any other test is left as it is.
"""

from __future__ import annotations

import ast
import operator

_COMPARE = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}
#: the value of a test that cannot be folded
UNKNOWN = object()


def fold_constants(source: str, constants: dict) -> str:
    """``source`` with each ``if``/``elif``/``else`` whose test is known from ``constants`` (and the module's own
    literal assignments) replaced by the branch it takes (a ``pass`` where that branch is empty)."""
    while True:
        tree = ast.parse(source)
        known = _known_names(tree, constants)
        lines = source.splitlines()
        for node in _ifs(tree):
            taken = _value(node.test, known)
            if taken is UNKNOWN or lines[node.lineno - 1].lstrip().startswith("elif"):
                continue  # an elif is folded with its if
            replacement = _branch(lines, node, bool(taken))
            if replacement is not None:  # None: a branch whose text cannot be moved left (a continued string)
                source = "\n".join(lines[: node.lineno - 1] + replacement + lines[node.end_lineno :]) + "\n"
                break
        else:
            return source


def _ifs(tree: ast.AST):
    """The ``if`` statements, outermost first, in the order of the text."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If):
            yield node
        stack.extend(reversed(list(ast.iter_child_nodes(node))))


def _known_names(tree: ast.Module, constants: dict) -> dict:
    """Module-level names bound to literals (``A = 1``, ``A, B = 0, 1``), updated by ``constants``, less any name
    that a function assigns or that is bound more than once."""
    known: dict = {}
    bound: dict[str, int] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        for n in ast.walk(stmt):  # every module-level binding: an assignment, an augmented one, a loop's target
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                bound[n.id] = bound.get(n.id, 0) + 1
        if isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                known.update(_literal_pairs(target, stmt.value))
    known = {name: value for name, value in known.items() if bound.get(name) == 1}
    known.update({name: value for name, value in constants.items() if _is_literal(value)})
    local: set[str] = set()  # names a function binds (its arguments, its stores, its globals)
    for fn in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)):
        local |= {a.arg for a in ast.walk(fn.args) if isinstance(a, ast.arg)}
        local |= {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        local |= {name for n in ast.walk(fn) if isinstance(n, ast.Global | ast.Nonlocal) for name in n.names}
    return {name: value for name, value in known.items() if name not in local}


def _literal_pairs(target: ast.AST, value: ast.AST) -> dict:
    """{name: literal} of an assignment ``target = value`` (a name, or a tuple of names and literals)."""
    if isinstance(target, ast.Name):
        try:
            literal = ast.literal_eval(value)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return {}
        return {target.id: literal} if _is_literal(literal) else {}
    if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) and len(target.elts) == len(value.elts):
        out: dict = {}
        for t, v in zip(target.elts, value.elts, strict=True):
            out.update(_literal_pairs(t, v))
        return out
    return {}


def _is_literal(value) -> bool:
    """A value a test may be folded on: a number, a bool or a string (None is a placeholder the generated module
    rebinds, a callback's)."""
    return isinstance(value, bool | int | float | str)


def _value(test: ast.AST, known: dict):
    """The value of ``test`` from ``known`` names and literals, or ``UNKNOWN``."""
    if isinstance(test, ast.Constant) and _is_literal(test.value):
        return test.value
    if isinstance(test, ast.Name):
        return known.get(test.id, UNKNOWN)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _value(test.operand, known)
        return UNKNOWN if inner is UNKNOWN else not inner
    if isinstance(test, ast.BoolOp):  # known where one operand decides it (False in an and, True in an or)
        values = [_value(v, known) for v in test.values]
        decides = isinstance(test.op, ast.Or)
        if any(v is not UNKNOWN and bool(v) == decides for v in values):
            return decides
        return UNKNOWN if any(v is UNKNOWN for v in values) else not decides
    if isinstance(test, ast.Compare) and all(type(op) in _COMPARE for op in test.ops):
        left = _value(test.left, known)
        rights = [_value(c, known) for c in test.comparators]
        if left is UNKNOWN or UNKNOWN in rights:
            return UNKNOWN
        try:
            for op, right in zip(test.ops, rights, strict=True):
                if not _COMPARE[type(op)](left, right):
                    return False
                left = right
        except TypeError:
            return UNKNOWN
        return True
    return UNKNOWN


def _branch(lines: list[str], node: ast.If, taken: bool) -> list[str] | None:
    """The lines that replace ``node``: its body (``taken``) or its ``else``, at the ``if``'s indentation."""
    indent = node.col_offset
    if taken:
        return _dedented(lines, node.body, indent)
    if not node.orelse:
        return [" " * indent + "pass"]
    first = node.orelse[0]
    if len(node.orelse) == 1 and isinstance(first, ast.If) and lines[first.lineno - 1].lstrip().startswith("elif"):
        head = lines[first.lineno - 1]
        at = len(head) - len(head.lstrip())
        return [head[:at] + head[at + 2 :]] + lines[first.lineno : node.end_lineno]  # elif -> if, same indent
    return _dedented(lines, node.orelse, indent)


def _dedented(lines: list[str], body: list[ast.stmt], indent: int) -> list[str] | None:
    """The text of the statements ``body`` moved left to column ``indent``; None when a line of it is indented
    less than its block (a continued string)."""
    cut = body[0].col_offset - indent
    out = []
    for line in lines[body[0].lineno - 1 : body[-1].end_lineno]:
        if line.strip() and not line[:cut].isspace():
            return None
        out.append(line[cut:] if line.strip() else "")
    return out

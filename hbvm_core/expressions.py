"""Problems from expressions: U, g, M, q0, p0 (and a closed form) as formulas; exact derivatives, generated callbacks.

A problem is given by its coordinates, parameters, the potential U, the constraints g (a list), the mass
matrix M (a scalar, its diagonal, or a full symmetric matrix; constant, possibly in the parameters), q0 and
p0 (numbers or expressions of the parameters), optionally a period and a closed form q(t), p(t), lam(t).
From them (docs/method.md section 1):

    grad U = (dU/dq_j)_j,   G_ji = dg_i/dq_j,   d2g_i(q, v) = sum_jk v_j v_k d^2 g_i / dq_j dq_k

are derived exactly (sympy), simplified by common-subexpression elimination (``sympy.cse``) and written,
once per set of expressions, into one generated module in the kernel cache (``kernels.modules.cache_dir``,
named by the digest of its text, so numba's disk cache serves every process): vectorised numpy callbacks
(``Problem``'s conventions) and compiled kernels (``Kernels``: grad_U, G, g, d2g; the parameters are the
kernels' ``params``, so one compiled loop serves every parameter value).

Expression strings (a config's ``problem:`` mapping) are parsed by a restricted grammar (``parse``): names of
coordinates and parameters (and ``t`` in a closed form), numbers, + - * / ** and unary -, parentheses, and
the functions of ``FUNCTIONS``; the tree is walked node by node and the sympy expression built from it --
no string is ever evaluated. ``Problem.identity`` is the canonical form (``sympy.srepr``) of the expressions,
so reformatting an expression does not change it and any change of the mathematics does.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import inspect
import json
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .errors import ConfigError, keywords_checked
from .problem import Problem
from .problems.family import Family, attach

#: the keys of a ``problem:`` mapping (the required ones first)
KEYS = ("name", "coordinates", "potential", "q0", "p0", "params", "mass", "constraints", "period", "exact")
REQUIRED = ("name", "coordinates", "potential", "q0", "p0")
#: functions an expression may call (sympy's of the same name; ``abs`` parses but is refused where not smooth)
FUNCTION_NAMES = ("sin", "cos", "tan", "exp", "log", "sqrt", "sinh", "cosh", "tanh", "asin", "acos", "atan", "atan2")
CONSTANT_NAMES = ("pi", "E")
#: the most characters of one expression, and the largest exponent of a number raised to a number
MAX_LENGTH = 4000
MAX_POWER_BITS = 4096
#: the deepest nesting of one expression (calls, operators, parentheses: levels of its syntax tree)
MAX_DEPTH = 40
#: the most operations of a problem's expressions and their derivatives (sympy ``count_ops``), and the most
#: seconds sympy may spend deriving and simplifying them (``time_limit``)
MAX_OPS = 20_000
MAX_SECONDS = 10.0


def _sympy():
    import sympy

    return sympy


def functions() -> dict[str, Any]:
    sp = _sympy()
    return {name: getattr(sp, name) for name in FUNCTION_NAMES} | {"abs": sp.Abs}


def _not_smooth(expr) -> str | None:
    """The name of a function in ``expr`` that is not differentiable everywhere (abs, sign, ...), else None."""
    sp = _sympy()
    rough = ((sp.Abs, "abs"), (sp.sign, "sign"), (sp.Heaviside, "Heaviside"), (sp.Min, "min"), (sp.Max, "max"))
    for function, name in rough:
        if expr.has(function):
            return name
    return None


# --------------------------------------------------------------------------- the restricted grammar
def _short(text: str) -> str:
    return text if len(text) <= 60 else text[:57] + "..."


#: the keys whose expressions must be smooth: ``abs`` is not one of their functions
SMOOTH_KEYS = ("problem.potential", "problem.constraints")


def _depth(tree) -> int:
    """Levels of nesting of a syntax tree: a chain a + b - c + ... (or a * b / c ...) is one level, as written
    (iteratively: a tree too deep for recursion is measured too)."""
    flat = {ast.Add: (ast.Add, ast.Sub), ast.Sub: (ast.Add, ast.Sub), ast.Mult: (ast.Mult, ast.Div)}
    flat[ast.Div] = flat[ast.Mult]
    deepest, todo = 0, [(tree, 1)]
    while todo:
        node, d = todo.pop()
        deepest = max(deepest, d)
        for child in ast.iter_child_nodes(node):
            chain = isinstance(node, ast.BinOp) and isinstance(child, ast.BinOp) and child is node.left
            same = chain and isinstance(child.op, flat.get(type(node.op), ()))
            todo.append((child, d if same else d + 1))
    return deepest


@contextlib.contextmanager
def time_limit(seconds: float, what: str):
    """ConfigError ('<what>: sympy took more than N s ...') when the block runs longer than ``seconds``.

    A SIGALRM timer, so only in the main thread of a process (where a config's expressions are first built:
    Snakemake's parse, a job script, a user's session) and when no other timer is set; elsewhere (a Dask
    worker's threads) the block runs unbounded: it derives only what a main thread accepted already. A
    subprocess would bound it everywhere, at a second of start-up for every problem."""
    import signal
    import threading

    usable = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    outer = signal.getitimer(signal.ITIMER_REAL) if usable else (0.0, 0.0)
    if not usable or 0 < outer[0] <= seconds:  # an outer timer (pytest-timeout's, say) fires first anyway
        yield
        return

    def expired(signum, frame):
        raise ConfigError(
            f"{what}: sympy took more than {seconds:g} s to derive and simplify it (at most {seconds:g} s): "
            "write it in fewer or simpler terms"
        )

    previous = signal.signal(signal.SIGALRM, expired)
    t0 = time.monotonic()
    signal.setitimer(signal.ITIMER_REAL, seconds, 1.0)  # again every second, should a library swallow it
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer[0] > 0:  # the outer timer goes on with what it had left
            signal.setitimer(signal.ITIMER_REAL, max(outer[0] - (time.monotonic() - t0), 1e-3), outer[1])


def parse(text: str, names: dict[str, Any], key: str, subscripts: Callable | None = None, families=()):
    """The sympy expression of ``text`` (a formula over ``names``), built node by node from Python's syntax tree.

    Allowed: the names in ``names`` and ``pi``, ``E``; int and float literals; + - * / ** and unary + -;
    calls of ``FUNCTIONS`` by name with positional arguments; with ``subscripts``, a reference ``f[index]`` to a
    name of ``families`` (the indexed form, ``hbvm_core.indexed``): ``subscripts(f, index, token)`` returns its
    symbol, the index a formula built by the same grammar. Anything else raises ConfigError naming ``key`` and
    the offending token.
    """
    sp = _sympy()
    funcs = functions()
    if key.split("[")[0] in SMOOTH_KEYS:  # refused there (not differentiable), so not offered
        funcs.pop("abs")
    what = f"{key} = {_short(text)!r}"
    if len(text) > MAX_LENGTH:
        raise ConfigError(f"{key}: expression of {len(text)} characters (at most {MAX_LENGTH})")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise ConfigError(f"{what}: not a formula ({exc.msg})") from None
    except (ValueError, RecursionError, MemoryError) as exc:  # a null byte, nesting too deep
        raise ConfigError(f"{what}: not a formula ({type(exc).__name__})") from None
    depth = _depth(tree)
    if depth > MAX_DEPTH:
        raise ConfigError(f"{key}: expression nested {depth} levels deep (at most {MAX_DEPTH})")

    def token(node) -> str:
        return _short(ast.get_source_segment(text.strip(), node) or type(node).__name__)

    def refuse(node, why: str):
        # the innermost unknown name in it first (``__import__`` in ``__import__('os').system``), else the node
        known = set(names) | set(CONSTANT_NAMES) | set(funcs) | set(families)
        unknown = sorted(
            (n for n in ast.walk(node) if isinstance(n, ast.Name) and n.id not in known and n is not node),
            key=lambda n: (n.lineno, n.col_offset),
        )
        if unknown:
            node, why = unknown[0], "is not a known name"
        allowed = f"names {', '.join(names) or '(none)'}; functions {', '.join(funcs)}"
        if families:
            allowed += f"; indexed {', '.join(f'{f}[...]' for f in families)}"
        raise ConfigError(f"{what}: {token(node)!r} {why} (allowed: numbers, + - * / **, {allowed})")

    ops = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b}
    ops |= {ast.Div: lambda a, b: a / b}

    def build(node):
        if isinstance(node, ast.Expression):
            return build(node.body)
        if isinstance(node, ast.Constant):
            if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
                refuse(node, "is not a number")
            return sp.Integer(node.value) if isinstance(node.value, int) else sp.Float(node.value)
        if isinstance(node, ast.Name):
            if node.id in names:
                return names[node.id]
            if node.id in CONSTANT_NAMES:
                return getattr(sp, node.id)
            if node.id in families:
                refuse(node, f"is indexed: write it with its index, {node.id}[...]")
            refuse(node, "is not a known name")
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            val = build(node.operand)
            return -val if isinstance(node.op, ast.USub) else val
        if isinstance(node, ast.BinOp) and type(node.op) in ops:
            return ops[type(node.op)](build(node.left), build(node.right))
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
            base, expo = build(node.left), build(node.right)
            if base.is_number and expo.is_number:  # evaluated exactly by sympy: bound the size first
                b, e = complex(base.evalf(15)), complex(expo.evalf(15))
                if abs(e) * max(1.0, abs(math.log2(abs(b)) if b else 0.0)) > MAX_POWER_BITS:
                    refuse(node, "is too large a power")
            return base**expo
        if isinstance(node, ast.Subscript) and subscripts is not None:
            if not isinstance(node.value, ast.Name) or node.value.id not in families:
                refuse(node.value, "is not an indexed coordinate")
            if isinstance(node.slice, (ast.Slice, ast.Tuple)):
                refuse(node, "takes one index (a formula)")
            return subscripts(node.value.id, build(node.slice), token(node))
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Name) and node.func.id == "abs" and "abs" not in funcs:
                raise ConfigError(f"{key}: not differentiable (abs); the potential and constraints must be smooth")
            if not isinstance(node.func, ast.Name) or node.func.id not in funcs:
                refuse(node.func, "is not an allowed function")
            if node.keywords:
                refuse(node, "takes no keyword arguments")
            return funcs[node.func.id](*(build(a) for a in node.args))
        refuse(node, "is not allowed")

    try:
        expr = build(tree)
    except ConfigError:
        raise
    except (TypeError, ValueError, ArithmeticError, RecursionError) as exc:
        raise ConfigError(f"{what}: cannot build it ({type(exc).__name__}: {exc})") from None
    if expr.has(sp.zoo, sp.nan, sp.oo, -sp.oo):
        raise ConfigError(f"{what}: not finite (a division by zero?)")
    return expr


# --------------------------------------------------------------------------- the symbolic problem
class Model:
    """The symbolic problem: the expressions (over coordinate and parameter symbols), their derivatives, the
    generated module and the identity. Independent of the parameters' values (``problem`` binds them)."""

    def __init__(
        self,
        name: str,
        coordinates: Sequence[str],
        potential,
        q0,
        p0,
        params: dict[str, float] | None = None,
        mass=1,
        constraints=(),
        period=None,
        exact=None,
    ):
        sp = _sympy()
        if not isinstance(name, str) or not name.isidentifier():
            raise ConfigError(f"problem.name = {name!r}: expected a name (letters, digits, _)")
        self.name = name
        self.coordinates = self._names("coordinates", coordinates)
        self.param_names = self._names("params", list(params or {}))
        taken = set(self.coordinates) & set(self.param_names)
        if taken:
            raise ConfigError(f"problem.params.{sorted(taken)[0]}: also a coordinate; give distinct names")
        self.defaults = {k: _number(f"problem.params.{k}", v) for k, v in (params or {}).items()}
        self.q = [sp.Symbol(c, real=True) for c in self.coordinates]
        self.c = [sp.Symbol(c, real=True) for c in self.param_names]
        self.t = sp.Symbol("t", real=True)
        m = len(self.q)
        on_q = dict(zip(self.coordinates, self.q)) | dict(zip(self.param_names, self.c))
        on_c = dict(zip(self.param_names, self.c))
        self.U = self._expr("problem.potential", potential, on_q, self.q)
        if callable(constraints) and not isinstance(constraints, (str, sp.Basic)):
            constraints = _trace("problem.constraints", constraints, self.q, on_c)
        if isinstance(constraints, (str, sp.Basic)) or not isinstance(constraints, Sequence):
            raise ConfigError(f"problem.constraints = {_short(repr(constraints))}: expected a list of expressions")
        self.g = [self._expr(f"problem.constraints[{i}]", gi, on_q, self.q) for i, gi in enumerate(constraints)]
        smooth = [("problem.potential", self.U)] + [(f"problem.constraints[{i}]", gi) for i, gi in enumerate(self.g)]
        for key, expr in smooth:
            bad = _not_smooth(expr)
            if bad is not None:
                raise ConfigError(f"{key}: not differentiable ({bad}); the potential and constraints must be smooth")
        self.mass = self._mass(mass, on_c, m)
        self.q0 = self._vector("problem.q0", q0, on_c, m)
        self.p0 = self._vector("problem.p0", p0, on_c, m)
        self.period = None if period is None else self._expr("problem.period", period, on_c)
        self.exact = None if exact is None else self._exact(exact, on_c | {"t": self.t}, m)
        nu = len(self.g)
        if nu >= max(m, 1):
            raise ConfigError(f"problem.constraints: nu = {nu} constraints need nu < m = {m} coordinates")
        # the derivatives (docs/method.md 1)
        self.v = [sp.Symbol(f"v_{j}", real=True) for j in range(m)]
        self.grad_U = [sp.diff(self.U, qj) for qj in self.q]
        self.G = [[sp.diff(gi, qj) for gi in self.g] for qj in self.q]  # G[j][i] = dg_i/dq_j
        self.d2g = [
            sum(self.v[j] * self.v[k] * sp.diff(self.G[j][i], self.q[k]) for j in range(m) for k in range(m))
            for i in range(nu)
        ]
        ops = sp.count_ops([self.U, *self.g, *self.grad_U, *(x for row in self.G for x in row), *self.d2g])
        if ops > MAX_OPS:
            raise ConfigError(
                f"problem {name!r}: its expressions and their derivatives take {ops} operations (at most "
                f"{MAX_OPS}): write them in fewer or simpler terms"
            )
        self.identity = self._identity()
        self.module = self._module()

    # --- reading the inputs
    @staticmethod
    def _names(key: str, names) -> tuple[str, ...]:
        if isinstance(names, str) or not isinstance(names, Sequence):
            raise ConfigError(f"problem.{key} = {names!r}: expected a list of names")
        reserved = set(FUNCTION_NAMES) | set(CONSTANT_NAMES) | {"abs", "t"}
        for name in names:
            if not isinstance(name, str) or not name.isidentifier() or name.startswith("_"):
                raise ConfigError(f"problem.{key}: {name!r} is not a name (letters, digits, _; not starting with _)")
            if name in reserved or name in ("lambda", "import", "None", "True", "False"):
                raise ConfigError(f"problem.{key}: {name!r} is reserved (a function, a constant or the time t)")
        if len(set(names)) != len(names):
            raise ConfigError(f"problem.{key} = {list(names)!r}: repeated name")
        if key == "coordinates" and not names:
            raise ConfigError("problem.coordinates: expected at least one coordinate")
        return tuple(names)

    def _expr(self, key: str, value, names: dict, q=None):
        """One expression: a string (parsed), a number, a sympy expression, or a function of q (traced)."""
        sp = _sympy()
        if isinstance(value, str):
            return parse(value, names, key)
        if isinstance(value, bool):
            raise ConfigError(f"{key} = {value!r}: expected an expression or a number")
        if isinstance(value, (int, float, np.integer, np.floating)):
            return sp.Integer(int(value)) if isinstance(value, (int, np.integer)) else sp.Float(float(value))
        if isinstance(value, sp.Basic):
            expr = value
        elif callable(value) and q is not None:
            expr = _trace(key, value, q, {k: v for k, v in names.items() if k in self.param_names})
        else:
            what = "an expression (a string), a number or a function"
            raise ConfigError(f"{key} = {_short(repr(value))}: expected {what}")
        if not isinstance(expr, sp.Expr):
            raise ConfigError(f"{key}: {_short(str(expr))!r} is not a scalar expression")
        unknown = sorted(str(s) for s in expr.free_symbols if str(s) not in names or names[str(s)] != s)
        if unknown:
            raise ConfigError(f"{key} = {_short(str(expr))!r}: {unknown[0]!r} is not a known name")
        return expr

    def _vector(self, key: str, value, names: dict, m: int) -> list:
        if isinstance(value, (str, bytes)) or not isinstance(value, (Sequence, np.ndarray)):
            raise ConfigError(f"{key} = {_short(repr(value))}: expected a list of {m} entries")
        if len(value) != m:
            raise ConfigError(f"{key}: {len(value)} entries, expected {m} (one per coordinate)")
        return [self._expr(f"{key}[{j}]", x, names) for j, x in enumerate(value)]

    def _mass(self, mass, names: dict, m: int):
        """('scalar', e) | ('diagonal', [e_j]) | ('full', [[e_jk]])."""
        if isinstance(mass, (str, int, float)) or not isinstance(mass, (Sequence, np.ndarray)):
            return ("scalar", self._expr("problem.mass", mass, names))
        rows = list(mass)
        if len(rows) != m:
            raise ConfigError(f"problem.mass: {len(rows)} entries, expected a scalar, {m} diagonal entries or {m} rows")
        if all(isinstance(r, (str, int, float)) or not isinstance(r, (Sequence, np.ndarray)) for r in rows):
            return ("diagonal", [self._expr(f"problem.mass[{j}]", x, names) for j, x in enumerate(rows)])
        full = []
        for j, row in enumerate(rows):
            if isinstance(row, str) or not isinstance(row, (Sequence, np.ndarray)) or len(row) != m:
                raise ConfigError(f"problem.mass[{j}]: expected a row of {m} entries (a full symmetric matrix)")
            full.append([self._expr(f"problem.mass[{j}][{k}]", x, names) for k, x in enumerate(row)])
        sp = _sympy()
        for j in range(m):
            for k in range(j):
                if sp.simplify(full[j][k] - full[k][j]) != 0:
                    raise ConfigError(f"problem.mass[{j}][{k}]: not equal to mass[{k}][{j}]; M must be symmetric")
        return ("full", full)

    def _exact(self, exact, names: dict, m: int) -> dict:
        if not isinstance(exact, dict) or not {"q", "p"} <= set(exact) or set(exact) - {"q", "p", "lam"}:
            raise ConfigError("problem.exact: expected a mapping {q: [...], p: [...], lam: [...]} (lam for nu > 0)")
        nu = len(self.g)
        out = {}
        for part, size in (("q", m), ("p", m), ("lam", nu)):
            value = exact.get(part, [] if nu == 0 else None)
            if value is None:
                raise ConfigError("problem.exact.lam: missing (with constraints a closed form gives lam(t) too)")
            out[part] = self._vector(f"problem.exact.{part}", value, names, size)
        return out

    # --- the identity and the generated module
    def _identity(self) -> str:
        """The canonical text of the mathematics: coordinates, parameter names and every expression (srepr)."""
        sp = _sympy()
        form, mass = self.mass
        doc = {
            "coordinates": list(self.coordinates),
            "params": list(self.param_names),
            "potential": sp.srepr(self.U),
            "constraints": [sp.srepr(x) for x in self.g],
            "mass": [form, sp.srepr(sp.Matrix(mass) if form == "full" else mass)],
            "q0": [sp.srepr(x) for x in self.q0],
            "p0": [sp.srepr(x) for x in self.p0],
            "period": None if self.period is None else sp.srepr(self.period),
            "exact": None if self.exact is None else {k: [sp.srepr(x) for x in v] for k, v in self.exact.items()},
        }
        return "hbvm-expressions-1:" + json.dumps(doc, sort_keys=True, separators=(",", ":"))

    def _module(self):
        import sys

        from .kernels.modules import import_generated

        text = generate_source(self)
        name = f"hbvm_expr_{hashlib.sha256(text.encode()).hexdigest()[:20]}"
        if name in sys.modules:  # the same expressions built again in this process
            return sys.modules[name]
        return import_generated(name, name, text)

    # --- a problem at parameter values
    def values(self, **overrides) -> dict[str, float]:
        return param_values(self.name, self.param_names, self.defaults, overrides)

    def problem(self, **overrides) -> Problem:
        """The Problem at these parameter values (the mapping's own ``params`` for the others)."""
        from .kernels import Kernels

        values = self.values(**overrides)
        c = np.array(list(values.values()), dtype=float)
        mod = self.module
        with np.errstate(all="ignore"):
            try:
                q0, p0, mass, period = mod.initial(c)
            except (ArithmeticError, ValueError) as exc:
                raise ConfigError(f"problem {self.name!r}: q0, p0, mass or period at {values}: {exc}") from None
        form = self.mass[0]
        shape = () if form == "scalar" else (-1,) if form == "diagonal" else (len(q0), -1)
        M = np.array(mass, dtype=float).reshape(shape)
        nu = len(self.g)
        for key, val in (("q0", q0), ("p0", p0), ("mass", mass), ("period", [] if period is None else [period])):
            if not np.all(np.isfinite(np.asarray(val, dtype=float))):
                raise ConfigError(f"problem.{key}: not finite at the parameters {values}")
        if period is not None and not period > 0:
            raise ConfigError(f"problem.period = {period!r} at the parameters {values}: expected > 0")
        kernels = Kernels(
            grad_U=f"{mod.__name__}:grad_U_kernel",
            G=f"{mod.__name__}:G_kernel" if nu else None,
            g=f"{mod.__name__}:g_kernel" if nu else None,
            d2g=f"{mod.__name__}:d2g_kernel" if nu else None,
            params=tuple(float(x) for x in c),
        )
        problem = Problem(
            name=self.name,
            q0=q0,
            p0=p0,
            U=_bind(mod.U, c),
            grad_U=_bind(mod.grad_U, c),
            g=_bind(mod.g, c) if nu else None,
            G=_bind(mod.G, c) if nu else None,
            d2g=_bind(mod.d2g, c) if nu else None,
            M=None if form == "scalar" and float(M) == 1.0 else M,
            exact=_bind(mod.exact, c) if self.exact is not None else None,
            period=period,
            params=values,
            kernels=kernels,
            identity=self.identity,
            coordinates=tuple(self.coordinates),
        )
        return attach(problem, self.family(values, problem))

    def family(self, values: dict[str, float], problem: Problem) -> Family:
        """The problem's instances as arrays over runs (``integrate_ensemble(problem, ..., params={...})``): the
        params rows are the parameters in order, so the callbacks take a row per point; q0, p0 and M come from
        ``initial`` run by run (microseconds each: nothing is built per run)."""
        mod, names, m = self.module, self.param_names, len(self.q)
        form = self.mass[0]

        def per_point(f: Callable) -> Callable:
            # the generated code reads c[j]: a row per point [n, P] is read as its columns (K.T), one row as is
            return lambda *args: f(*args[:-1], args[-1].T if np.ndim(args[-1]) == 2 else args[-1])

        def rows(v: dict[str, np.ndarray]) -> tuple:
            K = np.stack([np.asarray(v[k], dtype=float) for k in names], axis=1) if names else np.zeros((1, 0))
            R = K.shape[0]
            q0, p0 = np.empty((R, m)), np.empty((R, m))
            mass = np.empty((R, m)) if form != "full" else None
            with np.errstate(all="ignore"):
                for r in range(R):
                    try:
                        qr, pr, mr, _ = mod.initial(K[r])
                    except (ArithmeticError, ValueError) as exc:
                        raise ConfigError(f"problem {self.name!r} (run {r}): q0, p0 or mass: {exc}") from None
                    q0[r], p0[r] = qr, pr
                    if mass is not None:
                        mass[r] = mr if form == "diagonal" else mr[0]
            finite = np.isfinite(q0).all(axis=1) & np.isfinite(p0).all(axis=1)
            if mass is not None:
                finite &= np.isfinite(mass).all(axis=1)
            if not finite.all():
                r = int(np.flatnonzero(~finite)[0])
                at = {k: float(K[r, j]) for j, k in enumerate(names)}
                raise ConfigError(f"problem {self.name!r} (run {r}): q0, p0 or mass not finite at {at}")
            if form == "full":
                raise ConfigError(
                    f"params: problem {self.name!r} has a full mass matrix, which runs given as arrays do not "
                    "take: give a list of problems"
                )
            return K, q0, p0, (None if np.all(mass == 1.0) else mass)

        callbacks = [per_point(getattr(mod, key)) for key in ("U", "grad_U", "g", "G", "d2g")]
        return Family(
            self.name, dict(values), {k: () for k in names}, rows, *callbacks,
            build=self.problem, form=lambda: problem,
        )  # fmt: skip


def _bind(f: Callable, c: np.ndarray) -> Callable:
    """f(*args, c): a callback with the parameters bound (the same code for every parameter value)."""

    def callback(*args):
        return f(*args, c)

    callback.__qualname__ = callback.__name__ = f.__name__
    return callback


def param_values(name: str, names: list[str], defaults: dict, overrides: dict) -> dict[str, float]:
    """A problem's params, in its order: ``defaults`` updated by ``overrides`` (a ConfigError naming a key that is
    not one of ``names``, a value that is not a number, or a param with no value)."""
    unknown = sorted(set(overrides) - set(names))
    if unknown:
        raise ConfigError(
            f"problem.params.{unknown[0]}: not a parameter of {name!r} (its parameters: {', '.join(names) or 'none'})"
        )
    values = dict(defaults) | {k: _number(f"problem.params.{k}", v) for k, v in overrides.items()}
    missing = [k for k in names if k not in values]
    if missing:
        raise ConfigError(f"problem.params.{missing[0]}: no value given")
    return {k: values[k] for k in names}


def _number(key: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ConfigError(f"{key} = {value!r}: expected a finite number")
    if not math.isfinite(value):
        raise ConfigError(f"{key} = {value!r}: expected a finite number")
    return float(value)


def _trace(key: str, f: Callable, q: list, params: dict):
    """f(q) or f(q, params) called on symbols: a Python function turned into expressions."""
    try:
        n = len([p for p in inspect.signature(f).parameters.values() if p.default is inspect.Parameter.empty])
    except (TypeError, ValueError):
        n = 1
    try:
        return f(q, dict(params)) if n >= 2 else f(q)
    except Exception as exc:  # noqa: BLE001 - the user's function: one line naming it
        raise ConfigError(
            f"{key}: calling the function on symbols raised {type(exc).__name__}: {exc} "
            "(use the functions of hbvm_core.sym, not numpy's or math's)"
        ) from None


# --------------------------------------------------------------------------- code generation
def _printers():
    sp = _sympy()
    from sympy.printing.numpy import NumPyPrinter
    from sympy.printing.pycode import PythonCodePrinter

    def power(printer, expr, sqrt: str):
        """Small integer powers as products and half-integer ones as products with one square root (as the
        hand-written kernels: no libm pow; |q|^-3 of a central force is 1/(r2*sqrt(r2)))."""
        base, expo = expr.args
        b = printer.parenthesize(base, sp.printing.precedence.PRECEDENCE["Mul"])
        if expo.is_Integer and 2 <= abs(int(expo)) <= 4:
            factors = [b] * abs(int(expo))
        elif expo.is_Rational and expo.q == 2 and abs(expo.p) <= 7:
            factors = [b] * (abs(int(expo.p)) // 2) + [f"{sqrt}({printer.doprint(base)})"]
        else:
            return None
        prod = "*".join(factors)
        return f"({prod})" if expo > 0 else f"(1.0/({prod}))"

    class Scalar(PythonCodePrinter):
        def _print_Pow(self, expr, rational=False):
            return power(self, expr, "math.sqrt") or super()._print_Pow(expr, rational=rational)

    class Vector(NumPyPrinter):
        def _print_Pow(self, expr, rational=False):
            return power(self, expr, "numpy.sqrt") or super()._print_Pow(expr, rational=rational)

    settings = {"fully_qualified_modules": True, "standard": "python3"}
    return Scalar(settings), Vector(settings)


def _code(printer, expr) -> str:
    text = printer.doprint(expr)
    if "Not supported" in text or "\n" in text:
        raise ConfigError(f"expression {expr} cannot be written as code")
    return text


def _cse(exprs: list) -> tuple[list, list]:
    """``sympy.cse``: (the common subexpressions as (symbol _x<i>, value), the expressions written with them)."""
    sp = _sympy()
    return sp.cse(exprs, symbols=sp.numbered_symbols("_x"))


def _block(printer, exprs: list, indent: str) -> tuple[list[str], list[str]]:
    """(lines of the common subexpressions, code of each expression) after ``sympy.cse``."""
    if not exprs:
        return [], []
    subs, reduced = _cse(exprs)
    lines = [f"{indent}{sym} = {_code(printer, val)}" for sym, val in subs]
    return lines, [_code(printer, e) for e in reduced]


def _point_loops(printer, exprs: list, idx: list[str], m: int, with_v: bool) -> list[str]:
    """The body of a compiled kernel writing ``out[i, idx_k] = exprs[k]`` for every point i: after ``sympy.cse``,
    the entries are parted into groups that share no subexpression (the constant entries one group), and each
    group is one loop over the points with only the loads and subexpressions it needs. The loop over points is
    so the innermost one, over few columns: on the lockstep blocks' Fortran-ordered views (one point per lane)
    LLVM vectorises it (docs/performance.md); the arithmetic of each entry is the same as in one loop."""
    sp = _sympy()
    if not exprs:
        return []
    subs, reduced = _cse(exprs)
    needs = {}  # a subexpression -> the subexpressions it reads, itself included (transitively)
    for sym, val in subs:
        needs[sym] = {sym}.union(*(needs[f] for f in val.free_symbols if f in needs))
    uses = [set().union(*(needs[f] for f in e.free_symbols if f in needs)) for e in reduced]
    parent = list(range(len(reduced)))  # union-find over the entries: joined where they share a subexpression

    def root(k: int) -> int:
        while parent[k] != k:
            k = parent[k]
        return k

    first: dict = {}  # a subexpression -> the first entry that reads it
    for k, used in enumerate(uses):
        for sym in used:
            parent[root(k)] = root(first.setdefault(sym, k))
    groups: dict[int, list[int]] = {}  # root -> its entries; -1: the constant entries
    for k, e in enumerate(reduced):
        groups.setdefault(root(k) if e.free_symbols else -1, []).append(k)
    lines = []
    for part in sorted(groups.values(), key=min):
        used = set().union(*(uses[k] for k in part))
        read = [reduced[k] for k in part] + [val for sym, val in subs if sym in used]
        free = set().union(*(e.free_symbols for e in read))
        lines.append("    for i in range(Q.shape[0]):")
        lines += [f"        q_{j} = Q[i, {j}]" for j in range(m) if sp.Symbol(f"q_{j}", real=True) in free]
        if with_v:
            lines += [f"        v_{j} = V[i, {j}]" for j in range(m) if sp.Symbol(f"v_{j}", real=True) in free]
        lines += [f"        {sym} = {_code(printer, val)}" for sym, val in subs if sym in used]
        lines += [f"        out[i, {idx[k]}] = {_code(printer, reduced[k])}" for k in part]
    return lines


def generate_source(model: Model) -> str:
    """The module text: numpy callbacks ``U, grad_U, g, G, d2g(Q[, V], c)``, ``exact(t, c)``, ``initial(c)`` and
    the compiled kernels ``grad_U_kernel, g_kernel, G_kernel, d2g_kernel(Q, [V,] out, params)`` (registry)."""
    sp = _sympy()
    scalar, vector = _printers()
    m, nu = len(model.q), len(model.g)
    # coordinates, parameters, velocities and time under internal names (the user's names never reach the code)
    ren = {s: sp.Symbol(f"q_{j}", real=True) for j, s in enumerate(model.q)}
    ren |= {s: sp.Symbol(f"c_{j}", real=True) for j, s in enumerate(model.c)}
    ren |= {model.t: sp.Symbol("time", real=True)}

    def r(e):
        return sp.sympify(e).xreplace(ren)

    U, grad, g = [r(model.U)], [r(e) for e in model.grad_U], [r(e) for e in model.g]
    G = [r(model.G[j][i]) for j in range(m) for i in range(nu)]
    d2g = [r(e) for e in model.d2g]
    out = [
        f'"""Generated by hbvm_core.expressions for the problem {model.name!r}; do not edit."""',
        "import math  # noqa: F401",
        "",
        "import numpy",
        "",
        "from hbvm_core.kernels import kernel",
        "",
    ]
    params = [f"    c_{j} = c[{j}]" for j in range(len(model.c))]

    def fn(name, exprs, shape, idx, extra="", with_q=True):
        """A vectorised numpy function writing out[idx_k] = exprs[k] (zero entries left as zeros)."""
        lines = [f"def {name}(Q, {extra}c):" if with_q else f"def {name}(t, c):"]
        lines += params
        if with_q:
            lines.append("    n = Q.shape[0]")
            lines += [f"    q_{j} = Q[:, {j}]" for j in range(m)]
        else:
            lines += ["    time = numpy.asarray(t, dtype=float).reshape(-1)", "    n = time.shape[0]"]
        if extra:
            lines += [f"    v_{j} = V[:, {j}]" for j in range(m)]
        cse, codes = _block(vector, exprs, "    ")
        lines += cse
        lines.append(f"    out = numpy.zeros({shape})")
        lines += [f"    out[{i}] = {code}" for i, code in zip(idx, codes) if code not in ("0", "0.0")]
        lines += ["    return out", ""]
        return lines

    out += fn("U", U, "n", [":"])
    out += fn("grad_U", grad, f"(n, {m})", [f":, {j}" for j in range(m)])
    out += fn("g", g, f"(n, {nu})", [f":, {i}" for i in range(nu)])
    out += fn("G", G, f"(n, {m}, {nu})", [f":, {j}, {i}" for j in range(m) for i in range(nu)])
    out += fn("d2g", d2g, f"(n, {nu})", [f":, {i}" for i in range(nu)], extra="V, ")
    if model.exact is not None:
        ex = model.exact
        parts = [(f"exact_{k}", [r(e) for e in ex[k]], len(ex[k])) for k in ("q", "p", "lam")]
        for name, exprs, size in parts:
            out += fn(name, exprs, f"(n, {size})", [f":, {j}" for j in range(size)], with_q=False)
        out += ["def exact(t, c):", "    return exact_q(t, c), exact_p(t, c), exact_lam(t, c)", ""]

    # the initial data, the mass matrix and the period: plain floats
    form, mass = model.mass
    flat = [mass] if form == "scalar" else list(mass) if form == "diagonal" else [x for row in mass for x in row]
    init = [r(e) for e in model.q0 + model.p0 + flat] + ([] if model.period is None else [r(model.period)])
    cse, codes = _block(scalar, init, "    ")
    out += ["def initial(c):"] + params + cse
    out.append(f"    q0 = [{', '.join(codes[:m])}]")
    out.append(f"    p0 = [{', '.join(codes[m : 2 * m])}]")
    out.append(f"    mass = [{', '.join(codes[2 * m : 2 * m + len(flat)])}]")
    out.append(f"    period = {codes[-1] if model.period is not None else None}")
    out += ["    return q0, p0, mass, period", ""]

    # the compiled kernels (numba style: write into out at the rows of Q): one loop over the points per group of
    # entries that share common subexpressions, the loop over points innermost (``_point_loops``)
    def kernel_fn(name, exprs, idx, extra=""):
        lines = ["@kernel", f"def {name}(Q, {extra}out, params):"]
        lines += [f"    c_{j} = params[{j}]" for j in range(len(model.c))]
        loops = _point_loops(scalar, exprs, idx, m, bool(extra))
        lines += loops or ["    pass"]
        lines.append("")
        return lines

    out += kernel_fn("grad_U_kernel", grad, [str(j) for j in range(m)])
    out += kernel_fn("g_kernel", g, [str(i) for i in range(nu)])
    out += kernel_fn("G_kernel", G, [f"{j}, {i}" for j in range(m) for i in range(nu)])
    out += kernel_fn("d2g_kernel", d2g, [str(i) for i in range(nu)], extra="V, ")
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- the entry points
_MODELS: dict[str, Model] = {}


def model_from_mapping(mapping: dict, form: tuple | None = None) -> Model:
    """The Model of a config's ``problem:`` mapping (checked: its keys and every expression), memoised by its text.

    ``form``: (the model class, its keys, its required keys) of another form of the mapping (the indexed form:
    ``hbvm_core.formulas`` chooses), (Model, KEYS, REQUIRED) by default."""
    if not isinstance(mapping, dict):
        raise ConfigError(f"problem = {_short(repr(mapping))}: expected a built-in name, 'module:factory' or a mapping")
    cls, keys, required = form or (Model, KEYS, REQUIRED)
    unknown = [k for k in mapping if k not in keys]
    if unknown:
        raise ConfigError(f"problem.{unknown[0]}: unknown key (expected {', '.join(keys)})")
    missing = [k for k in required if k not in mapping]
    if missing:
        raise ConfigError(f"problem: missing key {missing[0]!r} (a problem mapping needs {', '.join(required)})")
    params = mapping.get("params") or {}
    if not isinstance(params, dict):
        raise ConfigError(f"problem.params = {params!r}: expected a mapping name -> value")
    try:
        key = json.dumps({k: v for k, v in mapping.items() if k != "params"} | {"params": list(params)}, sort_keys=True)
    except TypeError:
        key = None
    if key is not None and key in _MODELS:
        model = _MODELS[key]
        model.defaults = {k: _number(f"problem.params.{k}", v) for k, v in params.items()}
        return model
    with time_limit(MAX_SECONDS, f"problem {mapping.get('name')!r}"):
        model = cls(**{k: v for k, v in mapping.items()})
    if key is not None:
        _MODELS[key] = model
    return model


def factory(mapping: dict, form: tuple | None = None) -> Callable[..., Problem]:
    """A problem factory for the mapping: its keywords are the mapping's parameters (a study's ``grid`` keys);
    ``form`` as ``model_from_mapping``'s."""
    model = model_from_mapping(mapping, form)

    def build(**values) -> Problem:
        return model_from_mapping(mapping, form).problem(**values)

    build.__signature__ = inspect.Signature(
        [inspect.Parameter(k, inspect.Parameter.KEYWORD_ONLY, default=v) for k, v in model.defaults.items()]
    )
    build.__name__ = build.__qualname__ = model.name
    return build


@keywords_checked
def from_expressions(
    name: str,
    coordinates: Sequence[str],
    potential,
    q0,
    p0,
    *,
    params: dict[str, float] | None = None,
    mass=1,
    constraints=(),
    period=None,
    exact=None,
) -> Problem:
    """A Problem from expressions: strings, numbers, sympy expressions, or functions of q (traced).

    Parameters
    ----------
    name : str
    coordinates : list of str
        The names of q's components, in order.
    potential
        U(q): a string such as ``"grav*y"``, a sympy expression, or a function ``f(q)`` / ``f(q, params)``
        of the list of coordinate symbols (and a dict of parameter symbols) using ``hbvm_core.sym``.
    q0, p0 : list
        The initial state: numbers or expressions of the parameters.
    params : dict, optional
        Parameter name -> value.
    mass
        M: a scalar, its diagonal (a list of m entries) or a full symmetric matrix (m rows), numbers or
        expressions of the parameters.
    constraints : list, optional
        The g_i, each as ``potential``; or one function of q returning the list.
    period : optional
        The period T (an expression of the parameters).
    exact : dict, optional
        ``{q: [...], p: [...], lam: [...]}``: the closed form, expressions of ``t`` and the parameters.

    Returns
    -------
    Problem
        With numpy callbacks, compiled kernels (grad_U, G, g, d2g) and ``identity`` set.
    """
    with time_limit(MAX_SECONDS, f"problem {name!r}"):
        model = Model(name, coordinates, potential, q0, p0, params, mass, constraints, period, exact)
    return model.problem()


__all__ = ["FUNCTION_NAMES", "KEYS", "Model", "factory", "from_expressions", "generate_source", "parse"]

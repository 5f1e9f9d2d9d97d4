"""One indexed term: a formula over references ``f[index]`` for a loop index in a range, derived once per term.

A term (one sum of the potential, or one family of constraints ``for i in a..b``) is e(z_1..z_K; i, c): z_k the
references it makes (``x[i]``, ``x[i - 1]``: its slots), i the loop index, c the params. Its derivatives are taken
with respect to its own slots only (docs/method.md 1: grad U and the columns of G are made of them):

    de/dz_k,        d2e(z; w) = sum_kl w_k w_l d^2 e / dz_k dz_l     (w_k: the velocity of slot k)

and each is turned into one numpy function of arrays (``sympy.lambdify``, common subexpressions eliminated),
evaluated at every index of the range at once: the cost of the derivation does not grow with the range.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError
from ..expressions import FUNCTION_NAMES, MAX_OPS, _number, _short, _sympy, parse

Array = np.ndarray
#: a range: ``i in 1..n`` (the index, ``in``, two integer formulas of the params joined by ``..``)
RANGE = re.compile(r"^\s*([A-Za-z]\w*)\s+in\s+(.+?)\s*\.\.\s*(.+?)\s*$")
RANGE_FORM = "'i in 1..n' (an index, 'in', two integer formulas of the params joined by '..')"


@dataclass(frozen=True)
class Range:
    """``var in lo..hi``: lo and hi sympy formulas of the params (integers at their values)."""

    var: str
    lo: object
    hi: object
    text: str

    def bounds(self, key: str, values: dict[str, float]) -> tuple[int, int]:
        return integer(f"{key} = {self.text!r}: lower bound", self.lo, values), integer(
            f"{key} = {self.text!r}: upper bound", self.hi, values
        )


def parse_range(text, key: str, params: dict, taken: set[str]) -> Range:
    """The Range of ``text``; ConfigError naming ``key`` for anything else (its index may not be a taken name)."""
    match = RANGE.match(text) if isinstance(text, str) else None
    if match is None:
        raise ConfigError(f"{key} = {_short(repr(text))}: expected a range {RANGE_FORM}")
    var = match.group(1)
    if var in taken or var in params or var in FUNCTION_NAMES or var in ("pi", "E", "t"):
        raise ConfigError(
            f"{key} = {text!r}: the index {var!r} is already a name (a param, a coordinate or a function)"
        )
    lo, hi = (parse(match.group(g), params, f"{key} (range)") for g in (2, 3))
    return Range(var, lo, hi, text)


def integer(what: str, expr, values: dict[str, float]) -> int:
    """The value of an integer formula of the params; ConfigError naming ``what`` if it is not an integer."""
    sp = _sympy()
    value = expr.xreplace({s: sp.Float(values[str(s)]) for s in expr.free_symbols if str(s) in values})
    if value.free_symbols:
        raise ConfigError(f"{what}: {value} is not a formula of the params")
    x = float(value)
    if not (np.isfinite(x) and abs(x - round(x)) <= 1e-9 * max(1.0, abs(x))):
        raise ConfigError(f"{what}: {expr} = {x:g} at the params {values}: expected an integer")
    return int(round(x))


def integers(what: str, f: Callable, iv: Array, c: Array, var: str = "the index") -> Array:
    """An index formula at every loop index iv at once (integers; ConfigError naming ``what`` otherwise)."""
    x = np.broadcast_to(np.asarray(f(iv, *c), dtype=float), iv.shape)
    r = np.rint(x)
    bad = ~(np.isfinite(x) & (np.abs(x - r) <= 1e-9 * np.maximum(1.0, np.abs(x))))
    if bad.any():
        j = int(np.flatnonzero(bad)[0])
        raise ConfigError(f"{what} = {x[j]:g} at {var} = {iv[j]:g}: expected an integer")
    return r.astype(np.intp)


def _function(args: list, exprs) -> Callable:
    """numpy code of ``exprs`` over ``args`` (lambdify: the expressions come from the restricted grammar)."""
    sp = _sympy()
    return sp.lambdify(args, exprs, modules="numpy", cse=True)


class Term:
    """One term: its slots (family, index formula), the expression and its per-slot derivatives as numpy functions.

    Parameters
    ----------
    key : str
        Its config key, for messages (``problem.constraints[0]``).
    text : str or number
        The formula; references ``f[index]`` to the families.
    over : Range or None
        The loop index and its range; None: one term, its indices formulas of the params alone.
    families : sequence of str
        The indexed coordinates' names.
    params : dict
        Param name -> symbol.
    second : bool
        Also d2e(z; w) (a constraint's, for d2g).
    """

    def __init__(self, key: str, text, over: Range | None, families, params: dict, second: bool) -> None:
        sp = _sympy()
        self.key, self.over = key, over
        var = sp.Symbol(over.var, real=True) if over is not None else sp.Symbol("_i", real=True)
        names = dict(params) | ({over.var: var} if over is not None else {})
        allowed = set(names.values())
        symbols: dict[tuple, object] = {}
        self.slots: list[tuple[str, object]] = []
        self.tokens: list[str] = []

        def subscript(family: str, index, token: str):
            if not index.free_symbols <= allowed:
                where = f"{over.var} and the params" if over is not None else "the params (no index here)"
                raise ConfigError(f"{key}: the index of {token!r} must be a formula of {where}")
            slot = (family, index)
            if slot not in symbols:
                symbols[slot] = sp.Symbol(f"{family}[{index}]", real=True)
                self.slots.append(slot)
                self.tokens.append(f"{family}[{index}]")
            return symbols[slot]

        if isinstance(text, str):
            expr = parse(text, names, key, subscripts=subscript, families=tuple(families))
        else:
            expr = sp.Float(_number(key, text))
        self.expr = expr
        z = [sp.Symbol(f"z{k}", real=True) for k in range(len(self.slots))]
        w = [sp.Symbol(f"w{k}", real=True) for k in range(len(self.slots))]
        cs = [sp.Symbol(f"c_{p}", real=True) for p in params]
        plain = dict(zip([symbols[s] for s in self.slots], z)) | dict(zip(params.values(), cs)) | {var: sp.Symbol("i_")}
        e = expr.xreplace(plain)
        grad = [sp.diff(e, zk) for zk in z]
        #: the slots e depends on (a reference whose derivative vanishes identically is no nonzero of G)
        self.active = [k for k, d in enumerate(grad) if d != 0]
        #: no derivative depends on the references (a linear term): its gradient is the same at every q
        self.grad_constant = not any(d.free_symbols & set(z) for d in grad)
        d2 = sum(w[k] * w[j] * sp.diff(grad[k], z[j]) for k in self.active for j in self.active) if second else 0
        ops = sp.count_ops([e, *grad, d2])
        if ops > MAX_OPS:
            raise ConfigError(
                f"{key}: the term and its derivatives take {ops} operations (at most {MAX_OPS}): write it in "
                "fewer or simpler terms"
            )
        args = [*z, sp.Symbol("i_"), *cs]
        self.value = _function(args, e)
        self.grad = _function(args, [grad[k] for k in self.active])
        self.d2 = _function([*args, *w], d2) if second else None
        self.index = [_function([sp.Symbol("i_"), *cs], idx.xreplace(plain)) for _, idx in self.slots]
        self.canonical = sp.srepr(expr)

    def indices(self, values: dict[str, float]) -> Array:
        """The loop indices at the params (one 0 for a term without a range)."""
        if self.over is None:
            return np.zeros(1)
        lo, hi = self.over.bounds(self.key, values)
        return np.arange(lo, hi + 1, dtype=float)

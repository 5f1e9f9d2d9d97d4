"""An indexed problem read and derived once (``IndexedModel``), and its Problem at parameter values.

The mapping (docs/configuration.md, "Indexed problems"): ``coordinates`` families ``name: "i in lo..hi"``;
``fixed`` values of references outside the ranges (``"x[0]": 0``); ``potential`` a formula, ``{sum: "i in a..b",
term: ...}`` or a list of them; ``constraints`` a list of formulas and ``{for: "i in a..b", g: ...}``; ``mass``,
``q0``, ``p0`` one formula per family of its index (or one for all). Bounds and indices are integer formulas of the
params, so a param such as ``n`` sizes the problem and a study's grid sweeps it. The terms are derived when the
model is read (``terms.Term``); a Problem at values only numbers the coordinates and evaluates arrays.
"""

from __future__ import annotations

import json
import re

import numpy as np

from ..errors import ConfigError
from ..expressions import Model, _number, _short, _sympy, param_values, parse
from ..problem import Problem
from .assembly import Assembly
from .layout import Layout
from .terms import Term, parse_range

#: the keys of an indexed ``problem:`` mapping (the required ones first)
KEYS = ("name", "coordinates", "potential", "q0", "p0", "params", "mass", "constraints", "fixed")
REQUIRED = ("name", "coordinates", "potential", "q0", "p0")
#: a reference with its index: ``x[0]``, ``x[n + 1]``
REFERENCE = re.compile(r"^\s*([A-Za-z]\w*)\s*\[(.+)\]\s*$")


def is_indexed(mapping) -> bool:
    """Whether a ``problem:`` mapping is the indexed form (its ``coordinates`` a mapping of ranges)."""
    return isinstance(mapping, dict) and isinstance(mapping.get("coordinates"), dict)


class IndexedModel:
    """The indexed problem's terms, derived once; ``problem(**values)`` builds it at parameter values."""

    def __init__(self, name, coordinates, potential, q0, p0, params=None, mass=1, constraints=(), fixed=None):
        sp = _sympy()
        if not isinstance(name, str) or not name.isidentifier():
            raise ConfigError(f"problem.name = {name!r}: expected a name (letters, digits, _)")
        self.name = name
        if not isinstance(params or {}, dict):
            raise ConfigError(f"problem.params = {params!r}: expected a mapping name -> value")
        self.param_names = Model._names("params", list(params or {}))
        self.defaults = {k: _number(f"problem.params.{k}", v) for k, v in (params or {}).items()}
        self.c = {p: sp.Symbol(p, real=True) for p in self.param_names}
        if not isinstance(coordinates, dict) or not coordinates:
            raise ConfigError("problem.coordinates: expected a mapping name -> range, e.g. {x: 'i in 1..n'}")
        families = Model._names("coordinates", list(coordinates))
        both = set(families) & set(self.param_names)
        if both:
            raise ConfigError(f"problem.params.{sorted(both)[0]}: also a coordinate; give distinct names")
        self.ranges = {
            f: parse_range(coordinates[f], f"problem.coordinates.{f}", self.c, set(families)) for f in families
        }
        self.fixed = self._fixed(fixed or {})
        self.potential = self._terms("problem.potential", potential, "sum", "term", second=False)
        if isinstance(constraints, (str, dict)) or not isinstance(constraints, (list, tuple)):
            raise ConfigError(f"problem.constraints = {_short(repr(constraints))}: expected a list")
        self.constraints = [
            t for k, e in enumerate(constraints) for t in self._terms(f"problem.constraints[{k}]", e, "for", "g", True)
        ]
        self.mass = self._per_family("problem.mass", mass)
        self.q0 = self._per_family("problem.q0", q0)
        self.p0 = self._per_family("problem.p0", p0)
        self.identity = self._identity()

    # --- reading the mapping
    def _fixed(self, fixed) -> list:
        """[(family, index formula, value function of the params, key)] of ``problem.fixed``."""
        if not isinstance(fixed, dict):
            raise ConfigError(f"problem.fixed = {_short(repr(fixed))}: expected a mapping 'x[0]' -> value")
        out = []
        for ref, value in fixed.items():
            key = f"problem.fixed[{ref!r}]"
            match = REFERENCE.match(ref) if isinstance(ref, str) else None
            if match is None or match.group(1) not in self.ranges:
                raise ConfigError(f"{key}: expected a reference f[index] to one of {', '.join(self.ranges)}")
            index = parse(match.group(2), self.c, f"{key} (index)")
            out.append((match.group(1), index, self._function(key, value, {}), key))
        return out

    def _function(self, key: str, value, extra: dict):
        """A formula of the params (and ``extra`` names) as a numpy function of (*extra, *params)."""
        sp = _sympy()
        names = dict(self.c) | extra
        expr = parse(value, names, key) if isinstance(value, str) else sp.Float(_number(key, value))
        plain = {s: sp.Symbol(f"a{k}") for k, s in enumerate([*extra.values(), *self.c.values()])}  # no user name
        f = sp.lambdify(list(plain.values()), expr.xreplace(plain), modules="numpy")
        f.canonical = sp.srepr(expr)
        return f

    def _terms(self, key: str, entry, over: str, body: str, second: bool) -> list[Term]:
        """A formula (one term), a mapping {over: range, body: formula}, or (the potential) a list of them."""
        if isinstance(entry, list) and not second:
            return [t for k, e in enumerate(entry) for t in self._terms(f"{key}[{k}]", e, over, body, second)]
        if isinstance(entry, dict):
            unknown = [k for k in entry if k not in (over, body)]
            if unknown or set(entry) != {over, body}:
                what = f"{key}.{unknown[0]}: unknown key" if unknown else f"{key}: missing key"
                raise ConfigError(f"{what} (an indexed term is {{{over}: 'i in 1..n', {body}: formula}})")
            rng = parse_range(entry[over], f"{key}.{over}", self.c, set(self.ranges))
            return [Term(f"{key}.{body}", entry[body], rng, self.ranges, self.c, second)]
        if isinstance(entry, (str, int, float)) and not isinstance(entry, bool):
            return [Term(key, entry, None, self.ranges, self.c, second)]
        raise ConfigError(f"{key} = {_short(repr(entry))}: expected a formula or {{{over}: 'i in 1..n', {body}: ...}}")

    def _per_family(self, key: str, value) -> dict:
        """family -> numpy function of (its index, *params): one formula per family, or one for all."""
        sp = _sympy()
        if isinstance(value, dict):
            unknown = [f for f in value if f not in self.ranges]
            if unknown:
                raise ConfigError(f"{key}.{unknown[0]}: not an indexed coordinate ({', '.join(self.ranges)})")
            missing = [f for f in self.ranges if f not in value]
            if missing:
                raise ConfigError(f"{key}: no formula for {missing[0]!r} (one per indexed coordinate, or one for all)")
            return {f: self._function(f"{key}.{f}", value[f], {r.var: sp.Symbol(r.var, real=True)})
                    for f, r in self.ranges.items()}  # fmt: skip
        if isinstance(value, (list, tuple)):
            raise ConfigError(f"{key} = {_short(repr(value))}: expected a formula or a mapping coordinate -> formula")
        return {f: self._function(key, value, {r.var: sp.Symbol(r.var, real=True)}) for f, r in self.ranges.items()}

    def _identity(self) -> str:
        """The canonical text of the mathematics: the ranges and every formula (srepr), not the params' values."""
        sp = _sympy()

        def rng(r):
            return None if r is None else [r.var, sp.srepr(r.lo), sp.srepr(r.hi)]

        doc = {
            "coordinates": {f: rng(r) for f, r in self.ranges.items()},
            "params": list(self.param_names),
            "fixed": [[f, sp.srepr(i), v.canonical] for f, i, v, _ in self.fixed],
            "potential": [[rng(t.over), t.canonical] for t in self.potential],
            "constraints": [[rng(t.over), t.canonical] for t in self.constraints],
            **{k: {f: fn.canonical for f, fn in getattr(self, k).items()} for k in ("mass", "q0", "p0")},
        }
        return "hbvm-indexed-1:" + json.dumps(doc, sort_keys=True, separators=(",", ":"))

    # --- a problem at parameter values
    def values(self, **overrides) -> dict[str, float]:
        return param_values(self.name, self.param_names, self.defaults, overrides)

    def problem(self, linear_algebra: str = "auto", **overrides) -> Problem:
        """The Problem at these parameter values (the mapping's own ``params`` for the others); ``linear_algebra``
        (auto, sparse, dense) overrides the automatic choice of the numpy steppers' path."""
        from ..sparse import SparseG

        values = self.values(**overrides)
        layout = Layout(self, values)
        parts = Assembly(self.potential, self.constraints, layout)
        m = layout.m
        if parts.nu >= m:
            raise ConfigError(f"problem.constraints: nu = {parts.nu} constraints need nu < m = {m} coordinates")
        mass = layout.family_vector("problem.mass", self.mass, np.empty(m))
        if np.any(mass <= 0):
            raise ConfigError(
                f"problem.mass: {layout.names[int(np.argmin(mass))]} has mass {mass.min():g} (expected > 0)"
            )
        q0 = layout.family_vector("problem.q0", self.q0, np.empty(m))
        p0 = layout.family_vector("problem.p0", self.p0, np.empty(m))
        sparse = SparseG(parts.rows, parts.cols, parts.values, m, parts.nu, linear_algebra) if parts.nu else None
        return Problem(
            name=self.name,
            q0=q0,
            p0=p0,
            U=parts.U,
            grad_U=parts.grad_U,
            g=parts.g if parts.nu else None,
            d2g=parts.d2g if parts.nu else None,
            M=None if np.all(mass == 1.0) else mass,
            sparse=sparse,
            params=values,
            identity=self.identity,
            coordinates=layout.names,
        )

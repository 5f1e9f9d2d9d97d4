"""A parametric factory's instances as arrays over runs (``integrate_ensemble(problem, ..., params={...})``).

A ``Family`` is attached to each problem a factory of ``hbvm_core.problems.parametric`` returns (``family_of``). It
gives, for R runs at once and without building a Problem per run:

- ``rows(values)``: from the factory's keywords as arrays [R, *shape], the rows of ``Kernels.params`` K [R, P],
  q0 and p0 [R, m], and the diagonal of M [R, m] (None where M = I);
- the numpy callbacks at a params row per point: ``U(Q, K)``, ``grad_U(Q, K)``, ``g(Q, K)``, ``G(Q, K)``,
  ``d2g(Q, V, K)`` for Q [n, m] and K [n, P] (or one row [P] for all the points);
- ``build(**values)``: the instance at other values, with the general callbacks;
- ``form()``: the instance with the general (parametric) compiled callbacks. A factory at its defaults returns
  the published problem (its own callbacks and fingerprint); its ``form()`` is the same problem with the general
  callbacks, so that it runs in one ensemble block with the factory's other instances.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ConfigError, did_you_mean

Rows = tuple[np.ndarray, np.ndarray, np.ndarray, "np.ndarray | None"]


@dataclass(frozen=True)
class Family:
    """The instances of factory ``name`` around one of them (its keyword ``values``; ``shapes``: each keyword's
    shape per run, () for a number)."""

    name: str
    values: dict[str, Any]
    shapes: dict[str, tuple[int, ...]]
    rows: Callable[[dict[str, np.ndarray]], Rows]
    U: Callable
    grad_U: Callable
    g: Callable
    G: Callable
    d2g: Callable
    build: Callable[..., object]
    form: Callable[[], object]

    def arrays(self, given: dict, sizes: dict) -> dict[str, np.ndarray]:
        """The keywords as arrays: ``given`` (a number or an array [R, *shape] each) over this instance's values;
        records each per-run length in ``sizes`` (key ``params[name]``). ConfigError for an unknown keyword or a
        bad shape."""
        out = {}
        for key, value in given.items():
            if key not in self.shapes:
                raise ConfigError(
                    f"params: {key!r} is not a parameter of {self.name} (expected one of "
                    f"{', '.join(self.shapes)}){did_you_mean(key, self.shapes)}"
                )
            shape = self.shapes[key]
            try:
                arr = np.asarray(value, dtype=float)
            except (TypeError, ValueError):
                raise ConfigError(f"params[{key!r}]: expected numbers") from None
            if arr.shape[arr.ndim - len(shape) :] != shape or arr.ndim not in (len(shape), len(shape) + 1):
                want = "a number" if not shape else f"an array of shape {shape}"
                raise ConfigError(
                    f"params[{key!r}]: expected {want} or an array [R, {', '.join(map(str, shape))}] over the runs, "
                    f"got shape {arr.shape}".replace("[R, ]", "[R]")
                )
            if arr.ndim > len(shape):
                sizes[f"params[{key!r}]"] = arr.shape[0]
            out[key] = arr
        return out

    def broadcast(self, arrays: dict[str, np.ndarray], R: int) -> dict[str, np.ndarray]:
        """Every keyword as an array [R, *shape]: the given ones broadcast, the others at this instance's value."""
        full = {}
        for key, shape in self.shapes.items():
            value = arrays.get(key, np.asarray(self.values[key], dtype=float))
            full[key] = np.broadcast_to(value, (R, *shape))
        return full


def family_of(problem) -> Family | None:
    """The family a parametric factory attached to ``problem``, or None (a problem built otherwise)."""
    return problem.__dict__.get("family")


def attach(problem, family: Family):
    """``problem`` with ``family`` attached (not part of its fingerprint: ``hbvm_core.fingerprint`` hashes the
    name, params, sizes and callbacks only)."""
    problem.__dict__["family"] = family
    return problem


def positive(name: str, values: dict[str, np.ndarray]) -> None:
    """ConfigError naming the first run whose keyword is not a positive finite number."""
    for key, arr in values.items():
        bad = ~(np.isfinite(arr) & (arr > 0))
        if bad.any():
            run = int(np.flatnonzero(bad.reshape(bad.shape[0], -1).any(axis=1))[0])
            raise ConfigError(f"{name}: {key} = {arr[run].tolist()!r} (run {run}): expected a positive number")


__all__ = ["Family", "attach", "family_of", "positive"]

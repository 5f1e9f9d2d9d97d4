"""Integration methods. Each one is a small object that builds a per-problem stepper.

HBVM(k, s) with a constant (METHOD.md 3) or polynomial (METHOD.md 6) multiplier,
and the baselines RATTLE and DOP853 on the index-reduced ODE.
"""

from .hbvm import HBVM, HBVMStepper
from .index_reduced import DOP853
from .polynomial import PolynomialHBVM
from .rattle import RATTLE

__all__ = ["DOP853", "HBVM", "HBVMStepper", "PolynomialHBVM", "RATTLE", "from_spec"]

MULTIPLIERS = ("constant", "polynomial")


def _entry(spec: dict) -> str:
    return "{" + ", ".join(f"{k}: {v}" for k, v in spec.items()) + "}"


def _only(spec: dict, allowed: set, what: str) -> None:
    from ..errors import ConfigError

    unknown = sorted(set(spec) - allowed)
    if unknown:
        raise ConfigError(f"method entry {_entry(spec)}: unknown key {unknown[0]!r} for {what}")


def from_spec(spec: dict):
    """Build a method from a study's method entry.

    - ``{k: 6, s: 2}`` (optional solver, warm_start; multiplier: constant): HBVM(k, s), METHOD.md 3;
    - ``{k: 6, s: 3, multiplier: polynomial, projection: true}`` (optional warm_start): METHOD.md 6;
    - ``{method: rattle}``;
    - ``{method: dop853, rtol: 1e-8, atol: 1e-8, projection: false}`` (atol defaults to rtol).
    """
    from ..errors import ConfigError

    if not isinstance(spec, dict):
        raise ConfigError(f"method entry {spec!r}: expected a mapping such as {{k: 6, s: 2}}")
    spec = dict(spec)
    kind = spec.pop("method", "hbvm")
    if kind == "hbvm":
        multiplier = spec.pop("multiplier", "constant")
        if multiplier not in MULTIPLIERS:
            raise ConfigError(f"multiplier = {multiplier!r}: expected one of {', '.join(MULTIPLIERS)}")
        if "k" not in spec or "s" not in spec:
            raise ConfigError(f"method entry {_entry(spec)}: HBVM needs both k and s")
        if multiplier == "constant":
            if "projection" in spec:
                raise ConfigError(
                    f"projection = {spec['projection']!r}: only for multiplier: polynomial (this entry is constant)"
                )
            _only(spec, {"k", "s", "solver", "warm_start"}, "HBVM")
            return HBVM(**spec)
        solver = spec.pop("solver", "fixed-point")
        if solver != "fixed-point":
            raise ConfigError(f"solver = {solver!r}: multiplier: polynomial supports only fixed-point")
        _only(spec, {"k", "s", "projection", "warm_start"}, "HBVM with a polynomial multiplier")
        return PolynomialHBVM(**spec)
    if kind == "rattle":
        _only(spec, set(), "RATTLE")
        return RATTLE()
    if kind == "dop853":
        _only(spec, {"rtol", "atol", "projection"}, "DOP853")
        return DOP853(**spec)
    raise ConfigError(f"method = {kind!r}: unknown method (expected hbvm, rattle or dop853)")

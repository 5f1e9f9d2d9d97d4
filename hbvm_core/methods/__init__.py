"""Integration methods. Each one is a small object that builds a per-problem stepper."""

from .hbvm import HBVM, HBVMStepper

__all__ = ["HBVM", "HBVMStepper", "from_spec"]


def from_spec(spec: dict):
    """Build a method from a study's method entry, e.g. {"k": 6, "s": 2} or {"k": 6, "s": 2, "solver": "blended"}.

    Keys: k, s (HBVM); solver; warm_start. Baseline methods extend this (issue 6).
    """
    from ..errors import ConfigError

    spec = dict(spec)
    kind = spec.pop("method", "hbvm")
    if kind == "hbvm":
        unknown = set(spec) - {"k", "s", "solver", "warm_start"}
        if unknown:
            raise ConfigError(f"method entry {spec!r}: unknown key {sorted(unknown)[0]!r}")
        if "k" not in spec or "s" not in spec:
            raise ConfigError(f"method entry {spec!r}: HBVM needs both k and s")
        return HBVM(**spec)
    raise ConfigError(f"method = {kind!r}: unknown method (expected hbvm)")

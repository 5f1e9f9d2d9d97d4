"""Integration methods. Each one is a small object (``base.Method``) that builds a per-problem stepper.

HBVM(k, s) with a constant (docs/method.md 3) or polynomial (docs/method.md 6)
multiplier, the baselines RATTLE and DOP853 on the index-reduced ODE, and IDA on the
stabilized index-2 DAE.
``METHODS`` maps a study entry's ``method`` to its class, as scipy's
``solve_ivp`` maps method names to ``OdeSolver`` subclasses.
"""

from ..errors import ConfigError, did_you_mean
from .base import METHODS, EntryKey, Method, method_label
from .hbvm import HBVM, HBVMBase, HBVMStepper
from .ida import IDA
from .index_reduced import DOP853
from .polynomial import PolynomialHBVM
from .rattle import RATTLE

# The registry, entry ``method`` -> class: ``method_from_entry`` looks the entry up here and lets the class check
# the rest.
METHODS.update(
    {
        "hbvm": HBVMBase,  # multiplier: constant (HBVM) or polynomial (PolynomialHBVM)
        "rattle": RATTLE,
        "dop853": DOP853,
        "ida": IDA,  # the stabilized index-2 DAE by SUNDIALS IDA (scikit-sundae)
    }
)

__all__ = [
    "DOP853",
    "IDA",
    "EntryKey",
    "HBVM",
    "METHODS",
    "RATTLE",
    "HBVMBase",
    "HBVMStepper",
    "Method",
    "PolynomialHBVM",
    "method_from_entry",
    "load_method_modules",
    "method_class",
    "method_label",
    "registered",
]


def method_class(entry: dict) -> type[Method] | None:
    """The registered class of a method entry (its ``method``, default hbvm), or None for an unknown one."""
    name = entry.get("method", "hbvm") if isinstance(entry, dict) else None
    return METHODS.get(name) if isinstance(name, str) else None


def registered() -> list[type[Method]]:
    """Every concrete method class an entry can build (HBVM: one per multiplier), in registry order."""
    return [variant for cls in METHODS.values() for variant in cls.variants()]


def load_method_modules(names) -> list[str]:
    """Import the modules named (``module.path``) so that each registers its methods in ``METHODS``.

    ConfigError (naming the module) for one that is not a module name or fails to import. Returns the names
    of the modules imported."""
    import importlib

    if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) and n for n in names):
        raise ConfigError(f"method_modules = {names!r}: expected a list of module names (package.module)")
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - whatever the module raised, named on one line
            raise ConfigError(f"method_modules: importing {name!r} raised {type(exc).__name__}: {exc}") from None
    return list(names)


def method_from_entry(entry: dict) -> Method:
    """Build a method from a study's method entry.

    - ``{k: 6, s: 2}`` (optional solver, warm_start; multiplier: constant): HBVM(k, s), docs/method.md 3;
    - ``{k: 6, s: 3, multiplier: polynomial, projection: true}`` (optional warm_start): docs/method.md 6;
    - ``{method: rattle}``;
    - ``{method: dop853, rtol: 1e-8, atol: 1e-8, projection: false}`` (atol defaults to rtol);
    - ``{method: ida, rtol: 1e-8, atol: 1e-8}`` (atol defaults to rtol).
    """
    if not isinstance(entry, dict):
        raise ConfigError(f"method entry {entry!r}: expected a mapping such as {{k: 6, s: 2}}")
    cls = method_class(entry)
    entry = dict(entry)
    name = entry.pop("method", "hbvm")
    if cls is None:
        names = list(METHODS)
        hint = did_you_mean(name, names)
        raise ConfigError(f"method = {name!r}: unknown method (expected {', '.join(names[:-1])} or {names[-1]}){hint}")
    return cls.from_entry(entry)

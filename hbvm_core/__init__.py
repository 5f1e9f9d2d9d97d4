"""hbvm_core: HBVM(k, s) line-integral methods for Hamiltonian systems with holonomic constraints.

The method (``methods``), the problem (``problem``, ``problems``) and the time
loop (``integrate``) are separate; docs/method.md is the contract for every formula.
"""

from ._version import __version__
from .ensemble import EnsembleResult, integrate_ensemble
from .errors import BackendError, ConfigError, ConvergenceError, HBVMError, NonFiniteError, ProblemError
from .integrate import integrate
from .legendre import tableau
from .methods import HBVM
from .problem import Problem
from .problems import get_problem
from .trajectory import Trajectory


def __getattr__(name: str):
    """``metrics``, ``references`` (scipy.integrate), ``expressions``, ``sym``, ``from_expressions`` and
    ``from_indexed`` (sympy) on first use."""
    if name == "from_expressions":
        from .expressions import from_expressions

        return from_expressions
    if name == "from_indexed":
        from .indexed import from_indexed

        return from_indexed
    if name in ("metrics", "references", "sym", "expressions"):
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "HBVM",
    "BackendError",
    "ConfigError",
    "ConvergenceError",
    "EnsembleResult",
    "HBVMError",
    "NonFiniteError",
    "Problem",
    "ProblemError",
    "Trajectory",
    "__version__",
    "expressions",
    "from_expressions",
    "from_indexed",
    "get_problem",
    "integrate",
    "integrate_ensemble",
    "metrics",
    "references",
    "sym",
    "tableau",
]

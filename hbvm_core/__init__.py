"""hbvm_core: HBVM(k, s) line-integral methods for Hamiltonian systems with holonomic constraints.

The method (``methods``), the problem (``problem``, ``problems``) and the time
loop (``integrate``) are separate; METHOD.md is the contract for every formula.
"""

from . import metrics, references
from .errors import ConfigError, ConvergenceError, HBVMError, NonFiniteError, ProblemError
from .integrate import integrate
from .legendre import tableau
from .methods import HBVM
from .problem import Problem
from .problems import get_problem
from .trajectory import Trajectory

__version__ = "0.1.0"

__all__ = [
    "HBVM",
    "ConfigError",
    "ConvergenceError",
    "HBVMError",
    "NonFiniteError",
    "Problem",
    "ProblemError",
    "Trajectory",
    "__version__",
    "get_problem",
    "integrate",
    "metrics",
    "references",
    "tableau",
]

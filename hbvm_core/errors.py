"""Exception types raised by hbvm_core.

Every error carries a one-line message that names the offending key or value.
"""

from __future__ import annotations


def did_you_mean(word, choices) -> str:
    """'; did you mean 'halvings'?' for the choice closest to ``word`` (difflib), or '' when none is close."""
    import difflib

    if not isinstance(word, str):
        return ""
    close = difflib.get_close_matches(word, [str(c) for c in choices], n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


class HBVMError(Exception):
    """Base class of every hbvm error."""


class ConfigError(HBVMError, ValueError):
    """A bad parameter of a method, a study or an integration (names the key)."""


class ProblemError(HBVMError, ValueError):
    """A problem definition that cannot be integrated (shapes, consistency, regularity)."""


class NonFiniteError(HBVMError, FloatingPointError):
    """A user callback returned NaN or inf."""


class SolverError(HBVMError, RuntimeError):
    """A library's solver (scipy's DOP853 for a reference solution) reported a failure."""


class BackendError(HBVMError, RuntimeError):
    """A backend that cannot run here (``integrate_ensemble(backend="cuda")`` without a GPU or numba-cuda)."""


class ConvergenceError(HBVMError, RuntimeError):
    """The nonlinear iteration of one step did not converge (docs/method.md section 3)."""

    def __init__(self, step: int, t: float, increment: float, iterations: int, reason: str = ""):
        self.step = step
        self.t = t
        self.increment = increment
        self.iterations = iterations
        self.reason = reason or "no convergence"
        super().__init__(
            f"nonlinear iteration failed at step {step} (t = {t:.6g}): {self.reason} after "
            f"{iterations} iterations, last increment {increment:.3e}"
        )

    def as_dict(self) -> dict:
        return {
            "step": self.step,
            "t": self.t,
            "increment": self.increment,
            "iterations": self.iterations,
            "reason": self.reason,
        }

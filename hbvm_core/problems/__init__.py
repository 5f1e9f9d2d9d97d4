"""Built-in problems (docs/method.md section 4) and the lookup of user problems by ``module:factory``."""

from __future__ import annotations

import importlib
from collections.abc import Callable

from ..errors import ConfigError, did_you_mean
from ..problem import Problem
from .chain import branched_tree, chain, closed_chain
from .parametric import conical_pendulum, modified_pendulum, planar_pendulum, tethered_satellites
from .pendulum import theta_pendulum

BUILTIN: dict[str, Callable[[], Problem]] = {
    "planar_pendulum": planar_pendulum,
    "conical_pendulum": conical_pendulum,
    "modified_pendulum": modified_pendulum,
    "tethered_satellites": tethered_satellites,
    "theta_pendulum": theta_pendulum,
    "chain": chain,  # n beads, sparse G (the numpy steppers' sparse path past a size)
    "closed_chain": closed_chain,
    "branched_tree": branched_tree,
}

#: the built-in problems without compiled callbacks (the numpy loop, sparse past a size), by the number of beads
#: their keywords make: a step's cost grows with it (``hbvm_workflow.runs.step_rate``)
NUMPY_BEADS: dict[str, Callable[[dict], int]] = {
    "chain": lambda p: int(p.get("links") or p.get("n", 10)),
    "closed_chain": lambda p: int(p.get("n", 8)),
    "branched_tree": lambda p: 2 ** int(p.get("depth", 3)) - 1,
}


def resolve_factory(problem_entry: str | dict) -> Callable[..., Problem]:
    """The factory for a built-in name, a ``module.path:factory`` string or a mapping of expressions
    (``hbvm_core.expressions``: its keywords are the mapping's parameters)."""
    if isinstance(problem_entry, dict):
        from ..formulas import factory

        return factory(problem_entry)
    if not isinstance(problem_entry, str) or not problem_entry:
        raise ConfigError(f"problem = {problem_entry!r}: expected a built-in name or 'module.path:factory'")
    if problem_entry in BUILTIN:
        return BUILTIN[problem_entry]
    if ":" not in problem_entry:
        raise ConfigError(
            f"problem = {problem_entry!r}: unknown problem; built-in problems are {', '.join(sorted(BUILTIN))}, "
            "or give 'module.path:factory'" + did_you_mean(problem_entry, BUILTIN)
        )
    module, _, attr = problem_entry.partition(":")
    try:
        mod = importlib.import_module(module)
    except ImportError as exc:
        raise ConfigError(f"problem = {problem_entry!r}: cannot import module {module!r} ({exc})") from None
    factory = getattr(mod, attr, None)
    if not callable(factory):
        raise ConfigError(f"problem = {problem_entry!r}: module {module!r} has no callable {attr!r}")
    return factory


def problem_name(problem_entry: str | dict) -> str:
    """The name of a problem as a config gives it: the string, or a mapping's ``name``."""
    return str(problem_entry.get("name", "?")) if isinstance(problem_entry, dict) else problem_entry


def get_problem(problem_entry: str | dict, **params) -> Problem:
    """Build a built-in problem by name, a user problem from its factory, or a problem from expressions.

    Parameters
    ----------
    problem_entry : str or dict
        A built-in name (``BUILTIN``: planar_pendulum, conical_pendulum, ...), ``"module.path:factory"``, or
        a mapping ``{name, coordinates, params, mass, potential, constraints, q0, p0, period, exact}``
        (``hbvm_core.expressions``; docs/configuration.md).
    **params
        Keyword arguments of the factory.

    Returns
    -------
    Problem

    Raises
    ------
    ConfigError
        For an unknown name, a module that cannot be imported, no such factory, or a factory that does
        not return a Problem.
    ProblemError
        From the problem's own checks (shapes, consistent initial data).
    """
    factory = resolve_factory(problem_entry)
    problem = factory(**params)
    if not isinstance(problem, Problem):
        raise ConfigError(f"problem = {problem_entry!r}: factory returned {type(problem).__name__}, expected a Problem")
    return problem


__all__ = [
    "BUILTIN",
    "NUMPY_BEADS",
    "branched_tree",
    "chain",
    "closed_chain",
    "conical_pendulum",
    "get_problem",
    "modified_pendulum",
    "planar_pendulum",
    "problem_name",
    "resolve_factory",
    "tethered_satellites",
    "theta_pendulum",
]

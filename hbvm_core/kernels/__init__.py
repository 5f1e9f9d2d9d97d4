"""Compiled (numba) kernels of HBVM(k, s): the step and the time loop run compiled for problems that opt in.

A problem opts in by setting ``Problem.kernels = Kernels(grad_U=..., G=...)``
with numba-compiled callbacks that write into preallocated arrays:

    grad_U(Q, out, params)   Q (n, m), out (n, m)       gradient of U at the rows of Q
    G(Q, out, params)        Q (n, m), out (n, m, nu)   column i = gradient of g_i (omit when nu = 0)

``params`` is ``Kernels.params`` as a float64 array (masses, lengths, ...), so
one compiled loop serves every parameter value.

Each may be an ``@numba.njit`` function or a ``"module.path:function"`` string
(resolved lazily, so building a problem does not import numba). Callbacks that
can be imported by name get a generated loop module compiled once and cached
on disk (``registry``); others (defined in ``__main__`` or in a closure) are
compiled in-process on every run. Importing this package does not import numba.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

BUILTIN_MODULE = "hbvm_core.kernels.problems"


@dataclass(frozen=True)
class Kernels:
    """The compiled callbacks of a problem (njit functions or 'module:function' strings) and their params."""

    grad_U: Any
    G: Any = None
    params: tuple[float, ...] = ()


#: Compiled callbacks of the built-in problems (names in hbvm_core.kernels.problems).
_BUILTIN = {
    "planar_pendulum": ("planar_grad_U", "sphere_G"),
    "conical_pendulum": ("conical_grad_U", "sphere_G"),
    "modified_pendulum": ("modified_grad_U", "modified_G"),
    "tethered_satellites": ("tethered_grad_U", "tethered_G"),
    "theta_pendulum": ("theta_grad_U", None),
}


def builtin(name: str) -> Kernels:
    """The Kernels of a built-in problem, as lazily resolved names."""
    gu, g = _BUILTIN[name]
    return Kernels(grad_U=f"{BUILTIN_MODULE}:{gu}", G=None if g is None else f"{BUILTIN_MODULE}:{g}")


__all__ = ["Kernels", "builtin"]

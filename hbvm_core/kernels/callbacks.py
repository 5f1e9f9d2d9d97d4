"""What a problem hands the kernels: its compiled callbacks (``Kernels``) and the ``kernel`` marker."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Kernels:
    """The compiled callbacks of a problem (njit functions or 'module:function' strings) and their params.

    ``g(Q, out, params)`` (out (n, nu): the constraint values) is optional: only the compiled RATTLE loop
    needs it (docs/method.md 5); the HBVM loops bind ``grad_U`` and ``G`` alone. ``d2g(Q, V, out, params)``
    (out (n, nu): v^T Hess(g_i) v at the rows of Q, V) is optional: with it lambda(q, p) and the index-reduced
    reference ODE run compiled (``kernels/reference.py``).
    """

    grad_U: Any
    G: Any = None
    params: tuple[float, ...] = ()
    g: Any = None
    d2g: Any = None


#: the callbacks a loop's module can bind (the fields of ``Kernels`` but ``params``)
CALLBACK_NAMES = ("grad_U", "G", "g", "d2g")


def kernel(f):
    """Mark a plain Python callback to be compiled with ``numba.njit(cache=True)`` when a loop first needs it.

    A problem module can so define its compiled callbacks next to its numpy ones without importing numba;
    ``Kernels`` names them by ``"module:function"``.
    """
    f._hbvm_kernel = True
    return f

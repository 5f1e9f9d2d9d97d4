"""The math functions a problem written as plain Python functions of q may use (``from_expressions``).

Such a function is called once on symbols (traced), so it must use these, not numpy's or math's:

    from hbvm_core import sym
    U = lambda q: -1 / sym.sqrt(q[0] ** 2 + q[1] ** 2)

Each is sympy's function of the same name (``atan2``: sympy's ``atan2``; ``pi``, ``E``: the constants).
"""

from __future__ import annotations

import sympy as _sp

sin, cos, tan, exp, log, sqrt = _sp.sin, _sp.cos, _sp.tan, _sp.exp, _sp.log, _sp.sqrt
sinh, cosh, tanh = _sp.sinh, _sp.cosh, _sp.tanh
asin, acos, atan, atan2 = _sp.asin, _sp.acos, _sp.atan, _sp.atan2
pi, E = _sp.pi, _sp.E

__all__ = ["E", "acos", "asin", "atan", "atan2", "cos", "cosh", "exp", "log", "pi"]
__all__ += ["sin", "sinh", "sqrt", "tan", "tanh"]

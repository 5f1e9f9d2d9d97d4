"""Compiled (numba) kernels of HBVM(k, s) and RATTLE: the step and the time loop run compiled for problems
that opt in.

A problem opts in by setting ``Problem.kernels = Kernels(grad_U=..., G=...)``
with numba-compiled callbacks that write into preallocated arrays:

    grad_U(Q, out, params)   Q (n, m), out (n, m)       gradient of U at the rows of Q
    G(Q, out, params)        Q (n, m), out (n, m, nu)   column i = gradient of g_i (omit when nu = 0)
    g(Q, out, params)        Q (n, m), out (n, nu)      the constraint values (optional: RATTLE's loop)
    d2g(Q, V, out, params)   V (n, m), out (n, nu)      v^T Hess(g_i) v (optional: lambda(q, p) and the
                                                        reference ODE compiled, ``reference.py``)

``params`` is ``Kernels.params`` as a float64 array (masses, lengths, ...), so
one compiled loop serves every parameter value.

Each may be an ``@numba.njit`` function or a ``"module.path:function"`` string
(resolved lazily, so building a problem does not import numba) naming an njit
function or a plain function marked with ``@kernel`` (compiled on first use:
the built-in problems in ``hbvm_core.problems`` define theirs so). Callbacks that
can be imported by name get a generated loop module compiled once and cached
on disk (``registry``); others (defined in ``__main__`` or in a closure) are
compiled in-process on every run. ``uncached_loop`` / ``is_cached`` tell whether
a (method, problem) pair still has a loop to compile (``study.warm_up`` compiles
those side by side). ``python -m hbvm_core kernels warm|info|clear`` manages
the cache. Importing this package does not import numba.
"""

from __future__ import annotations

from .callbacks import Kernels, kernel


def uncached_loop(method, problem) -> str | None:
    """The name of the compiled loop module of (method, problem) if numba's disk cache does not hold it yet.

    None when it does, or when there is nothing to compile ahead: no compiled loop for this pair, or
    callbacks that cannot be imported by name (compiled in every process). Imports numba, and builds
    the loop's module (not its compiled code).
    """
    from .registry import is_compiled

    runner = method.compiled_runner(problem)
    module = None if runner is None else runner.module
    if module is None or getattr(module, "__file__", None) is None or is_compiled(module):
        return None
    return module.__name__


def is_cached(method, problem) -> bool:
    """Whether running ``method`` on ``problem`` compiles nothing that could have been cached on disk.

    The negation of ``uncached_loop(method, problem)``: True when the compiled loop is in numba's
    disk cache, or when there is none to cache.
    """
    return uncached_loop(method, problem) is None


__all__ = ["Kernels", "is_cached", "kernel", "uncached_loop"]

"""The compiled runner of the polynomial-multiplier HBVM: generated loop module, buffers, errors.

The template ``polynomial_kernel.py`` is written to
``<kernel cache dir>/poly_kernel_<hash>.py`` with ``grad_U`` and ``G`` bound by
import to a problem's compiled callbacks, so numba caches the loop on disk like
any module (the same scheme as ``hbvm_core.kernels.registry``, whose cache
directory it shares). The hash covers the template, the callbacks' names and
source and the numba version. Callbacks that cannot be imported by name get an
in-memory module without the disk cache.

Same contract as ``hbvm_core.integrate.python_runner``: points every
``save_every`` steps (and the last), per-step (t, lambda(t_n), iterations)
every ``save_every`` steps, emitted to the sink in blocks of ``chunk`` rows.
"""

from __future__ import annotations

import hashlib
import types
from pathlib import Path

import numpy as np

from ..errors import ConvergenceError, NonFiniteError
from ..legendre import shifted_legendre

TEMPLATE = Path(__file__).with_name("polynomial_kernel.py")
WARM_CODES = {"extrapolate": 0, "previous": 1, "p0": 2}
REASONS = {
    1: "no convergence",
    2: "non-finite increment (diverged)",
    3: "singular multiplier system (Singular matrix)",
    4: "non-finite state after the step",
}
_MODULES: dict[str, types.ModuleType] = {}


def loop_module(kernels) -> types.ModuleType:
    """The generated (and disk-cached) loop module for a problem's compiled callbacks."""
    import numba

    from ..kernels.registry import callback_source, import_generated, resolve_callback

    (gu, gu_name), (g, g_name) = resolve_callback("grad_U", kernels.grad_U), resolve_callback("G", kernels.G)
    template = TEMPLATE.read_text()
    named = gu_name is not None and g_name is not None
    parts = [template, numba.__version__, gu_name or repr(gu), g_name or repr(g)]
    parts += [callback_source(f) for f in (gu, g)]
    digest = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]
    if digest in _MODULES:
        return _MODULES[digest]
    if named:
        header = "".join(
            f"from {name.partition(':')[0]} import {name.partition(':')[2]} as {alias}\n"
            for name, alias in ((gu_name, "_grad_U_cb"), (g_name, "_G_cb"))
        )
        source = template.replace("grad_U = None", "grad_U = _grad_U_cb").replace("G = None", "G = _G_cb")
        module = import_generated(f"poly_kernel_{digest}", f"hbvm_poly_kernel_{digest}", header + source)
    else:
        source = template.replace("CACHE = True", "CACHE = False")
        module = types.ModuleType(f"hbvm_poly_kernel_{digest}")
        module.__dict__.update({"_grad_U_cb": gu, "_G_cb": g})
        source = source.replace("grad_U = None", "grad_U = _grad_U_cb").replace("G = None", "G = _G_cb")
        exec(compile(source, f"<hbvm poly kernel {digest}>", "exec"), module.__dict__)  # noqa: S102
    _MODULES[digest] = module
    return module


class PolynomialRunner:
    """The compiled time loop of a PolynomialHBVM for one problem; called like ``integrate.python_runner``."""

    def __init__(self, method, problem):
        self.module = loop_module(problem.kernels)
        tab = method.tableau
        s, k = tab.s, tab.k
        Bf = np.einsum("lj,li->jil", tab.W, tab.Phat).reshape(s * s, k)
        P0 = shifted_legendre(s - 1, np.zeros(1))[0]
        # writable C-ordered copies: numba types read-only arrays differently (a second compile)
        self.arrays = tuple(np.array(a, dtype=float, order="C") for a in (tab.Ihat, tab.W, tab.X, Bf, tab.E, P0))
        rule = method.rule
        self.rule = np.array([rule.rtol, rule.stall_rtol, rule.max_iter], dtype=float)
        self.warm = WARM_CODES[method.warm_start]
        self.projection = bool(method.projection)
        self.params = np.array(getattr(problem.kernels, "params", ()), dtype=float).reshape(-1)

    def __call__(self, problem, method, h, N, compensated, save_every, chunk, sink) -> dict:
        m, nu, s = problem.m, problem.nu, self.arrays[0].shape[1]
        q, p = problem.q0.copy(), problem.p0.copy()
        cq, cp = np.zeros(m), np.zeros(m)
        gamma_prev = np.zeros((s, m))
        state = np.array([0, 0, 1, 0, 0, 0, int(bool(compensated))], dtype=np.int64)
        info = np.zeros(4)
        pts = (np.empty(chunk), np.empty((chunk, m)), np.empty((chunk, m)))
        stp = (np.empty(chunk), np.empty((chunk, nu)), np.empty(chunk, dtype=np.int32))
        pts[0][0], pts[1][0], pts[2][0] = 0.0, q, p
        starts = [0, 0]

        def emit(which: int) -> None:
            n = int(state[2 + which])
            if n:
                bufs, out = (pts, sink.points) if which == 0 else (stp, sink.steps)
                out(starts[which], *(a[:n] for a in bufs))
                starts[which] += n
                state[2 + which] = 0

        if chunk == 1:
            emit(0)
        run = self.module.run_chunk
        while True:
            status = run(
                q, p, cq, cp, gamma_prev, state, float(h), int(N), int(save_every), self.warm, self.rule,
                self.projection, *self.arrays, self.params, *pts, *stp, info,
            )  # fmt: skip
            if status != 0:
                self._fail(problem, q, h, info)
            for which in (0, 1):
                if state[2 + which] == chunk:
                    emit(which)
            if state[0] >= N:
                break
        emit(0)
        emit(1)
        return {"iterations": int(state[4]), "max_iterations": int(state[5]), "backend": "numba"}

    def _fail(self, problem, q0, h, info) -> None:
        """Raise what the numpy stepper raises for the same failure (ConvergenceError, or NonFiniteError)."""
        status, n, it, d = int(info[0]), int(info[1]), int(info[2]), float(info[3])
        if status == 3:
            it, d = 0, float("nan")
        if status != 4 and np.all(np.isfinite(q0)):
            try:
                problem.check_finite(q0[None, :])
            except NonFiniteError as exc:
                raise NonFiniteError(f"{exc} at step {n} (t = {n * h:.6g})") from None
        raise ConvergenceError(n, n * h, d, it, REASONS[status])

"""The runs of an ensemble on the host, in numpy (``hbvm_core.ensemble``).

Per run: its params row (``Kernels.params``), the Cholesky factor of its M, its initial data, and the numpy
callbacks at its own params (H, g, G, M^-1 p, lambda), evaluated at points tagged by run. Two sources:
``Instances`` (a list of Problem objects, grouped by object) and ``Rows`` (one problem of a parametric factory and
its keywords as arrays: ``hbvm_core.problems.family``, nothing built per run). ``check_start`` checks the initial
data against the constraints, ``errors`` computes the summary (H_error, g_error) and ``start_multipliers`` the
blended solver's lambda(q0, p0), the same way for both.
"""

from __future__ import annotations

import numpy as np

from .errors import ProblemError
from .problem import CONSISTENCY_TOL, Problem
from .problems.family import Family, family_of


# --------------------------------------------------------------------------- structure
def structure_key(problem: Problem) -> tuple:
    """What runs of one ensemble block must share (hashable): the compiled callbacks, m, nu, whether M = I and
    the number of params; ``(None,)`` for a problem without compiled callbacks. Group runs by it before calling
    ``integrate_ensemble``. A parametric factory's instance is keyed by its general form (``Family.form``): the
    published problem at the factory's defaults has the key of the factory's other instances."""
    family = family_of(problem)
    return own_structure_key(family.form() if family is not None else problem)


def own_structure_key(problem: Problem) -> tuple:
    """``structure_key`` of the problem's own compiled callbacks."""
    k = problem.kernels
    if k is None:
        return (None,)
    callbacks = tuple(getattr(k, name) for name in ("grad_U", "G", "g", "d2g"))
    return (callbacks, problem.m, problem.nu, problem.M is None, len(tuple(k.params)))


def _loop_key(problem: Problem) -> tuple:
    """``own_structure_key`` without the mass-matrix form: a block with M != I runs instances with M = I (L = I)."""
    key = own_structure_key(problem)
    return key if len(key) == 1 else key[:3] + key[4:]


def _groups(slots: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """(slot, the positions holding it) for each distinct slot, in O(n log n)."""
    order = np.argsort(slots, kind="stable")
    cuts = np.flatnonzero(np.diff(slots[order])) + 1
    return [(int(slots[part[0]]), part) for part in np.split(order, cuts) if part.size]


# --------------------------------------------------------------------------- a list of problems
class Instances:
    """Runs given as Problem objects (one, or one per run), grouped by object. Where their own compiled callbacks
    differ, each takes its parametric form (``Family.form``: a factory's published problem at its defaults)."""

    def __init__(self, problem_list: list[Problem], R: int):
        seen: dict[int, int] = {}
        instances: list[Problem] = []
        first_run: list[int] = []
        slot = np.empty(len(problem_list), dtype=np.int64)
        for i, pb in enumerate(problem_list):
            if id(pb) not in seen:
                seen[id(pb)] = len(instances)
                instances.append(pb)
                first_run.append(i)
            slot[i] = seen[id(pb)]
        if len({_loop_key(pb) for pb in instances}) > 1:
            instances = [family_of(pb).form() if family_of(pb) is not None else pb for pb in instances]
        self.instances, self.first_run = instances, first_run
        self.inverse = np.zeros(R, dtype=np.int64) if len(problem_list) == 1 else slot
        # the loop of an instance with M != I where there is one: it runs the instances with M = I too (L = I)
        self.first = next((pb for pb in instances if pb.M is not None), instances[0])

    def check(self, runner) -> None:
        """Every instance shares the first's compiled loop (ProblemError naming the first that differs), and its
        compiled callbacks agree with its numpy ones at its own params; then the per-run rows."""
        from .kernels.driver import check_callbacks, cholesky_factor

        head, first = self.instances[0], self.first
        ref = _loop_key(head)
        what = ("compiled callbacks", "m", "nu", "number of params")
        for i, pb in zip(self.first_run, self.instances):
            mine = _loop_key(pb)
            if mine != ref:
                diff = "compiled callbacks" if len(mine) == 1 else next(w for w, a, b in zip(what, mine, ref) if a != b)
                raise ProblemError(
                    f"problems[{i}] ({pb.name}) differs from problems[0] ({head.name}) in its {diff}: "
                    "an ensemble runs one problem structure"
                )
            if pb is not first:
                check_callbacks(pb, runner.module, np.array(pb.kernels.params, dtype=float).reshape(-1))
        self.params = self._rows([np.array(pb.kernels.params, dtype=float).reshape(-1) for pb in self.instances])
        identity = np.eye(first.m)
        L = [identity if pb.M is None and first.M is not None else cholesky_factor(pb) for pb in self.instances]
        self.L = self._rows(L)
        self.q0 = self._rows([pb.q0 for pb in self.instances])
        self.p0 = self._rows([pb.p0 for pb in self.instances])

    def _rows(self, values: list[np.ndarray]) -> np.ndarray:
        return np.ascontiguousarray(np.stack(values)[self.inverse])

    def _each(self, runs: np.ndarray, f, shape: tuple) -> np.ndarray:
        """f(problem, positions) of each instance at the positions of its runs, into an array of ``shape``."""
        out = np.empty(shape)
        slots = self.inverse[runs]
        if len(self.instances) == 1:
            out[:] = f(self.instances[0], slice(None))
            return out
        for slot, rows in _groups(slots):
            out[rows] = f(self.instances[slot], rows)
        return out

    def H(self, q, p, runs):
        return self._each(runs, lambda pb, r: pb.hamiltonian(q[r], p[r]), (q.shape[0],))

    def g(self, q, runs):
        return self._each(runs, lambda pb, r: pb.constraint(q[r]), (q.shape[0], self.first.nu))

    def G(self, q, runs):
        return self._each(runs, lambda pb, r: pb.G(q[r]), (*q.shape, self.first.nu))

    def minv(self, p, runs):
        return self._each(runs, lambda pb, r: pb.minv_rows(p[r][:, :, None])[:, :, 0], p.shape)

    def lam(self, q, p, runs):
        nu = self.first.nu

        def one(pb, r):
            n = q[r].shape[0]
            return pb.multiplier(q[r], p[r], compiled=False) if pb.d2g is not None else np.zeros((n, nu))

        return self._each(runs, one, (q.shape[0], nu))


# --------------------------------------------------------------------------- a parametric family as arrays
class Rows:
    """Runs given as one parametric factory's keywords per run (``values``: arrays [R, *shape]), by its Family."""

    def __init__(self, family: Family, values: dict[str, np.ndarray]):
        self.family = family
        self.K, q0, p0, mass = family.rows(values)
        self.K = np.ascontiguousarray(self.K, dtype=float)
        self.q0, self.p0 = np.ascontiguousarray(q0, dtype=float), np.ascontiguousarray(p0, dtype=float)
        R = self.K.shape[0]
        first = family.form()
        if mass is not None and first.M is None and np.any(mass != 1.0):  # a structure problem with M != I
            i = int(np.flatnonzero(np.any(mass != 1.0, axis=1))[0])
            first = family.build(**{key: values[key][i].tolist() for key in values})
        self.first = first
        m = first.m
        self.mass = None if mass is None else np.ascontiguousarray(mass, dtype=float)
        if first.M is None:
            self.L = np.zeros((R, 0, 0))
        else:  # diagonal M: its Cholesky factor is diag(sqrt(M_ii)); I where every run's M is I (mass None)
            self.L = np.zeros((R, m, m))
            self.L[:, np.arange(m), np.arange(m)] = 1.0 if self.mass is None else np.sqrt(self.mass)
        self.params = self.K

    def check(self, runner) -> None:
        """The compiled callbacks agree with the family's numpy ones at the first and the last run's params and q0
        (``kernels.driver.check_callbacks``, on a view of the family at that run's params)."""
        from types import SimpleNamespace

        from .kernels.driver import check_callbacks

        f, first = self.family, self.first
        for run in sorted({0, self.K.shape[0] - 1}):
            K = self.K[run]
            view = SimpleNamespace(
                name=f"{f.name} (run {run})", q0=self.q0[run], m=first.m, nu=first.nu,
                grad_U=lambda Q, K=K: f.grad_U(Q, K), G=lambda Q, K=K: f.G(Q, K), g=lambda Q, K=K: f.g(Q, K),
            )  # fmt: skip
            check_callbacks(view, runner.module, K)

    def H(self, q, p, runs):
        v = self.minv(p, runs)
        return 0.5 * np.einsum("nm,nm->n", p, v) + self.family.U(q, self.K[runs])

    def g(self, q, runs):
        return self.family.g(q, self.K[runs])

    def G(self, q, runs):
        return self.family.G(q, self.K[runs])

    def minv(self, p, runs):
        return p if self.mass is None else p / self.mass[runs]

    def lam(self, q, p, runs):
        """lambda(q, p) = [G^T M^-1 G]^-1 [d2g(v, v) - G^T M^-1 grad U], v = M^-1 p (docs/method.md 1)."""
        K = self.K[runs]
        Gq = self.family.G(q, K)
        MG = Gq if self.mass is None else Gq / self.mass[runs][:, :, None]
        A = np.einsum("nmi,nmj->nij", Gq, MG)
        rhs = self.family.d2g(q, self.minv(p, runs), K) - np.einsum("nmi,nm->ni", MG, self.family.grad_U(q, K))
        return np.linalg.solve(A, rhs[:, :, None])[:, :, 0]


# --------------------------------------------------------------------------- what is computed from them
def check_start(runs, q0: np.ndarray, p0: np.ndarray) -> None:
    """ProblemError (one line) naming the first run whose finite (q0, p0) is off the constraints: |g(q0)| or the
    hidden constraint |G(q0)^T M^-1 p0| above the tolerances of ``Problem.validate`` (CONSISTENCY_TOL times
    1 + max |q0| + max |p0|, and times 1 + max |G(q0)| for the hidden one). A run with a non-finite q0 or p0 is
    not checked: its loop stops at once with status non-finite state."""
    idx = np.flatnonzero(np.all(np.isfinite(q0), axis=1) & np.all(np.isfinite(p0), axis=1))
    if not idx.size:
        return
    q, p = q0[idx], p0[idx]
    scale = 1.0 + np.abs(q).max(axis=1) + np.abs(p).max(axis=1)
    with np.errstate(all="ignore"):
        g = np.abs(runs.g(q, idx))
        G = runs.G(q, idx)
        hidden = np.abs(np.einsum("nmk,nm->nk", G, runs.minv(p, idx)))
    bad_g = ~(g.max(axis=1) <= CONSISTENCY_TOL * scale)
    tol_h = CONSISTENCY_TOL * scale * (1.0 + np.abs(G).reshape(len(idx), -1).max(axis=1))
    bad_h = ~(hidden.max(axis=1) <= tol_h)
    if not (bad_g.any() or bad_h.any()):
        return
    j = int(np.flatnonzero(bad_g | bad_h)[0])
    nu = g.shape[1]
    if bad_g[j]:
        c = int(np.argmax(g[j]))
        raise ProblemError(
            f"{runs.first.name}: q0 of run {int(idx[j])} is off the constraints: |g(q0)| = {g[j, c]:.3e} "
            f"(tolerance {CONSISTENCY_TOL * scale[j]:.1e}) at constraint {c} (of {nu}, counted from 0)"
        )
    c = int(np.argmax(hidden[j]))
    raise ProblemError(
        f"{runs.first.name}: p0 of run {int(idx[j])} is off the hidden constraint: |G(q0)^T M^-1 p0| = "
        f"{hidden[j, c]:.3e} (tolerance {tol_h[j]:.1e}) at constraint {c} (of {nu}, counted from 0)"
    )


def start_multipliers(runner, runs, q0: np.ndarray, p0: np.ndarray, nu: int) -> np.ndarray:
    """lam0 of each run: lambda(q0, p0) for the blended solver (as ``blended.initial_multiplier``), else 0."""
    from .kernels.driver import SOLVER_CODES

    R = q0.shape[0]
    if nu == 0 or getattr(runner, "solver", None) != SOLVER_CODES["blended"]:
        return np.zeros((R, nu))
    return np.ascontiguousarray(runs.lam(q0, p0, np.arange(R)))


#: the saved points evaluated at once by ``errors``: a block's temporaries stay a few MB (fresh memory is what a
#: 10^6-point evaluation spent its time on, not the arithmetic)
POINTS_PER_BLOCK = 1 << 15


def errors(runs, out: dict, nu: int) -> tuple[np.ndarray, np.ndarray]:
    """max over the saved points of |H - H(q0, p0)| and of |g_i(q)|, by the numpy callbacks at each run's params;
    the runs in blocks of about ``POINTS_PER_BLOCK`` points."""
    q, p, n_saved = out["q"], out["p"], out["n_saved"]
    R, S = q.shape[0], q.shape[1]
    H_error, g_error = np.full(R, np.nan), np.full((R, nu), np.nan)
    if not S:
        return H_error, g_error
    for block in run_blocks(np.arange(R), S):
        a, b = block[0], block[-1] + 1
        H_error[a:b], g_error[a:b] = _block_errors(runs, q[a:b], p[a:b], n_saved[a:b], block, nu)
    return H_error, g_error


def run_blocks(rows: np.ndarray, S: int) -> list[np.ndarray]:
    """``rows`` (runs of S saved points each) in consecutive blocks of about ``POINTS_PER_BLOCK`` points."""
    per = max(1, POINTS_PER_BLOCK // max(S, 1))
    return [rows[a : a + per] for a in range(0, rows.size, per)]


def _block_errors(runs, q, p, n_saved, run, nu: int) -> tuple[np.ndarray, np.ndarray]:
    """``errors`` of the runs ``run`` (their q, p [run, point, m] and numbers of saved points)."""
    n, S, m = q.shape
    mask = np.arange(S)[None, :] < n_saved[:, None]
    which = np.broadcast_to(run[:, None], (n, S))[mask]
    qs, ps = q[mask], p[mask]
    with np.errstate(all="ignore"):
        H = np.full(mask.shape, np.nan)
        H[mask] = _finite_rows(runs.H, qs, ps, which)
        H_error = np.max(np.where(mask, np.abs(H - H[:, :1]), -np.inf), axis=1)
        g_error = np.full((n, nu), np.nan)
        if nu:
            g = np.full(mask.shape + (nu,), np.nan)
            g[mask] = _finite_rows(lambda a, b, r: runs.g(a, r), qs, ps, which, nu)
            g_error = np.max(np.where(mask[:, :, None], np.abs(g), -np.inf), axis=1)
    return H_error, g_error


def _finite_rows(f, q: np.ndarray, p: np.ndarray, runs: np.ndarray, width: int | None = None) -> np.ndarray:
    """f at the rows of (q, p) that are finite; NaN at the others (a NaN initial state stays NaN)."""
    shape = (q.shape[0],) if width is None else (q.shape[0], width)
    ok = np.all(np.isfinite(q), axis=1) & np.all(np.isfinite(p), axis=1)
    if ok.all():
        return np.asarray(f(q, p, runs), dtype=float).reshape(shape)
    result = np.full(shape, np.nan)
    if np.any(ok):
        result[ok] = f(q[ok], p[ok], runs[ok])
    return result


__all__ = ["Instances", "Rows", "check_start", "errors", "own_structure_key", "start_multipliers", "structure_key"]

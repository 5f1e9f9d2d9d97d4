"""The problem API: a constrained Hamiltonian system (docs/method.md section 1).

    H(q, p) = 1/2 p^T M^{-1} p + U(q),   g(q) = 0,   G(q) = grad g(q)

Every callback is vectorised over a leading axis of points: ``Q`` has shape
(n, m) and

    U(Q)      -> (n,)          potential
    grad_U(Q) -> (n, m)        its gradient
    g(Q)      -> (n, nu)       constraints
    G(Q)      -> (n, m, nu)    column i = gradient of g_i
    d2g(Q, V) -> (n, nu)       v^T (Hessian of g_i) v, optional (lambda(q, p), references)

A problem with a sparse G may give its pattern instead of (or besides) a dense ``G``:
``sparse = hbvm_core.sparse.SparseG(rows, cols, values, m, nu)`` with ``values(Q) -> (n, nnz)``; the
numpy steppers then work on its nonzeros above a size (``hbvm_core.sparse.path``).

A user writes the callbacks with numpy and builds ``Problem(...)``; the
built-in problems live in ``hbvm_core.problems``.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .checks import check_derivatives as check_derivatives_of
from .checks import check_vectorised
from .checks import enabled as derivative_checks_enabled
from .errors import NonFiniteError, ProblemError, keywords_checked
from .kernels.description import LoopDescription

Array = np.ndarray

#: Tolerance (relative to the size of the data) for consistent initial values.
CONSISTENCY_TOL = 1e-10
#: G^T M^-1 G at q0 with a larger condition number counts as singular
MAX_CONDITION = 1e12
#: a diagonal M with more coordinates is kept as its diagonal (``Problem.M``), never as an m x m matrix
DENSE_DIAGONAL_MAX = 4096
_DEFERRED: contextvars.ContextVar[bool] = contextvars.ContextVar("hbvm_deferred_validation", default=False)


#: the compiled reference (kernels/reference.py): lambda(q, p) and the index-reduced ODE's right-hand side, a
#: module of functions (no time loop) binding d2g too; ``Problem.compiled_reference`` builds it
REFERENCE_LOOP = LoopDescription(template="reference", callbacks=("grad_U", "G", "d2g"), forms=frozenset({"functions"}))


@contextlib.contextmanager
def deferred_validation():
    """Within the block, problems built skip ``validate()`` (and the vectorisation check of g): whoever builds
    many instances of one structure (a study's grid) validates one of them and checks the initial data of all
    at once (``inconsistent_instance``)."""
    token = _DEFERRED.set(True)
    try:
        yield
    finally:
        _DEFERRED.reset(token)


@keywords_checked  # a misspelt keyword: one line with a did-you-mean (KeywordError), not a TypeError
@dataclass
class Problem:
    """A constrained (nu >= 1) or unconstrained (nu = 0) Hamiltonian system (docs/method.md 1).

    Parameters
    ----------
    name : str
        Used in messages and stores.
    q0, p0 : array_like, shape (m,)
        Initial state; must satisfy g(q0) = 0 and G(q0)^T M^{-1} p0 = 0.
    U, grad_U : callable
        ``U(Q) -> (n,)``, ``grad_U(Q) -> (n, m)`` for Q of shape (n, m).
    g, G : callable, optional
        ``g(Q) -> (n, nu)``, ``G(Q) -> (n, m, nu)``; both or neither (nu = 0).
    d2g : callable, optional
        ``d2g(Q, V) -> (n, nu)``, v^T (Hessian of g_i) v; needed for lambda(q, p) and references.
    M : float or array_like, shape (m,) or (m, m), optional
        The mass matrix: a scalar, its diagonal as a vector, or a full symmetric positive
        definite matrix; default (None) the identity. A diagonal M is kept as the full matrix, or as
        its diagonal (shape (m,)) past ``DENSE_DIAGONAL_MAX`` coordinates.
    exact : callable, optional
        ``exact(t) -> (q, p, lam)`` with shapes (n, m), (n, m), (n, nu).
    period : float, optional
        Lets studies give ``periods`` instead of ``t_end``.
    params : dict
        Anything that defines the problem, for the stores' attrs.
    kernels : hbvm_core.kernels.Kernels, optional
        Compiled callbacks: the problem then takes the compiled loop (and, with ``Kernels.d2g``, lambda(q, p)
        and the reference ODE run compiled too).
    sparse : hbvm_core.sparse.SparseG, optional
        The sparsity pattern of G and its values; with it ``G`` may be left out (its dense form is derived,
        for small problems), and the HBVM (fixed point, blended) and RATTLE numpy steppers take the sparse path for
        large ones (``hbvm_core.sparse.path``; the trajectory's attrs say which: ``linear_algebra``).
    coordinates : sequence of str, optional
        The names of the m components of q (and p), e.g. ``("x", "y", "z")``: the ``dof`` coordinate of a
        run's store (``q.sel(dof="z")``). Default ``x0, x1, ...``; expression problems name theirs.
    identity : str, optional
        The canonical text of what the problem computes, independent of the host (set by
        ``hbvm_core.expressions``: the expressions in canonical form); None for callbacks. When given, a
        run's identity (``hbvm_core.fingerprint``) hashes it instead of the source of the modules that
        define the callbacks.
    check : bool
        Run ``validate()`` on construction.
    check_derivatives : bool
        In ``validate()``, compare grad_U, G, d2g and the compiled callbacks with central differences
        of U, g, G and with the numpy callbacks (``hbvm_core.checks``); False skips that comparison.

    Raises
    ------
    ProblemError
        For callbacks that are not vectorised, a derivative that does not match the central
        differences of its function (``check_derivatives``), wrong shapes, an M that is not symmetric
        positive definite, inconsistent initial data or a singular G^T M^{-1} G at q0.
    NonFiniteError
        When a callback returns NaN/inf at q0.

    Notes
    -----
    Callbacks and the features that need them: ``U``, ``grad_U`` (and ``g``, ``G`` for
    a constrained system) are all the integrators need. ``d2g`` is needed for the
    multiplier lambda(q, p) and the index-reduced reference ODE (``errors.reference:
    reference`` without ``exact``, ``reference_kind: ode``). ``exact`` is needed for
    ``errors.reference: exact``; ``period`` for ``periods``, ``period_divisions`` and
    ``errors.sample: periods``. A study that asks for a feature whose callback is missing
    fails before any run, naming it.
    """

    name: str
    q0: Array
    p0: Array
    U: Callable[[Array], Array]
    grad_U: Callable[[Array], Array]
    g: Callable[[Array], Array] | None = None
    G: Callable[[Array], Array] | None = None
    d2g: Callable[[Array, Array], Array] | None = None
    M: Array | None = None
    exact: Callable[[Array], tuple[Array, Array, Array]] | None = None
    period: float | None = None
    params: dict[str, Any] = field(default_factory=dict)
    kernels: Any = None
    identity: str | None = None
    coordinates: tuple[str, ...] | None = None
    sparse: Any = None
    check: bool = True
    check_derivatives: bool = True

    def __post_init__(self) -> None:
        self.q0 = np.array(self.q0, dtype=float).reshape(-1)
        self.p0 = np.array(self.p0, dtype=float).reshape(-1)
        m = self.q0.size
        if self.p0.size != m:
            raise ProblemError(f"{self.name}: p0 has {self.p0.size} entries, q0 has {m}")
        if self.sparse is not None and self.G is None:
            self.G = self.sparse.dense
        if (self.g is None) != (self.G is None):
            raise ProblemError(f"{self.name}: give both g and G, or neither")
        self.coordinates = self._coordinate_names(m)
        self._chol, self._diag = None, None
        self._reference = None
        if self.M is not None:
            self._set_mass(m)
        self.nu = 0 if self.g is None else self._probe_nu()
        if self.sparse is not None and (self.sparse.m, self.sparse.nu) != (m, self.nu):
            raise ProblemError(
                f"{self.name}: sparse G is {self.sparse.m} x {self.sparse.nu}, expected m x nu = {m} x {self.nu}"
            )
        if self.check and not _DEFERRED.get():
            self.validate()

    def __repr__(self) -> str:
        """A few lines in xarray's spirit: name, sizes, mass matrix, parameters and the callbacks given."""
        M = "identity" if self.M is None else ("diagonal" if self._diag is not None else "full")
        given = [f for f in ("U", "grad_U", "g", "G", "d2g", "exact") if getattr(self, f) is not None]
        if self.sparse is not None:
            given.append(f"sparse G ({self.sparse.nnz} nonzeros)")
        lines = [
            f"<hbvm_core.Problem> {self.name}",
            f"  sizes:     m = {self.m}, nu = {self.nu}, M {M}; q = ({', '.join(self.coordinates)})",
            f"  params:    {self.params}",
            f"  callbacks: {', '.join(given)}",
            f"  period:    {'none' if self.period is None else f'{self.period:.10g}'}",
            f"  kernels:   {'compiled' if self.kernels is not None else 'none (numpy callbacks)'}",
        ]
        return "\n".join(lines)

    # --- sizes and linear algebra -------------------------------------------------
    def _coordinate_names(self, m: int) -> tuple[str, ...]:
        """The names of q's components: ``coordinates`` checked (m distinct non-empty strings), else x0..x{m-1}."""
        if self.coordinates is None:
            return tuple(f"x{i}" for i in range(m))
        names = (self.coordinates,) if isinstance(self.coordinates, str) else tuple(self.coordinates)
        if len(names) != m or not all(isinstance(c, str) and c for c in names) or len(set(names)) != m:
            raise ProblemError(
                f"{self.name}: coordinates = {list(names)!r}: expected {m} distinct names, one per component of q0"
            )
        return names

    @property
    def constraint_index(self) -> tuple[int, ...]:
        """0, 1, ..., nu - 1: the ``constraint`` coordinate of a run's store (g_i, the hidden constraint, lambda_i)."""
        return tuple(range(self.nu))

    def _set_mass(self, m: int) -> None:
        """M from a scalar, a vector (the diagonal) or a full SPD matrix.

        A diagonal M keeps the diagonal for M^-1 (a division; ``M`` holds the full matrix for
        the compiled kernels); M = I given as 1 or a vector of ones is M = None, exactly.
        """
        M = np.array(self.M, dtype=float)
        if M.ndim == 0 or M.shape == (m,):
            d = np.broadcast_to(M, (m,)).astype(float)
            if not np.all(np.isfinite(d)) or np.any(d <= 0):
                raise ProblemError(f"{self.name}: M is not positive definite (diagonal {d.tolist()})")
            if np.all(d == 1.0):
                self.M = None
                return
            # M^-1 is a division by d: no factor; M itself is kept as the full matrix (the compiled kernels'),
            # or as its diagonal past DENSE_DIAGONAL_MAX coordinates (the sparse path's chains of 10^4 beads)
            self._diag, self._chol = d, "diagonal"
            self.M = np.diag(d) if m <= DENSE_DIAGONAL_MAX else d
            return
        elif M.shape != (m, m) or not np.allclose(M, M.T):
            what = f"shape {M.shape}" if M.shape != (m, m) else "a non-symmetric matrix"
            raise ProblemError(
                f"{self.name}: M must be a scalar, a vector of {m} diagonal entries or a symmetric {m}x{m} matrix, "
                f"got {what}"
            )
        # imported here: scipy.linalg takes 0.1-0.15 s to import (the workflow's parse), and a diagonal M needs none
        from scipy.linalg import cho_factor

        try:
            self._chol = cho_factor(M)
        except np.linalg.LinAlgError:
            raise ProblemError(f"{self.name}: M is not positive definite") from None
        self.M = M

    @property
    def m(self) -> int:
        return self.q0.size

    def minv(self, x: Array) -> Array:
        """M^{-1} x for x of shape (m,) or (m, r), by the Cholesky factor (M^{-1} never formed)."""
        if self._chol is None:
            return x
        if self._diag is not None:
            return x / (self._diag if x.ndim == 1 else self._diag[:, None])
        from scipy.linalg import cho_solve

        return cho_solve(self._chol, x)

    def minv_rows(self, x: Array) -> Array:
        """M^{-1} applied along the axis of length m of x with shape (a, m) or (a, m, r)."""
        if self._chol is None:
            return x
        if self._diag is not None:
            return x / self._diag.reshape((1, self.m) + (1,) * (x.ndim - 2))
        from scipy.linalg import cho_solve

        a = x.shape[0]
        xt = np.moveaxis(x, 1, 0).reshape(self.m, -1)
        return np.moveaxis(cho_solve(self._chol, xt).reshape((self.m, a) + x.shape[2:]), 0, 1)

    # --- callbacks on single states and trajectories ---------------------------------
    def _probe_nu(self) -> int:
        if not _DEFERRED.get():
            check_vectorised(self, keys=("g",))
        try:
            gq = np.asarray(self.g(self.q0[None, :]))
        except Exception:
            check_vectorised(self, keys=("g",))  # deferred: the check's one line naming the callback, where it fails
            raise
        if gq.ndim != 2 or gq.shape[0] != 1:
            raise ProblemError(f"{self.name}: g(Q) must return shape (n, nu), got {gq.shape} for n = 1")
        return gq.shape[1]

    def hamiltonian(self, q: Array, p: Array) -> Array:
        """H(q_n, p_n) for q, p of shape (n, m)."""
        v = self.minv_rows(p[:, :, None])[:, :, 0] if self._chol is not None else p
        return 0.5 * np.einsum("nm,nm->n", p, v) + self.U(q)

    def constraint(self, q: Array) -> Array:
        """g(q_n), shape (n, nu)."""
        if self.nu == 0:
            return np.zeros((q.shape[0], 0))
        return self.g(q)

    def hidden_constraint(self, q: Array, p: Array) -> Array:
        """G(q_n)^T M^{-1} p_n, shape (n, nu)."""
        if self.nu == 0:
            return np.zeros((q.shape[0], 0))
        v = self.minv_rows(p[:, :, None])[:, :, 0] if self._chol is not None else p
        if self._sparse_path():
            from .sparse.checks import hidden_constraint

            return hidden_constraint(self.sparse, q, v)
        return np.einsum("nmk,nm->nk", self.G(q), v)

    def _sparse_path(self) -> bool:
        """Whether this problem's numpy steppers and checks work on its sparse G (``sparse.path``)."""
        if self.sparse is None:
            return False
        from .sparse.path import sparse_path

        return sparse_path(self)

    def compiled_reference(self):
        """(module, M^{-1}, params) of the compiled lambda(q, p) and reduced ODE (``kernels/reference.py``) when
        the problem's kernels give d2g (or nu = 0), else None."""
        k = self.kernels
        if k is None or (self.nu and getattr(k, "d2g", None) is None):
            return None
        if getattr(self, "_reference", None) is None:
            from .kernels.registry import loop_module

            module = loop_module(REFERENCE_LOOP, k, {"M_SIZE": self.m, "NU_SIZE": self.nu})
            minv = np.zeros((0, 0)) if self.M is None else self.minv(np.eye(self.m))
            self._reference = (module, np.ascontiguousarray(minv), np.array(k.params, dtype=float))
        return self._reference

    def multiplier(self, q: Array, p: Array, compiled: bool = True) -> Array:
        """lambda(q, p) = [G^T M^{-1} G]^{-1} [d2g(v, v) - G^T M^{-1} grad U], v = M^{-1} p (docs/method.md 1).

        ``compiled``: by the compiled reference module where the problem has one (compiled on first use); False
        for a few points, where numpy's callbacks cost less than a compile (the compiled module where they lack
        d2g)."""
        if self.nu == 0:
            return np.zeros((q.shape[0], 0))
        reference = self.compiled_reference() if compiled or self.d2g is None else None
        if reference is not None:
            module, minv, params = reference
            out = np.empty((q.shape[0], self.nu))
            q, p = np.ascontiguousarray(q, dtype=float), np.ascontiguousarray(p, dtype=float)
            module.multiplier(q, p, minv, params, out)
            return out
        if self.d2g is None:
            raise ProblemError(f"{self.name}: the multiplier lambda(q, p) needs d2g (the Hessian form of g)")
        if self._sparse_path():
            from .sparse.checks import multiplier

            return multiplier(self, q, p)
        Gq = self.G(q)
        MG = self.minv_rows(Gq)
        v = self.minv_rows(p[:, :, None])[:, :, 0] if self._chol is not None else p
        A = np.einsum("nmi,nmj->nij", Gq, MG)
        rhs = self.d2g(q, v) - np.einsum("nmi,nm->ni", MG, self.grad_U(q))
        return np.linalg.solve(A, rhs[:, :, None])[:, :, 0]

    def index_reduced_rhs(self, t: float, y: Array) -> Array:
        """y' for the index-reduced ODE y = (q, p): q' = M^{-1} p, p' = -grad U - G lambda(q, p)."""
        compiled = self.compiled_reference()
        if compiled is not None:
            module, minv, params = compiled
            return module.rhs(np.ascontiguousarray(y, dtype=float), minv, params)
        m = self.m
        q, p = y[None, :m], y[None, m:]
        v = self.minv(p[0])
        f = -self.grad_U(q)[0]
        if self.nu:
            f = f - self.G(q)[0] @ self.multiplier(q, p)[0]
        return np.concatenate([v, f])

    # --- validation ------------------------------------------------------------------
    def validate(self) -> None:
        """Check vectorisation, shapes, finiteness, derivatives (``hbvm_core.checks``), consistency of (q0, p0)
        and regularity of G^T M^{-1} G (on the sparse G where the problem takes the sparse path)."""
        if self._sparse_path():
            from .sparse.checks import validate_sparse

            validate_sparse(self, CONSISTENCY_TOL, MAX_CONDITION)
            return
        check_vectorised(self)
        m, nu = self.m, self.nu
        Q = np.stack([self.q0, self.q0 + 1e-3])
        expected = {"U": (2,), "grad_U": (2, m)}
        results = {"U": self.U(Q), "grad_U": self.grad_U(Q)}
        if nu:
            expected |= {"g": (2, nu), "G": (2, m, nu)}
            results |= {"g": self.g(Q), "G": self.G(Q)}
            if self.d2g is not None:
                expected["d2g"] = (2, nu)
                results["d2g"] = self.d2g(Q, Q)
        for key, val in results.items():
            shape = np.shape(val)
            if shape != expected[key]:
                raise ProblemError(f"{self.name}: callback {key} returned shape {shape}, expected {expected[key]}")
            if not np.all(np.isfinite(val)):
                raise NonFiniteError(f"{self.name}: callback {key} returned non-finite values at q0")
        if not (np.all(np.isfinite(self.q0)) and np.all(np.isfinite(self.p0))):
            raise ProblemError(f"{self.name}: q0 or p0 is not finite")
        if self.check_derivatives and derivative_checks_enabled():
            check_derivatives_of(self)
        if nu == 0:
            return
        if nu >= m:
            raise ProblemError(f"{self.name}: nu = {nu} constraints need nu < m = {m}")
        q, p = self.q0[None, :], self.p0[None, :]
        scale = 1.0 + np.abs(self.q0).max() + np.abs(self.p0).max()
        gq = np.abs(self.g(q)[0])
        g0, i = gq.max(), int(np.argmax(gq))
        if g0 > CONSISTENCY_TOL * scale:
            raise ProblemError(
                f"{self.name}: inconsistent initial data, |g(q0)| = {g0:.3e} (expected 0): constraint {i} (of "
                f"{nu}, counted from 0) has g_{i}(q0) = {float(self.g(q)[0][i]):.3e}"
            )
        hq = self.hidden_constraint(q, p)[0]
        hc, i = np.abs(hq).max(), int(np.argmax(np.abs(hq)))
        if hc > CONSISTENCY_TOL * scale * (1.0 + np.abs(self.G(q)).max()):
            raise ProblemError(
                f"{self.name}: inconsistent initial data, hidden constraint |G(q0)^T M^-1 p0| = {hc:.3e} (expected "
                f"0): constraint {i} (of {nu}, counted from 0) has (G^T M^-1 p0)_{i} = {float(hq[i]):.3e}"
            )
        Gq = self.G(q)[0]
        A = Gq.T @ self.minv(Gq)
        if np.linalg.cond(A) > MAX_CONDITION:
            raise ProblemError(f"{self.name}: G^T M^-1 G is singular at q0 (condition {np.linalg.cond(A):.3e})")

    def check_finite(self, Q: Array, n: int | None = None, t: float = 0.0) -> None:
        """After a failed step n (at time t): NonFiniteError naming the callback that returns NaN/inf at the
        finite stage points Q, with the step and time; nothing when Q itself is not finite or every value is.
        The one place of this message, for the numpy steppers and the compiled loops alike."""
        if not np.all(np.isfinite(Q)):
            return
        where = "" if n is None else f" at step {n} (t = {t:.6g})"
        calls = {"grad_U": lambda: self.grad_U(Q)}
        if self.nu:
            calls["G"] = (lambda: self.sparse.values(Q)) if self.sparse is not None else (lambda: self.G(Q))
        for key, f in calls.items():
            with np.errstate(all="ignore"):
                val = f()
            if not np.all(np.isfinite(val)):
                raise NonFiniteError(f"{self.name}: callback {key} returned non-finite values{where}")


def inconsistent_instance(problems: Sequence[Problem]) -> tuple[int, str] | None:
    """The first of ``problems`` (instances of one structure: the same m and nu) whose initial data ``validate``
    would refuse -- q0, p0, g(q0) or G(q0) not finite, |g(q0)| or the hidden constraint |G(q0)^T M^-1 p0| above
    ``CONSISTENCY_TOL`` times their scale, G^T M^-1 G singular at q0 -- as (index, the one-line reason), or None.
    One call of g and of G per problem (each at its own parameters); the checks vectorised over all of them."""
    if not problems:
        return None
    first = problems[0]
    if first._sparse_path():  # large problems with a sparse G: each checked on its nonzeros, no dense G
        for i, pb in enumerate(problems):
            try:
                pb.validate()
            except ProblemError as exc:
                return i, str(exc)
        return None
    m, nu = first.m, first.nu
    q0, p0 = np.stack([pb.q0 for pb in problems]), np.stack([pb.p0 for pb in problems])
    bad = ~(np.isfinite(q0).all(1) & np.isfinite(p0).all(1))
    if bad.any():
        i = int(np.argmax(bad))
        return i, f"{problems[i].name}: q0 or p0 is not finite"
    if nu == 0:
        return None
    with np.errstate(all="ignore"):
        g = np.stack([np.asarray(pb.g(pb.q0[None, :]), dtype=float).reshape(nu) for pb in problems])
        G = np.stack([np.asarray(pb.G(pb.q0[None, :]), dtype=float).reshape(m, nu) for pb in problems])
        for key, val in (("g", g), ("G", G)):
            finite = np.isfinite(val.reshape(len(problems), -1)).all(1)
            if not finite.all():
                i = int(np.argmin(finite))
                return i, f"{problems[i].name}: callback {key} returned non-finite values at q0"
        # M^-1 p0 and M^-1 G per problem: identity, diagonal (a division) or full (the Cholesky factor)
        v, MG = p0.copy(), G.copy()
        for i, pb in enumerate(problems):
            if pb._chol is not None:
                v[i], MG[i] = pb.minv(p0[i]), pb.minv(G[i])
        scale = 1.0 + np.abs(q0).max(1) + np.abs(p0).max(1)
        hidden = np.einsum("rmk,rm->rk", G, v)
        A = np.einsum("rmi,rmj->rij", G, MG)
        g_bad = np.abs(g).max(1) > CONSISTENCY_TOL * scale
        h_bad = np.abs(hidden).max(1) > CONSISTENCY_TOL * scale * (1.0 + np.abs(G).max((1, 2)))
        c_bad = ~(np.linalg.cond(A) <= MAX_CONDITION)
    for i in range(len(problems)):  # the first bad problem, for the first reason validate gives
        if not (g_bad[i] or h_bad[i] or c_bad[i]):
            continue
        name = problems[i].name
        if g_bad[i]:
            k = int(np.argmax(np.abs(g[i])))
            return i, (
                f"{name}: inconsistent initial data, |g(q0)| = {abs(g[i, k]):.3e} (expected 0): constraint {k} (of "
                f"{nu}, counted from 0) has g_{k}(q0) = {g[i, k]:.3e}"
            )
        if h_bad[i]:
            k = int(np.argmax(np.abs(hidden[i])))
            return i, (
                f"{name}: inconsistent initial data, hidden constraint |G(q0)^T M^-1 p0| = {abs(hidden[i, k]):.3e} "
                f"(expected 0): constraint {k} (of {nu}, counted from 0) has (G^T M^-1 p0)_{k} = {hidden[i, k]:.3e}"
            )
        return i, f"{name}: G^T M^-1 G is singular at q0 (condition {np.linalg.cond(A[i]):.3e})"
    return None

"""Simplified-Newton ("blended") iteration for the nonlinear system of one HBVM(k, s) step (docs/method.md 3).

Unknowns gamma = (gamma_0..gamma_{s-1}) in R^{s x m} and lam in R^nu; with
Q = q0 + h Ihat gamma, psi_j, rho_j as in docs/method.md 3 and v0 = M^{-1} p0, the
step solves

    F1(gamma, lam) = gamma - e_0 (x) v0 + h X M^{-1} (psi + rho lam) = 0          (B1)
    F2(gamma)      = sum_j rho_j^T gamma_j = 0

-- exactly the fixed point of the sweep (A lam = b is F2 = 0 at the updated
gamma), so both iterations converge to the same solution. Since
W^T Ihat = X (k >= s), d psi_j / d gamma_l = h X[j, l] Hess U at the stages.
Freezing the second derivatives at q0 and keeping everything else current
gives the Newton matrix at the iterate (gamma, rho = rho(gamma))

    J = [[ A11 = I + h^2 X^2 (x) M^{-1} K0,   h X M^{-1} rho ],                 (B2)
         [ C_l = rho_l^T + h sum_j X[j, l] (Hg gamma_j)^T,   0 ]]

with K0 = d/dq [grad U + G lam0](q0), (Hg v)[c, i] = sum_a d G[c, i]/d q_a (q0) v_a
(the Hessians of g_i applied to v) and lam0 the previous step's multiplier (on
the first step the exact lambda(q0, p0) of docs/method.md 1 where the problem has
d2g, else 0: ``initial_multiplier``). K0 and Hg come from central differences
of the problem's own grad_U and G at q0 +- delta e_a (delta = eps^(1/3)
max(1, |q0_a|); 2m extra evaluation points per step), so the problem supplies
no Hessians. The iteration

    J (dgamma, dlam) = -(F1, F2),   gamma += dgamma,   lam += dlam

is iterated by the fixed point's own loop (fixed_point.fixed_point, the same
stopping rule on max|dgamma|): ``newton_map`` is the map gamma -> gamma +
dgamma. The frozen block A11 is factorised once per step; the coupling
blocks, which cost no extra evaluations (rho is in the residual), are
refreshed every iteration -- freezing them too (a first version) made the
iteration slower than the fixed point at large h, because the constraint
geometry (G at the stages) turns by O(h) over a step. The compiled kernel
solves (B2) by the Schur complement of A11 (nu + 1 solves with its LU per
iteration); this module by a dense LU of J. Measured (benchmarks/README.md):
fewer iterations than the fixed point at h = 0.1, and convergence at step
sizes where the fixed point fails. This is a plain simplified Newton rather
than the authors' eigenvalue-based blending of X (which reduces A11 to
m-sized systems); for s m + nu <= ~50 the direct solve costs less than the
function evaluations.
"""

from __future__ import annotations

import numpy as np

from .errors import ConvergenceError

CBRT_EPS = float(np.finfo(float).eps) ** (1.0 / 3.0)


def initial_multiplier(problem) -> np.ndarray:
    """lam0 of the first step: lambda(q0, p0) (docs/method.md 1) when the problem has d2g, else zeros; by numpy's
    callbacks (one point: no compiled reference module for it)."""
    if problem.nu == 0 or problem.d2g is None:
        return np.zeros(problem.nu)
    return problem.multiplier(problem.q0[None, :], problem.p0[None, :], compiled=False)[0]


def hessians(stepper, q0: np.ndarray, lam: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """K0 = d/dq [grad U + G lam](q0) (m, m) and Hg[c, a, i] = d G[c, i] / d q_a (q0), by central differences."""
    pb = stepper.problem
    m = pb.m
    delta = CBRT_EPS * np.maximum(1.0, np.abs(q0))
    Qfd = np.repeat(q0[None, :], 2 * m, axis=0)
    Qfd[0::2][np.arange(m), np.arange(m)] += delta
    Qfd[1::2][np.arange(m), np.arange(m)] -= delta
    f = pb.grad_U(Qfd)
    Hg = None
    if pb.nu:
        Gfd = pb.G(Qfd)
        f = f + Gfd @ lam
        Hg = np.moveaxis((Gfd[0::2] - Gfd[1::2]) / (2.0 * delta[:, None, None]), 0, 1)  # (m, m, nu): [c, a, i]
    K0 = ((f[0::2] - f[1::2]) / (2.0 * delta[:, None])).T  # K0[c, a] = d f_c / d q_a
    return K0, Hg


def newton_matrix(stepper, h: float, K0: np.ndarray, Hg, gamma: np.ndarray, rho) -> np.ndarray:
    """The matrix J of (B2) at the iterate (gamma, rho) with the Hessians K0, Hg frozen at q0."""
    pb, tab = stepper.problem, stepper.tab
    m, nu, s = pb.m, pb.nu, tab.s
    X = tab.X
    J = np.eye(s * m + nu)
    J[: s * m, : s * m] += h * h * np.kron(X @ X, pb.minv(K0))
    if nu:
        J[: s * m, s * m :] = h * np.einsum("jl,lmn->jmn", X, pb.minv_rows(rho)).reshape(s * m, nu)
        HG = np.einsum("can,ja->jcn", Hg, gamma)  # Hess g_n gamma_j, (s, m, nu)
        row = rho + h * np.einsum("jl,jcn->lcn", X, HG)  # d F2 / d gamma_l = rho_l^T + h sum_j X[j, l] (Hg gamma_j)^T
        J[s * m :, : s * m] = np.moveaxis(row, 2, 0).reshape(nu, s * m)
        J[s * m :, s * m :] = 0.0
    return J


def residual(stepper, q0, Mp0, h, gamma, lam):
    """(F1, F2) of (B1) flattened, and the stage data (psi_0, rho_0, Q, rho) at gamma."""
    pb, tab = stepper.problem, stepper.tab
    Q = q0 + h * (tab.Ihat @ gamma)
    psi = tab.W.T @ pb.grad_U(Q)
    force = psi
    rho = None
    if pb.nu:
        rho = np.einsum("ij,imn->jmn", tab.W, pb.G(Q))
        force = psi + rho @ lam
    F1 = gamma + h * (tab.X @ pb.minv_rows(force[:, :, None])[:, :, 0])
    F1[0] -= Mp0
    if not pb.nu:
        return F1.ravel(), (psi[0], None, Q, None)
    F2 = np.einsum("jmn,jm->n", rho, gamma)
    return np.concatenate([F1.ravel(), F2]), (psi[0], rho[0], Q, rho)


def newton_map(stepper, q0, Mp0, h, n=0, t=0.0):
    """The iteration as the map gamma -> (gamma + dgamma, (lam, psi_0, rho_0, Q)) that ``fixed_point.fixed_point``
    iterates (the fixed point's stopping rule on max|dgamma|): each call solves J (dgamma, dlam) = -(F1, F2) at
    (gamma, lam) and carries lam + dlam to the next, lam starting from the stepper's ``blended_lam``. Returns
    (the map, None: no terms for the rule's scale)."""
    # here: this module is imported with every compiled runner (``initial_multiplier``), which needs no scipy.linalg
    from scipy.linalg import lu_factor, lu_solve

    pb = stepper.problem
    s, m = stepper.tab.s, pb.m
    lam = initial_multiplier(pb) if stepper.blended_lam is None else stepper.blended_lam
    K0, Hg = hessians(stepper, q0, lam)
    it = 0

    def newton(gamma):
        nonlocal lam, it
        it += 1
        F, (psi0, rho0, Q, rho) = residual(stepper, q0, Mp0, h, gamma, lam)
        J = newton_matrix(stepper, h, K0, Hg, gamma, rho)
        if not np.all(np.isfinite(J)):
            raise ConvergenceError(n, t, float("nan"), it, "non-finite increment (diverged)")
        lu = lu_factor(J, check_finite=False)
        if np.any(np.diag(lu[0]) == 0.0):
            raise np.linalg.LinAlgError("Singular matrix")
        delta = -lu_solve(lu, F, check_finite=False)
        lam = lam + delta[s * m :]
        return gamma + delta[: s * m].reshape(s, m), (lam, psi0, rho0, Q)

    return newton, None

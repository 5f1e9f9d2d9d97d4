"""The fixed-point sweep of ``hbvm.SparseSweep`` fused into one compiled (numba) function per sweep.

After the problem's vectorised callbacks (grad U and G's values at the k stage points, numpy, called from
Python), one call of ``fused_sweep`` does the rest of the sweep (docs/method.md 3) in loops over the nonzeros:

    psi = W^T grad U(Q),  rho = W^T G(Q),  y = e_0 D p0 - h X D psi,   b = sum_j rho_j^T y_j,
    A = h sum_{j,l} X[j, l] rho_j^T D rho_l  (over the pattern of G^T D G, ``normal``),  A lam = b,
    gamma = y - h X D rho lam

with A tridiagonal in the factorisation's order (a chain: ``factor.Factorisation`` form "banded", bands (1, 1))
solved as LAPACK's gtsv does (Gaussian elimination with partial pivoting). Its loops run over sizes read at run
time: one compile (``cache=True``) serves every chain of every size and every HBVM(k, s). Other patterns, or
without numba, or with ``HBVM_SPARSE_SWEEP=numpy``, the numpy sweep (``SparseSweep.sweep``) runs.
"""

from __future__ import annotations

import os

import numpy as np

from ..errors import ConfigError

Array = np.ndarray
#: the environment switch of the sparse sweep: auto (compiled where it applies and numba imports), numpy, compiled
SWITCH = "HBVM_SPARSE_SWEEP"
CHOICES = ("auto", "numpy", "compiled")


def gtsv(dl: Array, d: Array, du: Array, b: Array) -> int:
    """Solve the tridiagonal system (sub dl, diagonal d, super du) in place into b by LAPACK dgtsv's elimination
    (partial pivoting; dl holds the second superdiagonal of U after a row swap), U's diagonal kept as reciprocals
    (one division a row); 0, or the 1-based index of a zero pivot."""
    n = d.size
    for i in range(n - 1):
        if abs(d[i]) >= abs(dl[i]):
            if d[i] == 0.0:
                return i + 1
            r = 1.0 / d[i]
            fact = dl[i] * r
            d[i] = r
            d[i + 1] -= fact * du[i]
            b[i + 1] -= fact * b[i]
            dl[i] = 0.0
        else:
            r = 1.0 / dl[i]
            fact = d[i] * r
            d[i] = r
            temp = d[i + 1]
            d[i + 1] = du[i] - fact * temp
            if i < n - 2:
                dl[i] = du[i + 1]
                du[i + 1] = -fact * dl[i]
            else:
                dl[i] = 0.0
            du[i] = temp
            temp = b[i]
            b[i] = b[i + 1]
            b[i + 1] = temp - fact * b[i + 1]
    if d[n - 1] == 0.0:
        return n
    b[n - 1] *= 1.0 / d[n - 1]
    if n > 1:
        b[n - 2] = (b[n - 2] - du[n - 2] * b[n - 1]) * d[n - 2]
    for i in range(n - 3, -1, -1):
        b[i] = (b[i] - du[i] * b[i + 1] - dl[i] * b[i + 2]) * d[i]
    return 0


def _fused_sweep(gU, V, W, X, Ihat, dinv, dinv_nz, rows, cols, e1, e2, at_b, at_diag, at_pair, inv, q0, Mp0, h, nu):
    """The sweep after the callbacks: gU (k, m) = grad U(Q), V (k, nnz) = G's values at Q; returns (gamma_new
    (s, m), lam (nu,), psi_0 (m,), rho_0 (nnz,), the largest term summed into gamma, gtsv's info, the next sweep's
    stage points q0 + h Ihat gamma_new (k, m)). Where each term
    lands: ``at_b[e]`` in b (in the order ``inv``), ``at_diag[e]`` (the pair (e, e)) and ``at_pair[p]`` (the pair
    (e1[p], e2[p])) in the flat (3, nu) band storage of A (rows: super, diagonal, sub)."""
    k, m = gU.shape
    s, nnz, npair = X.shape[0], rows.size, e1.size
    psi = np.zeros((s, m))
    rho = np.zeros((s, nnz))
    for i in range(k):
        for j in range(s):
            w = W[i, j]
            for a in range(m):
                psi[j, a] += w * gU[i, a]
            for e in range(nnz):
                rho[j, e] += w * V[i, e]
    # y = e_0 M^-1 p0 - h X (M^-1 psi), hXMrho = X (rho h M^-1)
    XDpsi = np.zeros((s, m))
    hXMrho = np.zeros((s, nnz))
    for j in range(s):
        for l in range(s):
            x = X[j, l]
            for a in range(m):
                XDpsi[j, a] += x * (psi[l, a] * dinv[a])
            for e in range(nnz):
                hXMrho[j, e] += x * (rho[l, e] * (h * dinv_nz[e]))
    size = 0.0
    y = np.empty((s, m))
    for j in range(s):
        for a in range(m):
            y[j, a] = -h * XDpsi[j, a]
            size = max(size, abs(y[j, a]))
    for a in range(m):
        y[0, a] += Mp0[a]
    # b = sum_j rho_j^T y_j and A's terms: the pairs (e, e), then (e1, e2) of one row
    tb = np.zeros(nnz)
    ta = np.zeros(nnz)
    tp = np.zeros(npair)
    for j in range(s):
        for e in range(nnz):
            tb[e] += rho[j, e] * y[j, rows[e]]
            ta[e] += rho[j, e] * hXMrho[j, e]
        for p in range(npair):
            tp[p] += rho[j, e1[p]] * hXMrho[j, e2[p]]
    ab = np.zeros(3 * nu)
    bp = np.zeros(nu)
    for e in range(nnz):
        bp[at_b[e]] += tb[e]
        ab[at_diag[e]] += ta[e]
    for p in range(npair):
        ab[at_pair[p]] += tp[p]
    info = _solve_tridiagonal(ab[2 * nu : 3 * nu - 1], ab[nu : 2 * nu], ab[1:nu], bp)  # views: ab is scratch
    lam = np.empty(nu)
    for c in range(nu):
        lam[c] = bp[inv[c]]
    # gamma = y - h X M^-1 rho lam, and the size of the terms |h X M^-1 rho lam| summed before they cancel
    gamma = y
    terms = np.zeros((s, m))
    for j in range(s):
        for e in range(nnz):
            w = hXMrho[j, e] * lam[cols[e]]
            gamma[j, rows[e]] -= w
            terms[j, rows[e]] += abs(w)
    for j in range(s):
        for a in range(m):
            size = max(size, terms[j, a])
    Q = np.zeros((k, m))
    for i in range(k):
        for j in range(s):
            x = Ihat[i, j]
            for a in range(m):
                Q[i, a] += x * gamma[j, a]
        for a in range(m):
            Q[i, a] = q0[a] + h * Q[i, a]
    return gamma, lam, psi[0].copy(), rho[0].copy(), size, info, Q


_COMPILED = None
#: the tridiagonal solve ``_fused_sweep`` calls: ``gtsv``, its compiled twin once ``fused_sweep`` has compiled
_solve_tridiagonal = gtsv


def choice() -> str:
    """The switch ``HBVM_SPARSE_SWEEP`` (auto when unset); ConfigError naming it otherwise."""
    value = os.environ.get(SWITCH, "auto").strip().lower() or "auto"
    if value not in CHOICES:
        raise ConfigError(f"{SWITCH} = {value!r}: expected one of {', '.join(CHOICES)}")
    return value


def fused_sweep():
    """``_fused_sweep`` compiled by numba (once, cached on disk); None without numba."""
    global _COMPILED, _solve_tridiagonal
    if _COMPILED is None:
        try:
            import numba
        except ImportError:
            return None
        _solve_tridiagonal = numba.njit(cache=True, nogil=True)(gtsv)
        _COMPILED = numba.njit(cache=True, nogil=True)(_fused_sweep)
    return _COMPILED


def applies(factor) -> bool:
    """Whether the fused sweep solves this factorisation's systems: a tridiagonal band (gtsv), nu >= 2."""
    return factor.form == "banded" and tuple(factor.bands) == (1, 1) and factor.n > 1


class FusedSweep:
    """The arrays of one ``SparseSweep`` the fused function reads, laid out once (contiguous, writable, intp:
    one signature); ``fn`` the function (``fused_sweep()``'s compiled one unless given)."""

    def __init__(self, sweep, fn=None) -> None:
        S, N, F, tab = sweep.structure, sweep.normal, sweep.factor, sweep.tab
        nu = S.nu
        self.fn = fused_sweep() if fn is None else fn
        self.W, self.X, self.Ihat = np.array(tab.W, float), np.array(tab.X, float), np.array(tab.Ihat, float)
        self.dinv, self.dinv_nz = np.array(sweep.dinv, float), np.array(sweep.dinv_nz, float)
        self.rows, self.cols = np.array(S.rows, np.intp), np.array(S.cols, np.intp)
        self.e1, self.e2 = np.array(N.e1, np.intp), np.array(N.e2, np.intp)
        self.inv = np.array(F.inv, np.intp)
        at = np.asarray(F.ab_index, np.intp)[N.target]  # A's terms -> the flat band storage (factor.Factorisation)
        self.at_b, self.at_diag, self.at_pair = self.inv[S.cols], at[: S.nnz].copy(), at[S.nnz :].copy()
        self.nu = int(nu)
        self.layout = (self.W, self.X, self.Ihat, self.dinv, self.dinv_nz, self.rows, self.cols, self.e1, self.e2,
                       self.at_b, self.at_diag, self.at_pair, self.inv)  # fmt: skip

    def __call__(self, gU: Array, V: Array, q0: Array, Mp0: Array, h: float):
        """(gamma_new, lam, psi_0, rho_0, the largest term, the stage points of gamma_new: the next sweep's)."""
        gU, V, q0, Mp0 = (np.ascontiguousarray(a, float) for a in (gU, V, q0, Mp0))
        gamma, lam, psi0, rho0, size, info, Q = self.fn(gU, V, *self.layout, q0, Mp0, float(h), self.nu)
        if info != 0:
            raise np.linalg.LinAlgError(f"singular matrix (gtsv info {info})")
        return gamma, lam, psi0, rho0, size, Q

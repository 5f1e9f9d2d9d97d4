"""Error metrics of a trajectory and observed rates (docs/method.md section 5).

e_s      = max over sample times of ||y_n - y_ref(t_n)||   (y = (q, p))
e_lambda = max over sample step times of ||lam_n - lambda_ref(t_n)||
e_H      = max_n |H(y_n) - H(y_0)|
e_g      = max_n ||g(q_n)||_inf = max_i e_g,i,   e_g,i = max_n |g_i(q_n)|   (``constraint_errors``)
e_hc     = max_n ||G(q_n)^T M^{-1} p_n||   (norm: hc_norm)
rate     = log(e_prev / e) / log(h_prev / h)
order    = the least-squares slope of log e against log h over the asymptotic range (``fitted_order``)

``ErrorConvention`` chooses the reference (exact | reference | self), the norm
(1 | 2 | inf) and the sampling (all | periods | a time spacing); each published
convention is one configuration (``PUBLISHED``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from .errors import ConfigError
from .references import reference_solution, resolved_kind
from .trajectory import Trajectory

REFERENCES = ("exact", "reference", "self")
NORMS = (1, 2, "inf")
SAMPLES = ("all", "periods")
KEYS = ("reference", "norm", "sample", "lambda_sample", "hc_norm", "reference_kind", "reference_rtol")
#: the tolerance (rtol = atol) of the ODE reference by default
REFERENCE_RTOL = 1e-13


def _check_norm(key: str, value):
    if value in ("inf", math.inf) or value == float("inf"):
        return "inf"
    if isinstance(value, bool) or value not in (1, 2):
        raise ConfigError(f"errors.{key} = {value!r}: expected one of 1, 2, inf")
    return int(value)


def _check_rtol(value) -> float:
    """A reference tolerance: a number above the tighter one its accuracy is estimated against, at most 1e-3."""
    from .references import TIGHT_RTOL

    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and TIGHT_RTOL < value <= 1e-3
    if not ok:
        raise ConfigError(f"errors.reference_rtol = {value!r}: expected a tolerance above {TIGHT_RTOL:g}, at most 1e-3")
    return float(value)


def _check_sample(key: str, value):
    if value is None or value in SAMPLES:
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value > 0):
        raise ConfigError(f"errors.{key} = {value!r}: expected all, periods or a time spacing > 0")
    return float(value)


@dataclass(frozen=True)
class ErrorConvention:
    """How e_s, e_lambda and e_hc are measured; see the module docstring."""

    reference: str = "exact"
    norm: int | str = "inf"
    sample: str | float = "all"
    lambda_sample: str | float | None = None
    hc_norm: int | str | None = None
    reference_kind: str = "auto"
    #: the ODE reference's DOP853 tolerance (rtol = atol); None: REFERENCE_RTOL
    reference_rtol: float | None = None

    def __post_init__(self) -> None:
        if self.reference not in REFERENCES:
            raise ConfigError(f"errors.reference = {self.reference!r}: expected one of {', '.join(REFERENCES)}")
        object.__setattr__(self, "norm", _check_norm("norm", self.norm))
        object.__setattr__(self, "sample", _check_sample("sample", self.sample))
        object.__setattr__(self, "lambda_sample", _check_sample("lambda_sample", self.lambda_sample))
        if self.hc_norm is not None:
            object.__setattr__(self, "hc_norm", _check_norm("hc_norm", self.hc_norm))
        if self.reference_rtol is not None:
            object.__setattr__(self, "reference_rtol", _check_rtol(self.reference_rtol))

    @property
    def rtol(self) -> float:
        """The ODE reference's tolerance: ``reference_rtol``, else REFERENCE_RTOL."""
        return REFERENCE_RTOL if self.reference_rtol is None else self.reference_rtol

    @classmethod
    def from_config(cls, cfg: dict | None) -> ErrorConvention:
        cfg = dict(cfg or {})
        for key in cfg:
            if key not in KEYS:
                raise ConfigError(f"errors.{key}: unknown key (expected one of {', '.join(KEYS)})")
        return cls(**cfg)

    def as_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}

    def check_problem(self, problem, name: str | None = None) -> None:
        """Fail early, naming the missing callback, where the convention cannot apply to the problem
        (``name``: the problem as the config gives it, default ``problem.name``)."""
        name = problem.name if name is None else name
        if self.reference == "exact" and problem.exact is None:
            raise ConfigError(
                f"errors.reference = 'exact': problem {name!r} has no closed-form solution (no exact=); "
                "use reference: reference or self"
            )
        ode = resolved_kind(problem, self.reference_kind) == "ode"
        if self.reference == "reference" and ode and problem.nu and problem.d2g is None:
            raise ConfigError(
                f"errors.reference = 'reference': problem {name!r} has no d2g "
                "(needed for lambda(q, p) and the index-reduced reference ODE)"
            )
        for key in ("sample", "lambda_sample"):
            if getattr(self, key) == "periods" and problem.period is None:
                raise ConfigError(f"errors.{key} = 'periods': problem {name!r} has no period (no period=)")


def vector_norm(x: np.ndarray, norm) -> np.ndarray:
    """Row-wise 1-, 2- or inf-norm of x with shape (n, d)."""
    if x.shape[1] == 0:
        return np.zeros(x.shape[0])
    if norm == "inf":
        return np.max(np.abs(x), axis=1)
    return np.linalg.norm(x, ord=norm, axis=1)


def sample_times(sample, grid: np.ndarray, t_end: float, period: float | None) -> np.ndarray:
    """The sample times on ``grid``: all of it, whole periods j T (j >= 1), or multiples of a spacing."""
    if sample == "all":
        return grid
    if sample == "periods":
        if period is None:
            raise ConfigError("errors.sample = 'periods': the problem has no period")
        j = np.arange(1, math.floor(t_end / period * (1 + 1e-12)) + 1)
        times = j * period
    else:
        j = np.arange(0, math.floor(t_end / sample * (1 + 1e-12)) + 1)
        times = j * sample
    last = grid[-1] if grid.size else -1.0
    return times[times <= last + 1e-9 * max(1.0, abs(last))]


def _indices(traj: Trajectory, grid: np.ndarray, times: np.ndarray, what: str) -> np.ndarray:
    try:
        if grid is traj.t:
            return traj.at(times)
        return traj.at_step(times)
    except ValueError as exc:
        raise ConfigError(f"errors: {what} {exc}; pick h or save_every so the sample times are saved") from None


def errors(traj: Trajectory, convention: ErrorConvention, partner: Trajectory | None = None) -> dict[str, float]:
    """e_s, e_lambda, e_H, e_g, e_hc of ``traj`` under ``convention``.

    ``partner`` is the same method's run with h/2 when convention.reference == "self".
    e_lambda is NaN for an unconstrained problem (nu = 0): there is no multiplier.
    """
    c = convention
    pb = traj.problem
    t_end = float(traj.attrs.get("t_end", traj.t[-1]))
    lam_sample = c.sample if c.lambda_sample is None else c.lambda_sample
    ts = sample_times(c.sample, traj.t, t_end, pb.period)
    tl = sample_times(lam_sample, traj.tstep, t_end, pb.period)
    i_s = _indices(traj, traj.t, ts, "sample")
    i_l = _indices(traj, traj.tstep, tl, "lambda sample")
    y, lam = traj.y()[i_s], traj.lam[i_l]
    if c.reference == "self":
        if partner is None:
            raise ConfigError("errors.reference = 'self' needs the h/2 run as partner")
        y_ref = partner.y()[_indices(partner, partner.t, ts, "sample (h/2 run)")]
        lam_ref = partner.lam[_indices(partner, partner.tstep, tl, "lambda sample (h/2 run)")]
    else:
        reference_kind = c.reference_kind if c.reference == "reference" else "exact"
        # one reference for both samples (the reference ODE: one solve on [0, max time])
        times = np.concatenate([ts, tl])
        q_all, p_all, lam_all = reference_solution(pb, times, reference_kind=reference_kind, rtol=c.rtol)
        q_ref, p_ref, lam_ref = q_all[: ts.size], p_all[: ts.size], lam_all[ts.size :]
        y_ref = np.concatenate([q_ref, p_ref], axis=1)
    e_lambda = float(np.max(vector_norm(lam - lam_ref, c.norm), initial=0.0)) if pb.nu else float("nan")
    hc_norm = c.norm if c.hc_norm is None else c.hc_norm
    return {
        "e_s": float(np.max(vector_norm(y - y_ref, c.norm), initial=0.0)),
        "e_lambda": e_lambda,
        "e_H": float(np.max(traj.energy_error(), initial=0.0)),
        "e_g": float(np.max(constraint_errors(traj), initial=0.0)),
        "e_hc": float(np.max(vector_norm(traj.hidden(), hc_norm), initial=0.0)),
    }


def constraint_errors(traj: Trajectory) -> np.ndarray:
    """e_g,i = max_n |g_i(q_n)| for each constraint i (shape (nu,)); e_g is their maximum."""
    g = traj.g()
    return np.max(np.abs(g), axis=0, initial=0.0) if g.size else np.zeros(traj.problem.nu)


def rates(h, e) -> np.ndarray:
    """Observed orders log(e_{i-1}/e_i) / log(h_{i-1}/h_i); NaN in the first row and where e is missing."""
    h = np.asarray(h, dtype=float)
    e = np.asarray(e, dtype=float)
    out = np.full(e.shape, np.nan)
    with np.errstate(all="ignore"):
        r = np.log(e[:-1] / e[1:]) / np.log(h[:-1] / h[1:])
    ok = np.isfinite(r) & (e[:-1] > 0) & (e[1:] > 0)
    out[1:][ok] = r[ok]
    return out


def reference_accuracy(
    problem, t_end: float, norm, reference: str = "reference", reference_kind: str = "auto", rtol: float | None = None
):
    """The accuracy of a numerical reference (the ODE by DOP853 at ``rtol``, default REFERENCE_RTOL = 1e-13): the
    largest difference, in the
    vector norm ``norm`` of (q, p), between it and the solution at ``references.TIGHT_RTOL`` over
    ``references.ACCURACY_POINTS`` times of [0, t_end]; None unless ``reference`` is "reference" and
    ``reference_kind`` resolves to the ODE (a closed form and the HBVM reference are accurate to round-off)."""
    from .references import ACCURACY_POINTS, TIGHT_RTOL

    if reference != "reference" or resolved_kind(problem, reference_kind) != "ode":
        return None
    t = np.linspace(0.0, float(t_end), ACCURACY_POINTS)
    q, p, _ = reference_solution(problem, t, reference_kind, rtol=REFERENCE_RTOL if rtol is None else rtol)
    q2, p2, _ = reference_solution(problem, t, reference_kind, rtol=TIGHT_RTOL)
    return float(np.max(vector_norm(np.concatenate([q - q2, p - p2], axis=1), norm)))


#: an e_s at most this many times the numerical reference's accuracy (``reference_accuracy``) measures the reference
REFERENCE_MARGIN = 10.0

#: an error at most this many machine epsilons times its quantity's scale is round-off (see ``at_roundoff``)
ROUNDOFF_ULPS = 1000.0


def roundoff_floors(scale) -> np.ndarray:
    """The round-off floor of an error of a quantity of size ``scale`` (an array): ROUNDOFF_ULPS eps scale."""
    return ROUNDOFF_ULPS * float(np.finfo(float).eps) * np.asarray(scale, dtype=float)


def roundoff_floor(scale: float = 1.0) -> float:
    """``roundoff_floors`` of one scale, as a float."""
    return float(roundoff_floors(float(scale)))


def at_roundoff(e_prev: float, e: float, scale: float = 1.0) -> bool:
    """True when both errors of a rate pair lie at the round-off floor: <= ROUNDOFF_ULPS eps ``scale``.

    ``scale`` is the size of the measured quantity (``roundoff_scales``); the observed
    "rate" between two such errors is noise, not an order, and is not reported.
    The floor is 1000 eps (not 100): round-off accumulates over the thousands of
    steps of a run (the conical pendulum's e_lambda sits at 1e-14 .. 6e-14).
    """
    floor = roundoff_floor(scale)
    vals = (float(e_prev), float(e))
    return all(math.isfinite(v) and v <= floor for v in vals)


#: rates that differ by at most this (max - min) lie in one asymptotic range (``fitted_order``)
RATE_TOLERANCE = 0.2
#: the fewest step sizes a fitted order is computed from (two rates that agree)
FIT_POINTS = 3


def fitted_order(h, e, floor=0.0, tolerance: float = RATE_TOLERANCE) -> tuple[float, int, int]:
    """(p, first, last): the least-squares order over the asymptotic range of e(h) (docs/method.md section 5).

    The range is the longest run of consecutive rows first..last (at least FIT_POINTS) whose errors are
    finite and above the round-off floor ``floor`` (a number, or one per row) and whose neighbouring rates
    (``rates``) differ by at most ``tolerance`` (max - min over the run); of two such runs of the same length,
    the finer one (the larger indices). p is the slope of the least-squares line of log e against log h over
    it. (nan, -1, -1) where no run qualifies. ``fitted_orders`` is the same over many blocks of rows at once.
    """
    p, first, last = fitted_orders(h, e, floor, [0], tolerance)
    return (float(p[0]), int(first[0]), int(last[0])) if len(first) else (math.nan, -1, -1)


#: rows whose blocks ``fitted_orders`` takes at once (its tables: some 16 * log2(block rows) bytes a row)
FIT_CHUNK_ROWS = 1 << 16


def fitted_orders(h, e, floor=0.0, starts=(0,), tolerance: float = RATE_TOLERANCE):
    """(p, first, last), arrays with one entry per block: ``fitted_order`` of each block of consecutive rows (block
    j: the rows from ``starts[j]`` (``starts[0]`` = 0) to the next start; ``first``, ``last`` indices into all
    rows, -1 where no run qualifies), the blocks of about FIT_CHUNK_ROWS rows at a time."""
    h = np.asarray(h, dtype=float)
    e = np.asarray(e, dtype=float)
    floor = np.broadcast_to(np.asarray(floor, dtype=float), e.shape)
    starts = np.asarray(starts, dtype=np.int64) if e.size else np.zeros(0, dtype=np.int64)
    ends = np.r_[starts[1:], e.size]
    out = [np.full(starts.size, np.nan), np.full(starts.size, -1), np.full(starts.size, -1)]
    j = 0
    while j < starts.size:  # blocks j..k-1: the most that fit in FIT_CHUNK_ROWS rows, at least one
        k = max(j + 1, int(np.searchsorted(ends, starts[j] + FIT_CHUNK_ROWS, side="right")))
        a, b = starts[j], ends[k - 1]
        p, first, last = _fitted_orders(h[a:b], e[a:b], floor[a:b], starts[j:k] - a, tolerance)
        out[0][j:k] = p
        out[1][j:k] = np.where(first >= 0, first + a, -1)
        out[2][j:k] = np.where(last >= 0, last + a, -1)
        j = k
    return tuple(out)


def _fitted_orders(h: np.ndarray, e: np.ndarray, floor: np.ndarray, starts: np.ndarray, tolerance: float):
    """``fitted_orders`` of blocks in one go: per row, the last row of the longest run it starts, by a binary search
    over range maxima and minima of the rates (sparse tables)."""
    n = e.size
    with np.errstate(invalid="ignore"):
        ok = np.isfinite(e) & (e > floor) & (h > 0)
    r = rates(h, np.where(ok, e, np.nan))  # r[i]: the rate of rows i-1, i (across a block start: not used)
    usable = ok & np.isfinite(r)  # row i continues a run that includes row i-1
    usable[starts] = False
    idx = np.arange(n)
    # a run from row i ends before the next row that does not continue it
    stop = np.minimum.accumulate(np.where(usable, n, idx)[::-1])[::-1]  # the first row >= j that is not usable
    end = np.r_[stop[1:], n] - 1  # the last row a run from row i may reach
    rz = np.where(usable, r, 0.0)
    levels = max(1, int((end - idx).max(initial=0)).bit_length())  # 2^(levels - 1) >= the longest run's rates
    hi_t, lo_t = [rz], [rz]  # level k: max, min of r[j .. j + 2^k - 1]
    for k in range(1, levels):
        w = 1 << (k - 1)
        hi_t.append(np.r_[np.maximum(hi_t[-1][:-w], hi_t[-1][w:]), np.zeros(w)])
        lo_t.append(np.r_[np.minimum(lo_t[-1][:-w], lo_t[-1][w:]), np.zeros(w)])
    hi_t, lo_t = np.stack(hi_t), np.stack(lo_t)

    def spread(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """max - min of r[a .. b] (a <= b)."""
        k = np.frexp((b - a + 1).astype(float))[1] - 1  # floor(log2(length))
        b2 = b - (1 << k) + 1
        return np.maximum(hi_t[k, a], hi_t[k, b2]) - np.minimum(lo_t[k, a], lo_t[k, b2])

    first = np.flatnonzero(ok)
    lo, hi = first.copy(), end[first]  # the run's last row lies in [lo, hi]: lo always qualifies
    while True:
        active = np.flatnonzero(lo < hi)
        if not active.size:
            break
        mid = (lo[active] + hi[active] + 1) // 2
        good = spread(first[active] + 1, mid) <= tolerance
        lo[active] = np.where(good, mid, lo[active])
        hi[active] = np.where(good, hi[active], mid - 1)
    length = lo - first + 1
    block = np.searchsorted(starts, first, side="right") - 1
    # per block: the longest run, of equal ones the finer (the larger first row)
    key = np.where(length >= FIT_POINTS, length * (n + 1) + first, -1)
    best = np.full(starts.size, -1, dtype=np.int64)
    np.maximum.at(best, block, key)
    found = best >= 0
    f = np.where(found, best % (n + 1), -1)
    last = np.where(found, f + best // (n + 1) - 1, -1)
    p = np.full(starts.size, np.nan)
    for j in np.flatnonzero(found).tolist():
        sl = slice(int(f[j]), int(last[j]) + 1)
        p[j] = np.polyfit(np.log(h[sl]), np.log(e[sl]), 1)[0]
    return p, f, last


def roundoff_scales(traj: Trajectory) -> dict[str, float]:
    """The scale of each rated error of a run, for ``at_roundoff``: e_s: max(1, max |y_n|);
    e_lambda: max(1, max |lam_n|) (1 for an O(1) multiplier); e_hc: the e_s scale squared
    (G(q)^T M^-1 p is of the size |q| |p|)."""
    y = np.abs(traj.y())
    sy = max(1.0, float(np.max(y, initial=0.0)))
    lam = np.abs(traj.lam) if traj.lam is not None else np.zeros(0)
    return {"e_s": sy, "e_lambda": max(1.0, float(np.max(lam, initial=0.0))), "e_hc": sy * sy}


#: The paper's conventions (docs/method.md section 5).
PUBLISHED = {
    "table1": ErrorConvention(reference="exact", norm=1, sample="all"),
    "table2": ErrorConvention(reference="exact", norm="inf", sample="periods", lambda_sample="all"),
    "table3": ErrorConvention(reference="self", norm="inf", sample=0.1, hc_norm=1),
    "table4": ErrorConvention(reference="self", norm="inf", sample=0.1, hc_norm=1),
}

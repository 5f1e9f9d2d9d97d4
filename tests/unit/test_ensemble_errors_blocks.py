"""``hbvm_core.ensemble_runs.errors``: max |H - H0| and max |g| over each run's saved points, the runs taken in
blocks of a few points (``POINTS_PER_BLOCK``), against the conical pendulum's H = |p|^2 / 2 + gravity z and
g = |q|^2 - length^2 by hand, run by run; a run's points past its n_saved left out, a run with a non-finite saved
point NaN (its H there is NaN: the kernels stop such a run, ``status`` says why)."""

import numpy as np
import pytest

from hbvm_core import ensemble_runs
from hbvm_core.problems.family import family_of
from hbvm_core.problems.parametric import conical_pendulum

#: H and g of states of size <= 3, evaluated by two formulas of a few operations each: a few ulps
TOL = 1e-14


@pytest.mark.parametrize("block", [1, 7, 64, 1 << 15])
def test_errors_by_blocks_are_the_hand_maxima(monkeypatch, block):
    monkeypatch.setattr(ensemble_runs, "POINTS_PER_BLOCK", block)  # blocks of 1 run, of a few, of all
    rng = np.random.default_rng(3)
    R, S = 9, 5
    length, gravity = rng.uniform(0.5, 2.0, R), rng.uniform(0.5, 3.0, R)
    family = family_of(conical_pendulum(length=1.3, gravity=2.0))
    runs = ensemble_runs.Rows(family, family.broadcast({"length": length, "gravity": gravity}, R))
    q, p = rng.uniform(-1.5, 1.5, (R, S, 3)), rng.uniform(-1, 1, (R, S, 3))
    n_saved = np.array([5, 3, 1, 5, 0, 2, 5, 4, 5])
    q[np.arange(S)[None, :] >= n_saved[:, None]] = np.nan  # past n_saved: NaN, as the kernels leave them
    q[6, 2, 1] = np.inf  # a non-finite point of a run
    H_error, g_error = ensemble_runs.errors(runs, {"q": q, "p": p, "n_saved": n_saved}, 1)
    for r in range(R):
        points = list(range(n_saved[r]))
        if r == 6:
            assert np.isnan(H_error[r]) and np.isnan(g_error[r, 0])
            continue
        if not points:  # no point saved: -inf, the maximum over nothing (no run of a kernel has none)
            assert H_error[r] == -np.inf and g_error[r, 0] == -np.inf
            continue
        H = [0.5 * p[r, j] @ p[r, j] + gravity[r] * q[r, j, 2] for j in points]
        g = [abs(q[r, j] @ q[r, j] - length[r] ** 2) for j in points]
        assert abs(H_error[r] - max(abs(x - H[0]) for x in H)) <= TOL * 8, r
        assert abs(g_error[r, 0] - max(g)) <= TOL * 8, r

"""``hbvm_core.per_run.integrate_summary``: one run of a problem without a compiled loop (the chain) summarised as
an ensemble run is: the points of the save rule, max |H - H0| and max |g_i| over them, a failed step as a status.
Checked against the chain itself: unit masses, gravity and links, H = |p|^2 / 2 + sum_i y_i; numpy only."""

from __future__ import annotations

import numpy as np

from hbvm_core.kernels.rules import OK
from hbvm_core.methods import HBVM, RATTLE
from hbvm_core.per_run import integrate_summary
from hbvm_core.problems import chain

EPS = float(np.finfo(float).eps)


def test_a_run_keeps_the_points_of_the_save_rule_and_its_H_and_g_errors():
    n, h, N, every = 3, 0.01, 10, 3
    res, wall = integrate_summary(chain(links=n), HBVM(2, 2), h, N, every)
    assert res.runs == 1 and int(res.status[0]) == OK and int(res.steps[0]) == N and wall > 0
    # n = 0, 3, 6, 9 and the last, 10
    assert int(res.n_saved[0]) == 5 and np.allclose(res.t[0], h * np.array([0, 3, 6, 9, 10]), rtol=0, atol=1e-15)
    q, p = res.q[0], res.p[0]
    H = 0.5 * np.sum(p * p, axis=1) + np.sum(q[:, 1::2], axis=1)
    assert abs(float(res.H_error[0]) - np.max(np.abs(H - H[0]))) <= 10 * EPS * n * n  # ulps of |H| ~ n^2 / 2
    lengths = np.linalg.norm(np.diff(q.reshape(len(q), n, 2), axis=1, prepend=0.0), axis=2)
    g = lengths**2 - 1.0
    assert res.g_error.shape == (1, n)
    assert np.allclose(res.g_error[0], np.max(np.abs(g), axis=0), rtol=0, atol=10 * EPS * n)
    assert res.lam.shape == (1, n) and np.isfinite(res.lam).all() and res.backend == "numpy"


def test_a_failed_step_is_a_status_with_its_step_not_an_exception():
    # h = 1 on 20 links is far past the fixed-point iteration's reach (h = 0.1 already fails on 1000 links)
    res, _ = integrate_summary(chain(links=20), HBVM(2, 2), 1.0, 10, 1)
    assert int(res.status[0]) != OK and int(res.fail_step[0]) == 0 and int(res.steps[0]) == 0
    assert int(res.n_saved[0]) == 1 and np.isnan(res.lam).all()  # the initial point only


def test_rattle_keeps_the_rods_and_not_the_energy():
    n, steps = 8, 20
    res, _ = integrate_summary(chain(links=n), RATTLE(), 0.01, steps, 1)
    assert float(res.g_error.max()) <= 10 * EPS * n * steps  # projected onto g = 0: ulps of |q| ~ n per step
    assert float(res.H_error[0]) > 1e-9  # O(h^2), far above the round-off of |H| ~ n^2 / 2

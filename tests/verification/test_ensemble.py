"""The ensemble (``hbvm_core.integrate_ensemble``) against its oracle, the per-run compiled loop
(``hbvm_core.integrate(..., backend="numba")``), run by run: the same saved points, the same multiplier
of the last step, the same iterations; failures that stay in their own run; the summary (H_error,
g_error) at round-off on a conserving run; bad input as one-line errors."""

from __future__ import annotations

import numpy as np
import pytest

import hbvm_core as hc
from hbvm_core.errors import BackendError, ConfigError, ConvergenceError, ProblemError
from hbvm_core.kernels.rules import OK
from hbvm_core.methods import DOP853, RATTLE, PolynomialHBVM
from hbvm_core.problems.parametric import conical_pendulum, tethered_satellites

#: the unit round-off of float64
EPS = np.finfo(float).eps

METHODS = {
    "hbvm-fixed-point": hc.HBVM(2, 2),
    "hbvm-blended": hc.HBVM(2, 2, solver="blended"),
    "polynomial": PolynomialHBVM(3, 2),
    "rattle": RATTLE(),
}


def grid():
    """Two instances of the parametric conical pendulum (neither at the published defaults, which is the
    published problem with its own callbacks) and per-run h, N and sample_every."""
    problems = [conical_pendulum(length=1.5), conical_pendulum(length=2.0, gravity=1.3)]
    runs = [problems[0], problems[1], problems[0], problems[1]]
    h = np.array([0.05, 0.04, 0.1, 0.02])
    N = np.array([40, 25, 7, 60])
    every = np.array([3, 5, 1, 60])
    return runs, h, N, every


def per_run(pb, method, h, n, every):
    """The oracle: the per-run compiled loop with the same h, N and save rule."""
    return hc.integrate(pb, method, float(h), float(h) * int(n), save_every=int(every), backend="numba")


def assert_close(x, y, steps, what):
    """x equals y to eps times their scale times the steps: both are the same generated step, whose
    rounding may differ only through the compiled code's order (never asserted bit for bit)."""
    assert x.shape == y.shape, what
    scale = max(1.0, float(np.max(np.abs(y), initial=0.0)))
    assert np.max(np.abs(x - y), initial=0.0) <= 8 * EPS * scale * max(steps, 1), what


@pytest.mark.slow
@pytest.mark.parametrize("name", list(METHODS))
def test_against_per_run_loop(name):
    """Each run of a block of different params, h, N and save rules is its per-run compiled loop."""
    method = METHODS[name]
    runs, h, N, every = grid()
    result = hc.integrate_ensemble(runs, method, h, N, sample_every=every)
    # four runs, fewer than a lockstep block takes: the note says so, and why, in one line
    why = "fewer than 8 runs"  # every method here has a lockstep form
    assert result.backend == "numba" and "\n" not in result.backend_note
    assert result.backend_note.startswith("per-run block: 4 of 4 runs (")
    assert why in result.backend_note
    assert np.all(result.status == OK) and np.all(result.fail_step == -1)
    np.testing.assert_array_equal(result.steps, N)
    for r, pb in enumerate(runs):
        ref = per_run(pb, method, h[r], N[r], every[r])
        n = int(result.n_saved[r])
        assert n == ref.t.size, f"run {r}: saved points"
        assert np.all(np.isnan(result.q[r, n:])) and np.all(np.isnan(result.t[r, n:]))
        assert_close(result.t[r, :n], ref.t, N[r], f"run {r}: t")
        assert_close(result.q[r, :n], ref.q, N[r], f"run {r}: q")
        assert_close(result.p[r, :n], ref.p, N[r], f"run {r}: p")
        every_step = per_run(pb, method, h[r], N[r], 1)
        assert_close(result.lam[r], every_step.lam[-1], N[r], f"run {r}: lam of the last step")
        total = int(every_step.iterations.sum())
        # the stall test compares two round-off increments: a step may flip by one sweep, never more
        assert abs(int(result.iterations[r]) - total) <= int(N[r]), f"run {r}: iterations"
        assert abs(int(result.max_iterations[r]) - int(every_step.iterations.max())) <= 1


@pytest.mark.slow
def test_failures_stay_in_their_run():
    """A diverging run (a step far too large), a non-finite one (NaN q0) and runs of different lengths in
    one block: the failed runs record their status and step, the others are those of a block without them."""
    method = METHODS["hbvm-fixed-point"]
    runs, h, N, every = grid()
    good = hc.integrate_ensemble(runs, method, h, N, sample_every=every)
    q0 = np.stack([pb.q0 for pb in runs] + [runs[0].q0, runs[1].q0])
    q0[5] = np.nan
    block = hc.integrate_ensemble(
        runs + [runs[0], runs[1]], method, np.r_[h, 40.0, 0.05], np.r_[N, 30, 30], q0=q0,
        p0=np.stack([pb.p0 for pb in runs] + [runs[0].p0, runs[1].p0]), sample_every=np.r_[every, 1, 1],
    )  # fmt: skip
    assert np.all(block.status[:4] == OK)
    np.testing.assert_array_equal(block.n_saved[:4], good.n_saved)
    S = good.t.shape[1]
    for key in ("q", "p", "t", "lam"):
        a, b = getattr(block, key)[:4], getattr(good, key)
        if key != "lam":
            assert np.all(np.isnan(a[:, S:]))
            a = a[:, :S]
        assert np.array_equal(np.isnan(a), np.isnan(b)), key
        assert_close(np.nan_to_num(a), np.nan_to_num(b), N.max(), key)
    with pytest.raises(ConvergenceError) as err:
        per_run(runs[0], method, 40.0, 30, 1)
    assert block.status[4] != OK and block.fail_step[4] == err.value.step
    assert block.steps[4] == err.value.step and block.n_saved[4] == err.value.step + 1
    assert block.status[5] != OK and block.fail_step[5] == 0 and block.steps[5] == 0
    assert np.isnan(block.lam[4]).all() and np.isnan(block.lam[5]).all()
    assert block.n_saved[5] == 1 and np.all(np.isnan(block.q[5]))
    assert np.isnan(block.H_error[5]) and np.isfinite(block.H_error[:4]).all()
    t_last, q_last, _ = block.last_points()
    assert t_last[4] == block.t[4, err.value.step] and np.array_equal(
        q_last[:4, 0], good.q[np.arange(4), N // every + (N % every != 0), 0]
    )


@pytest.mark.slow
def test_summary_at_round_off():
    """H and g are conserved by HBVM(2,2) on the conical pendulum (U linear, g quadratic: degree <= 2k/s,
    docs/method.md 3), so the summary's H_error and g_error are round-off: eps times the scale times the steps."""
    runs, h, N, every = grid()
    result = hc.integrate_ensemble(runs, METHODS["hbvm-fixed-point"], h, N, sample_every=every, backend="auto")
    if result.backend == "numba":  # no GPU here: auto falls back and says so
        assert result.backend_note.startswith("backend auto: ran on numba")
    assert "4 x ok" in repr(result) and "\n" in repr(result)
    for r, pb in enumerate(runs):
        scale = max(1.0, abs(float(pb.hamiltonian(pb.q0[None], pb.p0[None])[0])), float(np.max(pb.q0**2)))
        assert 0.0 <= result.H_error[r] <= 4 * EPS * scale * N[r]
        assert result.g_error.shape == (4, 1) and 0.0 <= result.g_error[r, 0] <= 4 * EPS * scale * N[r]
    # the summary's own arithmetic: the same maxima from the saved points, by hand (H evaluated on other rows
    # at once: its vectorised sums may round differently, by an ulp of H)
    n = int(result.n_saved[0])
    H = runs[0].hamiltonian(result.q[0, :n], result.p[0, :n])
    assert abs(result.H_error[0] - np.max(np.abs(H - H[0]))) <= 4 * EPS * max(1.0, float(np.max(np.abs(H))))


@pytest.mark.slow
def test_mass_matrix_per_run():
    """Tethered satellites of different masses (M = diag(masses): a Cholesky factor per run) by HBVM(6,2),
    on one thread."""
    method = hc.HBVM(6, 2)
    runs = [tethered_satellites(masses=(1.0, 2.0, 1.5)), tethered_satellites(tether=1.2, masses=(0.5, 1.0, 1.0))]
    h, N = np.array([0.1, 0.05]), np.array([12, 20])
    result = hc.integrate_ensemble(runs, method, h, N, sample_every=4, threads=1)
    for r, pb in enumerate(runs):
        ref = per_run(pb, method, h[r], N[r], 4)
        n = int(result.n_saved[r])
        assert_close(result.q[r, :n], ref.q, N[r], f"run {r}: q")
        assert_close(result.p[r, :n], ref.p, N[r], f"run {r}: p")


# --------------------------------------------------------------------------- bad input (quick: no compile)
def test_method_without_compiled_loop():
    with pytest.raises(ConfigError, match="no compiled loop"):
        hc.integrate_ensemble(conical_pendulum(length=1.5), DOP853(1e-10), 0.1, 10)


def test_problems_of_different_structure():
    runs = [conical_pendulum(length=1.5), conical_pendulum(length=2.0), tethered_satellites(tether=1.2)]
    with pytest.raises(ProblemError, match=r"problems\[2\] \(tethered_satellites\) differs .* in its compiled"):
        hc.integrate_ensemble(runs, hc.HBVM(2, 2), 0.1, 10)


def test_structure_key_groups_the_runs():
    """Instances of one parametric factory share a key, the published problem (the defaults) included; another
    factory's do not."""
    from hbvm_core.ensemble import structure_key

    a, b, published = conical_pendulum(length=1.5), conical_pendulum(length=2.0, gravity=2.0), conical_pendulum()
    assert structure_key(a) == structure_key(b) and hash(structure_key(a)) == hash(structure_key(b))
    assert structure_key(published) == structure_key(a)
    assert structure_key(tethered_satellites()) != structure_key(a)


def test_mismatched_lengths():
    runs = [conical_pendulum(length=1.5), conical_pendulum(length=2.0)]
    with pytest.raises(ConfigError, match="problems has 2 runs, N has 3"):
        hc.integrate_ensemble(runs, hc.HBVM(2, 2), 0.1, [10, 20, 30])
    with pytest.raises(ConfigError, match="q0: rows of 2 entries"):
        hc.integrate_ensemble(runs, hc.HBVM(2, 2), 0.1, 10, q0=np.zeros((2, 2)))


def test_bad_values():
    pb = conical_pendulum(length=1.5)
    for kwargs, match in (
        ({"h": -0.1, "N": 3}, "h = -0.1"),
        ({"h": 0.1, "N": 2.5}, "N = 2.5"),
        ({"h": 0.1, "N": 3, "sample_every": 0}, "sample_every = 0"),
        ({"h": 0.1, "N": 3, "backend": "gpu"}, "backend = 'gpu'"),
        ({"h": 0.1, "N": 3, "threads": 0}, "threads = 0"),
    ):
        with pytest.raises(ConfigError, match=match):
            hc.integrate_ensemble(pb, hc.HBVM(2, 2), **kwargs)


def test_cuda_backend_missing():
    """backend "cuda" where numba-cuda finds no GPU: a one-line BackendError, before any loop is built (on a GPU,
    or under numba-cuda's simulator, tests/verification/test_gpu.py covers the GPU path)."""
    from hbvm_core.kernels.cuda import cuda_available

    if cuda_available():
        pytest.skip("a GPU (or numba-cuda's simulator) is present: tests/verification/test_gpu.py covers it")
    with pytest.raises(BackendError, match="^backend 'cuda': no GPU") as err:
        hc.integrate_ensemble(conical_pendulum(length=1.5), hc.HBVM(2, 2), 0.1, 3, backend="cuda")
    assert "\n" not in str(err.value)


@pytest.mark.slow  # compiles the block
def test_auto_keeps_a_small_block_on_the_cpu(monkeypatch):
    """backend "auto" tries the GPU only for a block of at least GPU_MIN_RUNS runs: a smaller one runs on numba
    without asking for a GPU (the GPU check is made to fail loudly if it is reached), and says why in one line."""
    import hbvm_core.ensemble as ens

    def no_gpu_asked(*args):
        raise AssertionError("a block below GPU_MIN_RUNS asked for the GPU")

    monkeypatch.setattr(ens, "_run_cuda", no_gpu_asked)
    pb = conical_pendulum(length=1.5)
    res = hc.integrate_ensemble(pb, hc.HBVM(2, 2), np.full(3, 0.1), 3, backend="auto")
    assert res.backend == "numba" and np.all(res.status == OK)
    least = ens.GPU_MIN_RUNS
    assert res.backend_note == (
        f"backend auto: ran on numba; 3 runs, fewer than the GPU's least block of {least}; "
        "per-run block: 3 of 3 runs (fewer than 8 runs)"
    )
    monkeypatch.setattr(ens, "GPU_MIN_RUNS", 3)  # at the threshold the GPU is tried
    with pytest.raises(AssertionError, match="asked for the GPU"):
        hc.integrate_ensemble(pb, hc.HBVM(2, 2), np.full(3, 0.1), 3, backend="auto")

"""IDA on the stabilized index-2 DAE: error falls with rtol, consistent start, a run like any method, a study job."""

import builtins
import importlib.util
import math

import numpy as np
import pytest

import hbvm_core as hc
from hbvm_core.methods import IDA, method_from_entry, method_label

# find_spec, not importorskip: importing sksundae while collecting made a later in-process Dask cluster test hang
pytestmark = pytest.mark.skipif(importlib.util.find_spec("sksundae") is None, reason="needs scikit-sundae")


def _state_error(problem, traj):
    q, p, _ = problem.exact(traj.t)
    return np.abs(np.concatenate([traj.q - q, traj.p - p], axis=1)).max()


def test_error_falls_with_rtol(planar):
    e = [_state_error(planar, hc.integrate(planar, IDA(rtol), 0.1, 10.0)) for rtol in (1e-6, 1e-9, 1e-12)]
    assert all(a > 100 * b for a, b in zip(e, e[1:])), e
    assert e[-1] < 1e-8, e


def test_initial_values_are_consistent(planar, tethered):
    for pb in (planar, tethered):
        st = IDA(1e-8).stepper(pb)
        y, yp = st.consistent(pb.q0, pb.p0)
        res = np.empty_like(y)
        st.residual(0.0, y, yp, res)
        scale = 1.0 + np.abs(y).max() + np.abs(yp).max()
        assert np.abs(res).max() <= 1e-14 * scale, (pb.name, res)
        assert np.all(y[2 * pb.m + pb.nu :] == 0.0)  # mu_0 = 0
        np.testing.assert_allclose(y[2 * pb.m : 2 * pb.m + pb.nu], pb.multiplier(pb.q0[None], pb.p0[None])[0])


def test_run_stores_q_p_lam_like_any_method(tethered):
    traj = hc.integrate(tethered, IDA(1e-8), 0.5, 5.0)
    assert traj.q.shape == (11, tethered.m) and traj.p.shape == (11, tethered.m)
    assert traj.lam.shape == (10, tethered.nu)
    np.testing.assert_allclose(traj.lam, tethered.multiplier(traj.q[:-1], traj.p[:-1]), rtol=1e-14, atol=1e-15)
    assert np.abs(traj.g()).max() < 1e-6 and traj.iterations.min() > 0


def test_entry_label_and_bad_values():
    m = method_from_entry({"method": "ida", "rtol": 1e-8})
    assert m.tolerances == (1e-8, 1e-8) and m.name == "IDA(1e-08)" and m.label() == "ida_rtol1e-08"
    assert method_label({"method": "ida", "rtol": 1e-8}) == "ida_rtol1e-08"
    assert method_from_entry(m.entry()) == m
    assert method_from_entry({"method": "ida", "rtol": 1e-8, "atol": 1e-12}).tolerances[1] == 1e-12
    for entry, key in [
        ({"method": "ida", "rtol": 0}, "rtol = 0"),
        ({"method": "ida", "rtol": 1e-8, "atol": "x"}, "atol = 'x'"),
        ({"method": "ida", "rtol": 1e-8, "projection": True}, "'projection'"),
    ]:
        with pytest.raises(hc.ConfigError, match=key):
            method_from_entry(entry)


def test_missing_package_is_one_clear_config_error(planar, monkeypatch):
    real = builtins.__import__

    def no_sundae(name, *args, **kwargs):
        if name.startswith("sksundae"):
            raise ImportError(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_sundae)
    with pytest.raises(hc.ConfigError, match="method = ida needs the package scikit-sundae"):
        IDA(1e-8).stepper(planar)


def test_study_job_with_ida_solves(tmp_path):
    from hbvm_workflow.study import expand_study
    from hbvm_workflow.worker import solve_job

    cfg = {
        "problem": "planar_pendulum",
        "methods": [{"method": "ida", "rtol": 1e-9}],
        "t_end": 1,
        "h": [0.1],
        "errors": {"reference": "exact", "norm": 1, "sample": "all"},
        "backend": "numpy",
    }
    study = expand_study("ida", cfg, results=str(tmp_path / "results"))
    (job,) = study.jobs.values()
    assert job.label == "ida_rtol1e-09"
    out = solve_job(job)
    assert out["status"] == "ok" and out["steps"] == 10 and math.isfinite(out["mean_iterations"])


@pytest.mark.parametrize("name", ["planar_pendulum", "conical_pendulum", "modified_pendulum", "tethered_satellites"])
def test_the_compiled_residual_is_the_numpy_residual(name):
    """IDA's residual over the compiled callbacks equals the numpy one to round-off, away from the solution too."""
    problem = hc.get_problem(name)
    runner = IDA(1e-8).compiled_runner(problem)
    assert runner is not None
    numpy_st, compiled_st = IDA(1e-8).stepper(problem), IDA(1e-8).stepper(problem, runner.callbacks)
    rng = np.random.default_rng(1)
    y, yp = numpy_st.consistent(problem.q0, problem.p0)
    for _ in range(5):
        z, zp = y + 0.1 * rng.standard_normal(y.size), yp + rng.standard_normal(y.size)
        a, b = np.full(y.size, np.nan), np.full(y.size, np.nan)
        numpy_st.residual(0.0, z, zp, a)
        compiled_st.residual_compiled(0.0, z, zp, b)
        np.testing.assert_allclose(b, a, rtol=1e-14, atol=1e-14)


def test_ida_runs_on_the_compiled_callbacks_unless_backend_numpy(planar):
    fast = hc.integrate(planar, IDA(1e-9), 0.5, 10.0)
    slow = hc.integrate(planar, IDA(1e-9), 0.5, 10.0, backend="numpy")
    assert fast.attrs["backend"] == "numba" and slow.attrs["backend"] == "numpy"
    # the same DAE solved to the same tolerance (global error about 100 rtol): equally accurate
    e_fast, e_slow = _state_error(planar, fast), _state_error(planar, slow)
    assert e_fast < 1e-6 and e_slow < 1e-6 and 1 / 3 < e_fast / e_slow < 3
    assert np.abs(fast.q - slow.q).max() < 1e-6

"""A user-defined problem through the public API: conservation and order."""

import numpy as np
import pytest
from _util import fitted_order
from user_problems import bead_on_torus, double_pendulum

import hbvm_core as hc
from hbvm_core.metrics import ErrorConvention, errors


def test_double_pendulum_with_masses_conserves_h_and_g():
    """U linear, g quadratic: HBVM(2,2) conserves both to round-off, with a non-identity M."""
    pb = double_pendulum()
    traj = hc.integrate(pb, hc.HBVM(2, 2), 0.05, 20.0)
    assert traj.energy_error().max() <= 1e-13
    assert np.abs(traj.g()).max() <= 1e-13
    assert np.abs(pb.multiplier(traj.q[:1], traj.p[:1])).max() > 0.1  # the multiplier really varies
    assert np.ptp(traj.lam[:, 0]) > 0.1


def test_double_pendulum_is_second_order_against_the_ode_reference():
    pb = double_pendulum()
    conv = ErrorConvention(reference="reference", norm="inf", sample=0.5)
    hs = [0.05, 0.025, 0.0125]
    es = [errors(hc.integrate(pb, hc.HBVM(3, 2), h, 4.0), conv) for h in hs]
    assert fitted_order(hs, [e["e_s"] for e in es]) == pytest.approx(2, abs=0.15)
    assert fitted_order(hs, [e["e_lambda"] for e in es]) == pytest.approx(1, abs=0.2)


def test_bead_on_torus_quartic_constraint_needs_k_2s():
    """g has degree 4: HBVM(2s, s) conserves H and g (degree <= 2k/s), HBVM(s, s) does not."""
    pb = bead_on_torus()
    exact = hc.integrate(pb, hc.HBVM(4, 2), 0.05, 10.0)
    assert exact.energy_error().max() <= 1e-13 and np.abs(exact.g()).max() <= 1e-13
    gauss = hc.integrate(pb, hc.HBVM(2, 2), 0.05, 10.0)
    assert np.abs(gauss.g()).max() > 1e-9
    hs = [0.05, 0.025, 0.0125]
    conv = ErrorConvention(reference="reference", norm=2, sample=1.0)
    es = [errors(hc.integrate(pb, hc.HBVM(4, 2), h, 5.0), conv)["e_s"] for h in hs]
    assert fitted_order(hs, es) == pytest.approx(2, abs=0.15)


def test_user_problem_by_module_path():
    pb = hc.get_problem("user_problems:double_pendulum", m2=3.0)
    assert pb.name == "double_pendulum" and pb.M[2, 2] == 3.0

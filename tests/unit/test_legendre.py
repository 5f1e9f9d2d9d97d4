"""docs/method.md section 2: the Legendre/Gauss machinery."""

import numpy as np
import pytest

from hbvm_core.errors import ConfigError
from hbvm_core.legendre import gauss_legendre, shifted_legendre, tableau, x_matrix


@pytest.mark.parametrize("k,s", [(1, 1), (2, 2), (3, 2), (6, 3), (12, 6)])
def test_x_matrix_is_phat_omega_ihat(k, s):
    tab = tableau(k, s)
    np.testing.assert_allclose(tab.Phat.T @ np.diag(tab.b) @ tab.Ihat, x_matrix(s), atol=1e-14)


def test_basis_is_orthonormal_and_integrals_exact():
    c, b = gauss_legendre(8)
    P = shifted_legendre(5, c)
    np.testing.assert_allclose(P.T @ np.diag(b) @ P, np.eye(6), atol=1e-13)
    tab = tableau(5, 4)
    # Ihat[i, j] = int_0^{c_i} P_j by a fine quadrature of [0, c_i]
    for i, ci in enumerate(tab.c):
        x, w = gauss_legendre(10)
        np.testing.assert_allclose(w * ci @ shifted_legendre(3, ci * x), tab.Ihat[i], atol=1e-14)


def test_extrapolation_matrix_is_exact_for_the_stage_polynomial():
    tab = tableau(4, 3)
    rng = np.random.default_rng(0)
    gamma = rng.normal(size=(3, 2))
    c = np.linspace(0, 1, 7)
    u_next = shifted_legendre(2, c) @ (tab.E @ gamma)
    u_prev = shifted_legendre(2, 1 + c) @ gamma
    np.testing.assert_allclose(u_next, u_prev, atol=1e-13)


@pytest.mark.parametrize("k,s,key", [(1, 2, "k = 1"), (2, 0, "s = 0"), (2.5, 1, "k = 2.5")])
def test_bad_k_s(k, s, key):
    with pytest.raises(ConfigError, match=key):
        tableau(k, s)

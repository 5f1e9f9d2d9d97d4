"""hbvm_core.sparse: the pattern of G and its products, the assembly over G^T M^-1 G's pattern, the solve with
an ordering found once, and the checks of a problem on the sparse path, against dense computations."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import sparse

from hbvm_core.errors import ConfigError, ProblemError
from hbvm_core.problem import Problem
from hbvm_core.problems import branched_tree, chain, closed_chain
from hbvm_core.problems.rods import Rods
from hbvm_core.sparse import SparseG
from hbvm_core.sparse.factor import Factorisation

EPS = np.finfo(float).eps


def _chain_G(q: np.ndarray) -> np.ndarray:
    """G of a chain pinned at the origin by hand: column i holds 2 (x_i - x_{i-1}) at bead i, minus at i - 1."""
    x = np.vstack([np.zeros(2), q.reshape(-1, 2)])
    n = x.shape[0] - 1
    G = np.zeros((2 * n, n))
    for i in range(n):
        d = 2.0 * (x[i + 1] - x[i])
        G[2 * i : 2 * i + 2, i] = d
        if i:
            G[2 * i - 2 : 2 * i, i] = -d
    return G


@pytest.fixture
def bent():
    n = 12
    return chain(n=n, mass=1.0 + 0.5 * np.sin(np.arange(n)), theta0=np.linspace(0.1, 1.2, n), omega0=0.3)


def test_products_over_the_pattern_match_the_dense_G(bent):
    """G lam, G^T v and the dense view agree with G built by hand, to round-off of their sums (2 terms each)."""
    S, rng = bent.sparse, np.random.default_rng(1)
    Q = bent.q0[None, :] + 0.1 * rng.standard_normal((3, bent.m))
    G = np.stack([_chain_G(q) for q in Q])
    assert np.abs(S.dense(Q) - G).max() == 0.0  # the same products 2 (x_i - x_{i-1}), placed
    lam, v = rng.standard_normal((3, bent.nu)), rng.standard_normal((3, bent.m))
    scale = np.abs(G).max() * 4
    assert np.abs(S.G_dot(S.values(Q), lam) - np.einsum("nmi,ni->nm", G, lam)).max() <= 4 * EPS * scale
    assert np.abs(S.Gt_dot(S.values(Q), v) - np.einsum("nmi,nm->ni", G, v)).max() <= 4 * EPS * scale


def test_normal_assembly_matches_the_dense_product(bent):
    """sum_j L_j^T D R_j over the pattern of G^T D G equals the dense einsum (s = 2 stacks, D = M^-1)."""
    S, rng = bent.sparse, np.random.default_rng(2)
    L, R = rng.standard_normal((2, S.nnz)), rng.standard_normal((2, S.nnz))
    D = 1.0 / bent._diag
    dense_L, dense_R = np.zeros((2, bent.m, bent.nu)), np.zeros((2, bent.m, bent.nu))
    dense_L[:, S.rows, S.cols], dense_R[:, S.rows, S.cols] = L, R
    want = np.einsum("jmi,m,jmk->ik", dense_L, D, dense_R)
    got = S.normal.matrix(S.normal.data(L, R * D[S.rows])).toarray()
    assert np.abs(got - want).max() <= 8 * EPS * np.abs(want).max()
    assert S.normal.nnz == 3 * bent.nu - 2  # a chain's G^T G is tridiagonal


@pytest.mark.parametrize("form", ["banded", "splu"])
@pytest.mark.parametrize(
    "problem", [chain(n=30, theta0=0.4), closed_chain(n=30), branched_tree(depth=5)], ids=["chain", "loop", "tree"]
)
def test_factorisation_solves_like_dense_elimination(problem, form):
    """Either solver, with its ordering found once, solves G^T M^-1 G x = b and a second matrix of the same
    pattern to the conditioning of the system (backward error: residual <= 100 eps |A| |x|); the chain's
    tridiagonal band takes LAPACK's gtsv, the loop's wider one solve_banded."""
    S = problem.sparse
    f = Factorisation(S.normal.indptr, S.normal.indices, S.nu, form)
    rng = np.random.default_rng(3)
    for q in (problem.q0, problem.q0 + 0.05 * rng.standard_normal(problem.m)):
        Gv = S.values(q[None, :])
        data = S.normal.data(Gv, Gv)
        A, b = S.normal.matrix(data).toarray(), rng.standard_normal(S.nu)
        x = f.solve(data, b)
        assert np.abs(A @ x - b).max() <= 100 * EPS * np.abs(A).max() * np.abs(x).max()


def test_a_singular_tridiagonal_system_is_refused_with_one_line():
    """A chain's G^T G with the first rod's column zeroed (a rod of length 0: a zero row and column of A) is
    singular; the tridiagonal solve says so instead of returning inf or NaN."""
    S = chain(n=10).sparse
    Gv = S.values(chain(n=10).q0[None, :])
    Gv[:, S.cols == 0] = 0.0
    with pytest.raises(np.linalg.LinAlgError, match="singular"):
        S.factorisation.solve(S.normal.data(Gv, Gv), np.ones(S.nu))


def test_the_band_is_found_for_a_loop_and_refused_for_a_wide_tree():
    """A closed loop through the fixed pin couples rod i only to rods i - 1 and i + 1 (the last two share the
    last bead): tridiagonal in its own order, no permutation; a tree of 127 beads has a wide band even after
    reverse Cuthill-McKee, so it takes the sparse LU."""
    loop = closed_chain(n=40).sparse.factorisation
    assert loop.form == "banded" and loop.bands == (1, 1) and not loop.permuted
    assert branched_tree(depth=7).sparse.factorisation.form == "splu"


def test_from_matrix_reads_the_pattern_once():
    """A callback returning scipy.sparse G(q) gives the same values as the chain's own."""
    problem = chain(n=8, theta0=0.3)
    S = SparseG.from_matrix(lambda q: sparse.csr_matrix(_chain_G(q)), problem.q0, problem.nu)
    Q = problem.q0[None, :] + 0.01
    assert np.array_equal(S.dense(Q), problem.sparse.dense(Q))


def test_a_repeated_nonzero_is_refused_with_one_line():
    with pytest.raises(ProblemError, match=r"^sparse G: a \(row, col\) pair appears twice in the pattern$"):
        SparseG([0, 0], [0, 0], lambda Q: np.ones((Q.shape[0], 2)), 2, 1)


def _rods_problem(values_sign: float = 1.0, p0=None, n: int = 40) -> Problem:
    rods = Rods(np.arange(-1, n - 1), np.arange(n), n, np.ones(n), np.ones(n), 1.0)
    base = rods.structure("sparse")
    S = SparseG(base.rows, base.cols, lambda Q: values_sign * rods.values(Q), 2 * n, n, "sparse")
    q0 = np.stack([np.zeros(n), -np.arange(1.0, n + 1)], 1).ravel()
    return Problem(name="rods", q0=q0, p0=np.zeros(2 * n) if p0 is None else p0, U=rods.U, grad_U=rods.grad_U,
                   g=rods.g, d2g=rods.d2g, sparse=S)  # fmt: skip


def test_the_sparse_checks_refuse_a_wrong_sign_of_G_in_one_line():
    _rods_problem()  # the right sign passes
    with pytest.raises(ProblemError) as info:
        _rods_problem(-1.0)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("rods: callback sparse G values does not match the central differences of g at q0")


def test_the_sparse_checks_refuse_inconsistent_velocities():
    """A hanging straight chain moving along itself stretches its rods: the hidden constraint is refused."""
    p0 = np.zeros(80)
    p0[1::2] = 1.0
    with pytest.raises(ProblemError, match=r"^rods: inconsistent initial data, hidden constraint"):
        _rods_problem(p0=p0)


def test_multiplier_and_hidden_constraint_on_the_sparse_path_match_the_dense_path():
    """lambda(q, p) (docs/method.md 1) and G^T M^-1 p computed over the nonzeros equal the dense formulas."""
    kw = {"n": 40, "mass": 1.0 + 0.5 * np.cos(np.arange(40)), "theta0": 0.3, "omega0": 0.5}
    fast, slow = chain(**kw, linear_algebra="sparse"), chain(**kw, linear_algebra="dense")
    q, p = fast.q0[None, :] + 0.01 * np.sin(np.arange(fast.m)), fast.p0[None, :]
    lam, want = fast.multiplier(q, p), slow.multiplier(q, p)
    assert np.abs(lam - want).max() <= 1e3 * EPS * np.abs(want).max()  # cond(G^T M^-1 G) ~ n^2 / 10
    assert np.abs(fast.hidden_constraint(q, p) - slow.hidden_constraint(q, p)).max() <= 8 * EPS * np.abs(q).max()


def test_the_stall_tests_amplification_follows_the_problem_of_a_shared_structure():
    """Chains of one graph share their SparseG, where sqrt(cond(G^T M^-1 G)) at q0 is kept for the last problem
    asked: each stepper's value is its own problem's, ||A||_inf / lambda_min(A) by dense eigenvalues (the
    estimate's definition; 20 inverse iterations converge at (lambda_1 / lambda_2)^20 ~ 4^-20 on a chain), also
    when the problems alternate."""
    from hbvm_core.methods import HBVM

    mass = 1.0 + 0.9 * np.cos(np.arange(40))
    light = chain(n=40, theta0=0.3, linear_algebra="sparse")
    heavy = chain(n=40, theta0=0.3, mass=mass, linear_algebra="sparse")
    assert light.sparse is heavy.sparse
    for problem, D in ((light, np.ones(80)), (heavy, 1.0 / np.repeat(mass, 2)), (light, np.ones(80))):
        S = problem.sparse
        G = S.dense(problem.q0[None, :])[0]
        A = G.T @ (D[:, None] * G)
        want = np.abs(A).sum(axis=1).max() / np.linalg.eigvalsh(A)[0]
        got = HBVM(2, 2).stepper(problem).sparse.amplification ** 2
        assert abs(got - want) <= 1e-6 * want


def test_chain_bad_input_is_one_line_naming_the_key():
    with pytest.raises(ConfigError, match=r"^mass = 5 values: expected a positive finite number or 4 of them$"):
        chain(n=4, mass=np.ones(5))
    with pytest.raises(ConfigError, match=r"^n = 0: expected an integer >= 1$"):
        chain(n=0)


def test_a_grid_of_large_sparse_instances_is_checked_on_the_nonzeros():
    """inconsistent_instance (a study's grid, validation deferred) names the instance whose velocities stretch
    its rods, without building a dense G."""
    from hbvm_core.problem import deferred_validation, inconsistent_instance

    p0 = np.zeros(80)
    p0[1::2] = 1.0
    with deferred_validation():
        good, bad = _rods_problem(), _rods_problem(p0=p0)
    assert inconsistent_instance([good, good]) is None
    index, reason = inconsistent_instance([good, bad])
    assert index == 1 and reason.startswith("rods: inconsistent initial data, hidden constraint")

"""Whether a numpy stepper takes the sparse path: automatic by size, or as the problem's pattern asks."""

from __future__ import annotations

#: below this many coordinates the dense path is as fast (benchmarks/README.md, "Chains"): a problem with a
#: sparse pattern and m >= SPARSE_MIN_M takes the sparse path ("auto")
SPARSE_MIN_M = 64


def sparse_path(problem) -> bool:
    """True when ``problem`` declares a sparse G (``Problem.sparse``) with M = I or diagonal, and its pattern
    asks for the sparse path ("sparse") or leaves it to the size ("auto": m >= SPARSE_MIN_M)."""
    structure = getattr(problem, "sparse", None)
    if structure is None or (problem.M is not None and problem._diag is None):
        return False
    if structure.linear_algebra == "auto":
        return problem.m >= SPARSE_MIN_M
    return structure.linear_algebra == "sparse"


def inverse_mass(problem):
    """The diagonal of M^-1 as a vector (ones for M = I): the sparse path's M^-1."""
    import numpy as np

    return np.ones(problem.m) if problem.M is None else 1.0 / problem._diag

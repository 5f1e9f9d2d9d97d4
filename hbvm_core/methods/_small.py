"""Small dense solves shared by the baseline steppers (the nu x nu systems of one step)."""

from __future__ import annotations

import numpy as np


def solve_small(A: np.ndarray, b: np.ndarray) -> np.ndarray:
    """A^{-1} b for a small square A; a 1 x 1 system is a division (np.linalg.solve costs ~15 us per call)."""
    if A.shape == (1, 1):
        a = A[0, 0]
        if a == 0.0 or not np.isfinite(a):
            raise np.linalg.LinAlgError("Singular matrix")
        return b / a
    return np.linalg.solve(A, b)

"""The probe points of a problem: q0 and fixed points near it.

Where a problem is looked at beyond its initial state: the derivative checks compare its callbacks with central
differences there (``checks.check_derivatives``), and its identity records its values there
(``fingerprint.problem_probe``). Deterministic, so every host probes the same points.
"""

from __future__ import annotations

import numpy as np


def probe_points(q0: np.ndarray, n: int = 3) -> np.ndarray:
    """q0 and ``n`` fixed deterministic points near it (a distance 1e-2 (1 + max |q0|) away), shape (n + 1, m)."""
    m = q0.size
    scale = 1e-2 * (1.0 + float(np.max(np.abs(q0)))) if m else 0.0
    rows = [q0] + [q0 + scale * np.cos(0.7 * (j + 1) * np.arange(1, m + 1) + j) for j in range(n)]
    return np.array(rows, dtype=float)


__all__ = ["probe_points"]

"""Small helpers shared by the tests (importable because pytest puts tests/ on sys.path)."""

from __future__ import annotations

import numpy as np


def agrees(x: float, published: float, digits: int = 4) -> bool:
    """x agrees with a published value to ``digits`` significant digits (relative 5 * 10^-digits)."""
    return abs(x - published) <= 5 * 10.0**-digits * abs(published)


def round_off(steps: int, scale: float, per_step: float = 1.0) -> float:
    """The round-off two evaluation orders (or code paths) of the same run may differ by after ``steps`` steps:
    ``per_step`` roundings of the quantity's ``scale`` on each step (eps = 2.2e-16)."""
    return per_step * max(1, steps) * float(np.finfo(float).eps) * max(1.0, float(scale))


def fitted_order(h, e) -> float:
    """Least-squares slope of log e against log h."""
    return float(np.polyfit(np.log(h), np.log(e), 1)[0])

"""Small helpers shared by the tests (importable because pytest puts tests/ on sys.path)."""

from __future__ import annotations

import numpy as np


def agrees(x: float, published: float, digits: int = 4) -> bool:
    """x agrees with a published value to ``digits`` significant digits (relative 5 * 10^-digits)."""
    return abs(x - published) <= 5 * 10.0**-digits * abs(published)


def fitted_order(h, e) -> float:
    """Least-squares slope of log e against log h."""
    return float(np.polyfit(np.log(h), np.log(e), 1)[0])

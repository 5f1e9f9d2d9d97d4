"""The numerical reference's accuracy (``tables.reference_floor``): estimated once per instance, and the rates and
fitted orders of e_s stop at it, flagged ``reference_floor_s`` and printed "reference floor" (not "round-off")."""

from __future__ import annotations

import math

import numpy as np
import pytest
from _errors import made_up_rows

from hbvm_workflow.study import expand_study
from hbvm_workflow.tables import (
    REFERENCE_MARGIN,
    block_rates,
    errors_dataset,
    markdown_table,
    reference_floor,
)

H = [0.1 * 2.0**-i for i in range(8)]
#: a made-up reference accuracy: e_s = h^4 reaches 10 x FLOOR between h = 0.1/2^6 (6.0e-12) and 0.1/2^7 (3.7e-13)
FLOOR = 1e-13


def _study(**errors):
    cfg = {"problem": "modified_pendulum", "methods": [{"k": 2, "s": 2}], "t_end": 2, "h": H}
    return expand_study("s", {**cfg, "errors": {"norm": "inf", "sample": "all", **errors}})


def test_the_floor_of_an_ode_reference_and_none_of_a_closed_form():
    """modified_pendulum has no closed form: DOP853 at rtol 1e-13 over [0, 2] is accurate to about 6e-13 (an
    independent solve agrees); the planar pendulum's closed form and errors.reference: self have no floor."""
    study = _study(reference="reference")
    floor = reference_floor(study, study.instance_of(""))
    assert 1e-14 <= floor <= 1e-11
    assert reference_floor(_study(reference="self"), study.instance_of("")) is None
    cfg = {"problem": "planar_pendulum", "methods": [{"k": 2, "s": 2}], "t_end": 1, "h": [0.1, 0.05]}
    exact = expand_study("e", {**cfg, "errors": {"reference": "exact", "norm": "inf", "sample": "all"}})
    assert reference_floor(exact, exact.instance_of("")) is None


def _rows(floor):
    study = _study(reference="reference")
    rows = made_up_rows(study, lambda e, sm: 4, roundoff=("e_lambda",))  # e_s = h^4; e_lambda at round-off
    block_rates(rows, floor)
    return study, rows


def test_rates_and_fitted_orders_stop_at_the_reference_floor():
    """e_s = h^4 (rate log 16 / log 2 = 4 by hand): the last pair's finer e_s, 3.7e-13, is under 10 x FLOOR, so it
    has no rate and the fitted order's range ends a row before it; without a floor the same pair is a rate."""
    assert REFERENCE_MARGIN == 10.0
    _, rows = _rows(FLOOR)
    rate = [row["rate_s"] for row in rows]
    assert rate[1:7] == pytest.approx([4.0] * 6, abs=1e-9) and math.isnan(rate[7])
    assert [row["reference_floor_s"] for row in rows] == [False] * 7 + [True]
    assert not any(row["roundoff_s"] for row in rows)  # the reference's, not the arithmetic's
    order = [row["order_s"] for row in rows]
    assert order[:7] == pytest.approx([4.0] * 7, abs=1e-9) and math.isnan(order[7])
    assert all(row["roundoff_lambda"] for row in rows[1:])  # e_lambda: round-off, as before
    _, free = _rows(None)
    assert free[7]["rate_s"] == pytest.approx(4.0, abs=1e-9) and not free[7]["reference_floor_s"]


def test_the_tables_and_errors_zarr_name_the_reference_floor():
    """table.md prints "reference floor" in rate(e_s) of the row at the floor and "round-off" in rate(e_lambda)
    where that error is the arithmetic's; errors.zarr flags the row in reference_floor_s."""
    study, rows = _rows(FLOOR)
    text = markdown_table(study, rows)
    head = next(line for line in text.splitlines() if line.startswith("| h "))
    columns = [c.strip() for c in head.strip("|").split("|")]
    last = next(line for line in text.splitlines() if line.startswith(f"| {H[7]:.6g} |"))
    cells = dict(zip(columns, (c.strip() for c in last.strip("|").split("|"))))
    assert cells["rate(e_s)"] == "reference floor" and cells["rate(e_lambda)"] == "round-off"
    assert text.count("reference floor") == 1
    ds = errors_dataset(study, rows)
    assert ds["reference_floor_s"].values.tolist() == [[False] * 7 + [True]]
    assert not ds["roundoff_s"].values.any()


def test_the_summary_path_applies_the_same_rule():
    """ensemble_errors (a save: summary study): the same e_s = h^4, FLOOR per row: the same flags and range."""
    from hbvm_workflow.ensemble_errors import _fitted, _rates

    h = np.array(H)
    e = h**4
    block, scale = np.zeros(h.size, dtype=np.int64), np.ones(h.size)
    rate, noise, below = _rates(h, e, block, scale, np.full(h.size, FLOOR))
    assert below.tolist() == [False] * 7 + [True] and not noise.any()
    assert rate[1:7] == pytest.approx([4.0] * 6, abs=1e-9) and math.isnan(rate[7])
    order = _fitted(h, e, block, scale, np.full(h.size, FLOOR))
    assert order[:7] == pytest.approx([4.0] * 7, abs=1e-9) and math.isnan(order[7])
    rate, _, below = _rates(h, e, block, scale, np.full(h.size, np.nan))  # NaN: no reference floor
    assert not below.any() and rate[7] == pytest.approx(4.0, abs=1e-9)


def test_a_looser_reference_has_a_higher_floor_and_a_bad_tolerance_is_one_line():
    """errors.reference_rtol: DOP853 at rtol 1e-6 over [0, 2] is accurate to within two decades of its tolerance
    (1e-8 .. 1e-4), far above the default's (1e-14 .. 1e-11); a tolerance at or under the estimate's own 2.5e-14, or
    above 1e-3, is a one-line ConfigError naming the key."""
    from hbvm_core.errors import ConfigError

    loose = _study(reference="reference", reference_rtol=1e-6)
    assert 1e-8 <= reference_floor(loose, loose.instance_of("")) <= 1e-4
    for bad in (1e-15, 1e-2, True):
        with pytest.raises(ConfigError, match=r"errors\.reference_rtol") as err:
            _study(reference="reference", reference_rtol=bad)
        assert "\n" not in str(err.value)

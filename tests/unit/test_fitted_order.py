"""The fitted order over the asymptotic range (docs/method.md section 5, "Fitted order"): on errors made up with
a known order, a pre-asymptotic first step and a round-off plateau (the oracle by construction), and on a
published study solved for real (table1: order 2)."""

from __future__ import annotations

import csv
import math
from fractions import Fraction

import numpy as np
import pytest
import yaml

from hbvm_core import metrics
from hbvm_core.metrics import (
    FIT_POINTS,
    RATE_TOLERANCE,
    ROUNDOFF_ULPS,
    fitted_order,
    fitted_orders,
    roundoff_floor,
    roundoff_floors,
)

H = 0.1 * 2.0 ** -np.arange(10)
FLOOR = roundoff_floor(1.0)  # 1000 eps: 2.2e-13


def made_up(p: float = 3.0) -> np.ndarray:
    """C h^p on rows 1..7, a pre-asymptotic row 0 (4 times too large: its rate is p + 2) and a plateau at
    round-off on rows 8, 9 (below the floor)."""
    e = 0.7 * H**p
    e[0] *= 4.0
    e[8:] = [3e-16, 1e-16]
    return e


def test_roundoff_floors_around_powers_of_two():
    """The array form of the floor on scales at, just below and just above powers of two (where a float's ulp
    changes): each is ROUNDOFF_ULPS eps scale rounded once (ROUNDOFF_ULPS eps is exact: an integer times 2^-52), so
    the correctly rounded exact product (Fraction); at a power of two exactly ROUNDOFF_ULPS 2^(k - 52); the scalar
    form gives each element; the shape is kept."""
    k = np.arange(-60, 61, 7)
    powers = np.ldexp(1.0, k)
    scales = np.stack([np.nextafter(powers, 0.0), powers, np.nextafter(powers, np.inf)])
    floors = roundoff_floors(scales)
    assert floors.shape == scales.shape
    eps = Fraction(np.finfo(float).eps)
    for x, f in zip(scales.ravel().tolist(), floors.ravel().tolist()):
        assert f == float(Fraction(ROUNDOFF_ULPS) * eps * Fraction(x))
        assert roundoff_floor(x) == f
    assert floors[1].tolist() == [math.ldexp(ROUNDOFF_ULPS, int(j) - 52) for j in k]
    assert np.all(floors[0] < floors[1]) and np.all(floors[1] < floors[2])


def brute_force_range(h: list, e: list, floor: list) -> tuple[int, int]:
    """The asymptotic range by its definition, every (first, last) tried: all rows finite, above their floor, h > 0;
    every rate of neighbours finite (math.log), max - min of them <= the tolerance; the longest of at least FIT_POINTS
    rows, of equal ones the finer; (-1, -1) for none."""
    best = (0, -1, -1)
    n = len(e)
    for first in range(n):
        for last in range(first + FIT_POINTS - 1, n):
            rows = range(first, last + 1)
            if not all(math.isfinite(e[i]) and e[i] > floor[i] and h[i] > 0 for i in rows):
                continue
            r = [math.log(e[i - 1] / e[i]) / math.log(h[i - 1] / h[i]) for i in rows[1:]]
            if all(math.isfinite(x) for x in r) and max(r) - min(r) <= RATE_TOLERANCE and last - first + 1 >= best[0]:
                best = (last - first + 1, first, last)
    return best[1], best[2]


@pytest.mark.parametrize("chunk_rows", [metrics.FIT_CHUNK_ROWS, 50])
def test_fitted_orders_of_many_blocks_are_each_block_s_range_by_its_definition(chunk_rows, monkeypatch):
    """Blocks of 1 to 40 rows of noisy C h^p with gaps (NaN), errors below a per-row floor and jumps (the oracle:
    ``brute_force_range``, per block); the order is the least-squares slope over that range (numpy's log of the same
    rows: to a few ulps of the slope's size); one block at a time (``fitted_order``) gives the same; all blocks in
    one go, or a few at a time (``chunk_rows``)."""
    monkeypatch.setattr(metrics, "FIT_CHUNK_ROWS", chunk_rows)
    rng = np.random.default_rng(7)
    hs, es, floors, starts = [], [], [], []
    for _ in range(120):
        n = int(rng.integers(1, 41))
        h = 0.1 * 2.0 ** -np.arange(n) * rng.uniform(0.9, 1.1)
        e = rng.uniform(0.5, 2.0) * h ** rng.uniform(1.0, 6.0) * np.exp(rng.normal(0.0, 0.04, n))
        e[rng.random(n) < 0.05] = np.nan
        e[rng.random(n) < 0.05] *= 30.0
        floor = np.where(rng.random(n) < 0.1, 2 * e, 1e-300)  # some rows at their floor
        starts.append(sum(map(len, hs)))
        hs.append(h), es.append(e), floors.append(floor)
    h, e, floor = np.concatenate(hs), np.concatenate(es), np.concatenate(floors)
    p, first, last = fitted_orders(h, e, floor, starts)
    found = 0
    for j, a in enumerate(starts):
        b = a + len(hs[j])
        f, l = brute_force_range(h[a:b].tolist(), e[a:b].tolist(), floor[a:b].tolist())
        assert (first[j], last[j]) == ((a + f, a + l) if f >= 0 else (-1, -1)), j
        one = fitted_order(h[a:b], e[a:b], floor[a:b])
        assert one[1:] == (f, l)
        if f >= 0:
            found += 1
            slope = np.polyfit(np.log(h[a + f : a + l + 1]), np.log(e[a + f : a + l + 1]), 1)[0]
            assert p[j] == pytest.approx(slope, rel=1e-12) and one[0] == pytest.approx(slope, rel=1e-12)
        else:
            assert math.isnan(p[j]) and math.isnan(one[0])
    assert 30 < found < 120  # both outcomes met
    assert fitted_orders([], [], 0.0, [0])[0].size == 0


def test_known_order_without_the_plateau_and_the_first_step():
    p, first, last = fitted_order(H, made_up(3.0), FLOOR)
    assert (first, last) == (1, 7)
    assert p == pytest.approx(3.0, abs=1e-12)  # exact powers: the least-squares slope is p to round-off


def test_a_plateau_above_the_floor_is_left_out_by_its_rates():
    """A plateau the floor does not catch (a larger scale's round-off, at 1e-12): its rates near 0 differ from
    p's by more than the tolerance, so the range stops before it."""
    e = made_up(2.0)
    e[7:] = [1.1e-12, 1.0e-12, 1.05e-12]
    p, first, last = fitted_order(H, e, FLOOR)
    assert (first, last) == (1, 6) and p == pytest.approx(2.0, abs=1e-12)


def test_noisy_rates_within_the_tolerance_are_one_range():
    rng = np.random.default_rng(0)
    e = 0.5 * H**2 * np.exp(rng.uniform(-0.01, 0.01, H.size))  # rates 2 +- 0.03
    p, first, last = fitted_order(H, e, FLOOR)
    assert (first, last) == (0, H.size - 1) and p == pytest.approx(2.0, abs=0.02)


def test_of_two_equal_runs_the_finer_one():
    e = 0.5 * H**2
    e[5:] = e[5] * (H[5:] / H[5]) ** 4  # order 2 on rows 0..5, order 4 on rows 5..9: five rows each
    p, first, last = fitted_order(H[1:], e[1:], FLOOR)
    assert (first, last) == (4, 8) and p == pytest.approx(4.0, abs=1e-12)


def test_no_range_no_order():
    assert math.isnan(fitted_order(H[:2], 0.5 * H[:2] ** 2, FLOOR)[0])  # fewer than FIT_POINTS rows
    assert FIT_POINTS == 3
    assert fitted_order(H, np.full(H.size, 1e-16), FLOOR)[1:] == (-1, -1)  # all at round-off
    e = 0.5 * H**2
    e[1::2] = np.nan  # no two neighbours: no rate
    assert math.isnan(fitted_order(H, e, FLOOR)[0])


def test_tables_put_the_order_on_the_rows_of_its_range():
    from hbvm_workflow.tables import fit_orders

    rows = [
        {"h": h, "e_s": e, "e_lambda": math.nan, "e_hc": 1e-16, "scales": {"e_s": 1.0}} for h, e in zip(H, made_up())
    ]
    fit_orders(rows)
    got = [row["order_s"] for row in rows]
    assert all(math.isnan(v) for v in got[:1] + got[8:])
    assert got[1:8] == pytest.approx([3.0] * 7, abs=1e-12)
    assert all(math.isnan(row["order_lambda"]) and math.isnan(row["order_hc"]) for row in rows)


@pytest.mark.slow
def test_table1_fitted_order_is_2(tmp_path):
    """table1 as published (HBVM(s,s), s = 1, 2, 3, on the planar pendulum, h = 0.1 2^-n, n = 0..8), solved
    and aggregated: e_s of each method has the fitted order 2 within 0.05 (docs/method.md section 5)."""
    from hbvm_workflow.study import expand_study
    from hbvm_workflow.tables import compute_errors
    from hbvm_workflow.worker import solve_job

    with open("config/config.yaml") as fh:
        study = expand_study("table1", yaml.safe_load(fh)["studies"]["table1"], results=str(tmp_path))
    for job in study.jobs.values():
        assert solve_job(job)["status"] == "ok"
    out = tmp_path / "table1"
    compute_errors(study, str(out / "errors.zarr"), str(out / "errors.csv"))
    with open(out / "errors.csv") as fh:
        rows = list(csv.DictReader(fh))
    for sm in study.methods:
        fit = [float(r["order_s"]) for r in rows if r["method"] == sm.label and r["order_s"] != ""]
        assert len(fit) >= FIT_POINTS and fit[0] == pytest.approx(2.0, abs=0.05), (sm.label, fit)

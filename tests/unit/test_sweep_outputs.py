"""The outputs of a sweep that a person reads: table.md, .tex and .html are a compact summary whose size does not
grow with the grid (per method and h: runs, failed runs, min / median / max of each error column and of the
iterations; the rows of the first and last grid values and of the worst runs), and the sweep figure is never
blank (with ``reference: none`` it still draws the iterations, e_H and e_g against the grid value).

The rows are made up (seeded random numbers, a few failed runs), 2 methods x 5 step sizes x 1000 grid values =
10^4 rows; the oracle is numpy over those rows."""

from __future__ import annotations

import math
import re

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")

from hbvm_workflow import plots  # noqa: E402
from hbvm_workflow.study import expand_study  # noqa: E402
from hbvm_workflow.tables import errors_dataset, html_table, latex_table, markdown_table  # noqa: E402

VALUES = [round(0.5 + 1.4 * i / 999, 12) for i in range(1000)]
HS = [0.1, 0.05, 0.025, 0.0125, 0.00625]
COLUMNS = {"e_s": "e_s", "e_lambda": "e_lambda", "e_H": "e_H", "e_g": "e_g", "e_hc": "e_hc"}
COLUMNS["iterations"] = "mean_iterations"


def sweep(reference: str = "exact"):
    errors = {"reference": reference} if reference == "none" else {"reference": reference, "norm": 1, "sample": "all"}
    cfg = {
        "kind": "sweep",
        "problem": "planar_pendulum",
        "backend": "auto",  # nothing runs here
        "grid": {"theta_dot0": VALUES},
        "methods": [{"k": 1, "s": 1}, {"k": 2, "s": 2}],
        "t_end": 1,
        "h": HS,
        "errors": errors,
        "expected_rates": {"e_s": "2s"},  # the figure's p: 2s of each method's s (docs/configuration.md)
    }
    return expand_study("sw", cfg)


def made_up_rows(study, seed: int = 1) -> list[dict]:
    """errors.csv's rows of the study in its order (method, grid value, h): random errors over decades, random
    iterations, the runs at grid positions 7 and 500 of the second method failed at every h."""
    rng = np.random.default_rng(seed)
    rows = []
    for i, sm in enumerate(study.methods):
        for j, v in enumerate(VALUES):
            for h in HS:
                failed = i == 1 and j in (7, 500)
                row = {"method": sm.label, "name": sm.name, "k": sm.k, "s": sm.s, "h": h, "n": None, "host": ""}
                row.update(status="failed" if failed else "ok", error="step 3: no convergence" if failed else "")
                row.update(combo=f"theta_dot0={v}", theta_dot0=v, steps=round(1 / h))
                for c in ("e_s", "e_lambda", "e_H", "e_g", "e_hc"):
                    row[c] = math.nan if failed else float(10.0 ** rng.uniform(-14, -2))
                if study.reference == "none":
                    row.update(e_s=math.nan, e_lambda=math.nan)
                row["mean_iterations"] = math.nan if failed else float(rng.uniform(2, 12))
                for c in ("rate_s", "rate_lambda", "rate_hc", "order_s", "order_lambda", "order_hc", "wall_s"):
                    row[c] = math.nan
                row.update(roundoff_s=False, roundoff_lambda=False, roundoff_hc=False)
                rows.append(row)
    return rows


@pytest.fixture(scope="module")
def exact():
    study = sweep()
    return study, made_up_rows(study)


@pytest.fixture(scope="module")
def no_reference():
    study = sweep("none")
    return study, made_up_rows(study, seed=2)


def md_sections(text: str) -> dict[str, tuple[list[str], list[list[str]]]]:
    """'## heading' -> (header cells, rows of cells) of table.md."""
    out, heading = {}, None
    for line in text.splitlines():
        if line.startswith("## "):
            heading = line[3:]
            out[heading] = ([], [])
        elif heading and line.startswith("|") and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            if not out[heading][0]:
                out[heading] = (cells, [])
            else:
                out[heading][1].append(cells)
    return out


def number(cell: str) -> float:
    """A table cell's number, without its floor words ("1.0000e-15 (round-off)")."""
    return float(cell.split(" (")[0])


def column_of(rows, study, label, h, column):
    return np.array([r[column] for r in rows if r["method"] == label and r["h"] == h], dtype=float)


def test_the_tables_of_a_sweep_of_10_4_rows_are_under_100_kB(exact):
    study, rows = exact
    assert len(rows) == 10_000
    for table in (markdown_table, latex_table, html_table):
        text = table(study, rows)
        assert len(text.encode()) < 100_000, (table.__name__, len(text.encode()))
        assert "theta_dot0" in text.replace("\\_", "_")


def test_the_distribution_over_the_grid_is_numpys_min_median_max(exact):
    study, rows = exact
    sections = md_sections(markdown_table(study, rows))
    for sm in study.methods:
        header, cells = sections[f"{sm.name}: distribution over the grid"]
        assert header[:4] == ["h", "runs", "failed", "statistic"]
        assert [header[4:]] == [list(COLUMNS)]
        for k, h in enumerate(HS):
            block = cells[3 * k : 3 * k + 3]
            assert float(block[0][0]) == h and [c[3] for c in block] == ["min", "median", "max"]
            for name, column in COLUMNS.items():
                x = column_of(rows, study, sm.label, h, column)
                x = x[np.isfinite(x)]
                want = [np.min(x), np.median(x), np.max(x)]
                got = [number(c[header.index(name)]) for c in block]
                # printed with 5 significant digits: half a unit of the fifth
                assert got == pytest.approx(want, rel=5e-5), (sm.label, h, name)


def test_the_failed_count_per_method_and_step_size(exact):
    study, rows = exact
    text = markdown_table(study, rows)
    sections = md_sections(text)
    for sm in study.methods:
        _, cells = sections[f"{sm.name}: distribution over the grid"]
        for k, h in enumerate(HS):
            status = [r["status"] for r in rows if r["method"] == sm.label and r["h"] == h]
            assert cells[3 * k][1:3] == [str(len(status)), str(sum(s != "ok" for s in status))]
    assert sum(r["status"] == "failed" for r in rows) == 2 * len(HS)  # the made-up failures: 2 per h, one method
    failures = [line for line in text.splitlines() if line.startswith("- HBVM(2,2), theta_dot0 = ")]
    assert failures[0] == f"- HBVM(2,2), theta_dot0 = {VALUES[7]}, h = 0.1: failed: step 3: no convergence"
    assert any("more failed runs" in line for line in text.splitlines())  # 10 failed, 5 listed by name


def test_the_first_last_and_worst_grid_values_appear(exact):
    study, rows = exact
    sections = md_sections(markdown_table(study, rows))
    for sm in study.methods:
        header, cells = sections[f"{sm.name}: first and last grid values, largest of each column"]
        assert header[:4] == ["theta_dot0", "h", "run", "status"]
        for h in HS:
            at_h = [c for c in cells if float(c[1]) == h]
            assert float(at_h[0][0]) == VALUES[0] and "first" in at_h[0][2]
            assert any(float(c[0]) == VALUES[-1] and "last" in c[2] for c in at_h)
            for name, column in COLUMNS.items():
                x = column_of(rows, study, sm.label, h, column)
                worst = int(np.nanargmax(x))
                (line,) = [c for c in at_h if f"max {name}" in c[2].split(", ")]
                assert float(line[0]) == VALUES[worst], (sm.label, h, name)
                assert number(line[header.index(name)]) == pytest.approx(x[worst], rel=5e-5)


def headers(table, text: str) -> list[list[str]]:
    """The header cells of each table of table.md, .tex or .html."""
    if table is markdown_table:
        return [header for header, _ in md_sections(text).values()]
    if table is latex_table:
        lines = text.splitlines()
        return [lines[i + 1].removesuffix(r" \\").split(" & ") for i, x in enumerate(lines) if "multicolumn" in x]
    return [re.findall("<th>(.*?)</th>", t) for t in re.findall("<table>(.*?)</table>", text)]


@pytest.mark.parametrize("table", [markdown_table, latex_table, html_table])
def test_without_a_reference_no_column_of_em_dashes(no_reference, table):
    study, rows = no_reference
    text = table(study, rows)
    tables = headers(table, text)
    assert len(tables) == 4  # per method: the distribution and the extreme rows
    for header in tables:
        names = [c.replace("\\_", "_") for c in header]
        assert "e_s" not in names and "e_lambda" not in names
        assert names[-4:] == ["e_H", "e_g", "e_hc", "iterations"]
    if table is markdown_table:
        for heading, (header, cells) in md_sections(text).items():
            for j, name in enumerate(header):
                column = [c[j] for c in cells if c[j]]
                assert column and set(column) - {"—"}, (heading, name)


def test_errors_at_a_floor_say_so_in_the_summary():
    """Hand-made rows of one method at one h, their reference accurate to 1e-10 (so e_s <= 1e-9 is the reference's,
    REFERENCE_MARGIN = 10) and round-off at 1000 eps = 2.2e-13: the words of each statistic are those of the run it
    is, "reference floor" before "round-off" for e_s; e_H's tiny values are round-off; a value above both is bare."""
    from hbvm_workflow.tables import REFERENCE_MARGIN

    assert REFERENCE_MARGIN == 10.0
    study = sweep("reference")
    sm = study.methods[0]
    #            e_s     e_H    (grid value: VALUES[j])
    made = [(5e-10, 1e-15), (1e-14, 2e-16), (1e-6, 1e-8), (3e-7, 1e-16)]  # e_s sorted: 1e-14, 5e-10 | 3e-7, 1e-6
    rows = []
    for j, (e_s, e_H) in enumerate(made):
        row = {"method": sm.label, "name": sm.name, "h": HS[0], "n": None, "status": "ok", "error": ""}
        row.update(combo=f"theta_dot0={VALUES[j]}", theta_dot0=VALUES[j], e_s=e_s, e_H=e_H, mean_iterations=2.0)
        row.update(e_lambda=math.nan, e_g=math.nan, e_hc=math.nan, reference_accuracy=1e-10)
        rows.append(row)
    sections = md_sections(markdown_table(study, rows))
    header, cells = sections[f"{sm.name}: distribution over the grid"]
    by = {c[header.index("statistic")]: c for c in cells}
    e_s, e_H = header.index("e_s"), header.index("e_H")
    assert by["min"][e_s] == "1.0000e-14 (reference floor)"  # under 1e-9: the reference's, though under round-off
    assert by["median"][e_s] == "1.5025e-07"  # (5e-10 + 3e-7) / 2: one at the reference floor, one not: no word
    assert by["max"][e_s] == "1.0000e-06"
    assert by["min"][e_H] == "1.0000e-16 (round-off)" and by["max"][e_H] == "1.0000e-08"
    assert by["median"][e_H] == "6.0000e-16 (round-off)"  # both middle runs (2e-16, 1e-15) at round-off
    assert by["min"][header.index("iterations")] == "2"  # iterations: no floor
    header, cells = sections[f"{sm.name}: first and last grid values, largest of each column"]
    first = next(c for c in cells if "first" in c[header.index("run")])
    assert first[header.index("e_s")] == "5.0000e-10 (reference floor)"
    assert first[header.index("e_H")] == "1.0000e-15 (round-off)"
    rows[0]["reference_accuracy"] = math.nan  # a closed form: no reference floor, e_s 5e-10 is the method's
    sections = md_sections(markdown_table(study, rows))
    header, cells = sections[f"{sm.name}: first and last grid values, largest of each column"]
    first = next(c for c in cells if "first" in c[header.index("run")])
    assert first[header.index("e_s")] == "5.0000e-10"


# --------------------------------------------------------------------------- the figure
def drawn(ax) -> list[np.ndarray]:
    """The finite y data of each line drawn on ``ax``."""
    out = []
    for line in ax.get_lines():
        y = np.asarray(line.get_ydata(), dtype=float)
        if np.isfinite(y).any():
            out.append(y[np.isfinite(y)])
    return out


@pytest.fixture(scope="module")
def figure_without_reference(no_reference, tmp_path_factory):
    study, rows = no_reference
    tmp = tmp_path_factory.mktemp("figure")
    return plots.sweep_plot(study, errors_dataset(study, rows), str(tmp / "f.png"), str(tmp / "f.pdf")), tmp


def test_a_sweep_figure_without_a_reference_is_not_blank(no_reference, figure_without_reference):
    study, rows = no_reference
    fig, tmp_path = figure_without_reference
    titles = [ax.get_title().replace("\n", " ") for ax in fig.axes]
    assert titles == ["mean iterations per step", "energy error max |H − H0|", "constraint error max |g|"]
    for ax, column in zip(fig.axes, ("mean_iterations", "e_H", "e_g")):
        lines = drawn(ax)
        assert len(lines) == 2 * 2, ax.get_title()  # per method: the finest h and the coarsest
        x = np.asarray(ax.get_lines()[0].get_xdata(), dtype=float)
        assert x[0] == VALUES[0] and x[-1] == VALUES[-1]
        lo, hi = ax.get_ylim()
        every = np.concatenate([np.asarray(r[column], dtype=float)[None] for r in rows if r["h"] in (HS[0], HS[-1])])
        every = every[np.isfinite(every)]
        assert lo <= every.min() and every.max() <= hi and np.isfinite([lo, hi]).all()
        # 1000 grid values: lines, not 1000 markers
        assert all(line.get_marker() in ("None", "none", None, "") for line in ax.get_lines())
    assert (tmp_path / "f.png").stat().st_size > 10_000


def test_a_sweep_figure_with_a_reference_adds_the_error_constant(exact, tmp_path):
    study, rows = exact
    fig = plots.sweep_plot(study, errors_dataset(study, rows), str(tmp_path / "f.png"), str(tmp_path / "f.pdf"))
    assert [ax.get_title().replace("\n", " ") for ax in fig.axes][0] == "error constant e_s / h^p"
    assert len(fig.axes) == 4 and all(drawn(ax) for ax in fig.axes)
    # the constant at the finest h, p from expected_rates (2s): C = e_s / h^p
    for i, sm in enumerate(study.methods):
        y = np.asarray(fig.axes[0].get_lines()[i].get_ydata(), dtype=float)
        e = np.array([r["e_s"] for r in rows if r["method"] == sm.label and r["h"] == HS[-1]])
        p = 2.0 * sm.s
        assert np.allclose(y, e / HS[-1] ** p, rtol=1e-12, equal_nan=True)  # one division, its rounding


def test_the_legend_says_which_step_sizes(no_reference, figure_without_reference):
    study, _ = no_reference
    fig, _ = figure_without_reference
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend == [f"{sm.name}: h = 0.00625 solid, 0.1 dotted" for sm in study.methods]
    assert re.search("sw", fig.get_suptitle())


def test_a_curve_of_10_4_values_goes_through_each_bins_min_and_max():
    rng = np.random.default_rng(3)
    x = np.linspace(0.0, 2.0, 10_000)
    y = 10.0 ** rng.uniform(-14, -2, x.size)
    y[2000:2010] = np.nan  # a bin without a number: a gap
    y[5003] = np.nan  # a bin with one missing: its other values
    xs, ys = plots.min_max_bins(x, y)
    assert xs.size == ys.size == plots.SWEEP_POINTS  # 1000 bins of 10 values, a min and a max each
    bins = y.reshape(1000, 10)
    with np.errstate(all="ignore"), pytest.warns(RuntimeWarning):  # the all-NaN bin
        want = np.column_stack([np.nanmin(bins, axis=1), np.nanmax(bins, axis=1)]).ravel()
    assert np.array_equal(ys, want, equal_nan=True) and np.isnan(ys[400:402]).all()
    assert np.array_equal(xs, np.repeat(x[::10], 2))
    small = np.arange(5.0)
    xs, ys = plots.min_max_bins(small, small)  # up to SWEEP_POINTS values: as given
    assert xs is small and ys is small


@pytest.mark.parametrize("values, compact", [(3, False), (25, True)])
def test_a_convergence_study_with_more_than_24_combinations_has_the_summary(values, compact):
    grid = {"theta_dot0": [0.5 + 0.01 * i for i in range(values)]}
    cfg = {"problem": "planar_pendulum", "grid": grid, "methods": [{"k": 1, "s": 1}], "t_end": 1, "h": [0.1]}
    study = expand_study("c", {**cfg, "errors": {"reference": "exact", "norm": 1, "sample": "all"}})
    text = markdown_table(study, [])
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    if compact:
        assert headings == ["## HBVM(1,1): distribution over the grid"] + [
            "## HBVM(1,1): first and last grid values, largest of each column"
        ]
    else:
        assert headings == [f"## HBVM(1,1), theta_dot0={v}" for v in grid["theta_dot0"]]

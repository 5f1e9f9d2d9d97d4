"""The compact tables of a sweep (``kind: sweep``) or of a study with a large grid: what a person reads, not a
row per run (errors.csv keeps those).

Per method: for each step size, the number of runs and of failed runs (status other than ok) and the min, median
and max over the grid of each error column and of the mean iterations per step (over the finite values); then the
rows of the extreme grid values: the first and the last grid combination and, per column, the run where it is
largest. A column with no number in the whole study (e_s and e_lambda with ``reference: none``) is left out.
The size is independent of the grid's: per method, (3 + 2 + columns) rows per step size.

An error at a floor says so, in the words of the convergence tables (``tables._cells``): "(reference floor)" after
an e_s at most REFERENCE_MARGIN times its run's reference accuracy (``reference_accuracy``: the instance's
``tables.reference_floor``), said first; else "(round-off)" after an error at most ROUNDOFF_ULPS eps (the round-off
floor of a quantity of size 1, ``metrics.roundoff_floor``). A statistic has the words of the run it is (min, max;
the median: of both middle runs where they agree).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .layout import combo_name
from .study import Study

#: a study of another kind with more grid combinations than this has the compact tables too
COMPACT_COMBINATIONS = 24
#: (errors.csv column, header) of the summarised columns
QUANTITIES = (
    ("e_s", "e_s"),
    ("e_lambda", "e_lambda"),
    ("e_H", "e_H"),
    ("e_g", "e_g"),
    ("e_hc", "e_hc"),
    ("mean_iterations", "iterations"),
)
STATISTICS = ("min", "median", "max")
#: failures listed by name per method (the others counted; errors.csv has them all)
LISTED_FAILURES = 5


def combinations(study: Study) -> int:
    """The number of grid combinations (1 without a grid)."""
    return math.prod(len(v) for v in study.grid.values()) if study.grid else 1


def is_compact(study: Study) -> bool:
    """Whether the study's tables are the compact summary: a sweep, or a grid of more than COMPACT_COMBINATIONS."""
    return bool(study.grid) and (study.study_kind == "sweep" or combinations(study) > COMPACT_COMBINATIONS)


@dataclass
class Step:
    """The rows of one method at one step size (in grid order) and their summary."""

    h: float
    n: object
    rows: list = field(default_factory=list)
    _columns: dict = field(default_factory=dict, repr=False)

    @property
    def failed(self) -> list:
        return [r for r in self.rows if r["status"] != "ok"]

    def column(self, name: str) -> np.ndarray:
        """The rows' values of an errors.csv column as floats (NaN where missing), computed once."""
        if name not in self._columns:
            self._columns[name] = np.array([r.get(name, math.nan) for r in self.rows], dtype=float)
        return self._columns[name]

    def words(self, name: str) -> np.ndarray:
        """Per row, the words of its value of an error column at a floor (``floor_words``), computed once."""
        key = ("words", name)
        if key not in self._columns:
            self._columns[key] = floor_words(name, self.column(name), self.column("reference_accuracy"))
        return self._columns[key]


@dataclass
class Section:
    """One table: a heading, its header cells and its rows of cells."""

    heading: str
    header: list[str]
    rows: list[list[str]]


def shown_columns(steps: list[Step]) -> list[tuple[str, str]]:
    """The QUANTITIES with at least one finite value in the ``steps``."""
    return [(c, head) for c, head in QUANTITIES if any(np.isfinite(step.column(c)).any() for step in steps)]


def steps_of(study: Study, rows: list[dict]) -> dict[str, list[Step]]:
    """method label -> its Steps in the rows' order of h (rows in grid order within each)."""
    out: dict[str, dict[float, Step]] = {sm.label: {} for sm in study.methods}
    for r in rows:
        by_h = out.setdefault(r["method"], {})
        by_h.setdefault(r["h"], Step(r["h"], r.get("n"))).rows.append(r)
    return {label: list(by_h.values()) for label, by_h in out.items()}


def statistics(step: Step, column: str) -> tuple[float, float, float]:
    """(min, median, max) of ``column`` over the finite values of the step's rows; NaNs where there is none."""
    x = step.column(column)
    x = x[np.isfinite(x)]
    if not x.size:
        return math.nan, math.nan, math.nan
    return float(x.min()), float(np.median(x)), float(x.max())


def statistic_words(step: Step, column: str) -> tuple[str, str, str]:
    """The floor words (``floor_words``) of the (min, median, max) of ``column``: those of the run that is the
    minimum and of the run that is the maximum; of the median's run, or of both middle runs where they agree."""
    x = step.column(column)
    ok = np.flatnonzero(np.isfinite(x))
    if not ok.size:
        return "", "", ""
    words = step.words(column)[ok]
    ranked = np.argsort(x[ok], kind="stable")
    middle = {words[ranked[(ok.size - 1) // 2]], words[ranked[ok.size // 2]]}
    return str(words[ranked[0]]), middle.pop() if len(middle) == 1 else "", str(words[ranked[-1]])


def _fmt(column: str, v: float, word: str = "") -> str:
    if not math.isfinite(v):
        return "—"
    text = f"{v:.5g}" if column == "mean_iterations" else f"{v:.4e}"
    return f"{text} ({word})" if word else text


#: the words of an error at a floor (those of the convergence tables' rate cells)
ROUNDOFF_WORD, REFERENCE_WORD = "round-off", "reference floor"


def floor_words(column: str, values: np.ndarray, accuracy: np.ndarray) -> np.ndarray:
    """Per value of an error ``column``: REFERENCE_WORD where an e_s is at most REFERENCE_MARGIN times its run's
    reference ``accuracy`` (NaN: none), else ROUNDOFF_WORD where it is at most the round-off floor of a quantity
    of size 1 (``metrics.roundoff_floor``), else ""; "" for the iterations."""
    from hbvm_core.metrics import REFERENCE_MARGIN, roundoff_floor

    words = np.full(values.shape, "", dtype=object)
    if column == "mean_iterations":
        return words
    with np.errstate(invalid="ignore"):
        words[values <= roundoff_floor(1.0)] = ROUNDOFF_WORD
        if column == "e_s":
            words[values <= REFERENCE_MARGIN * accuracy] = REFERENCE_WORD
    return words


def grid_header(study: Study) -> str:
    """The header of the grid column: the key of a one-key grid, else "combination"."""
    return next(iter(study.grid)) if len(study.grid) == 1 else "combination"


def grid_cell(study: Study, row: dict) -> str:
    """A row's grid value (``theta_dot0`` 1.5 as "1.5") or combination (``a=1, b=2``)."""
    if len(study.grid) == 1:
        (key,) = study.grid
        return _value(row[key])
    return str(row.get("combo", "")).replace(",", ", ")


def _value(v) -> str:
    """A grid value as text: a float by repr (the shortest text that reads back as it), else as in run names."""
    return repr(v) if isinstance(v, float) else combo_name({"": v})[1:]


def _grid_words(study: Study) -> str:
    n = combinations(study)
    if len(study.grid) == 1:
        (key,) = study.grid
        values = study.grid[key]
        ends = f" ({_value(values[0])} .. {_value(values[-1])})" if values else ""
        return f"{n} values of {key}{ends}"
    return f"{n} combinations of {', '.join(study.grid)}"


def _labels(label: str) -> list[str]:
    return ["n", "h"] if label == "n" else ["h"]


def _h_cells(step: Step, label: str) -> list[str]:
    h = f"{step.h:.6g}"
    return [str(step.n), h] if label == "n" else [h]


def _extremes(step: Step, columns) -> list[tuple[str, int]]:
    """(what, row index): the first and last grid combination, and per column the row where it is largest; one
    entry per row, its reasons joined ("last, max e_H")."""
    picked: dict[int, list] = {}
    order: list[int] = []

    def pick(i: int, why: str) -> None:
        if i not in picked:
            picked[i] = [why]
            order.append(i)
        else:
            picked[i].append(why)

    if step.rows:
        pick(0, "first")
        pick(len(step.rows) - 1, "last")
    for c, head in columns:
        x = step.column(c)
        if np.isfinite(x).any():
            pick(int(np.nanargmax(x)), f"max {head}")
    return [(", ".join(picked[i]), i) for i in order]


def grid_words(study: Study) -> str:
    """The grid in words, for the caption: its size and range, and where the rows per run are."""
    return f"{_grid_words(study)}, summarised per method and h (errors.csv: a row per run)"


def sections(study: Study, rows: list[dict]) -> tuple[list[Section], list[str]]:
    """The tables (per method: the distribution, then the extreme rows) and the failure notes."""
    label = study.row_label
    steps = steps_of(study, rows)
    columns = shown_columns([step for block in steps.values() for step in block])
    heads = [head for _, head in columns]
    out, notes = [], []
    for sm in study.methods:
        block = steps.get(sm.label, [])
        dist = []
        for step in block:
            stats = [statistics(step, c) for c, _ in columns]
            words = [statistic_words(step, c) for c, _ in columns]
            for j, name in enumerate(STATISTICS):
                lead = _h_cells(step, label) + [str(len(step.rows)), str(len(step.failed))] if j == 0 else None
                lead = lead or [""] * (len(_labels(label)) + 2)
                dist.append(lead + [name] + [_fmt(c, s[j], w[j]) for (c, _), s, w in zip(columns, stats, words)])
        header = [*_labels(label), "runs", "failed", "statistic", *heads]
        out.append(Section(f"{sm.name}: distribution over the grid", header, dist))
        extreme = []
        for step in block:
            for why, i in _extremes(step, columns):
                r = step.rows[i]
                cells = [_fmt(c, step.column(c)[i], step.words(c)[i]) for c, _ in columns]
                extreme.append([grid_cell(study, r), *_h_cells(step, label), why, r["status"], *cells])
        header = [grid_header(study), *_labels(label), "run", "status", *heads]
        out.append(Section(f"{sm.name}: first and last grid values, largest of each column", header, extreme))
        failed = [(step, r) for step in block for r in step.failed]
        for step, r in failed[:LISTED_FAILURES]:
            where = f"{grid_header(study)} = {grid_cell(study, r)}, h = {step.h:.6g}"
            notes.append(f"{sm.name}, {where}: {r['status']}: {r.get('error', '')}")
        if len(failed) > LISTED_FAILURES:
            notes.append(f"{sm.name}: {len(failed) - LISTED_FAILURES} more failed runs (errors.csv, status column)")
    return out, notes

"""Work-precision and long-time studies (beyond the paper): tables and figures from a solved study.

- ``work_precision`` studies: every run's wall time (``measure``: the best of ``timing_repeats`` timed
  repeats, the compiled loop warmed first) against e_s (the study's
  error convention: true error against the reference solution), one curve per
  method family -- an HBVM/RATTLE family sweeps h, a DOP853 family sweeps the
  tolerance at a fixed output step -- and the time each family needs to reach
  e_s <= each target (the cheapest measured run that does; "--" where none does).
- ``long_time`` studies: |H - H0|, ||g||_inf and the hidden constraint
  ||G^T M^{-1} p||_inf against t (log-log), and per run the drift numbers:
  the maximum over the first and the last decade of the interval and the growth
  exponent of the running maximum, fitted on log-spaced times over the last two
  decades (about 0 for bounded errors, 1 for a linear drift).

The numbers come from the stores, errors.csv (the errors) and timings.csv (the
measured wall times) the workflow writes (``hbvm_workflow.storage``,
``hbvm_workflow.tables``); nothing is recomputed here.
"""

from __future__ import annotations

import csv
import math
import os

import numpy as np

from hbvm_core.errors import ConfigError

from . import layout, printed
from .plots import MIN_PANEL_W, _plain_log_ticks, envelope, panel_grid
from .printed import DEFAULT_WIDTH, WIDTHS
from .storage import ResultsMismatchError, read_arrays, require_intact, store_status
from .study import Study

#: e_s targets of the time-to-accuracy table
TARGETS = (1e-6, 1e-10)
#: floor for exact zeros in the growth exponent's log (values at exact round-off 0)
FLOOR = 1e-18
#: the series' names in the Markdown tables (no '|' in a table cell)
PLAIN = {"dH": "energy error H - H0", "g": "constraint g", "hc": "hidden constraint"}
#: below this a long-time series is "at round-off" and gets no drift exponent
ROUNDOFF = 1e-13
SERIES = (("dH", r"$|H - H_0|$"), ("g", r"$\|g(q)\|_\infty$"), ("hc", r"$\|G^T M^{-1} p\|_\infty$"))


# --------------------------------------------------------------------------- work precision
#: methods whose runs differ by a tolerance rtol (not a step h): entry ``method`` -> family name
TOLERANCE_FAMILIES = {"dop853": "DOP853", "ida": "IDA"}


def family(entry: dict, name: str) -> str:
    """The curve a run belongs to: DOP853 (or IDA) runs that differ only in the tolerance form one curve."""
    tolerance_family = TOLERANCE_FAMILIES.get(entry.get("method"))
    if tolerance_family is not None:
        return tolerance_family + ("-proj" if entry.get("projection") else "")
    return name


def _number(v: str) -> float:
    return float(v) if v not in ("", None) else math.nan


def _read_csv(path: str) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


#: how many timed repeats a run's wall time is the best of (config ``timing_repeats``)
TIMING_REPEATS = 5


def timing_repeats(study: Study) -> int:
    """The study's ``timing_repeats`` (default TIMING_REPEATS)."""
    return int(study.cfg.get("timing_repeats") or TIMING_REPEATS)


def measure(study: Study, repeats: int | None = None) -> dict[str, float]:
    """{run id: best wall time} of every complete run of a work_precision study: the best of ``repeats``
    (``timing_repeats``) timed integrations of its problem and method over its whole interval (``integrate``'s
    ``wall_s``: the time loop alone, into memory, no store written), one run at a time, after one untimed step
    that compiles (or loads) its compiled loop and imports what it uses: compile time is excluded. A repeat that
    fails leaves the run out (its store says why)."""
    from hbvm_core.errors import HBVMError
    from hbvm_core.integrate import integrate
    from hbvm_core.methods import method_from_entry

    repeats = repeats or timing_repeats(study)
    best: dict[str, float] = {}
    for r in study.rows:
        job = study.jobs[r.job]
        if store_status(job.store, job.hash) != "complete":
            continue
        problem, method = study.instance_of(r.combo).problem, method_from_entry(job.method)
        options = {"compensated": job.compensated, "backend": job.backend}
        try:
            integrate(problem, method, job.h, job.h, **options)  # warm: compiles or loads the loop
            walls = [
                integrate(problem, method, job.h, job.t_end, save_every=job.save_every, **options).attrs["wall_s"]
                for _ in range(repeats)
            ]
        except (HBVMError, FloatingPointError):
            continue
        best[job.id] = float(min(walls))
    return best


def work_precision_rows(study: Study, errors_csv: str, timings_csv: str | None = None) -> list[dict]:
    """The study's runs: family, name, h, rtol, e_s, steps, mean_iterations, status from errors.csv, and
    wall_s, the run's measured wall time, from timings.csv (by default next to errors.csv): its ``best_wall_s``
    (``measure``), the store's ``wall_s`` where timings.csv has none."""
    by_label = {m.label: m for m in study.methods}
    raw = _read_csv(errors_csv)
    timings = _read_csv(timings_csv or layout.timings_beside(errors_csv))
    wall = {(t["method"], t["h"]): t.get("best_wall_s") or t["wall_s"] for t in timings}
    rows = []
    for r in raw:
        study_method = by_label.get(r["method"])
        if study_method is None:
            continue
        if (r["method"], r["h"]) not in wall:
            raise ResultsMismatchError(f"{errors_csv}: run {r['method']}/h={r['h']} has no row in its timings.csv")
        rows.append(
            {
                "problem": study.problem,
                "study": study.name,
                "family": family(study_method.entry, study_method.name),
                "name": study_method.name,
                "label": study_method.label,
                "h": _number(r["h"]),
                "rtol": study_method.entry.get("rtol", math.nan),
                "e_s": _number(r["e_s"]),
                "wall_s": _number(wall[(r["method"], r["h"])]),
                "steps": int(_number(r["steps"])) if r["steps"] else 0,
                "mean_iterations": _number(r["mean_iterations"]),
                "status": r["status"],
            }
        )
    return rows


def families(rows: list[dict]) -> list[str]:
    """Families in order of first appearance."""
    out: list[str] = []
    for r in rows:
        if r["family"] not in out:
            out.append(r["family"])
    return out


def _ok(r: dict) -> bool:
    return r["status"] == "ok" and math.isfinite(r["e_s"]) and math.isfinite(r["wall_s"])


def time_to_accuracy(rows: list[dict], targets=TARGETS) -> list[dict]:
    """Per family and target: the cheapest run with e_s <= target (wall_s NaN and run '' where none reaches it)."""
    out = []
    for fam in families(rows):
        runs = [r for r in rows if r["family"] == fam and _ok(r)]
        for target in targets:
            good = [r for r in runs if r["e_s"] <= target]
            best = min(good, key=lambda r: r["wall_s"]) if good else None
            out.append(
                {
                    "problem": rows[0]["problem"],
                    "family": fam,
                    "target": float(target),
                    "wall_s": best["wall_s"] if best else math.nan,
                    "e_s": best["e_s"] if best else math.nan,
                    "run": _run_label(best) if best else "",
                    "label": best.get("label", "") if best else "",
                    "setting": _setting(best) if best else "",
                    "best_e_s": min((r["e_s"] for r in runs), default=math.nan),
                }
            )
    return out


def _setting(r: dict) -> str:
    """What a family sweeps, at this run: rtol=1e-08 for a tolerance family, else h=0.025."""
    if r["family"].split("-")[0] in TOLERANCE_FAMILIES.values():
        return f"rtol={r['rtol']:.0e}"
    return f"h={r['h']:g}"


def _run_label(r: dict) -> str:
    if r["family"].split("-")[0] in TOLERANCE_FAMILIES.values():
        return f"rtol={r['rtol']:.0e}, h_out={r['h']:g}"
    return f"h={r['h']:g}"


def _fmt(v: float, fmt: str = ".3g") -> str:
    return "--" if not (isinstance(v, float) and math.isfinite(v)) else format(v, fmt)


def time_to_accuracy_markdown(table: list[dict], targets=TARGETS) -> str:
    """One row per (problem, family); per target the wall time in seconds and the run that reaches it."""
    head = "| problem | method | " + " | ".join(f"time to e_s <= {t:.0e} [s] | run" for t in targets)
    head += " | best e_s |\n|---|---|" + "---|---|" * len(targets) + "---|\n"
    lines = []
    keys = []
    for r in table:
        if (r["problem"], r["family"]) not in keys:
            keys.append((r["problem"], r["family"]))
    for problem, fam in keys:
        cells = [problem, fam]
        best = math.nan
        for t in targets:
            r = next(x for x in table if x["problem"] == problem and x["family"] == fam and x["target"] == t)
            cells += [_fmt(r["wall_s"]), r["run"] or "not reached"]
            best = r["best_e_s"]
        cells.append(_fmt(best, ".2e"))
        lines.append("| " + " | ".join(cells) + " |")
    return head + "\n".join(lines) + "\n"


def write_csv(rows: list[dict], path: str, columns: list[str]) -> None:
    """rows as CSV (NaN as empty fields), written atomically."""
    tmp = path + ".tmp"
    with open(tmp, "w", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(columns)
        for r in rows:
            vals = [r.get(c, "") for c in columns]
            w.writerow(["" if isinstance(v, float) and not math.isfinite(v) else v for v in vals])
    os.replace(tmp, path)


def write_text(text: str, path: str) -> None:
    with open(path + ".tmp", "w") as fh:
        fh.write(text)
    os.replace(path + ".tmp", path)


TTA_COLUMNS = ["problem", "family", "target", "wall_s", "e_s", "run", "best_e_s"]
#: results/beyond/time_to_accuracy.csv: per (problem, target, method) the cheapest run reaching the target
TIME_TO_ACCURACY_COLUMNS = ["problem", "target", "method", "label", "wall_s", "setting", "e_s"]


def _style(fam: str, i: int) -> dict:
    marker = "s" if fam.startswith("DOP853") else ("^" if fam == "RATTLE" else "o")
    ls = "--" if fam.endswith("-proj") and "poly" not in fam else "-"
    return {"color": f"C{i % 10}", "marker": marker, "ls": ls, "ms": 4, "lw": 1.2}


def _wall_note(repeats) -> str:
    """The work-precision figure's note on what a point's time is."""
    if not repeats:
        return ""
    return f"; wall time: the best of {repeats} repeats of the time loop, compile time excluded"


def work_precision_plot(
    panels: list[tuple[str, list[dict]]],
    png: str,
    pdf: str,
    targets=TARGETS,
    repeats: int | None = None,
    width: float = WIDTHS[DEFAULT_WIDTH],
):
    """One log-log panel per problem: wall time per run against e_s, one curve per family; ``repeats``: the
    times are the best of that many timed repeats (``measure``), said in the title. ``width``: the printed
    width in inches (``printed.width``); the legend below the panels. Returns the figure."""

    n = len(panels)
    nrows, ncols = panel_grid(n, width) if n > 1 else (1, 1)
    ncols = min(ncols, 2)
    nrows = math.ceil(n / ncols)
    panel_w = width / ncols
    names: list[str] = []
    for _, rows in panels:
        names += [f for f in families(rows) if f not in names]
    title = printed.wrap(
        "work precision: cost against accuracy (more accurate to the right)" + _wall_note(repeats),
        width,
        printed.STYLE["figure.titlesize"],
    )
    with printed.style():
        fig = printed.new_figure(width, nrows * min(2.8, 0.8 * panel_w) + 0.3 * (title.count("\n") + 1) + 0.5)
        axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
        for ax in axes[n:]:
            fig.delaxes(ax)  # an empty slot: nothing drawn
        handles: dict[str, object] = {}
        for ax, (name, rows) in zip(axes, panels):
            for fam in families(rows):
                runs = sorted(
                    (r for r in rows if r["family"] == fam and _ok(r) and r["e_s"] > 0), key=lambda r: -r["e_s"]
                )
                if runs:
                    e = [r["e_s"] for r in runs]
                    w = [r["wall_s"] for r in runs]
                    (line,) = ax.loglog(e, w, label=fam, **_style(fam, names.index(fam)))
                    handles.setdefault(fam, line)
            for t in targets:
                ax.axvline(t, color="0.6", lw=0.8, ls=":")
            ax.invert_xaxis()
            ax.set_xlabel(r"$e_s$ (max over samples, $\|\cdot\|_\infty$, vs reference)")
            ax.set_ylabel("wall time per run [s]")
            printed.set_title(ax, name, panel_w)
            ax.grid(True, alpha=0.3)
        fig.suptitle(title)
        printed.legend_below(fig, list(handles.values()), list(handles), width)
        _plain_log_ticks(fig)
        printed.save(fig, png, pdf)
    return fig


# --------------------------------------------------------------------------- long time
def invariant_series(store: str) -> dict[str, np.ndarray]:
    """t, |H - H0|, ||g||_inf and ||hidden constraint||_inf at the saved points of one store."""

    require_intact(store)  # a missing chunk must not read back as fill values
    t, H, g, hc = read_arrays(store, ("t", "H", "g", "hc"))
    inf = lambda x: np.max(np.abs(x), axis=1) if x.shape[1] else np.zeros(x.shape[0])  # noqa: E731
    return {"t": t, "dH": np.abs(H - H[0]), "g": inf(g), "hc": inf(hc)}


def growth_exponent(t: np.ndarray, y: np.ndarray, decades: float = 2.0) -> float:
    """Slope of log(running max of y) against log t on log-spaced times over the last ``decades`` decades."""
    ok = t > 0
    t, y = t[ok], np.maximum.accumulate(np.where(np.isfinite(y[ok]), y[ok], 0.0))
    if t.size < 3:
        return math.nan
    if y[-1] <= 0:
        return 0.0  # identically zero: nothing grows
    t0 = max(t[0], t[-1] * 10.0**-decades)
    grid = np.geomspace(t0, t[-1], 25)
    idx = np.clip(np.searchsorted(t, grid), 0, t.size - 1)
    yy = np.maximum(y[idx], FLOOR)
    if yy[0] <= FLOOR and yy[-1] <= FLOOR:
        return 0.0
    return float(np.polyfit(np.log(t[idx]), np.log(yy), 1)[0])


def drift_stats(series: dict[str, np.ndarray]) -> dict[str, float]:
    """Per series: max over t <= t_end / 1000 ("early"), over the last decade ("late"), overall, and the exponent."""
    t = series["t"]
    t_end = float(t[-1])
    first = t <= max(t[1] if t.size > 1 else t_end, t_end * 1e-3)
    last = t >= t_end / 10.0
    out = {}
    for key, _ in SERIES:
        y = series[key]
        out[f"{key}_early"] = float(np.max(y[first]))
        out[f"{key}_late"] = float(np.max(y[last]))
        out[f"{key}_max"] = float(np.max(y))
        # at round-off the fitted slope describes the noise, not a drift: leave it out
        out[f"{key}_exponent"] = growth_exponent(t, y) if out[f"{key}_max"] > ROUNDOFF else math.nan
    out["t_early"] = float(t[first][-1])
    out["t_end"] = t_end
    return out


def long_time_runs(study: Study):
    """(job, series) for every complete run of the study, in config order."""

    for r in study.rows:
        job = study.jobs[r.job]
        if store_status(job.store, job.hash) == "complete":
            yield job, invariant_series(job.store)


def long_time_table(study: Study, runs) -> list[dict]:
    rows = []
    for job, series in runs:
        stats = drift_stats(series)
        rows.append({"problem": study.problem, "method": job.name, "h": job.h, "steps": job.steps, **stats})
    return rows


LT_COLUMNS = ["problem", "method", "h", "steps", "t_early", "t_end"] + [
    f"{k}_{w}" for k, _ in SERIES for w in ("early", "late", "max", "exponent")
]


def long_time_markdown(rows: list[dict]) -> str:
    """|H - H0|, ||g||_inf, ||G^T M^-1 p||_inf: max up to t_early, over the last decade, and the growth exponent."""
    head = "| problem | method | h | steps |"
    sep = "|---|---|---|---|"
    for key, _ in SERIES:
        head += f" {PLAIN[key]} early | late | exponent |"
        sep += "---|---|---|"
    lines = [head, sep]
    for r in rows:
        cells = [r["problem"], r["method"], f"{r['h']:g}", f"{r['steps']:d}"]
        for k, _ in SERIES:
            expo = _fmt(r[f"{k}_exponent"], ".2f") if r[f"{k}_max"] > ROUNDOFF else "round-off"
            cells += [_fmt(r[f"{k}_early"], ".1e"), _fmt(r[f"{k}_late"], ".1e"), expo]
        lines.append("| " + " | ".join(cells) + " |")
    t_early = rows[0]["t_early"] if rows else math.nan
    note = (
        f"\nMaxima of |H - H0|, ||g||_inf and ||G^T M^-1 p||_inf. "
        f"early: max over t <= {t_early:g}; late: max over the last decade of [0, t_end]; exponent: slope of "
        "log(running max) against log t over the last two decades (0: bounded, 1: linear drift); "
        f"round-off: the series stays below {ROUNDOFF:.0e}.\n"
    )
    return "\n".join(lines) + "\n" + note


def _loglog(ax, t, y, color: str, label: str):
    """The series (faint) and its running maximum (solid), the curve that shows drift or its absence; exact
    zeros of the running maximum as marks on the axis floor. Returns (the solid line, whether there are zeros)."""

    ok = t > 0
    tt, yy = envelope(t[ok], np.where(np.isfinite(y[ok]), y[ok], 0.0))
    top = np.fmax.accumulate(yy)
    ax.loglog(tt, printed.nonzero(yy), color=color, lw=0.5, alpha=0.3)
    (line,) = ax.loglog(tt, printed.nonzero(top), color=color, lw=1.3, label=label)
    return line, printed.zero_marks(ax, tt, top, color=color, marker="|", s=12, lw=0.6)


def long_time_plot(panels: list[tuple[str, list]], png: str, pdf: str, width: float = WIDTHS[DEFAULT_WIDTH]):
    """Per problem: |H - H0|, ||g||, hidden constraint against t, log-log, one line per method (runs with the same
    numbers one line, named by all: ``printed.identical_groups``), at the printed ``width`` (inches): three
    panels a row where they fit. Returns the figure."""

    ncols = min(len(SERIES), max(1, int(width // MIN_PANEL_W)))
    per = math.ceil(len(SERIES) / ncols)  # rows per problem
    panel_w = width / ncols
    names: list[str] = []
    for _, runs in panels:
        names += [job.name for job, _ in runs if job.name not in names]
    title = "long-time behaviour: running maximum (solid) and values (faint)"
    if len(panels) == 1:  # one problem: its name once, above the figure
        title = f"{panels[0][0]}\n{title}"
    title = printed.wrap(title, width, printed.STYLE["figure.titlesize"])
    with printed.style():
        fig = printed.new_figure(width, len(panels) * per * min(2.4, 0.85 * panel_w) + 0.3 * title.count("\n") + 0.8)
        grid = fig.subplots(len(panels) * per, ncols, squeeze=False)
        handles: dict[str, object] = {}
        for p, (name, runs) in enumerate(panels):
            axes = grid[p * per : (p + 1) * per].ravel()
            for ax in axes[len(SERIES) :]:
                fig.delaxes(ax)
            groups = printed.identical_groups([np.concatenate([s[k] for k, _ in SERIES]) for _, s in runs])
            for ax, (key, label) in zip(axes, SERIES):
                zero = False
                for group in groups:  # runs with the same numbers: one curve, named by all of them
                    job, series = runs[group[0]]
                    name_all = printed.joined_name([runs[j][0].name for j in group])
                    color = f"C{names.index(job.name) % 10}"
                    line, z = _loglog(ax, series["t"], series[key], color=color, label=name_all)
                    handles.setdefault(name_all, line)
                    zero |= z
                if zero:
                    printed.floor_room(ax)
                note = f" ({printed.ZERO_NOTE})" if zero else ""
                head = PLAIN[key] if len(panels) == 1 else f"{name}: {PLAIN[key]}"
                printed.set_title(ax, head + note, panel_w)
                ax.set_xlabel("t")
                ax.set_ylabel(label)
                ax.grid(True, alpha=0.3)
        fig.suptitle(title)
        printed.legend_below(fig, list(handles.values()), list(handles), width)
        _plain_log_ticks(fig)
        printed.save(fig, png, pdf)
    return fig


# --------------------------------------------------------------------------- writers used by the rules
def accuracy_targets(study: Study) -> tuple[float, ...]:
    return tuple(float(t) for t in study.cfg.get("accuracy_targets") or TARGETS)


def _convention_note(study: Study) -> str:
    c = study.convention
    sample = {"all": "every saved point", "periods": "t = jT"}.get(c.sample) or f"t = j * {c.sample:g}"
    return (
        f"e_s = max over {sample} in [0, {study.t_end:g}] of ||y_n - y_ref(t_n)||_{c.norm} "
        f"(reference: {study.reference}); wall time of a run: the best of {timing_repeats(study)} timed repeats "
        f"of its time loop into memory, its compiled loop warmed first (compile time excluded; backend "
        f"{study.cfg.get('backend', 'auto')}); the cheapest measured run that reaches the target."
    )


def study_figure(study: Study, png: str, pdf: str) -> None:
    """The study's figure, results/<study>/<study>.png (called by the aggregate rule after errors.csv is written)."""
    if study.study_kind == "work_precision":
        rows = work_precision_rows(study, layout.errors_csv(study.results, study.name))
        targets, repeats = accuracy_targets(study), timing_repeats(study)
        work_precision_plot([(study.title, rows)], png, pdf, targets, repeats, printed.width(study))
    elif study.study_kind == "long_time":
        long_time_plot([(study.title, list(long_time_runs(study)))], png, pdf, printed.width(study))
    else:
        raise ConfigError(f"study {study.name!r}: kind {study.study_kind!r} has no work-precision or long-time figure")


def write_study(study: Study, errors_csv: str, md: str, out_csv: str) -> int:
    """The tables of one work_precision or long_time study; returns the number of runs in them."""
    if study.study_kind == "work_precision":
        rows = work_precision_rows(study, errors_csv)
        targets = accuracy_targets(study)
        table = time_to_accuracy(rows, targets)
        text = f"# {study.title}: time to accuracy\n\n{_convention_note(study)}\n\n"
        write_text(text + time_to_accuracy_markdown(table, targets), md)
        write_csv(table, out_csv, TTA_COLUMNS)
        return len(rows)
    if study.study_kind == "long_time":
        table = long_time_table(study, long_time_runs(study))
        write_text(f"# {study.title}: long-time drift\n\n" + long_time_markdown(table), md)
        write_csv(table, out_csv, LT_COLUMNS)
        return len(table)
    raise ConfigError(f"study {study.name!r}: kind {study.study_kind!r} has no work-precision or long-time tables")


def write_time_to_accuracy(studies: list[Study], out_csv: str) -> int:
    """results/beyond/time_to_accuracy.csv over the work_precision ``studies``: one row per (problem, target,
    method), the cheapest run with e_s <= target (empty wall_s, label, setting, e_s where none reaches it).
    Returns the number of rows."""
    table = []
    for st in studies:
        rows = work_precision_rows(st, layout.errors_csv(st.results, st.name))
        targets = accuracy_targets(st)
        found = time_to_accuracy(rows, targets)
        table += [{**r, "method": r["family"]} for t in targets for r in found if r["target"] == t]
    write_csv(table, out_csv, TIME_TO_ACCURACY_COLUMNS)
    return len(table)


def _width(studies: list[Study]) -> float:
    """The printed width of a summary figure: its first study's (``printed.width``)."""
    return printed.width(studies[0]) if studies else WIDTHS[DEFAULT_WIDTH]


def write_summary(study_kind: str, studies: list[Study], png: str, pdf: str, md: str, out_csv: str) -> None:
    """The figure and table over every study of ``study_kind`` (results/beyond/)."""
    if study_kind == "work_precision":
        panels, table = [], []
        targets = accuracy_targets(studies[0]) if studies else TARGETS
        for st in studies:
            rows = work_precision_rows(st, layout.errors_csv(st.results, st.name))
            panels.append((st.problem, rows))
            table += time_to_accuracy(rows, targets)
        repeats = "/".join(str(n) for n in sorted({timing_repeats(st) for st in studies}))
        work_precision_plot(panels, png, pdf, targets, repeats, _width(studies))
        notes = "\n".join(f"- {st.name}: {_convention_note(st)}" for st in studies)
        text = f"# Work precision: time to accuracy\n\n{notes}\n\n" + time_to_accuracy_markdown(table, targets)
        write_text(text, md)
        write_csv(table, out_csv, TTA_COLUMNS)
        return
    if study_kind == "long_time":
        panels, table = [], []
        for st in studies:
            runs = list(long_time_runs(st))
            panels.append((st.problem, runs))
            table += long_time_table(st, runs)
        long_time_plot(panels, png, pdf, _width(studies))
        write_text("# Long-time drift\n\n" + long_time_markdown(table), md)
        write_csv(table, out_csv, LT_COLUMNS)
        return
    raise ConfigError(f"kind {study_kind!r}: expected work_precision or long_time")

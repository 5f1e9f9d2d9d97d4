"""The study figures (docs/method.md section 5), written as PNG and PDF.

- ``convergence``: log-log e_s, e_lambda, e_hc against h per method, each curve with its dotted
  reference slope (``reference_order``: the rule of docs/configuration.md, Reference slopes), and the
  conservation panels e_H and e_g (the maximum over the constraints; each one's in errors.zarr);
- ``solution_error`` (fig1): ||y_n - y(t_n)|| against t / T (linear axes: it grows linearly);
- ``invariants`` (fig2): against t, log y: lambda error, hidden constraint, H error, g error;
- ``constraint_panels`` (fig3): against t, log y: hidden constraint, H error and each |g_i|.

In a study with a ``grid``, the convergence figure has a row of panels per combination and the
figures of single runs a curve per run and combination, labelled with it (``theta_dot0=1.5``).

Uses the object-oriented matplotlib API (no pyplot state), Agg backend.
"""

from __future__ import annotations

import math

import numpy as np

from hbvm_core.metrics import ROUNDOFF_ULPS, roundoff_floor

from . import printed
from .printed import AXIS_ROOM, tick_label
from .storage import Expected, load_trajectory, store_state
from .study import Study

#: curves longer than this are drawn as a max-envelope over this many bins (bounded memory and file size)
MAX_POINTS = 20000
#: the same for the stacked log panels of fig2 / fig3 (error maxima per bin: what a log plot shows anyway)
PANEL_POINTS = 4000


def log_locator(lo: float, hi: float, room: int = 12):
    """A major-tick locator for a log axis over [lo, hi] with at least three ticks and at most ``room`` (as
    many labels as fit the axis): decades where the range holds three (every second or third decade on a long
    range), else 1, 2, 5 times the decades, else every integer multiple; the finest that fits where none has
    three."""
    from matplotlib.ticker import LogLocator

    room = max(3, room)
    if not (np.isfinite(lo) and np.isfinite(hi) and 0 < lo < hi):
        return LogLocator(base=10, numticks=min(8, room))
    d0, d1 = math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1
    fits = (1.0,)
    for subs in ((1.0,), (1.0, 2.0, 5.0), tuple(float(i) for i in range(1, 10))):
        count = sum(lo <= m * 10.0**d <= hi for d in range(d0, d1 + 1) for m in subs)
        if count >= 3 and (subs == (1.0,) or count <= room):
            return LogLocator(base=10, subs=subs, numticks=room if subs == (1.0,) else 40)
        if count <= room:
            fits = subs
    return LogLocator(base=10, subs=fits, numticks=40)


def _plain_log_ticks(fig, label_room: float = 0.2) -> None:
    """At least three labelled ticks on every log axis: plainly from 0.001 to 1000, else as $10^{-6}$
    (``printed.tick_label``; matplotlib's default labels only the decades: one label on an axis spanning less
    than a decade); on a y axis at most one per ``label_room`` inches of its height."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter, NullLocator

    for ax in fig.axes:
        box = ax.bbox  # before the layout: near enough to say how many labels fit
        for axis, scale, lim, room in (
            (ax.xaxis, ax.get_xscale(), ax.get_xlim, box.width / fig.dpi / 0.3),  # a label is about 0.25 in wide
            (ax.yaxis, ax.get_yscale(), ax.get_ylim, box.height / fig.dpi / label_room),  # 0.12 in high
        ):
            if scale != "log":
                continue
            lo, hi = sorted(lim())
            axis.set_major_locator(log_locator(lo, hi, int(room)))
            axis.set_major_formatter(FuncFormatter(tick_label))
            few = 0 < lo < hi and hi / lo < 1e4  # minor ticks only where they are few enough to read
            axis.set_minor_locator(LogLocator(base=10, subs="auto", numticks=40) if few else NullLocator())
            axis.set_minor_formatter(NullFormatter())


#: per method: marker, line style and marker size (decreasing, hollow: coinciding curves stay visible)
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
LINESTYLES = ("-", "--", "-.", (0, (5, 1, 1, 1, 1, 1)))


def method_style(i: int) -> dict:
    """Line keywords of the i-th method of a plot: its colour, marker and line style."""
    return {
        "color": f"C{i % 10}",
        "marker": MARKERS[i % len(MARKERS)],
        "ls": LINESTYLES[i % len(LINESTYLES)],
        "ms": max(3.5, 8.0 - 1.5 * (i % 4)),
        "mfc": "none",
        "mew": 1.2,
        "lw": 1.2,
    }


def envelope(t: np.ndarray, y: np.ndarray, max_points: int = MAX_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """(t, max of y) over max_points / 2 bins when there are more than max_points points, else (t, y)."""
    if len(t) <= max_points:
        return t, y
    edges = np.linspace(0, len(t), max_points // 2 + 1).astype(int)
    idx = edges[:-1]
    with np.errstate(all="ignore"):
        ymax = np.fmax.reduceat(np.nan_to_num(y, nan=-np.inf), idx)
    ymax[~np.isfinite(ymax)] = np.nan
    return t[idx], ymax


def _slope(rate, s) -> float | None:
    if rate is None:
        return None
    if isinstance(rate, str):
        mult = rate[:-1]
        return (float(mult) if mult else 1.0) * (s or 0) or None
    return float(rate)


#: error -> the keys of a method's declared ``orders`` it follows (e_s: the lower of q and p)
ORDER_KEYS = {"e_s": ("q", "p"), "e_lambda": ("lam",), "e_hc": ("hc",)}


def theoretical_order(method, var: str) -> float | None:
    """The order of ``var`` (e_s, e_lambda, e_hc) that ``method`` (a method object, or an entry for
    ``method_from_entry``) declares in its ``orders`` ({"q": ..., "p": ..., "lam": ...}, None where unknown), or None
    where it declares none."""
    if isinstance(method, dict):
        from hbvm_core.methods import method_from_entry

        try:
            method = method_from_entry(method)
        except Exception:  # an entry the study already checked; a method that cannot say has no order
            return None
    orders = getattr(method, "orders", None)
    if not isinstance(orders, dict):
        return None
    # a number, or a multiple of s written like "2s" (as in expected_rates)
    values = [_slope(orders.get(key), getattr(method, "s", None)) for key in ORDER_KEYS[var]]
    if not values or any(v is None for v in values):
        return None
    return float(min(values))


def reference_order(study: Study, study_method, var: str) -> tuple[float | None, str]:
    """(p, how) of one curve's reference slope, by the one rule of docs/configuration.md (Reference slopes):
    the study's ``expected_rates[var]`` evaluated for this method (``"2s"``: 2 s of its own s), "expected";
    else the order its method declares (``theoretical_order``), "declared"; else (None, ""): no slope."""
    p = _slope(study.expected_rates.get(var), study_method.s)
    if p:
        return p, "expected"
    p = theoretical_order(getattr(study_method, "method", None) or study_method.entry, var)
    return (p, "declared") if p else (None, "")


# --------------------------------------------------------------------------- convergence
def _asymptotic(ds, sub, var: str, rate: str) -> np.ndarray:
    """The rows of one method (``sub``) whose error is not at the round-off or reference floor: a point is
    at a floor when a rate pair it belongs to is flagged (errors.zarr ``roundoff_*``, ``reference_floor_s``)."""
    flag, below = (f"{kind}_{var.removeprefix('e_')}" for kind in ("roundoff", "reference_floor"))
    f = np.asarray(sub[flag].values, dtype=bool) if flag in ds else np.zeros(sub.sizes["h"], dtype=bool)
    low = f.copy()
    low[:-1] |= f[1:]  # the flag sits on the second row of its pair
    if below in ds:
        low |= np.asarray(sub[below].values, dtype=bool)  # the finer error of the pair: at the reference floor
    return ~low


def _all_roundoff(ds, rate: str, flag: str) -> bool:
    """Every rate pair of every method (rows with a rate or a round-off flag) is at the round-off floor."""
    if flag not in ds:
        return False
    flags = np.asarray(ds[flag].values, dtype=bool)
    pairs = np.isfinite(ds[rate].values) | flags
    return bool(pairs.any() and flags[pairs].all())


#: the error panels of the convergence figure: (error, its rate, title, y label)
RATE_PANELS = [
    ("e_s", "rate_s", "solution error", r"$e_s$"),
    ("e_lambda", "rate_lambda", "multiplier error", r"$e_\lambda$"),
    ("e_hc", "rate_hc", "hidden constraint", r"$e_{hc}$"),
]
#: the conservation panels of the convergence figure: (error, no rate, title, y label); no reference slope
CONSERVATION = [("e_H", None, "energy error", r"$e_H$"), ("e_g", None, "constraint error", r"$e_g$")]
#: the smallest printed width (inches) of a panel, tick labels included: more panels than fit wrap to a new row
MIN_PANEL_W = 1.7
#: the x label of the convergence panels
H_LABEL = "step size $h$"


def panel_grid(n: int, width_in: float) -> tuple[int, int]:
    """(rows, columns) for n panels at a printed width: as few rows as panels of MIN_PANEL_W allow, balanced."""
    most = max(1, int(width_in // MIN_PANEL_W))
    rows = math.ceil(n / most)
    return rows, math.ceil(n / rows)


def convergence_plot(study: Study, ds, png: str, pdf: str):
    """Log-log errors against h for each method, with dotted reference slopes C h^p, and what the method
    conserves: e_H and e_g against h (no slope; e_g only for a constrained problem), at the study's printed
    width (``printed.width``).

    Each method has its own colour, hollow marker and line style; methods whose errors agree to
    ``printed.SAME_RTOL`` in every panel are one curve, named "HBVM(2,2) = (4,2)". One legend below the
    panels names the curves, the reference slopes and the round-off floor. Each curve's p is its own method's
    (``reference_order``), drawn only for a curve with a rate in the panel; one line per distinct p (grey when
    several curves share it). A panel whose every rate pair is at the round-off floor is left out, and the
    title says so. Exact zeros are marks on the axis floor. Returns the figure.
    """

    with printed.style():
        fig = _convergence_figure(study, ds, printed.width(study))
        printed.save(fig, png, pdf)
    return fig


def _convergence_figure(study: Study, ds, W: float):

    panels = RATE_PANELS + (CONSERVATION if study.dims[1] else CONSERVATION[:1])  # e_g: only with constraints
    panels = [p for p in panels if np.isfinite(ds[p[0]].values).any()]
    combos = _combinations(study, ds)  # a row of panels per grid combination
    noise = [p for p in panels if p[1] and all(_all_roundoff(d, p[1], _flag(p[0])) for _, d in combos)]
    panels = [p for p in panels if p not in noise]
    groups = printed.identical_groups([_digits(ds.isel(scheme=i), panels) for i in range(ds.sizes["scheme"])])
    nrows, ncols = panel_grid(max(1, len(panels)), W)
    panel_h = min(2.2, 0.85 * W / ncols)
    title = _suptitle(study)
    if noise:
        names = ", ".join(p[0] for p in noise)
        title += f"\n{names}: every rate pair at the round-off floor (<= {ROUNDOFF_ULPS:g} eps x scale), not drawn"
    title = printed.wrap(title, W, printed.STYLE["figure.titlesize"])
    H = len(combos) * (nrows * panel_h + (0.2 if study.grid else 0.0)) + 0.2 * (title.count("\n") + 1) + 0.6
    fig = printed.new_figure(W, H)
    fig.suptitle(title)
    subfigs = fig.subfigures(len(combos), 1, squeeze=False)[:, 0] if study.grid else [fig]
    legend: dict[tuple, tuple] = {}  # key -> (handle, label), methods first
    instances = study.instances if study.grid else [study.instance_of("")]
    for sub_fig, (heading, sub_ds), inst in zip(subfigs, combos, instances):
        if heading:
            sub_fig.suptitle(heading, fontsize=printed.STYLE["axes.titlesize"])
        axes = sub_fig.subplots(nrows, ncols, squeeze=False).ravel()
        for ax in axes[len(panels) :]:
            sub_fig.delaxes(ax)  # an empty slot of the grid: nothing drawn
        for ax, panel in zip(axes, panels):
            _convergence_panel(study, sub_ds, ax, panel, groups, legend, W / ncols)
            if panel[0] == "e_s":
                _reference_band(ax, reference_floor(study, inst), legend, reference_band(study))
    entries = sorted(legend.items(), key=lambda kv: kv[0])
    printed.legend_below(fig, [h for _, (h, _) in entries], [lab for _, (_, lab) in entries], W)
    _plain_log_ticks(fig)
    return fig


def reference_floor(study: Study, inst) -> float | None:
    """The accuracy of the study's numerical reference for ``inst`` (``metrics.reference_accuracy``, as
    ``tables.reference_floor``; None for a closed form or no reference): e_s below it measures the reference."""
    from hbvm_core.metrics import reference_accuracy

    c = study.convention
    reference_kind = getattr(c, "reference_kind", "auto")
    return reference_accuracy(
        inst.problem, inst.t_end, c.norm, study.reference, reference_kind, getattr(c, "rtol", None)
    )


def reference_band(study: Study) -> str:
    """The legend's name of the band below the numerical reference's accuracy: its solver and tolerance."""
    return f"reference floor (DOP853 at rtol {study.convention.rtol:g}, estimated)"


def _reference_band(ax, floor: float | None, legend: dict, name: str) -> None:
    """The band below the reference's accuracy ``floor`` on an e_s panel, named in the legend."""
    if floor is None:
        return
    lo, hi = ax.get_ylim()
    if floor > lo:
        band = ax.axhspan(lo, min(floor, hi), color="C1", alpha=0.15, lw=0, zorder=0)
        legend.setdefault((3, 0.0, ""), (band, name))
    ax.set_ylim(lo, hi)


def _digits(sub, panels) -> np.ndarray:
    """One method's errors in every panel as one array, those at the round-off floor (``roundoff_floor`` of
    size 1) as -1: two methods are one curve when these agree (``printed.identical_groups``)."""
    e = np.concatenate([np.ravel(np.asarray(sub[p[0]].values, dtype=float)) for p in panels] or [np.zeros(0)])
    return np.where(e <= roundoff_floor(1.0), -1.0, e)


def _flag(var: str) -> str:
    return f"roundoff_{var.removeprefix('e_')}"


def _combinations(study: Study, ds) -> list:
    """[(heading, the (scheme, h) dataset)] per grid combination; [("", ds)] without a grid."""
    if not study.grid:
        return [("", ds)]
    out, position = [], study.grid_positions()
    for inst in study.instances:
        at = dict(zip(study.grid, position(inst.values)))
        out.append((_combo_label(inst.key), ds.isel(at)))
    return out


def _convergence_panel(study: Study, ds, ax, panel, groups, legend: dict, panel_w: float) -> None:
    """One panel: the error ``var`` against h per group of identical methods (``printed.identical_groups``),
    exact zeros on the floor; for a rate panel the reference slopes, for a conservation panel the round-off
    floor (ROUNDOFF_ULPS eps of a quantity of size 1) dashed and the y axis at least 1e-17 .. 1e-11 around it."""

    var, rate, title, ylabel = panel
    with_rate = []  # (h, e, p, how, color) per curve with a rate
    zero = False
    drawn = []  # (name, this panel's errors) per curve
    for group in groups:
        i = group[0]
        sub = ds.isel(scheme=i)
        h, e = sub.h.values, np.asarray(sub[var].values, dtype=float)
        ok = np.isfinite(e)
        if not ok.any():
            continue
        style = printed.at_print_size(method_style(i))
        (line,) = ax.loglog(h[ok], printed.nonzero(e[ok]), **style)
        zero |= printed.zero_marks(ax, h[ok], e[ok], color=style["color"], marker=style["marker"], s=10)
        name = printed.joined_name([str(ds.isel(scheme=j).name.values) for j in group])
        legend.setdefault((0, i), (line, name))
        drawn.append((name, e))
        if rate is None:
            continue
        asym = ok & (e > 0) & _asymptotic(ds, sub, var, rate)
        o = np.flatnonzero(ok)  # this curve's rows (a grid's combinations have h of their own)
        a, rated = asym[o], np.isfinite(np.asarray(sub[rate].values, dtype=float))[o]
        if not (a[1:] & a[:-1] & rated[1:]).any():
            continue  # no rate in this panel: no slope
        p, how = reference_order(study, study.methods[i], var)
        if p and p > 0:
            with_rate.append((h[asym], e[asym], p, how, style["color"]))
    if rate is None:
        floor = roundoff_floor(1.0)
        line = ax.axhline(floor, color="0.5", ls="--", lw=0.8)
        legend.setdefault((2, 0.0, ""), (line, f"{ROUNDOFF_ULPS:g} eps (round-off)"))
        lo, hi = ax.get_ylim()
        ax.set_ylim(min(lo, 1e-17), max(hi, 1e-11))
    for p in sorted({c[2] for c in with_rate}):
        curves = [c for c in with_rate if c[2] == p]
        how = "/".join(sorted({c[3] for c in curves}, reverse=True))
        color = curves[0][4] if len(curves) == 1 else "0.4"
        hs = np.concatenate([c[0] for c in curves])
        hh = np.array([hs.max(), hs.min()])
        c0 = 0.5 * min(float(np.min(e / h**p)) for h, e, *_ in curves)  # below every curve at every h
        line = _reference_line(ax, hh, c0 * hh**p, p, how, color)
        legend.setdefault((1, p, how, color), (line, line.get_label()))
    if zero:
        printed.floor_room(ax)
    # curves that coincide in this panel only (their markers nest): the title names them
    same = [g for g in printed.identical_groups([d for _, d in drawn]) if len(g) > 1]
    notes = [printed.joined_name([drawn[j][0] for j in g]) for g in same] + ([printed.ZERO_NOTE] if zero else [])
    ax.set_xlabel(H_LABEL)
    ax.set_ylabel(ylabel)
    printed.set_title(ax, title + (f" ({'; '.join(notes)})" if notes else ""), panel_w)
    ax.grid(True, alpha=0.3)


#: a sweep figure draws markers up to this many grid values, lines alone beyond (no 10^4 markers)
MARKED_POINTS = 50
#: beyond this many grid values a sweep curve is drawn through the min and max of each of SWEEP_POINTS / 2 bins
SWEEP_POINTS = 2000


def min_max_bins(x: np.ndarray, y: np.ndarray, points: int = SWEEP_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) through the min and the max of y in each of points / 2 bins of consecutive values (the vertical
    extent a line through every point has at that width: what the figure shows of it), NaN for a bin without a
    number; (x, y) as given up to ``points`` values."""
    if len(x) <= points:
        return x, y
    idx = np.linspace(0, len(x), points // 2 + 1).astype(int)[:-1]
    with np.errstate(all="ignore"):
        lo = np.fmin.reduceat(np.where(np.isnan(y), np.inf, y), idx)
        hi = np.fmax.reduceat(np.where(np.isnan(y), -np.inf, y), idx)
    lo[~np.isfinite(lo)] = np.nan
    hi[~np.isfinite(hi)] = np.nan
    return np.repeat(x[idx], 2), np.column_stack([lo, hi]).ravel()


def sweep_panels(study: Study, ds) -> list[tuple[str, str]]:
    """(variable, title) of the sweep figure's panels: the error constant where there is a reference (some e_s),
    the mean iterations per step, e_H, and e_g for a constrained problem."""
    panels = [("e_s", "error constant e_s / h^p")] if np.isfinite(ds["e_s"].values).any() else []
    panels += [("mean_iterations", "mean iterations per step"), ("e_H", "energy error max |H − H0|")]
    panels += [("e_g", "constraint error max |g|")] if study.dims[1] else []
    if _size_sweep(study) and "wall_s" in ds and "steps" in ds and np.isfinite(ds["wall_s"].values).any():
        panels.append(("seconds_per_step", "wall seconds per step"))
    return panels


def _size_sweep(study: Study) -> bool:
    """Whether the grid changes the problem's size (a chain over its number of links: ``Study.sizes_vary``, known
    from the expansion); then the cost of a step against the grid value is the sweep's other question."""
    return study.sizes_vary


def _panel_values(sub, var: str) -> np.ndarray:
    """A panel's values of one method, (h, grid value): a column of errors.zarr, or the wall seconds per step."""
    if var == "seconds_per_step":
        with np.errstate(all="ignore"):
            return np.asarray(sub["wall_s"].values, dtype=float) / np.asarray(sub["steps"].values, dtype=float)
    return np.asarray(sub[var].values, dtype=float)


def log_grid_axis(x: np.ndarray) -> bool:
    """A sweep's grid axis is logarithmic where its values are positive and span a factor of 20 or more (links
    10 .. 1000: the small values are not crowded into the axis's first percent)."""
    finite = x[np.isfinite(x)]
    return finite.size > 1 and finite.min() > 0 and finite.max() >= 20 * finite.min()


def sweep_axis(ds, key: str) -> tuple[np.ndarray, np.ndarray, str]:
    """(x, order, label): the grid values in increasing order (``order``: their positions along the grid), or
    the positions themselves for values that are not numbers."""
    raw = ds[key].values
    try:
        x = np.asarray(raw, dtype=float)
    except (TypeError, ValueError):
        return np.arange(raw.size, dtype=float), np.arange(raw.size), f"{key} (position in the grid)"
    order = np.argsort(x, kind="stable")
    return x[order], order, key


def _sweep_curve(ax, x, y, style: dict, log: bool) -> tuple[object, bool]:
    """One curve of a sweep panel (markers only up to MARKED_POINTS values, ``min_max_bins`` beyond SWEEP_POINTS);
    (the line, whether it has exact zeros: on a log axis, gaps in the line and marks on the panel's floor,
    ``printed.zero_marks``)."""

    y = np.asarray(y, dtype=float)
    zero = False
    if log:
        zero = printed.zero_marks(ax, x, y, color=style["color"], marker="|", s=10, lw=0.6)
        y = printed.nonzero(y)
    if x.size > MARKED_POINTS:
        style = {**style, "marker": "none", "lw": 0.9}
    (line,) = ax.plot(*min_max_bins(x, y), **style)
    return line, zero


def _finest_and_coarsest(values: np.ndarray) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Per grid value (column of a (h, value) array, h decreasing) the index of its finest and of its coarsest
    step size with a number (the step sizes of a grid value may be its own: T/n of its own period T); (None,
    None) where no grid value has one. A grid value without any has index -1 (its NaN there is drawn as a gap)."""
    finite = np.isfinite(values)
    if not finite.any():
        return None, None
    some = finite.any(axis=0)
    fine = np.where(some, values.shape[0] - 1 - np.argmax(finite[::-1], axis=0), -1)
    return fine, np.where(some, np.argmax(finite, axis=0), -1)


def _steps_words(h: np.ndarray, at: np.ndarray, which: str = "finest") -> str:
    """The step size of the curve through rows ``at`` (-1: none): "h = 0.00625", or "each value's finest h"."""
    distinct = np.unique(h[at[at >= 0]])
    return f"h = {distinct[0]:.4g}" if distinct.size == 1 else f"each value's {which} h"


#: the y label of each sweep panel
SWEEP_YLABELS = {
    "e_s": r"$e_s / h^p$",
    "mean_iterations": "iterations",
    "e_H": r"$e_H$",
    "e_g": r"$e_g$",
    "seconds_per_step": "s / step",
}
#: inches per labelled major tick of a sweep panel's log y axis (mathtext labels such as $10^{-12}$ are about 0.14 in
#: high; a label every 0.3 in leaves a gap of one label between two)
SWEEP_TICK_ROOM = 0.3


def sweep_plot(study: Study, ds, png: str, pdf: str):
    """A one-key grid study (kind sweep): per method against the grid value (``sweep_panels``): the error
    constant e_s / h^p at the finest step (p: the method's reference order of e_s, ``reference_order``, else 2),
    where there is a reference, with the band below the reference's accuracy (errors.zarr ``reference_accuracy``)
    shaded in it; the mean iterations per step, e_H and e_g (log) at the finest step size (solid) and the coarsest
    (dotted); where the grid changes the problem's size (``_size_sweep``), the wall seconds per step of each run.
    The grid axis is logarithmic where its values span a factor of 20 or more (``log_grid_axis``). At the study's
    printed width (``printed.width``): panels of at least MIN_PANEL_W inches, the legend
    below them. Never blank: with ``reference: none`` the other panels are drawn. Returns the figure."""

    with printed.style():
        fig = _sweep_figure(study, ds, printed.width(study))
        printed.save(fig, png, pdf)
    return fig


def _sweep_figure(study: Study, ds, W: float):

    (key,) = study.grid
    x, order, xlabel = sweep_axis(ds, key)
    panels = sweep_panels(study, ds)
    nrows, ncols = panel_grid(len(panels), W)
    panel_w = W / ncols
    panel_h = min(2.0, 0.8 * panel_w)
    title = printed.wrap(_suptitle(study), W, printed.STYLE["figure.titlesize"])
    H = nrows * panel_h + 0.2 * (title.count("\n") + 1) + 0.15
    fig = printed.new_figure(W, H)
    fig.suptitle(title)
    axes = list(fig.subplots(nrows, ncols, squeeze=False).ravel())
    for ax in axes[len(panels) :]:
        fig.delaxes(ax)  # an empty slot of the grid: nothing drawn
    zeros = [False] * len(panels)
    handles, labels, bands = [], [], []
    for i in range(ds.sizes["scheme"]):
        sub = ds.isel(scheme=i)
        h = sub.h.values
        style = printed.at_print_size(method_style(i))
        words, line = [], None
        for k, (ax, (var, _)) in enumerate(zip(axes, panels)):
            values = _panel_values(sub, var)[:, order]
            fine, coarse = _finest_and_coarsest(values)
            if fine is None:
                continue
            at = np.arange(values.shape[1])
            if var == "e_s":
                p = reference_order(study, study.methods[i], "e_s")[0] or 2.0
                hp = h[fine] ** p
                line, zero = _sweep_curve(ax, x, values[fine, at] / hp, style, log=True)
                zeros[k] |= zero
                words.append(f"C = e_s / h^{p:g} at {_steps_words(h, fine)}")
                bands.append((ax, hp, style["color"]))
                continue
            log = var != "mean_iterations"
            line, zero = _sweep_curve(ax, x, values[fine, at], style, log)
            zeros[k] |= zero
            if not np.array_equal(coarse, fine):
                _, zero = _sweep_curve(ax, x, values[coarse, at], {**style, "ls": ":", "alpha": 0.6}, log)
                zeros[k] |= zero
                coarsest = _steps_words(h, coarse, "coarsest").removeprefix("h = ").removeprefix("each value's ")
                steps = f"{_steps_words(h, fine)} solid, {coarsest} dotted"
            else:
                steps = _steps_words(h, fine)
            if steps not in words:
                words.append(steps)
        if line is not None:
            handles.append(line)
            labels.append(f"{sub.name.values}: {'; '.join(words)}")
    for ax, (var, title), zero in zip(axes, panels, zeros):
        if var != "mean_iterations":
            ax.set_yscale("log")
        if zero:
            printed.floor_room(ax)
        printed.set_title(ax, title + (f" ({printed.ZERO_NOTE})" if zero else ""), panel_w)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(SWEEP_YLABELS[var])
        if log_grid_axis(x):
            ax.set_xscale("log")  # its ticks: _plain_log_ticks
        else:
            ax.xaxis.set_major_locator(_grid_locator(panel_w))
        ax.grid(True, which="major", alpha=0.3)
    band = _sweep_bands(bands, _sweep_reference_floor(ds, order), x)
    if band is not None:
        handles.append(band)
        labels.append(f"{reference_band(study)}: C of an e_s below the reference's accuracy")
    _plain_log_ticks(fig, label_room=SWEEP_TICK_ROOM)
    wrapped = [printed.wrap(label, W - LEGEND_HANDLE, printed.MIN_PT) for label in labels]
    legend = printed.legend_below(fig, handles, wrapped, W)
    if legend is not None:  # the figure grows by the legend's height: the panels keep theirs
        tall = legend.get_window_extent(fig.canvas.get_renderer()).height / fig.dpi
        fig.set_size_inches(W, H + tall + 0.05)
    return fig


#: inches of a legend entry taken by its handle and the gaps around it (its label wraps to the rest of the width)
LEGEND_HANDLE = 0.6


def _grid_locator(panel_w: float):
    """Major ticks of a sweep panel's grid axis: as many as fit its width at about 0.45 in per label, at 1, 2 or 5
    times a power of ten."""
    from matplotlib.ticker import MaxNLocator

    return MaxNLocator(nbins=max(2, int((panel_w - AXIS_ROOM) / 0.45)), steps=[1, 2, 5, 10])


def _sweep_reference_floor(ds, order) -> np.ndarray | None:
    """The reference's estimated accuracy at each grid value, in the order of the figure's x (errors.zarr
    ``reference_accuracy``; NaN: a closed form or none), or None where there is none at any."""
    if "reference_accuracy" not in ds:
        return None
    floor = np.asarray(ds["reference_accuracy"].values, dtype=float).reshape(-1)[order]
    return floor if np.isfinite(floor).any() else None


def _sweep_bands(bands: list, floor: np.ndarray | None, x: np.ndarray):
    """Per method's error-constant curve (``bands``: its axes, h^p and colour), the band below the reference's
    accuracy in its units (``floor`` / h^p at each grid value, as the convergence figure's band below e_s): a
    constant in it measures the reference, not the method. Returns one band (for the legend), or None."""
    band = None
    if floor is None:
        return None
    for ax, hp, color in bands:
        lo, hi = ax.get_ylim()
        edge = np.minimum(floor / hp, hi)
        if np.nanmax(edge) > lo:
            band = ax.fill_between(x, lo, edge, color=color, alpha=0.15, lw=0, zorder=0)
        ax.set_ylim(lo, hi)
    return band


def _reference_line(ax, h, y, p, how: str, color):
    """A dotted line C h^p, labelled "order p (expected)" or "order p (declared)" (``reference_order``) for the
    legend (a label on the line would cover data or other labels). Returns the line."""
    (line,) = ax.loglog(h, y, ":", color=color, lw=1.2, alpha=0.9, label=f"order {p:g} ({how})")
    return line


# --------------------------------------------------------------------------- figures of single runs
def _runs(study: Study):
    """(row, Job, Trajectory) for each successful row of the study, in the order of its rows (per method,
    its grid combinations in grid order, their step sizes); each trajectory carries its combination's problem."""

    for r in study.rows:
        job = study.jobs[r.job]
        inst = study.instance_of(r.combo)
        if store_state(job.store, Expected.of_job(job, inst.checked()))[0] == "complete":
            yield r, job, load_trajectory(job.store, inst.problem, job=job, planned=inst.checked())


def _run_label(study: Study, r, job) -> str:
    """A curve's legend entry: the method and step size, and the grid combination (``theta_dot0=1.5``) in
    a study with a grid."""
    label = f"{job.name}, h = {_hlabel(study, r)}"
    return f"{label}, {_combo_label(r.combo)}" if r.combo else label


def _combo_label(combo: str) -> str:
    """A grid combination (``Instance.key``, ``a=1,b=2``) as written in legends and headings: ``a=1, b=2``."""
    return combo.replace(",", ", ")


def _reference(study: Study, traj, times):
    from hbvm_core.references import reference_solution

    conv = study.convention
    reference_kind = "exact" if study.reference == "exact" else getattr(conv, "reference_kind", "auto")
    return reference_solution(traj.problem, times, reference_kind=reference_kind, rtol=conv.rtol)


def _norm(study: Study):
    return study.convention.norm


def solution_error_plot(study: Study, png: str, pdf: str):
    """fig1: ||y_n - y(t_n)|| against t / T (or t): one curve per run, and so per grid combination, each
    against its combination's period T, at the study's printed width. Returns the figure."""
    from hbvm_core.metrics import vector_norm

    W = printed.width(study)
    with printed.style():
        fig = printed.new_figure(W, 0.45 * W + 0.6)
        ax = fig.subplots()
        periodic = all(inst.period for inst in study.instances or [study.instance_of("")])
        handles, labels = [], []
        for r, job, traj in _runs(study):
            q, p, _ = _reference(study, traj, traj.t)
            err = vector_norm(traj.y() - np.concatenate([q, p], axis=1), _norm(study))
            x = traj.t / _period(study, r) if periodic else traj.t
            (line,) = ax.plot(*envelope(x, err), lw=1, label=_run_label(study, r, job))
            handles.append(line)
            labels.append(line.get_label())
        ax.set_xlabel("t / T (periods)" if periodic else "t")
        ax.set_ylabel(f"solution error, {_norm(study)}-norm")
        ax.set_xlim(left=0)
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        printed.set_title(ax, _suptitle(study), W)
        printed.legend_below(fig, handles, labels, W)
        printed.save(fig, png, pdf)
    return fig


def _time_panels(study: Study, panels: list[tuple[str, str]], curves, png: str, pdf: str):
    """Stacked log-y panels against t (shared axis), one per (title, y label), one curve per run and so per grid
    combination: curves(traj) -> [(t, y), ...]; exact zeros are marks on the panel's floor. At the study's printed
    width, the legend below. Returns the figure."""
    from matplotlib.lines import Line2D

    W = printed.width(study)
    with printed.style():
        fig = printed.new_figure(W, len(panels) * (1.15 if W > 4 else 1.0) + 0.9)
        axes = fig.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0]
        zeros = [False] * len(panels)
        handles, labels = [], []
        for k, (r, job, traj) in enumerate(_runs(study)):
            color = f"C{k % 10}"
            for i, (ax, (t, y)) in enumerate(zip(axes, curves(traj))):
                tt, yy = envelope(np.asarray(t), np.asarray(y, dtype=float), PANEL_POINTS)
                how = {"lw": 0.8}
                if np.any(yy == 0):
                    how.update(marker=".", ms=1.5)  # a point between two zeros stays seen
                if _ulp_noise(yy):
                    how.update(ls="none", marker=".", ms=1.5)  # round-off noise: points, not a block of lines
                label = _run_label(study, r, job)
                (line,) = ax.semilogy(tt, printed.nonzero(yy), color=color, label=label, **how)
                zeros[i] |= printed.zero_marks(ax, tt, yy, color=color, marker="|", s=12, lw=0.6)
            handles.append(Line2D([], [], color=color, lw=0.8))  # the run's colour, whatever its panels show
            labels.append(line.get_label())
        for ax, (title, ylabel), zero in zip(axes, panels, zeros):
            if zero:
                printed.floor_room(ax)
            printed.set_title(ax, title + (f" ({printed.ZERO_NOTE})" if zero else ""), W)
            ax.set_ylabel(ylabel)
            ax.grid(True, alpha=0.3)
        axes[-1].set_xlabel("t")
        fig.suptitle(printed.wrap(_suptitle(study), W, printed.STYLE["figure.titlesize"]))
        printed.legend_below(fig, handles, labels, W)
        _plain_log_ticks(fig)
        printed.save(fig, png, pdf)
    return fig


def _ulp_noise(y: np.ndarray) -> bool:
    """The series is round-off noise: below the round-off floor, on a few multiples of an ulp (at most 50 values)."""
    y = np.asarray(y, dtype=float)
    y = y[np.isfinite(y)]
    return bool(y.size and y.max() <= roundoff_floor(1.0) and np.unique(y).size <= 50)


def invariants_plot(study: Study, png: str, pdf: str):
    """fig2: lambda error, hidden constraint, H error, g error against t (log y), a curve per run and grid
    combination. Returns the figure."""
    from hbvm_core.metrics import vector_norm

    def curves(traj):
        _, _, lam_ref = _reference(study, traj, traj.tstep)
        return [
            (traj.tstep, vector_norm(traj.lam - lam_ref, "inf")),
            (traj.t[1:], vector_norm(traj.hidden()[1:], _hc_norm(study))),  # 0 at t = 0: consistent data
            (traj.t[1:], traj.energy_error()[1:]),  # 0 at t = 0 by definition
            (traj.t, vector_norm(traj.g(), "inf")),
        ]

    return _time_panels(
        study,
        [LAMBDA_PANEL, HIDDEN_PANEL, ENERGY_PANEL, ("constraint error", r"$\|g(q_n)\|_\infty$")],
        curves,
        png,
        pdf,
    )


def constraint_panels_plot(study: Study, png: str, pdf: str):
    """fig3: hidden constraint, H error and each constraint |g_i| against t (log y), a curve per run and
    grid combination. Returns the figure."""
    from hbvm_core.metrics import vector_norm

    nu = study.built_problem.nu

    def curves(traj):
        g = traj.g()
        out = [(traj.t[1:], vector_norm(traj.hidden()[1:], _hc_norm(study))), (traj.t[1:], traj.energy_error()[1:])]
        return out + [(traj.t, np.abs(g[:, i])) for i in range(nu)]

    panels = [HIDDEN_PANEL, ENERGY_PANEL] + [(f"constraint g_{i + 1}", f"$|g_{i + 1}(q_n)|$") for i in range(nu)]
    return _time_panels(study, panels, curves, png, pdf)


#: (title, y label) of the panels of fig2 and fig3
LAMBDA_PANEL = ("multiplier error", r"$|\lambda_n - \lambda(t_n)|$")
HIDDEN_PANEL = ("hidden constraint", r"$\|G(q_n)^T M^{-1} p_n\|$")
ENERGY_PANEL = ("energy error", r"$|H(y_n) - H(y_0)|$")


def _suptitle(study: Study) -> str:
    return study.title if study.title != study.name else f"{study.name}: {study.problem}"


def _hc_norm(study: Study):
    c = study.convention
    return c.norm if c.hc_norm is None else c.hc_norm


def _period(study: Study, r) -> float | None:
    """The period of a row's grid combination (the study's without a grid)."""
    return study.instance_of(r.combo).period


def _hlabel(study: Study, r) -> str:
    T = _period(study, r)
    if r.n is not None and T and math.isclose(r.h * r.n, T, rel_tol=1e-12):
        return f"T/{r.n}"
    return f"{r.h:.6g}"


PLOTS = {
    "solution_error": solution_error_plot,
    "invariants": invariants_plot,
    "constraint_panels": constraint_panels_plot,
}

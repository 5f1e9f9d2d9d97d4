"""Figures at the size a journal prints them (docs/configuration.md, Figures).

A study's ``figure: {width: single | double | <inches>}`` sets the printed width (default double, 7 in); the
figure is drawn at that size with text of at least ``MIN_PT`` points, laid out by matplotlib's constrained layout,
its legend below the axes (never over data), long titles wrapped, and saved as PNG and as a PDF with embedded
TrueType fonts (``pdf.fonttype`` 42). Exact zeros on a log axis are marks on the axis floor, not values at 1e-18.
"""

from __future__ import annotations

import math
import re
import textwrap

import numpy as np

#: printed widths (inches) by name: one journal column, the full page width
WIDTHS = {"single": 3.5, "double": 7.0}
DEFAULT_WIDTH = "double"
#: the smallest text (points) at the printed size
MIN_PT = 7.0
#: text sizes (points) of the figures, and the PDF's embedded TrueType fonts (42; 3 would be bitmaps in some viewers)
STYLE = {
    "font.size": 8.0,
    "axes.titlesize": 8.0,
    "axes.labelsize": 8.0,
    "xtick.labelsize": MIN_PT,
    "ytick.labelsize": MIN_PT,
    "legend.fontsize": MIN_PT,
    "figure.titlesize": 9.0,
    "axes.titlepad": 3.0,
    "lines.markersize": 4.0,
    "legend.handlelength": 2.0,
    "legend.columnspacing": 1.2,
    "mathtext.default": "regular",  # upright symbols in the text's own font: one font to embed
    "pdf.fonttype": 42,
    "ps.fonttype": 42,
}
#: dots per inch of the PNG
PNG_DPI = 300
#: the average width of a character in ems of its font size (DejaVu Sans), for wrapping and legend columns
CHAR_EM = 0.6


def width(study) -> float:
    """The printed width (inches) of ``study``'s figure: its ``figure: {width: ...}`` key, double by default."""
    value = ((getattr(study, "cfg", None) or {}).get("figure") or {}).get("width", DEFAULT_WIDTH)
    if isinstance(value, str) and value in WIDTHS:
        return WIDTHS[value]
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return float(value)
    from hbvm_core.errors import ConfigError

    raise ConfigError(f"figure: width {value!r}: expected single, double or a width in inches")


def style():
    """The figures' text sizes and PDF fonts, for building and saving a figure."""
    import matplotlib

    return matplotlib.rc_context(STYLE)


def new_figure(width_in: float, height_in: float):
    """A Figure of the printed size on an Agg canvas (which can measure text), with the constrained layout and
    small pads."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width_in, height_in), layout="constrained")
    FigureCanvasAgg(fig)
    fig.get_layout_engine().set(w_pad=2 / 72, h_pad=2 / 72, wspace=0.03, hspace=0.03)
    return fig


def wrap(text: str, width_in: float, pt: float) -> str:
    """``text`` broken into lines that fit ``width_in`` inches at ``pt`` points (its own line breaks kept)."""
    chars = max(12, int(width_in * 72 / (CHAR_EM * pt)))
    return "\n".join(textwrap.fill(line, chars) if line else line for line in text.split("\n"))


#: inches of a panel's width taken by its y label and tick labels
AXIS_ROOM = 0.65


def set_title(ax, text: str, panel_w: float) -> None:
    """The axes' title, wrapped to the width of a panel of ``panel_w`` inches less its y axis's labels."""
    ax.set_title(wrap(text, panel_w - AXIS_ROOM, STYLE["axes.titlesize"]))


def tick_label(x: float, _pos=None) -> str:
    """A log axis tick: plainly from 0.001 to 1000 (0.05, 20), else in mathtext: $10^{-6}$, $2\\times10^{-6}$."""
    if not (np.isfinite(x) and x > 0):
        return ""
    e = math.floor(math.log10(x) + 1e-9)
    m = round(x / 10.0**e, 6)
    if -3 <= e <= 3:
        return f"{x:.6g}"
    return f"$10^{{{e}}}$" if m == 1 else f"${m:g}\\times10^{{{e}}}$"


def legend_below(fig, handles: list, labels: list[str], width_in: float):
    """One legend for the whole figure, below the axes (outside every panel: it covers no data), in as many
    columns as fit the figure's width (measured on the drawn legend)."""
    if not handles:
        return None
    renderer = fig.canvas.get_renderer()
    for ncol in range(len(labels), 0, -1):
        legend = fig.legend(handles, labels, loc="outside lower center", ncol=ncol, frameon=False)
        if ncol == 1 or legend.get_window_extent(renderer).width <= 0.97 * width_in * fig.dpi:
            return legend
        legend.remove()
    return None


def at_print_size(style: dict) -> dict:
    """Line keywords (``plots.method_style``) with markers and lines sized for the printed figure."""
    return {**style, "ms": 0.6 * style.get("ms", 6.0), "mew": 0.9, "lw": 1.0}


def save(fig, png: str, pdf: str) -> None:
    """The figure as PNG and as PDF (vector, fonts embedded), under ``style``."""
    with style():
        fig.savefig(png, dpi=PNG_DPI)
        fig.savefig(pdf)


#: how close two curves' errors must be (relative) to be one curve: the digits a log plot could ever tell apart
SAME_RTOL = 1e-8


def identical_groups(curves: list[np.ndarray]) -> list[list[int]]:
    """Indices of ``curves`` grouped by equality (NaN where NaN, else within SAME_RTOL), in order of first index."""
    groups: list[list[int]] = []
    for i, c in enumerate(curves):
        c = np.asarray(c, dtype=float)
        for g in groups:
            d = np.asarray(curves[g[0]], dtype=float)
            if c.shape == d.shape and np.array_equal(np.isnan(c), np.isnan(d)):
                ok = ~np.isnan(c)
                if np.allclose(c[ok], d[ok], rtol=SAME_RTOL, atol=0.0):
                    g.append(i)
                    break
        else:
            groups.append([i])
    return groups


def joined_name(names: list[str]) -> str:
    """Names of identical curves as one legend entry: "HBVM(2,2) = (4,2) = (6,2)" (a shared family written once)."""
    parts = [re.match(r"^([^(]*)(\(.*)$", n) for n in names]
    if len(names) > 1 and all(parts) and len({p.group(1) for p in parts}) == 1:
        return " = ".join([names[0]] + [p.group(2) for p in parts[1:]])
    return " = ".join(names)


def zero_marks(ax, x, y, **style) -> bool:
    """Marks on the axis floor (the bottom of the axes, whatever its limits) at the x where y is exactly 0;
    True if there are any. The curve itself should leave those points out (``nonzero``)."""
    from matplotlib.transforms import blended_transform_factory

    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    at = x[y == 0]
    if not at.size:
        return False
    if at.size > 400:  # a rug: one mark per distinct place the eye can tell apart
        at = at[:: math.ceil(at.size / 400)]
    ax.scatter(
        at,
        np.zeros_like(at),
        transform=blended_transform_factory(ax.transData, ax.transAxes),
        clip_on=False,
        zorder=3,
        **style,
    )
    return True


def floor_room(ax) -> None:
    """Room below a log axis's lowest value, so that its marks on the floor stand apart from every curve."""
    lo, hi = ax.get_ylim()
    if ax.get_yscale() == "log" and 0 < lo < hi:
        ax.set_ylim(lo / 3.0, hi)


def nonzero(y) -> np.ndarray:
    """y with its exact zeros (and negatives) as NaN: a log axis shows them as gaps, ``zero_marks`` on the floor."""
    y = np.asarray(y, dtype=float)
    return np.where(y > 0, y, np.nan)


#: a panel's note when it has marks on its floor
ZERO_NOTE = "zeros: marks on the floor"

"""The index of a sweep's ``run`` dimension (``shards.open_shards``): xarray's MultiIndex of (scheme, the grid keys,
h) that also takes ``method="nearest"`` and names the nearest values of a label that is not there.

``ds.sel(a1=0.5, method="nearest")`` takes, per level in order (scheme, the grid keys, h), the value nearest the
label among the runs the labels before it leave; an exact ``ds.sel(a1=0.55)`` takes a value within a relative
``REL`` of the label (a grid value typed as the config writes it), and a label that no run has is a
``NotOnGridError``: one line naming the key, the label and the nearest values there are. A selection that leaves
one level (the runs of one scheme and grid value: along ``h``) keeps these rules on that level.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from xarray.indexes import PandasIndex, PandasMultiIndex

from .storage import RunNotFoundError

#: the relative distance within which an exact selection takes a stored value (as ``select_run`` matches h)
REL = 1e-9


class NotOnGridError(RunNotFoundError):
    """A label that no run of the sweep has, with the nearest values there are (one line, no quotes)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def _scalar(value):
    """The label as a Python scalar, or None for what is not one (a list, a slice, an array)."""
    if isinstance(value, (str, bytes, int, float, np.generic)) and not isinstance(value, bool):
        return value.item() if isinstance(value, np.generic) else value
    if isinstance(value, np.ndarray) and value.ndim == 0:
        return value.item()
    return None


def snap(name: str, values: np.ndarray, label, method: str | None, tolerance=None):
    """The stored value of ``values`` (a level's values, repeated as along ``run``) that the label ``label`` selects:
    the nearest (``method="nearest"``, within ``tolerance`` if given) or the one within a relative REL; anything
    but a scalar label, or a ``method`` other than nearest, is passed on as given. NotOnGridError when none."""
    x = _scalar(label)
    if x is None or method not in (None, "nearest"):
        return label
    uniq = pd.unique(np.asarray(values))
    numeric = np.asarray(uniq).dtype.kind in "iuf" and isinstance(x, (int, float)) and not isinstance(x, bool)
    if not numeric:
        if x in set(uniq.tolist()):
            return x
        there = ", ".join(repr(v) for v in sorted(uniq.tolist(), key=str)[:10])
        raise NotOnGridError(f"{name} = {x!r} is not one of the runs' values: {there}")
    uniq = np.sort(np.asarray(uniq, dtype=float))
    d = np.abs(uniq - float(x))
    i = int(np.argmin(d))
    near = uniq[i]
    close = d[i] <= REL * max(abs(float(x)), abs(near)) if method is None else tolerance is None or d[i] <= tolerance
    if close:
        return values.dtype.type(near) if np.asarray(values).dtype.kind in "iu" else float(near)
    j = int(np.searchsorted(uniq, float(x)))
    around = uniq[max(j - 1, 0) : j + 1]
    there = " and ".join(repr(float(v)) for v in around)
    how = f"tolerance {tolerance!r}" if method else 'method="nearest" takes the nearest'
    raise NotOnGridError(f"{name} = {x!r} is not on the grid: the nearest values there are {there} ({how})")


class RunIndex(PandasMultiIndex):
    """The MultiIndex of ``run`` whose ``sel`` snaps scalar labels of its levels (``snap``) before selecting."""

    def sel(self, labels, method=None, tolerance=None):
        if not all(name in self.index.names for name in labels):  # the run dimension itself: as xarray does
            return super().sel(labels, method=method, tolerance=tolerance)
        rows = np.ones(len(self.index), dtype=bool)
        snapped = {}
        for name in [n for n in self.index.names if n in labels]:  # in level order: each within the ones before
            values = np.asarray(self.index.get_level_values(name))
            snapped[name] = snap(name, values[rows], labels[name], method, tolerance)
            x = _scalar(snapped[name])
            if x is not None:
                rows &= values == x
        result = super().sel(snapped)
        return _keep_snapping(result)


class LevelIndex(PandasIndex):
    """The index of the one level a selection leaves (e.g. ``h`` of one scheme and grid value), with ``snap``."""

    def sel(self, labels, method=None, tolerance=None):
        if method not in (None, "nearest") or len(labels) != 1:
            return super().sel(labels, method=method, tolerance=tolerance)
        (name, label), values = next(iter(labels.items())), np.asarray(self.index)
        return super().sel({name: snap(str(name), values, label, method, tolerance)})


def _keep_snapping(result):
    """A selection's result with the plain PandasIndex of a level it leaves replaced by a LevelIndex."""
    for name, index in list(result.indexes.items()):
        if type(index) is PandasIndex:
            level = LevelIndex(index.index, index.dim, coord_dtype=index.coord_dtype)
            result.indexes[name] = level
            result.variables.update(level.create_variables({name: result.variables[name]}))
    return result

"""The CSV files of a study (errors.csv, timings.csv): one rule for a cell, written by rows or by columns.

A cell is a float by ``repr`` (the shortest text that reads back as the same double), empty for a missing
number (None, NaN, +-inf), ``str`` of anything else (ints, bools, text); quoted as Python's ``csv`` module quotes
(``QUOTE_MINIMAL``), one line per row ending in ``\\n``. ``write_rows`` takes a list of dicts (a study of run
stores, ``tables.compute_errors``); ``write_columns`` takes arrays (a sharded study: a hundred thousand rows), and
formats each distinct value of a column once.
"""

from __future__ import annotations

import contextlib
import csv
import io
import math
import os
import shutil

import numpy as np

from .forking import beside

#: rows of a table formatted at a time by ``write_columns``
CHUNK_ROWS = 1 << 16
#: the fewest rows that ``write_columns`` formats in two processes (a fork costs some milliseconds)
SPLIT_ROWS = 20000
#: the Python types whose equal values (``==``, hence one dict key) always have one text: not float (0.0 == -0.0)
EXACT_KEYS = frozenset({str, int, type(None)})


def cell(v) -> str:
    """The text of one cell (unquoted): floats by repr, missing numbers empty, the rest by str."""
    if isinstance(v, np.generic):  # a numpy scalar: as the Python number it holds
        v = v.item()
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(v) if math.isfinite(v) else ""
    return str(v)


def quoted(text: str) -> str:
    """``text`` as a field inside a row of the csv module (``QUOTE_MINIMAL``: quoted where it holds a comma, a
    quote or a line break)."""
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow([text, ""])  # two fields: never the lone-empty-field form
    return buf.getvalue()[:-2]


def write_rows(rows: list[dict], path: str, columns: tuple[str, ...]) -> None:
    """A CSV of the dicts ``rows`` (the ``columns`` of each; a missing key is an empty cell), written atomically."""
    tmp = path + ".tmp"
    with open(tmp, "w", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(columns)
        for row in rows:
            w.writerow([cell(row.get(c)) for c in columns])
    os.replace(tmp, path)


def column_cells(values) -> list[str]:
    """The quoted cells of one column (an array, or a list), each distinct value formatted once."""
    a = np.asarray(values)
    if a.dtype == np.float64:  # distinct by bit pattern (-0.0 and 0.0 apart); a number never needs quoting
        distinct, inverse = np.unique(a.view(np.int64), return_inverse=True)
        x = distinct.view(np.float64)
        texts = np.array(list(map(repr, x.tolist())), dtype=object)  # ``cell`` of a finite float
        texts[~np.isfinite(x)] = ""  # and of a missing one
        return texts[inverse.reshape(-1)].tolist()
    if a.dtype.kind in "iub":
        distinct, inverse = np.unique(a, return_inverse=True)
        return np.array(list(map(str, distinct.tolist())), dtype=object)[inverse.reshape(-1)].tolist()
    items = a.tolist()
    kinds = set(map(type, items))
    if kinds == {float}:
        return column_cells(np.array(items, dtype=np.float64))
    if kinds <= EXACT_KEYS:  # equal values, one text: each distinct value formatted and quoted once
        memo = {v: quoted(cell(v)) for v in set(items)}
    else:
        items = list(map(cell, items))
        memo = {t: quoted(t) for t in set(items)}
    return list(map(memo.__getitem__, items))


def write_columns(cols: dict, path: str, columns: tuple[str, ...], workers: int = 1) -> None:
    """A CSV of the arrays ``cols[c]`` for c in ``columns`` (one row per element), written atomically; the same
    text as ``write_rows`` of the same rows. ``workers`` > 1 and at least ``SPLIT_ROWS`` rows: the second half of
    the rows is formatted by a process forked here (``forking.beside``: it reads the columns it inherited) into a
    file of its own, appended to this one's half."""
    if len(columns) < 2:  # a row of one empty field is written '""' by the csv module: left to it
        write_rows([dict(zip(columns, r)) for r in zip(*(cols[c] for c in columns))], path, columns)
        return

    rows = len(cols[columns[0]])
    split = rows if workers < 2 or rows < SPLIT_ROWS else rows // 2
    tmp, part = path + ".tmp", path + ".part.tmp"
    try:
        with beside(lambda: None, lambda _: _write_rows_text(cols, columns, split, rows, part), split < rows) as send:
            if split < rows:
                send(None)  # the child has the columns already: it starts on its half
            with open(tmp, "w", newline="") as fh:
                fh.write(",".join(quoted(c) for c in columns) + "\n")
                _write_text(fh, cols, columns, 0, split)
        if split < rows:
            with open(tmp, "ab") as out, open(part, "rb") as half:
                shutil.copyfileobj(half, out, 1 << 20)
        os.replace(tmp, path)
    finally:
        for leftover in (tmp, part):
            with contextlib.suppress(FileNotFoundError):
                os.remove(leftover)


def _write_rows_text(cols: dict, columns: tuple[str, ...], a: int, b: int, path: str) -> None:
    """Rows a..b of the table (no header) into the file ``path``."""
    with open(path, "w", newline="") as fh:
        _write_text(fh, cols, columns, a, b)


def _write_text(fh, cols: dict, columns: tuple[str, ...], a: int, b: int) -> None:
    """Rows a..b of the table, CHUNK_ROWS at a time (memory bounded at 10^6 rows)."""
    for lo in range(a, b, CHUNK_ROWS):
        hi = min(lo + CHUNK_ROWS, b)
        cells = [column_cells(cols[c][lo:hi]) for c in columns]
        fh.write("\n".join(map(",".join, zip(*cells))) + "\n")

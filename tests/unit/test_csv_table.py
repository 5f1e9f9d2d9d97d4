"""errors.csv's text: the column writer (``csv_table.write_columns``, a sharded study's hundred thousand rows) and
the row writer (``write_rows``, a study of run stores) against an oracle written here from Python's csv module
and ``repr``, on cells that each rule of a cell meets (NaN, +-inf, None, -0.0, floats that need 17 digits, ints
as numpy and Python objects, bools, text with a comma, a quote and a line break); floats read back bit for bit."""

from __future__ import annotations

import csv
import io
import math

import numpy as np
import pytest

from hbvm_workflow import csv_table
from hbvm_workflow.csv_table import write_columns, write_rows

#: floats whose shortest round-trip text is long or unusual: 17 significant digits, subnormal, exponents
FLOATS = [0.1 + 0.2, 1 / 3, 2.0**-1074, 1e16, 1e-5, 123456789.12345679, -0.0, 0.0, 2.0**0.5, 5e-324 * 3]


def table() -> dict[str, np.ndarray]:
    """Columns of every kind the aggregation writes (float, int, object with None, text, grid values)."""
    R = 12
    f = np.array(FLOATS + [math.nan, math.inf], dtype=float)
    return {
        "e_s": f,
        "rate_s": np.r_[np.nan, -np.inf, f[2:]],
        "steps": np.arange(R, dtype=np.int64) * 10**15,
        "n": np.array([None, 3, None, -1, 0, 7, None, 2**40, 1, 2, 3, 4], dtype=object),
        "k": np.array([np.int64(2)] * R, dtype=object),
        "flag": np.arange(R) % 3 == 0,
        "name": np.array(["HBVM(1,1)", 'say "hi"', "a\nb", "", "plain", "x,y", "ok"] + ["z"] * 5, dtype=object),
        "status": np.array(["ok", "failed"] * 6),  # a numpy text array
        "theta_dot0": np.array([0.5, 1 / 3, -0.0, math.inf, math.nan, 1.0] * 2, dtype=object),
        "mixed": np.array([1.5, 2, None, np.float64(0.1 + 0.2), True, "t"] * 2, dtype=object),
    }


def oracle(cols: dict[str, np.ndarray], columns: tuple[str, ...]) -> str:
    """The file by the csv module, each cell by hand: a float (numpy's as Python's) by repr, empty where not
    finite; None empty; anything else str."""

    def text(v) -> str:
        if isinstance(v, np.generic):
            v = v.item()
        if v is None or (isinstance(v, float) and not math.isfinite(v)):
            return ""
        return repr(v) if isinstance(v, float) else str(v)

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(columns)
    for i in range(len(cols[columns[0]])):
        w.writerow([text(cols[c][i]) for c in columns])
    return buf.getvalue()


@pytest.mark.parametrize("chunk_rows, workers", [(csv_table.CHUNK_ROWS, 1), (5, 1), (5, 2), (4, 2)])
def test_columns_as_csv_and_repr(tmp_path, monkeypatch, chunk_rows, workers):
    monkeypatch.setattr(csv_table, "CHUNK_ROWS", chunk_rows)  # 5: the 12 rows formatted in three pieces
    monkeypatch.setattr(csv_table, "SPLIT_ROWS", 2)  # workers 2: rows 6..11 formatted by a forked process
    cols = table()
    columns = tuple(cols)
    write_columns(cols, str(tmp_path / "c.csv"), columns, workers)
    got = (tmp_path / "c.csv").read_text()
    assert got == oracle(cols, columns)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.csv"]  # no temporary left beside it
    # every finite float reads back as the same double (repr is the shortest round-trip text), signed zero too
    rows = list(csv.DictReader(io.StringIO(got)))
    back = np.array([float(r["e_s"]) if r["e_s"] else math.nan for r in rows])
    assert np.array_equal(back.view(np.int64)[:-2], cols["e_s"].view(np.int64)[:-2])
    assert [r["name"] for r in rows] == list(cols["name"])  # the comma, quote and line break survive


def test_rows_as_csv_and_repr(tmp_path):
    cols = table()
    columns = tuple(cols)
    rows = [{c: cols[c][i] for c in columns} for i in range(len(cols["e_s"]))]
    write_rows(rows, str(tmp_path / "r.csv"), columns)
    assert (tmp_path / "r.csv").read_text() == oracle(cols, columns)


def test_one_column_and_no_rows(tmp_path):
    """A lone empty field is quoted by the csv module (a blank line would be no row); a table without rows is its
    header."""
    one = {"error": np.array(["", "step 3: diverged", ""], dtype=object)}
    write_columns(one, str(tmp_path / "one.csv"), ("error",))
    assert (tmp_path / "one.csv").read_text() == oracle(one, ("error",))
    empty = {"h": np.zeros(0), "name": np.zeros(0, dtype=object)}
    write_columns(empty, str(tmp_path / "empty.csv"), ("h", "name"))
    assert (tmp_path / "empty.csv").read_text() == "h,name\n"

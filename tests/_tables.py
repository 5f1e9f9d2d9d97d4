"""Read table.md, table.tex and table.html back into rows, and check each column against errors.csv by its
header and its position.

The headers are read as written; what a header means is said here, not taken from
``hbvm_workflow.tables``: e_s, e_lambda, e_H, e_g, e_hc name their errors.csv columns; a rate column
named ``rate(e_x)`` is the rate of e_x, a bare ``rate`` the rate of the error column left of it; ``n`` and
``h`` are the row's step-size labels. So two columns swapped (values or headers) cannot pass.

A block's last row, labelled ``fitted order (h range)``, holds in each rate column the fitted order of that
column's error and its range, ``2.00 (h 0.1..0.0125)``: the errors.csv column ``order_<x>`` of the rate
``rate_<x>``, which is the order on the rows of the range and empty on the others.
"""

from __future__ import annotations

import math
import re
from html.parser import HTMLParser

ERRORS = ("e_s", "e_lambda", "e_H", "e_g", "e_hc")
RATE_OF = {"e_s": "rate_s", "e_lambda": "rate_lambda", "e_hc": "rate_hc"}
#: the label of a block's fitted-order row
FITTED = "fitted order (h range)"
#: table cells that stand for no number
BLANK = {"—", "--", "", "round-off"}


def normalise(header: str) -> str:
    """'$e_\\lambda$' -> 'e_lambda', '$e_{hc}$' -> 'e_hc', 'rate($e_s$)' -> 'rate(e_s)', '$n$' -> 'n'."""
    return re.sub(r"[${}\\\s]", "", header).replace("rate(", "rate(").strip()


def columns(headers: list[str]) -> list[str | None]:
    """The errors.csv column of each header (None: not a number of errors.csv, e.g. a caption column)."""
    out: list[str | None] = []
    last_error = None
    for raw in headers:
        h = normalise(raw)
        if h in ERRORS:
            out.append(h)
            last_error = h
        elif h.startswith("rate"):
            inner = h[len("rate") :].strip("()")
            of = inner if inner else last_error
            assert of in RATE_OF, f"rate column {raw!r}: of which error? ({of!r})"
            out.append(RATE_OF[of])
        elif h in ("n", "h"):
            out.append(h)
        else:
            out.append(None)
    return out


def markdown_blocks(text: str) -> list[tuple[str, list[str], list[list[str]]]]:
    """(heading, header cells, rows of cells) per '## heading' block of table.md."""
    blocks = []
    heading = None
    for line in text.splitlines():
        if line.startswith("## "):
            heading = line[3:].strip()
            blocks.append((heading, [], []))
        elif line.startswith("|") and heading is not None:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if all(set(c) <= set("-:") for c in cells):
                continue
            head, rows = blocks[-1][1], blocks[-1][2]
            (rows.append(cells) if head else head.extend(cells))
    return blocks


def latex_blocks(text: str) -> list[tuple[str, list[str], list[list[str]]]]:
    """(heading, header cells, rows of cells) per \\multicolumn heading of table.tex."""
    blocks = []
    for line in text.splitlines():
        m = re.match(r"\\multicolumn\{\d+\}\{l\}\{(.*)\} \\\\$", line)
        if m:
            blocks.append((m.group(1).replace("\\_", "_"), [], []))
        elif line.endswith(r"\\") and blocks and "&" in line:
            cells = [c.strip() for c in line[: -len(r"\\")].split("&")]
            head, rows = blocks[-1][1], blocks[-1][2]
            (rows.append(cells) if head else head.extend(cells))
    return blocks


class _HTML(HTMLParser):
    def __init__(self):
        super().__init__()
        self.blocks: list = []
        self.cell: list[str] | None = None
        self.row: list[str] | None = None
        self.in_heading = False

    def handle_starttag(self, tag, attrs):
        if tag in ("h3", "h4", "caption"):
            self.in_heading = True
            self.blocks.append(["", [], []])
        elif tag == "tr":
            self.row = []
        elif tag in ("td", "th"):
            self.cell = []

    def handle_endtag(self, tag):
        if tag in ("h3", "h4", "caption"):
            self.in_heading = False
        elif tag in ("td", "th") and self.cell is not None and self.row is not None:
            self.row.append("".join(self.cell).strip())
            self.cell = None
        elif tag == "tr" and self.row is not None:
            head, rows = self.blocks[-1][1], self.blocks[-1][2]
            (rows.append(self.row) if head else head.extend(self.row))
            self.row = None

    def handle_data(self, data):
        if self.cell is not None:
            self.cell.append(data)
        elif self.in_heading:
            self.blocks[-1][0] += data


def html_blocks(text: str) -> list[tuple[str, list[str], list[list[str]]]]:
    parser = _HTML()
    parser.feed(text)
    return [(h.strip(), head, rows) for h, head, rows in parser.blocks if head]


def close(cell: str, value: str, column: str) -> bool:
    """A table cell against errors.csv's value: e-columns printed with 5 significant digits, rates with 2
    decimals, h with 6 significant digits; a blank cell for an empty value."""
    if cell in BLANK or value == "":
        return cell in BLANK and (value == "" or column.startswith("rate"))
    x, v = float(cell), float(value)
    if column.startswith("rate"):
        return abs(x - v) <= 0.005 + 1e-12
    if column in ("n",):
        return int(x) == int(v)
    return math.isclose(x, v, rel_tol=5e-5 if column != "h" else 5e-6)


def check_blocks(blocks, csv_rows: list[dict], label: str) -> int:
    """Every cell of every block against errors.csv (rows matched by the block heading = the method's name, in
    order); returns the number of numbers checked. Fails naming the file's block, row and column."""
    checked = 0
    by_name: dict[str, list[dict]] = {}
    for row in csv_rows:
        by_name.setdefault(row["name"], []).append(row)
    assert [h for h, _, _ in blocks] == list(by_name), ([h for h, _, _ in blocks], list(by_name))
    for heading, head, rows in blocks:
        cols = columns(head)
        assert sorted(c for c in cols if c in ERRORS) == sorted(ERRORS), (heading, head)
        assert sorted(c for c in cols if c and c.startswith("rate")) == sorted(RATE_OF.values()), (heading, head)
        assert label in cols, (heading, head)
        want = by_name[heading]
        assert rows and rows[-1][0] == FITTED, (heading, rows[-1] if rows else None)
        checked += check_fitted(heading, rows.pop(), cols, head, want)
        assert len(rows) == len(want), (heading, len(rows), len(want))
        for cells, row in zip(rows, want):
            assert len(cells) == len(cols), (heading, cells)
            for cell, col, raw in zip(cells, cols, head):
                if col is None:
                    continue
                assert close(cell, row[col], col), (heading, raw, col, cell, row[col])
                checked += cell not in BLANK
    return checked


def check_fitted(heading: str, cells: list[str], cols: list, head: list[str], want: list[dict]) -> int:
    """A block's fitted-order row against the errors.csv rows of its method: in each rate column the order and
    the first and last h of the rows where ``order_<x>`` is not empty, which are consecutive; returns the
    numbers checked."""
    checked = 0
    for cell, col, raw in zip(cells, cols, head):
        if not (col and col.startswith("rate")):
            continue
        order = "order" + col[len("rate") :]
        on = [i for i, row in enumerate(want) if row[order] != ""]
        if cell in BLANK:
            assert not on, (heading, raw, cell, [want[i][order] for i in on])
            continue
        m = re.fullmatch(r"(-?[0-9.]+) \(h ([0-9.e+-]+)\.\.([0-9.e+-]+)\)", cell)
        assert m, (heading, raw, cell)
        assert on == list(range(on[0], on[-1] + 1)), (heading, raw, on)  # one range of consecutive rows
        assert all(want[i][order] == want[on[0]][order] for i in on), (heading, raw)
        assert abs(float(m.group(1)) - float(want[on[0]][order])) <= 0.005 + 1e-12, (heading, raw, cell)
        for text, i in ((m.group(2), on[0]), (m.group(3), on[-1])):
            assert math.isclose(float(text), float(want[i]["h"]), rel_tol=5e-6), (heading, raw, cell)
        checked += 3
    return checked

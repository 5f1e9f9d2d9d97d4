"""table.md, table.tex and table.html: each column, found by its header and position, holds errors.csv's
column of that name (tests/_tables.py says what each header means; the numbers here are made up, each
column with its own digits, so that two columns swapped cannot pass)."""

from __future__ import annotations

import csv
import math

import pytest
from _tables import check_blocks, html_blocks, latex_blocks, markdown_blocks

from hbvm_workflow.layout import COLUMNS, EXTRA
from hbvm_workflow.study import expand_study
from hbvm_workflow.tables import html_table, latex_table, markdown_table, write_csv

CFG = {
    "problem": "planar_pendulum",
    "methods": [{"k": 1, "s": 1}, {"k": 2, "s": 2}],
    "t_end": 1,
    "h0": 0.1,
    "halvings": 2,
    "errors": {"reference": "exact", "norm": 1, "sample": "all"},
}


def made_up_rows(study) -> list[dict]:
    """One row per (method, n): e_s = 1.1e-2 ..., each error column with its own leading digits; rates likewise;
    no rate in a method's first row."""
    rows = []
    for mi, study_method in enumerate(study.methods):
        for r in study_method.rows:
            n = r.n
            scale = 10.0 ** -(n + 2 * mi + 2)
            rows.append(
                {
                    "problem": "planar_pendulum",
                    "k": study_method.k,
                    "s": study_method.s,
                    "h": r.h,
                    "study": study.name,
                    "method": study_method.label,
                    "name": study_method.name,
                    "n": n,
                    "t_end": 1.0,
                    "status": "ok",
                    "error": "",
                    "steps": round(1.0 / r.h),
                    "combo": "",
                    "e_s": 1.1 * scale,
                    "e_lambda": 2.2 * scale,
                    "e_H": 3.3e-16 * (n + 1),
                    "e_g": 4.4e-15 * (n + 1),
                    "e_hc": 5.5 * scale,
                    "rate_s": math.nan if n == 0 else 1.11 + mi,
                    "rate_lambda": math.nan if n == 0 else 2.22 + mi,
                    "rate_hc": math.nan if n == 0 else 3.33 + mi,
                    # fitted orders on the rows of their ranges: e_s on all, e_lambda on n = 1, 2, e_hc on none
                    "order_s": 1.23 + mi,
                    "order_lambda": math.nan if n == 0 else 2.34 + mi,
                    "order_hc": math.nan,
                    "mean_iterations": 4.0,
                    "wall_s": 0.1,
                }
            )
    return rows


@pytest.mark.parametrize("table_format", ["md", "tex", "html"])
def test_each_table_column_is_its_errors_csv_column(table_format, tmp_path):
    study = expand_study("cols", dict(CFG))
    rows = made_up_rows(study)
    write_csv(rows, str(tmp_path / "errors.csv"), COLUMNS + EXTRA)
    with open(tmp_path / "errors.csv") as fh:
        csv_rows = list(csv.DictReader(fh))
    text, parse = {
        "md": (markdown_table(study, rows), markdown_blocks),
        "tex": (latex_table(study, rows), latex_blocks),
        "html": (html_table(study, rows), html_blocks),
    }[table_format]
    checked = check_blocks(parse(text), csv_rows, study.row_label)
    # 6 rows x 5 errors, and 4 rows with rates x 3 rates, and the two labels of each row (n, and h beside it),
    # and per method the fitted orders of e_s and e_lambda with the first and last h of their ranges
    assert checked == 6 * 5 + 4 * 3 + 6 * 2 + 2 * 2 * 3

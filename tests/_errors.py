"""Made-up errors of a study, as the aggregation would write them, for the figures' tests: e = C h^p per method
with p chosen by the test (the oracle by construction), rates, round-off flags and fitted orders computed by
``hbvm_workflow.tables`` from them, and the (scheme, h) dataset of errors.zarr."""

from __future__ import annotations

import math

import numpy as np

from hbvm_core.metrics import at_roundoff, rates
from hbvm_workflow.tables import RATES, ROUNDOFF, errors_dataset, fit_orders

#: a made-up round-off error (below the floor 1000 eps = 2.2e-13 of a quantity of size 1)
ROUNDOFF_ERROR = 3e-16


def made_up_rows(study, order, roundoff=()) -> list[dict]:
    """One row per (method, combination, h) of ``study``: e_x = 10^-i h^p for x in e_s, e_lambda, e_hc with
    p = order(x, study_method) (the i-th method), ROUNDOFF_ERROR for the errors named in ``roundoff``, e_H and
    e_g at round-off (1e-16 (1 + i)), e_g per constraint 1e-16 (1 + i + j)."""
    nu = study.dims[1]
    out = []
    for i, sm in enumerate(study.methods):
        for inst in study.instances or [study.instance_of("")]:
            block = []
            for r in (r for r in sm.rows if r.combo == inst.key):
                row = {"method": sm.label, "name": sm.name, "k": sm.k, "s": sm.s, "h": r.h, "n": r.n}
                row.update(status="ok", error="", host="", combo=inst.key, steps=round(inst.t_end / r.h), **inst.values)
                for e in ("e_s", "e_lambda", "e_hc"):
                    row[e] = ROUNDOFF_ERROR if e in roundoff else 10.0**-i * r.h ** order(e, sm)
                row.update(e_H=1e-16 * (1 + i), e_g=1e-16 * (1 + i + max(nu - 1, 0)), mean_iterations=3.0)
                row["e_g_constraint"] = np.array([1e-16 * (1 + i + j) for j in range(nu)])
                block.append(row)
            h = [row["h"] for row in block]
            for rate, e in RATES.items():
                for j, (row, v) in enumerate(zip(block, rates(h, [row[e] for row in block]))):
                    floor = j > 0 and at_roundoff(block[j - 1][e], row[e])
                    row[ROUNDOFF[rate]] = floor
                    row[rate] = math.nan if floor else float(v)
            fit_orders(block)
            out += block
    return out


def made_up_dataset(study, order, roundoff=()):
    """errors.zarr's dataset of ``made_up_rows``."""
    return errors_dataset(study, made_up_rows(study, order, roundoff))

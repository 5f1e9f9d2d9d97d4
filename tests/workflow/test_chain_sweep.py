"""A sweep of the planar chain over its size (``kind: sweep``, ``grid: {links: [...]}``, ``save: summary``) through
Snakemake as a user runs it: each size another problem structure, without a compiled loop, so each run goes by the
numpy loop (``hbvm_core.per_run``) into the study's one sharded store, read back by ``links``.

Checked against the chain itself, not the code: unit masses, gravity and links, so H = |p|^2 / 2 + sum_i y_i and,
hanging at rest at theta0 = 0.5, H0 = -cos(0.5) n (n + 1) / 2 (bead i at depth (i + 1) cos 0.5); every rod keeps
length 1. U is linear and g quadratic, polynomials of degree <= 2k/s = 2 for HBVM(2,2), so HBVM(2,2) conserves H
and g to round-off (docs/method.md, Properties); RATTLE projects onto g = 0 but its H error is O(h^2).
"""

from __future__ import annotations

import math

import matplotlib
import numpy as np
import pytest
import xarray as xr
from test_chain_study_end_to_end import chain_energy, link_lengths
from test_workflow import ok, read_csv, snakemake, write_config

matplotlib.use("Agg")

from hbvm_workflow import plots  # noqa: E402
from hbvm_workflow.reading import open_study  # noqa: E402
from hbvm_workflow.study import expand_study  # noqa: E402

pytestmark = pytest.mark.slow

EPS = float(np.finfo(float).eps)
LINKS = [4, 8, 16]
STEPS = 20
SWEEP = {
    "kind": "sweep",
    "problem": "chain",
    "grid": {"links": LINKS},
    "methods": [{"k": 2, "s": 2}, {"method": "rattle"}],
    "t_end": 0.2,
    "h": [0.01],
    "errors": {"reference": "none"},
}


def test_a_chain_swept_over_its_size_gives_a_row_per_size_and_method_with_H_and_g_at_round_off(tmp_path):
    write_config(tmp_path, {"chain": SWEEP}, select=["chain"])
    ok(snakemake(tmp_path, "--cores", "2"))
    res = tmp_path / "results" / "chain"
    rows = read_csv(res / "errors.csv")
    assert sorted((int(r["links"]), r["method"]) for r in rows) == sorted(
        (n, m) for n in LINKS for m in ("hbvm_k2_s2", "rattle")
    )
    assert all(r["status"] == "ok" and r["error"] == "" and int(r["steps"]) == STEPS for r in rows)
    for r in rows:
        n = int(r["links"])
        # g_i = |q_i - q_(i-1)|^2 - 1 of coordinates up to n in size: a few ulps of n per step, both methods
        assert float(r["e_g"]) <= 10 * EPS * n * STEPS, r
        # |H| <= n (n + 1) / 2 (the heights): HBVM(2,2) keeps H to a few ulps of it per step; RATTLE does not
        roundoff_H = 10 * EPS * n * (n + 1) / 2 * STEPS
        if r["method"] == "hbvm_k2_s2":
            assert float(r["e_H"]) <= roundoff_H, r
        else:
            assert float(r["e_H"]) > 100 * roundoff_H, r  # O(h^2), far above round-off
    # each run timed on its own: its seconds per step in timings.csv
    timings = read_csv(res / "timings.csv")
    assert len(timings) == len(rows) and all(0 < float(t["wall_s"]) < 60 for t in timings)

    ds = open_study("chain", results=str(tmp_path / "results"))
    assert list(ds.dof.values[:4]) == ["x0", "y0", "x1", "y1"] and ds.sizes["dof"] == 2 * max(LINKS)
    for n in LINKS:
        for scheme in ("hbvm_k2_s2", "rattle"):
            one = ds.sel(links=n, scheme=scheme, h=0.01)
            assert int(one.status) == 0 and int(one.n_saved) == STEPS + 1
            q, p = one.q.values, one.p.values
            assert np.isnan(q[:, 2 * n :]).all() and np.isnan(p[:, 2 * n :]).all()  # past this chain's size
            q, p = q[:, : 2 * n], p[:, : 2 * n]
            H = chain_energy(q, p)
            assert H[0] == pytest.approx(-math.cos(0.5) * n * (n + 1) / 2, rel=10 * EPS)
            # the stored H_error is max |H - H0| over the stored states
            assert abs(float(one.H_error) - np.max(np.abs(H - H[0]))) <= 10 * EPS * n * n
            assert np.max(np.abs(link_lengths(q) - 1.0)) <= 10 * EPS * n * STEPS
    assert (res / "chain.png").stat().st_size > 10_000

    # the figure's last panel: each run's wall seconds per step (timings.csv), against links
    study = expand_study("chain", SWEEP, results=str(tmp_path / "results"))
    fig = plots.sweep_plot(study, xr.open_zarr(res / "errors.zarr"), str(tmp_path / "f.png"), str(tmp_path / "f.pdf"))
    last = fig.axes[-1]
    assert last.get_title().replace("\n", " ") == "wall seconds per step"
    for line, scheme in zip(last.get_lines(), ("hbvm_k2_s2", "rattle")):
        per_step = [float(t["wall_s"]) / STEPS for t in sorted(timings, key=lambda t: int(t["links"]))
                    if t["method"] == scheme]  # fmt: skip
        assert list(line.get_xdata()) == LINKS and np.allclose(line.get_ydata(), per_step, rtol=1e-12)

"""A convergence study in space and time of the planar chain (``grid: {links: [...]}``: the number of links, the
chain's ``n`` by the name a grid may use) through the package's own path: the runs solved by ``worker.solve_job``,
aggregated by ``tables.compute_errors``, tabulated and drawn. The small chain takes the dense linear algebra and
the 1000-link one the sparse (``hbvm_core.sparse``); the stores say which, and chunk q and p over dof as well as
time.

Checked against the chain itself, not the code: H = |p|^2 / 2 + sum_i y_i (unit masses, gravity and links, so U
is linear) computed from the stored q and p, and each link's length |q_i - q_(i-1)| = 1. No loop is compiled
(``backend: numpy``)."""

from __future__ import annotations

import os

import matplotlib
import numpy as np

matplotlib.use("Agg")

from hbvm_workflow import layout  # noqa: E402
from hbvm_workflow.loading import load_studies  # noqa: E402
from hbvm_workflow.plot_dispatch import study_plot  # noqa: E402
from hbvm_workflow.storage import CHUNK_BYTES, open_trajectory  # noqa: E402
from hbvm_workflow.tables import compute_errors, rows_from_outputs, write_tables  # noqa: E402
from hbvm_workflow.worker import solve_job  # noqa: E402

EPS = float(np.finfo(float).eps)
LINKS = (10, 1000)
H = (0.05,)  # h = 0.1 is past the fixed-point iteration's reach on 1000 links
CHAIN = {
    "problem": "chain",
    "backend": "numpy",
    "methods": [{"k": 2, "s": 2}],
    "t_end": 0.4,
    "h": list(H),
    "grid": {"links": list(LINKS)},
    "errors": {"reference": "self"},
}


def chain_energy(q: np.ndarray, p: np.ndarray) -> np.ndarray:
    """H = |p|^2 / 2 + sum of the beads' heights (unit masses and gravity), one per row."""
    return 0.5 * np.sum(p * p, axis=1) + np.sum(q[:, 1::2], axis=1)


def link_lengths(q: np.ndarray) -> np.ndarray:
    """|q_i - q_(i-1)| of every link, the first from the pin at the origin; (rows, links)."""
    beads = q.reshape(len(q), -1, 2)
    return np.linalg.norm(np.diff(beads, axis=1, prepend=0.0), axis=2)


def test_a_chain_study_over_its_size_runs_and_stores_every_run(tmp_path):
    results = str(tmp_path / "results")
    (study,) = load_studies({"studies": {"chain": CHAIN}, "results": results}).values()
    jobs = list(study.jobs.values())
    assert len(jobs) == len(LINKS) * len({*H, *(h / 2 for h in H)})  # and each h's h/2 partner (reference: self)
    for job in jobs:
        assert solve_job(job)["status"] == "ok"
    for job in jobs:
        n, steps = job.params["links"], round(job.t_end / job.h)
        ds = open_trajectory(job.store, load=True)
        assert ds.sizes["dof"] == 2 * n and ds.sizes["t"] == steps + 1
        assert ds.attrs["linear_algebra"] == ("sparse" if n >= 64 else "dense")
        q, p = ds["q"].values, ds["p"].values
        assert np.isfinite(q).all() and np.isfinite(p).all()
        # the chain hangs n deep: |H| and the heights are of order n^2 / 2; each step adds a few ulps of them
        scale = 1.0 + float(np.max(np.abs(q))) * n
        assert np.max(np.abs(chain_energy(q, p) - chain_energy(q, p)[0])) <= 100 * EPS * scale * steps
        assert np.max(np.abs(chain_energy(q, p) - ds["H"].values)) <= 10 * EPS * scale  # the stored H is this H
        # each rod keeps its unit length (g = 0) to round-off of the coordinates, |q| up to n
        assert np.max(np.abs(link_lengths(q) - 1.0)) <= 100 * EPS * n * steps
        assert np.max(np.abs(ds["g"].values)) <= 100 * EPS * n * steps
        # the store holds its rows (q, p: 2 (steps + 1) 2n floats) and a probe of the problem of G's nonzeros,
        # not of a dense G (4 points x 2n x n: 64 MB at n = 1000)
        assert os.path.getsize(job.store) <= 2**21 + 4 * 8 * (steps + 1) * 2 * n  # q, p, g, hc rows, 2 MiB else
        for name in ("q", "p"):  # chunked over time and dof, each chunk within CHUNK_BYTES
            rows, columns = ds[name].encoding["chunks"]
            assert 8 * rows * columns <= CHUNK_BYTES and columns <= 2 * n
    out = layout.aggregate_outputs(results, "chain")
    compute_errors(study, out["zarr"], out["csv"], out["timings"])
    rows = rows_from_outputs(study, out["csv"], out["zarr"])
    assert sorted({r["links"] for r in rows}) == list(LINKS)
    md, tex, html = (layout.table_path(results, "chain", ext) for ext in ("md", "tex", "html"))
    write_tables(study, rows, md, tex, html)
    png, pdf = layout.figure_path(results, "chain", "png"), layout.figure_path(results, "chain", "pdf")
    study_plot(study, out["zarr"], png, pdf)
    assert (tmp_path / "results" / "chain" / "chain.png").stat().st_size > 10_000

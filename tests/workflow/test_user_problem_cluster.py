"""A user problem (``mymod:factory``, a file next to the config) on an existing Dask scheduler whose
workers run elsewhere, without the config's folder on their PYTHONPATH: the solve step ships it."""

from __future__ import annotations

import os

import pytest
from test_workflow import ROOT, external_cluster, ok, read_csv, snakemake, write_config

pytestmark = pytest.mark.slow

MYMOD = '''
import numpy as np
import hbvm_core as hc


def pendulum(length=1.0):
    """The planar pendulum on a rod of the given length, written by a user."""
    return hc.Problem(
        name="my_pendulum",
        q0=[0.0, -length],
        p0=[1.0, 0.0],
        M=2.0,
        U=lambda Q: Q[:, 1].copy(),
        grad_U=lambda Q: np.broadcast_to([0.0, 1.0], Q.shape).copy(),
        g=lambda Q: (Q[:, 0] ** 2 + Q[:, 1] ** 2 - length**2)[:, None],
        G=lambda Q: 2.0 * Q[:, :, None],
        d2g=lambda Q, V: 2.0 * np.sum(V**2, axis=1)[:, None],
        params={"length": length},
    )
'''


def test_a_user_problem_on_an_external_scheduler_without_its_folder_on_the_workers_path(tmp_path):
    study_dir, elsewhere = tmp_path / "study", tmp_path / "elsewhere"
    study_dir.mkdir()
    elsewhere.mkdir()
    (study_dir / "mymod.py").write_text(MYMOD)
    env = dict(os.environ, PYTHONPATH=str(ROOT))  # the packages, not the module's folder
    with external_cluster(elsewhere, env) as address:
        study = {
            "problem": "mymod:pendulum",
            "params": {"length": 1.0},
            "methods": [{"k": 2, "s": 2}],
            "t_end": 1,
            "h": [0.1, 0.05],
            "errors": {"reference": "reference"},
        }
        write_config(study_dir, {"mine": study}, dask={"address": address})
        ok(snakemake(study_dir, "--cores", "1"))
        rows = read_csv(study_dir / "results" / "mine" / "errors.csv")
        assert [r["status"] for r in rows] == ["ok", "ok"] and abs(float(rows[1]["rate_s"]) - 2) < 0.1
        log = (study_dir / "logs" / "mine" / "solve.log").read_text()
        assert f"problem module {study_dir / 'mymod.py'} uploaded to the workers" in log
        assert f"computing on scheduler {address}" in log

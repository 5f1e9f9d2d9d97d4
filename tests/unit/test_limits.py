"""Budgets before work: a run's steps and store size are known before any job runs, and bounded."""

from __future__ import annotations

import shutil

import pytest

from hbvm_core.errors import ConfigError
from hbvm_workflow.loading import defaults, load_studies
from hbvm_workflow.study import check_limits, expand_study
from hbvm_workflow.worker import run_to_store

LIMITS = defaults("limits")


def config(results, **over) -> dict:
    study = {
        "problem": "planar_pendulum",
        "backend": "numpy",
        "methods": [{"k": 2, "s": 2}],
        "t_end": 1,
        "h": [0.1],
        "errors": {"reference": "none"},
    }
    return {"results": str(results), "studies": {"s": {**study, **over}}}


def test_the_estimated_size_is_the_size_of_the_store_written(tmp_path):
    """stored_bytes counts what storage.ZarrSink writes (uncompressed): the arrays' sizes, exactly."""
    import zarr

    from hbvm_core.methods import method_from_entry
    from hbvm_core.problems import get_problem

    for name, save_every in (("planar_pendulum", 1), ("tethered_satellites", 3)):
        cfg = config(tmp_path, problem=name, save_every=save_every, h=[0.05])
        study = expand_study("s", cfg["studies"]["s"], results=str(tmp_path))
        job = next(iter(study.jobs.values()))
        problem, method = get_problem(name), method_from_entry(job.method)
        run_to_store(job.store, problem, method, job.h, job.t_end, save_every=save_every, backend="numpy")
        g = zarr.open_group(zarr.storage.ZipStore(job.store, mode="r"), mode="r")
        written = sum(a.nbytes for _, a in g.arrays())
        assert job.stored_bytes(*study.dims) == written, name


def test_a_runaway_run_is_refused_naming_it_its_size_and_the_key(tmp_path):
    with pytest.raises(ConfigError) as info:
        load_studies(config(tmp_path, h=[1e-10]))
    msg = str(info.value)
    assert msg.startswith("studies.s: run hbvm_k2_s2/h=1e-10 takes 1e+10 steps and stores 840 GB (about ")
    assert msg.endswith(f"above limits.max_steps = {LIMITS['max_steps']:.3g}; raise limits.max_steps to run it")
    # raised, the same run is let through the step limit and stopped by the byte limit
    with pytest.raises(ConfigError, match=r"above limits\.max_bytes = 2e\+10; raise limits\.max_bytes"):
        load_studies({**config(tmp_path, h=[1e-10]), "limits": {"max_steps": 1e11}})


def test_stores_that_do_not_fit_the_free_space_are_refused(tmp_path):
    free = shutil.disk_usage(tmp_path).free
    h = 1.0 / (free / 10)  # 84 bytes a step: some 8 times the free space
    cfg = {**config(tmp_path / "new" / "results", h=[h]), "limits": {"max_steps": 1e30, "max_bytes": 1e30}}
    with pytest.raises(ConfigError) as info:
        load_studies(cfg)
    msg = str(info.value)
    assert msg.startswith(f"results = '{tmp_path / 'new' / 'results'}': the runs to compute store ")
    assert f"GB free in {tmp_path}; " in msg  # the nearest existing folder


def test_the_published_and_beyond_studies_are_within_the_defaults():
    import yaml

    from hbvm_workflow.loading import SCHEMA

    root = SCHEMA.parent.parent
    cfg = yaml.safe_load((root / "config" / "config.yaml").read_text())
    studies = load_studies(cfg)
    assert check_limits(studies, {}, cfg.get("results", "results")) >= 0

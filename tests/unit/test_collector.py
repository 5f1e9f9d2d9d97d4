"""The garbage collector paused while the expansion builds a study's runs (hbvm_workflow.collector)."""

from __future__ import annotations

import gc

import pytest

from hbvm_workflow.collector import paused
from hbvm_workflow.study import expand_study


def test_paused_restores_the_collector_as_it_was_however_the_block_ends():
    """Enabled before: disabled inside, enabled after, also when the block raises; disabled before: it stays so."""
    was = gc.isenabled()
    try:
        gc.enable()
        with paused():
            assert not gc.isenabled()
        assert gc.isenabled()
        with pytest.raises(ValueError), paused():
            raise ValueError("inside")
        assert gc.isenabled()
        gc.disable()
        with paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        (gc.enable if was else gc.disable)()


def sweep(steps: int) -> dict:
    """A study of ten methods at ``steps`` step sizes on the planar pendulum, a run store each."""
    return {
        "problem": "planar_pendulum",
        "methods": [{"k": k, "s": 1} for k in range(1, 11)],
        "t_end": 1,
        "h": [1.0 / n for n in range(20, 20 + steps)],
        "errors": {"reference": "exact", "norm": 1, "sample": 1.0},
        "save": "trajectory",
    }


def test_the_runs_of_an_expansion_cost_no_collection(tmp_path):
    """With collections made frequent (a threshold of 100 new objects), a study of 2000 runs is expanded with as
    many collections as one of 20: its Jobs and Rows, some 10^4 objects, start none (each run's are the same). (A
    summary study's expansion keeps no such object per run, only floats and strings in its columns: it starts
    none with the collector on either, so it is not the case here.)"""
    counts: list[int] = []

    def count(phase: str, info: dict) -> None:
        if phase == "start":
            counts.append(info["generation"])

    thresholds, was = gc.get_threshold(), gc.isenabled()
    expand_study("warm", sweep(2), results=str(tmp_path))  # the problem's and the methods' caches filled
    gc.callbacks.append(count)
    try:
        gc.enable()
        gc.set_threshold(100, 10, 10)
        found = []
        for steps in (2, 200):
            counts.clear()
            study = expand_study(f"s{steps}", sweep(steps), results=str(tmp_path))
            assert len(study.jobs) == 10 * steps
            found.append(len(counts))
    finally:
        gc.callbacks.remove(count)
        gc.set_threshold(*thresholds)
        (gc.enable if was else gc.disable)()
    assert found[1] <= found[0] + 2, found  # +2: the jobs' dict and the rows' lists grow, not one pass per run

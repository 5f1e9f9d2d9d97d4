"""Run names: the row label n for numbered rules, the step size as written otherwise; unique per study."""

from __future__ import annotations

import pytest

from hbvm_core.errors import ConfigError
from hbvm_workflow.layout import run_name, short_h
from hbvm_workflow.study import expand_study

ERR = {"reference": "exact", "norm": 1, "sample": "all"}
SELF = {"reference": "self", "norm": "inf", "sample": "all"}


def _names(cfg, results="results"):
    st = expand_study("s", {"problem": "planar_pendulum", "methods": [{"k": 1, "s": 1}], "errors": ERR, **cfg})
    return [j.store.removeprefix(f"{results}/s/runs/hbvm_k1_s1/") for j in st.jobs.values()], st


def test_the_step_size_as_written():
    assert short_h(0.1) == "0.1" and short_h(5.0) == "5.0" and short_h(0.1 / 2) == "0.05"
    assert short_h(0.26417540005910617) == "0.264175400059" and run_name(0.025) == "h=0.025.zarr.zip"
    names, st = _names({"t_end": 1.2, "h": [0.1, 0.3, 0.4]})
    assert names == ["h=0.4.zarr.zip", "h=0.3.zarr.zip", "h=0.1.zarr.zip"]
    assert [j.id for j in st.jobs.values()] == ["hbvm_k1_s1/h=0.4", "hbvm_k1_s1/h=0.3", "hbvm_k1_s1/h=0.1"]


def test_the_h2_partner_of_a_user_step_has_a_short_name():
    names, _ = _names({"t_end": 0.6, "h": [0.3, 0.1], "errors": SELF})
    assert names == ["h=0.3.zarr.zip", "h=0.15.zarr.zip", "h=0.1.zarr.zip", "h=0.05.zarr.zip"]


def test_numbered_rows_are_named_by_n_and_partners_by_the_n_of_the_halved_step():
    names, st = _names({"t_end": 1, "h0": 0.1, "halvings": 2, "errors": SELF})
    assert names == ["n=0.zarr.zip", "n=1.zarr.zip", "n=2.zarr.zip", "n=3.zarr.zip"]  # n=3: the h/2 run of n=2
    assert [(r.job, r.partner) for r in st.rows][0] == ("hbvm_k1_s1/n=0", "hbvm_k1_s1/n=1")
    st = expand_study(
        "c",
        {
            "problem": "conical_pendulum",
            "methods": [{"k": 1, "s": 1}],
            "periods": 1,
            "period_divisions": [10, 15],
            "errors": SELF,
        },
    )
    assert [j.id.split("/")[1] for j in st.jobs.values()] == ["n=10", "n=20", "n=15", "n=30"]


def test_two_step_sizes_with_one_name_are_a_config_error():
    with pytest.raises(ConfigError, match=r"step sizes .* get the same run name 'h=0.1'"):
        _names({"t_end": 1.0, "h": [0.1, 0.1000000000001]})

"""Ranges in a grid (hbvm_workflow.grids): numpy's values, the same run hashes on another host, bad ranges refused."""

from __future__ import annotations

import copy

import mpmath
import numpy as np
import pytest
from user_problems import PERTURB_ULPS

from hbvm_core.errors import ConfigError
from hbvm_workflow.grids import grid_values
from hbvm_workflow.loading import load_studies
from hbvm_workflow.study import expand_study

SWEEP = {
    "kind": "sweep",
    "problem": "user_problems:sphere_quadratic",  # BLAS products: another host's round-off on demand
    "params": {"n": 4},
    "methods": [{"k": 2, "s": 2}],
    "t_end": 1,
    "h": [0.1],
    "errors": {"reference": "none"},
}


@pytest.mark.parametrize(
    "start,stop,num", [(0, 2, 10000), (-3.7, 11.3, 999), (0.1, 0.3, 7), (1, 1, 4), (2.5, -1.0, 2), (5, 9, 1)]
)
def test_linspace_is_numpys(start, stop, num):
    # numpy's linspace is arange(num) * step + start, one rounding each: the same two IEEE operations here
    assert grid_values("k", {"linspace": [start, stop, num]}) == np.linspace(start, stop, num).tolist()


@pytest.mark.parametrize("start,stop,step", [(0, 2, 0.1), (0.1, 1.0, 0.2), (-1.5, 7.25, 0.37), (1, 10, 3)])
def test_arange_is_numpys(start, stop, step):
    got = grid_values("k", {"arange": [start, stop, step]})
    want = np.arange(start, stop, step)
    assert got == want.tolist() and {type(x) for x in got} == {type(want.tolist()[0])}  # ints stay ints


def test_logspace_is_the_nearest_float_to_each_power_and_numpys_to_an_ulp():
    got = np.array(grid_values("k", {"logspace": [-3, 2, 1001]}))
    exps = np.linspace(-3, 2, 1001)
    mpmath.mp.prec = 200  # the oracle: 10^x to 200 bits, rounded once to a float
    nearest = np.array([float(mpmath.mpf(10) ** mpmath.mpf(float(x))) for x in exps])
    assert np.array_equal(got, nearest)
    # numpy's power (libm or SIMD) is within an ulp of the nearest float, not always on it
    assert np.all(np.abs(got - np.logspace(-3, 2, 1001)) <= np.spacing(got))


def test_a_range_gives_the_runs_of_its_values_and_their_hashes_on_another_host(monkeypatch):
    ranged = expand_study("s", SWEEP | {"grid": {"stiffness": {"linspace": [0.5, 2.0, 7]}}})
    listed = expand_study("s", SWEEP | {"grid": {"stiffness": np.linspace(0.5, 2.0, 7).tolist()}})
    assert [i.values["stiffness"] for i in ranged.instances] == np.linspace(0.5, 2.0, 7).tolist()
    assert ranged.job_hashes() == listed.job_hashes()
    monkeypatch.setenv(PERTURB_ULPS, "4")  # another host: the problem's values 4 units in the last place apart
    there = expand_study("s", SWEEP | {"grid": {"stiffness": {"linspace": [0.5, 2.0, 7]}}})
    assert there.job_hashes() == ranged.job_hashes()
    # the hashes see the values' last bit: a range whose values moved by one ulp is other runs
    monkeypatch.delenv(PERTURB_ULPS)
    moved = np.nextafter(np.linspace(0.5, 2.0, 7), 3.0).tolist()
    other = expand_study("s", SWEEP | {"grid": {"stiffness": moved}})
    assert not {h for _, h in other.job_hashes()} & {h for _, h in ranged.job_hashes()}


@pytest.mark.parametrize(
    "grid_range,message",
    [
        ({"linspace": [0, 2, 0]}, r"^studies\.s\.grid\.stiffness\.linspace = \[0, 2, 0\]: num = 0: expected an"),
        ({"linspace": [0, 2, 2.5]}, r"^studies\.s\.grid\.stiffness\.linspace = .*num = 2\.5: expected an integer"),
        ({"arange": [0, 2, -0.5]}, r"^studies\.s\.grid\.stiffness\.arange = .*: step = -0\.5: expected a number > 0"),
        ({"arange": [2, 0, 0.5]}, r"^studies\.s\.grid\.stiffness\.arange = .*: stop = 0 is not above start = 2"),
        ({"logspace": [0, 400, 3]}, r"^studies\.s\.grid\.stiffness\.logspace = .*: 10 \*\* 400 is not a finite"),
        ({"linspace": [0, 2, 10**8]}, r"^studies\.s\.grid\.stiffness\.linspace = .*: expected an integer from 1 to"),
        ({"linspace": [0, 2]}, r"^config\.studies\.s\.grid\.stiffness\.linspace = \[0, 2\]: .* too short"),
        ({"arange": [0, 2, 1, 4]}, r"^config\.studies\.s\.grid\.stiffness\.arange = .* too long"),
        ({"linspace": [0, "2", 3]}, r"^config\.studies\.s\.grid\.stiffness\.linspace\[1\] = '2': .* not of type"),
        ({"linspace": "0:2:3"}, r"^config\.studies\.s\.grid\.stiffness\.linspace = '0:2:3': .* not of type"),
        ({"linspace": [0, 1, 3], "arange": [0, 1, 1]}, r"^config\.studies\.s\.grid\.stiffness = .* too many"),
        ({"linspaced": [0, 1, 3]}, r"^config\.studies\.s\.grid\.stiffness: unknown key 'linspaced'"),
    ],
)
def test_a_bad_range_is_one_line_naming_the_key(grid_range, message):
    config = {"studies": {"s": copy.deepcopy(SWEEP) | {"grid": {"stiffness": grid_range}}}}
    with pytest.raises(ConfigError, match=message) as err:
        load_studies(config)
    assert "\n" not in str(err.value)


def test_two_values_with_one_name_are_one_line():
    # 0.1 and the next float up both print as '0.1' in 12 digits (layout.short_h): one folder, refused
    grid = {"stiffness": [0.5, 0.1, 0.75, float(np.nextafter(0.1, 1.0))]}
    with pytest.raises(ConfigError, match=r"^studies\.s\.grid: two combinations get the same name 'stiffness=0\.1'"):
        expand_study("s", SWEEP | {"grid": grid})

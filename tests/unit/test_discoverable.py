"""What a new user discovers without reading the code: short reprs, `did you mean` on unknown names, and
``python -m hbvm_workflow list`` with ``--help`` on every subcommand."""

from __future__ import annotations

import contextlib
import io

import pytest

import hbvm_core as hc
from hbvm_core.errors import ConfigError
from hbvm_core.methods import method_from_entry
from hbvm_core.problems import BUILTIN
from hbvm_workflow.__main__ import main
from hbvm_workflow.loading import load_studies


@pytest.fixture(scope="module")
def traj():
    return hc.integrate(hc.get_problem("planar_pendulum"), hc.HBVM(2, 2), 0.1, 1.0, backend="numpy")


def test_trajectory_repr_is_short_and_says_what_it_is(traj):
    text = repr(traj)
    lines = text.splitlines()
    assert lines[0] == "<hbvm_core.Trajectory> planar_pendulum, HBVM(2,2), h = 0.1, 10 steps"
    assert len(lines) <= 6 and all(len(line) <= 100 for line in lines), text
    assert "backend: numpy" in text and "q, p (11, 2), lam (10, 1)" in text
    assert "max |H - H(y_0)| = " in text and "max |g(q)| = " in text
    assert "array(" not in text and "[" not in text  # no arrays
    e_H = float(text.split("max |H - H(y_0)| = ")[1].split(",")[0])
    assert e_H == pytest.approx(float(traj.energy_error().max()), rel=1e-3)  # printed to 4 digits


def test_one_step_is_singular():
    one = hc.integrate(hc.get_problem("planar_pendulum"), hc.HBVM(1, 1), 0.1, 0.1, backend="numpy")
    assert ", 1 step\n" in repr(one)


def test_problem_and_method_reprs():
    text = repr(hc.get_problem("tethered_satellites"))
    assert text.splitlines()[0] == "<hbvm_core.Problem> tethered_satellites"
    assert "m = 9, nu = 3, M identity" in text and "d2g" in text and len(text.splitlines()) <= 6
    assert repr(hc.HBVM(6, 2)) == "<hbvm_core.HBVM> HBVM(6,2), label hbvm_k6_s2, entry {method: hbvm, k: 6, s: 2}"
    assert repr(method_from_entry({"method": "rattle"})).startswith("<hbvm_core.RATTLE> RATTLE, label rattle")


def _study(**over):
    cfg = {"problem": "planar_pendulum", "methods": [{"k": 1, "s": 1}], "t_end": 1, "h0": 0.1, "halvings": 1}
    cfg["errors"] = {"reference": "exact", "norm": 1, "sample": "all"}
    return {"studies": {"table1": {**cfg, **over}}}


@pytest.mark.parametrize(
    "config, hint",
    [
        ({"studies": {"table1": {**_study()["studies"]["table1"], "halving": 2}}}, "did you mean 'halvings'?"),
        (_study(problem="planar_pendulm"), "did you mean 'planar_pendulum'?"),
        (_study(methods=[{"method": "ratle"}]), "did you mean 'rattle'?"),
        ({**_study(), "select": ["tabel1"]}, "did you mean 'table1'?"),
        (_study(errors={"reference": "exact", "nrom": 1}), "did you mean 'norm'?"),
    ],
)
def test_did_you_mean(config, hint):
    with pytest.raises(ConfigError) as err:
        load_studies(config)
    message = str(err.value)
    assert hint in message and "\n" not in message, message


def _cli(*argv) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            rc = main(list(argv))
        except SystemExit as exc:  # argparse's --help
            rc = exc.code
    return rc, out.getvalue()


def test_list_problems_and_methods():
    rc, text = _cli("list", "problems")
    assert rc == 0 and len(text.splitlines()) == len(BUILTIN)
    assert "planar_pendulum(theta_dot0=1.0, length=1.0, gravity=1.0)" in text
    rc, text = _cli("list", "methods")
    assert rc == 0
    keys = {line.split(":")[0]: line for line in text.splitlines()}
    assert {"hbvm", "rattle", "dop853", "ida"} <= set(keys)
    assert "k, s" in keys["hbvm"] and "solver" in keys["hbvm"] and "rtol, atol" in keys["dop853"]


@pytest.mark.parametrize("argv", [["--help"], ["list", "--help"], ["verify", "--help"]])
def test_every_subcommand_has_help(argv):
    rc, text = _cli(*argv)
    assert rc == 0 and text.startswith("usage: python -m hbvm_workflow"), text


def test_an_unknown_listing_suggests_one(capsys):
    rc, _ = _cli("list", "problem")
    err = capsys.readouterr().err
    assert rc == 2 and err.splitlines()[-1].endswith(
        "unknown listing 'problem' (expected problems, methods, studies); did you mean 'problems'?"
    ), err

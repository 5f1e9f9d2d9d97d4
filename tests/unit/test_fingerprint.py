"""Fingerprints of problems and numerics (hbvm_core.fingerprint): what determines a run's numbers, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

import hbvm_core as hc
from hbvm_core.fingerprint import method_fingerprint, method_kind, problem_fingerprint, source_digest
from hbvm_core.kernels import Kernels
from hbvm_core.problems import BUILTIN


def line(c: float, q0=(1.0, 0.5)):
    """A particle in the potential U = c y (no constraint)."""
    return hc.Problem(
        name="line",
        q0=np.array(q0),
        p0=np.array([0.1, 0.0]),
        U=lambda Q: c * Q[:, 1],
        grad_U=lambda Q: np.broadcast_to([0.0, c], Q.shape).copy(),
    )


def test_a_changed_callback_constant_changes_the_fingerprint():
    assert problem_fingerprint(line(1.0)) == problem_fingerprint(line(1.0))
    assert problem_fingerprint(line(1.0)) != problem_fingerprint(line(5.0))
    assert problem_fingerprint(line(1.0)) != problem_fingerprint(line(1.0, q0=(1.0, 0.25)))


def test_the_same_problem_built_twice_and_the_published_ones_are_stable():
    first = {name: problem_fingerprint(hc.get_problem(name)) for name in BUILTIN}
    again = {name: problem_fingerprint(hc.get_problem(name)) for name in BUILTIN}
    assert first == again and len(set(first.values())) == len(first)
    pb = hc.get_problem("user_problems:double_pendulum")
    assert problem_fingerprint(pb) == problem_fingerprint(hc.get_problem("user_problems:double_pendulum"))
    assert problem_fingerprint(pb) != problem_fingerprint(hc.get_problem("user_problems:double_pendulum", m2=3.0))


def test_compiled_callbacks_count_by_their_module_source(tmp_path, monkeypatch):
    """A kernel named 'module:function' is covered by its module's parsed source (not imported: no numba)."""
    monkeypatch.syspath_prepend(str(tmp_path))
    mod = tmp_path / "fp_kernels_mod.py"
    mod.write_text("C = 1.0\n\n\ndef gu(Q, out, params):\n    out[:, 1] = C\n")

    def build():
        pb = line(1.0)
        pb.kernels = Kernels(grad_U="fp_kernels_mod:gu")
        return pb

    before = problem_fingerprint(build())
    mod.write_text(
        "C = 1.0  # a comment and other formatting do not count\n\ndef gu(Q, out, params):\n    out[:, 1] = C\n"
    )
    assert problem_fingerprint(build()) == before
    mod.write_text("C = 5.0\n\n\ndef gu(Q, out, params):\n    out[:, 1] = C\n")
    assert problem_fingerprint(build()) != before


def test_source_digest_ignores_docstrings_and_comments(tmp_path):
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text('"""Doc."""\nx = 1  # one\n')
    b.write_text('"""Other doc."""\n\nx = 1\n')
    assert source_digest(a) == source_digest(b)
    b.write_text("x = 2\n")
    assert source_digest(a) != source_digest(b)


@pytest.mark.parametrize(
    "entry, kind",
    [
        ({"method": "hbvm", "k": 2, "s": 2, "solver": "fixed-point"}, "hbvm-constant-fixed-point"),
        ({"k": 6, "s": 2, "solver": "blended"}, "hbvm-constant-blended"),
        ({"k": 6, "s": 3, "multiplier": "polynomial", "projection": True}, "hbvm-polynomial"),
        ({"method": "rattle"}, "rattle"),
        ({"method": "dop853", "rtol": 1e-8}, "dop853"),
    ],
)
def test_method_fingerprints_by_kind(entry, kind):
    assert method_kind(entry) == kind
    fp = method_fingerprint(entry)
    assert len(fp) == 16 and fp == method_fingerprint(dict(entry))


def test_method_fingerprints_differ_between_kinds():
    kinds = [{"k": 2, "s": 2}, {"k": 2, "s": 2, "solver": "blended"}, {"k": 2, "s": 2, "multiplier": "polynomial"}]
    kinds += [{"method": "rattle"}, {"method": "dop853"}]
    assert len({method_fingerprint(e) for e in kinds}) == len(kinds)


def test_job_hashes_follow_exactly_the_fingerprints_they_depend_on(monkeypatch):
    """A changed numerics fingerprint changes the hashes of that kind's runs only; a changed problem, all."""
    import hbvm_core.fingerprint as fp
    from hbvm_workflow.study import expand_study

    cfg = {
        "problem": "planar_pendulum",
        "methods": [{"k": 2, "s": 2}, {"method": "rattle"}],
        "t_end": 1,
        "h": [0.1],
        "errors": {"reference": "exact", "norm": 1, "sample": "all"},
    }
    before = {j.id: j.hash for j in expand_study("s", cfg).jobs.values()}
    real = fp.method_fingerprint
    monkeypatch.setattr(fp, "method_fingerprint", lambda e: "changed" if e.get("method") == "rattle" else real(e))
    after = {j.id: j.hash for j in expand_study("s", cfg).jobs.values()}
    assert after["hbvm_k2_s2/h=0.1"] == before["hbvm_k2_s2/h=0.1"] and after["rattle/h=0.1"] != before["rattle/h=0.1"]
    monkeypatch.setattr(fp, "problem_fingerprint", lambda pb: "other")
    assert not set(before.values()) & {j.hash for j in expand_study("s", cfg).jobs.values()}


def test_every_loop_source_of_the_numerics_exists():
    """The compiled loops a method kind's fingerprint covers are files of the package (a moved template would
    otherwise hash as 'unreadable' and changes to it would go unnoticed)."""
    from hbvm_core.fingerprint import LOOP_SOURCES, PACKAGE

    paths = {rel for rels in LOOP_SOURCES.values() for rel in rels}
    assert {"kernels/hbvm.py", "kernels/polynomial.py", "kernels/rattle.py", "kernels/runner.py"} <= paths
    assert all((PACKAGE / rel).is_file() for rel in paths), sorted(
        rel for rel in paths if not (PACKAGE / rel).is_file()
    )

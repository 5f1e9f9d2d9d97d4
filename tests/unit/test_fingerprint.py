"""Run identity (hbvm_core.fingerprint): the same on hosts that differ only in round-off, another one when
anything moves a number by more than round-off (a source, params, q0, M, the method's coefficients)."""

from __future__ import annotations

import json
import shutil
import sys

import numpy as np
import pytest
from user_problems import PERTURB_ULPS, sphere_quadratic

import hbvm_core as hc
from hbvm_core.fingerprint import (
    PACKAGE,
    PROBE_RTOL,
    method_fingerprint,
    numerics_digest,
    probe_mismatch,
    problem_fingerprint,
    problem_identity,
    problem_probe,
    problem_structure,
    source_digest,
)
from hbvm_core.kernels import Kernels
from hbvm_core.problems import BUILTIN

STUDY = {
    "problem": "user_problems:sphere_quadratic",
    "params": {"n": 12},
    "methods": [{"k": 2, "s": 2}, {"method": "rattle"}],
    "t_end": 1,
    "h": [0.1],
    "errors": {"reference": "none"},
}


def line(c: float, q0=(1.0, 0.5)):
    """A particle in the potential U = c y (no constraint); c is not a param: only its values show it."""
    return hc.Problem(
        name="line",
        q0=np.array(q0),
        p0=np.array([0.1, 0.0]),
        U=lambda Q: c * Q[:, 1],
        grad_U=lambda Q: np.broadcast_to([0.0, c], Q.shape).copy(),
    )


def other_host(monkeypatch, ulps: int = 1):
    """Problems built from now on compute their values ``ulps`` units in the last place apart."""
    monkeypatch.setenv(PERTURB_ULPS, str(ulps))


def test_another_hosts_round_off_keeps_the_identity(monkeypatch):
    here = sphere_quadratic()
    other_host(monkeypatch)
    there = sphere_quadratic()
    a, b = problem_probe(here), problem_probe(there)
    assert a["grad_U"]["data"] != b["grad_U"]["data"] and a["p0"] != b["p0"]  # the bits differ ...
    assert probe_mismatch(a, b) is None  # ... by round-off only
    assert problem_structure(here) == problem_structure(there)
    assert problem_fingerprint(here) == problem_fingerprint(there)
    recorded = [{"problem_fingerprint": "f" * 16, "problem_structure": problem_structure(here), "problem_probe": a}]
    assert problem_identity(there, recorded) == ("f" * 16, a)  # snaps to the record, with its reference values


def test_the_job_hashes_and_the_worker_check_ignore_round_off(monkeypatch, tmp_path):
    from hbvm_workflow.study import expand_study
    from hbvm_workflow.worker import check_problem

    planned = expand_study("s", STUDY, results=str(tmp_path))
    other_host(monkeypatch, 4)
    again = expand_study("s", STUDY, results=str(tmp_path))
    assert {j.id: j.hash for j in planned.jobs.values()} == {j.id: j.hash for j in again.jobs.values()}
    job = next(iter(planned.jobs.values()))
    worker_problem = hc.get_problem(job.problem, **job.params)
    assert problem_probe(worker_problem)["U"] != json.loads(job.problem_probe)["U"]  # another host's bits
    assert check_problem(job, worker_problem) == json.loads(job.problem_probe)


def test_values_moved_beyond_round_off_are_refused_by_the_worker_and_get_another_identity():
    from hbvm_workflow.runs import Job
    from hbvm_workflow.worker import check_problem

    planned, moved = line(1.0), line(1.0 + 1e-8)  # c is a constant of the source, not a param
    assert problem_fingerprint(planned) == problem_fingerprint(moved)  # the structure alone is the same
    why = probe_mismatch(problem_probe(planned), problem_probe(moved))
    assert why is not None and why.startswith("U differs by")
    structure, probe = problem_structure(planned), problem_probe(planned)
    record = {"problem_fingerprint": problem_fingerprint(planned), "problem_structure": structure}
    fingerprint, _ = problem_identity(moved, [record | {"problem_probe": probe}])
    assert fingerprint != problem_fingerprint(planned)
    job = Job("s", "l", "n", "p", {}, {"k": 1, "s": 1}, 0.1, 1.0, 1, True, "numpy", 64)
    job.problem_structure, job.problem_probe = structure, json.dumps(probe)
    with pytest.raises(RuntimeError, match=r"is not the one planned .*U differs by .* run again"):
        check_problem(job, moved)
    assert PROBE_RTOL * 1.0 < 1e-8  # the moved value is beyond the tolerance (scale of U: about 1)


@pytest.mark.parametrize(
    "change",
    [{"params": {"n": 13}}, {"params": {"n": 12, "stiffness": 2.0}}],
)
def test_changed_params_change_the_job_hashes(tmp_path, change):
    from hbvm_workflow.study import expand_study

    before = {j.hash for j in expand_study("s", STUDY, results=str(tmp_path)).jobs.values()}
    after = {j.hash for j in expand_study("s", STUDY | change, results=str(tmp_path)).jobs.values()}
    assert len(before) == 2 and not before & after


def test_changed_q0_and_M_change_the_values():
    assert probe_mismatch(problem_probe(line(1.0)), problem_probe(line(1.0, q0=(1.0, 0.25)))).startswith("U differs")
    pb, heavy = hc.get_problem("user_problems:double_pendulum"), hc.get_problem("user_problems:double_pendulum", m2=3.0)
    assert problem_fingerprint(pb) != problem_fingerprint(heavy)  # params
    assert probe_mismatch(problem_probe(pb), problem_probe(heavy)) is not None  # M, U, p0


def write_problem(folder, constant: str, comment: str = "") -> None:
    """A user problem module whose potential's constant lives in a helper module it imports."""
    (folder / "fp_helper_mod.py").write_text(f"{comment}\nC = {constant}\n")
    (folder / "fp_problem_mod.py").write_text(
        "import numpy as np\nimport hbvm_core as hc\nfrom fp_helper_mod import C\n\n\n"
        "def build():\n"
        "    return hc.Problem(name='fp', q0=[0.0, 1.0], p0=[1.0, 0.0], U=lambda Q: C * Q[:, 1],\n"
        "                      grad_U=lambda Q: np.broadcast_to([0.0, C], Q.shape).copy())\n"
    )
    for name in ("fp_helper_mod", "fp_problem_mod"):
        sys.modules.pop(name, None)


def test_a_constant_of_an_imported_helper_module_changes_the_identity(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    write_problem(tmp_path, "1.0")
    before = problem_fingerprint(hc.get_problem("fp_problem_mod:build"))
    write_problem(tmp_path, "1.0", comment="# a comment does not count")
    assert problem_fingerprint(hc.get_problem("fp_problem_mod:build")) == before
    write_problem(tmp_path, "1.0 + 1e-15")  # below round-off in value, but a source change: another identity
    assert problem_fingerprint(hc.get_problem("fp_problem_mod:build")) != before


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


def test_a_problem_with_an_identity_is_hashed_by_it_not_by_its_sources():
    def build(identity, c=1.0, q0=(1.0, 0.5)):
        pb = line(c, q0)
        pb.identity = identity
        return pb

    assert problem_fingerprint(build("U = y")) == problem_fingerprint(build("U = y"))
    assert problem_fingerprint(build("U = y")) != problem_fingerprint(build("U = 2*y"))
    assert problem_fingerprint(build("U = y")) != problem_fingerprint(line(1.0))
    assert probe_mismatch(problem_probe(build("U = y")), problem_probe(build("U = y", q0=(1.0, 0.25)))) is not None


def test_the_built_in_problems_are_stable_and_distinct():
    first = {name: problem_fingerprint(hc.get_problem(name)) for name in BUILTIN}
    again = {name: problem_fingerprint(hc.get_problem(name)) for name in BUILTIN}
    assert first == again and len(set(first.values())) == len(first)


def test_source_digest_ignores_docstrings_and_comments(tmp_path):
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text('"""Doc."""\nx = 1  # one\n')
    b.write_text('"""Other doc."""\n\nx = 1\n')
    assert source_digest(a) == source_digest(b)
    b.write_text("x = 2\n")
    assert source_digest(a) != source_digest(b)


def method_classes():
    from hbvm_core.methods import METHODS, HBVMBase

    return [c for c in METHODS.values() if c is not HBVMBase] + list(HBVMBase.VARIANTS.values())


def test_every_method_declares_the_sources_of_its_numbers():
    """Each method's numerics cover files of the package (a moved file would otherwise hash as 'unreadable' and
    changes to it would go unnoticed), and differ from one method class to the next."""
    classes = method_classes()
    assert {c.__name__ for c in classes} >= {"HBVM", "PolynomialHBVM", "RATTLE", "DOP853", "IDA"}
    for cls in classes:
        assert cls.numerics_sources, cls.__name__
        assert all((PACKAGE / rel).is_file() for rel in cls.numerics_sources), (cls.__name__, cls.numerics_sources)
    assert len({numerics_digest(c) for c in classes}) == len(classes)
    entries = [{"k": 2, "s": 2}, {"k": 2, "s": 2, "multiplier": "polynomial"}, {"method": "rattle"}]
    entries += [{"method": "dop853"}, {"method": "ida"}]
    assert len({method_fingerprint(e) for e in entries}) == len(entries)


@pytest.mark.parametrize(
    "cls_name, rel, old, new",
    [
        ("HBVM", "legendre.py", "npleg.leggauss(k)", "npleg.leggauss(k)  # same"),
        ("HBVM", "legendre.py", "    return out", "    return out  # same"),
        ("HBVM", "fixed_point.py", "max_iter: int = ", "max_iter: int = 1 + "),  # the stopping rule
        ("PolynomialHBVM", "legendre.py", "X[0, 0] = 0.5", "X[0, 0] = 0.5000001"),  # the coefficients
        ("RATTLE", "fixed_point.py", "max_iter: int = ", "max_iter: int = 1 + "),
        ("IDA", "methods/ida.py", "_FREE = 1e30", "_FREE = 1e29"),
    ],
)
def test_an_edit_of_a_numerics_source_changes_the_method_fingerprint(tmp_path, cls_name, rel, old, new):
    """Edited in a copy of the package: a change of code changes the fingerprint, a comment does not."""
    cls = next(c for c in method_classes() if c.__name__ == cls_name)
    assert rel in cls.numerics_sources
    copy = tmp_path / "hbvm_core"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert numerics_digest(cls, copy) == numerics_digest(cls)
    text = (copy / rel).read_text()
    assert old in text
    (copy / rel).write_text(text.replace(old, new, 1))
    changed = numerics_digest(cls, copy) != numerics_digest(cls)
    assert changed == ("# same" not in new)


def test_job_hashes_follow_exactly_the_fingerprints_they_depend_on(monkeypatch, tmp_path):
    """A changed numerics fingerprint changes the hashes of that method's runs only; a changed problem, all."""
    import hbvm_core.fingerprint as fp
    from hbvm_workflow.study import expand_study

    cfg = {
        "problem": "planar_pendulum",
        "methods": [{"k": 2, "s": 2}, {"method": "rattle"}],
        "t_end": 1,
        "h": [0.1],
        "errors": {"reference": "exact", "norm": 1, "sample": "all"},
    }
    before = {j.id: j.hash for j in expand_study("s", cfg, results=str(tmp_path)).jobs.values()}
    real = fp.method_fingerprint
    monkeypatch.setattr(fp, "method_fingerprint", lambda e: "changed" if e.get("method") == "rattle" else real(e))
    after = {j.id: j.hash for j in expand_study("s", cfg, results=str(tmp_path)).jobs.values()}
    assert after["hbvm_k2_s2/h=0.1"] == before["hbvm_k2_s2/h=0.1"] and after["rattle/h=0.1"] != before["rattle/h=0.1"]
    monkeypatch.setattr(fp, "problem_identity", lambda pb, recorded, structure=None: ("other", {}))
    assert not set(before.values()) & {j.hash for j in expand_study("s", cfg, results=str(tmp_path)).jobs.values()}


def test_module_closure_follows_edits_within_a_process(tmp_path, monkeypatch):
    """The closure is remembered per set of modules, and given again only while its files hold the same bytes: an
    edit of the same size (one digit), and a new import, both show at the next call, in the same process."""
    from hbvm_core.fingerprint import module_closure

    pkg = tmp_path / "closure_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from . import b\n\nA = 1\n")
    (pkg / "b.py").write_text("B = 1\n")
    (pkg / "c.py").write_text("C = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    first = module_closure(["closure_pkg.a"])
    assert set(first) == {"closure_pkg", "closure_pkg.a", "closure_pkg.b"}
    assert module_closure(["closure_pkg.a"]) == first
    (pkg / "b.py").write_text("B = 2\n")  # the same size
    second = module_closure(["closure_pkg.a"])
    assert second["closure_pkg.b"] != first["closure_pkg.b"] and second["closure_pkg.a"] == first["closure_pkg.a"]
    (pkg / "a.py").write_text("from . import b, c\n\nA = 1\n")
    assert "closure_pkg.c" in module_closure(["closure_pkg.a"])

"""A grid's instances planned as arrays: no problem built per grid value (``save: summary`` studies).

``family_instances`` plans the instances of a grid of a problem whose factory's ``Family``
(``hbvm_core.problems.family``) this module knows how to plan (``planning``: a formula problem's, the built-in
planar and conical pendulum's): the first general instance is built and validated in full, as ``study._instances``
does for the first of each code; the others are checked as arrays -- the factory's own checks (``Family.rows``),
the mass positive, the period positive, the initial data consistent (g(q0) = 0, G(q0)^T M^-1 p0 = 0, G^T M^-1 G
regular: ``hbvm_core.problem.inconsistent_instance``'s rules) -- and identified by their structure
(``problem_structure`` written from one template: ``fingerprint.structures_at``). An instance at the published
values is built, as the factory returns another problem there. Anything the arrays do not settle -- a check that
fails, a value that is not a finite number, an identity that differs from the one of an instance built to compare
-- returns None: the study is then planned instance by instance, which names the first bad one in one line.

What is known of a factory lives here, not in ``hbvm_core.problems``: a problem's identity covers the source of
the modules that define its callbacks (``hbvm_core.fingerprint``), which this knowledge would change.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from hbvm_core.errors import ConfigError, NonFiniteError, ProblemError

from .templates import Template, json_texts


class Planning(NamedTuple):
    """What a study needs to plan a family's instances without building them: ``periods(values)``, the period of
    each row of keyword values (None: the instances have none); ``published``, the keyword values at which the
    factory returns the published problem instead of the general one; ``recorded(x)``, how a problem's ``params``
    record a keyword's number."""

    periods: Callable[[dict[str, np.ndarray]], np.ndarray | None]
    published: dict[str, Any] | None
    recorded: Callable[[Any], Any]


def _as_given(x: Any) -> Any:
    return x


def _no_period(values: dict) -> None:
    return None


def _conical_periods(values: dict) -> np.ndarray:
    """2 pi / w at the rows of length, gravity, as ``parametric._conical`` (r = length / sqrt 2, w^2 = gravity / r)."""
    r = values["length"] * 2.0**-0.5
    return 2.0 * np.pi / np.sqrt(values["gravity"] / r)


#: the built-in factories planned as arrays (``hbvm_core.problems.parametric``), by name
PARAMETRIC = {
    "planar_pendulum": Planning(_no_period, {"theta_dot0": 1.0, "length": 1.0, "gravity": 1.0}, _as_given),
    "conical_pendulum": Planning(_conical_periods, {"length": 1.0, "gravity": 1.0}, _as_given),
}


def planning(family) -> Planning | None:
    """How to plan the instances of ``family`` as arrays, or None (one by one): a formula problem's (its model's
    ``initial`` run by run for the periods; params recorded as floats), or a built-in factory of ``PARAMETRIC``."""
    from hbvm_core.expressions import Model

    model = getattr(family.build, "__self__", None)
    if isinstance(model, Model):

        def periods(values: dict) -> np.ndarray | None:
            if model.period is None:
                return None
            K = np.stack([np.asarray(values[k], dtype=float) for k in model.param_names], axis=1)
            with np.errstate(all="ignore"):
                return np.array([float(model.module.initial(row)[3]) for row in K])

        return Planning(periods, None, float)
    module = getattr(family.build, "__module__", "")
    return PARAMETRIC.get(family.name) if module == "hbvm_core.problems.parametric" else None


class Steps(NamedTuple):
    """The study's own steps (``hbvm_workflow.study``), which the arrays' planning takes for the instances it
    builds: the Instance class, ``build_problem``, ``_interval``, ``_validate`` and ``_convention``."""

    instance: Callable
    build_problem: Callable
    interval: Callable
    validate: Callable
    convention: Callable


def family_instances(
    where: str, cfg: dict, grid: dict, combos: list[dict], steps: Steps
) -> tuple[list, list, tuple] | None:
    """``study._instances`` of ``combos`` (the grid's combinations, in order) by arrays, or None where they are to
    be planned one by one (see the module docstring)."""
    try:
        return _family_instances(where, cfg, grid, combos, steps)
    except (ConfigError, ProblemError, NonFiniteError, ValueError, TypeError, ArithmeticError):
        return None  # the instance-by-instance planning says what is wrong, in its own words


def _names(values: list, texts: list[str]) -> list[str]:
    """``layout.short_h`` of each of a key's values (floats; an int as it is: ``layout.combo_name``), its JSON text
    (``texts``: the repr) at hand."""
    if type(values[0]) is int:
        return texts
    out = []
    for v, exact in zip(values, texts):
        short = format(v, ".12g")
        out.append(exact if float(short) == v else short)
    return out


def _family_instances(
    where: str, cfg: dict, grid: dict, combos: list[dict], steps: Steps
) -> tuple[list, list, tuple] | None:
    from hbvm_core.checks import derivative_checks
    from hbvm_core.problem import deferred_validation
    from hbvm_core.problems.family import family_of

    Instance, build_problem, _interval, _validate, _convention = steps

    R = len(combos)
    keys = list(grid)
    texts = {k: json_texts(grid[k]) for k in keys}  # each value's JSON, once (the combinations: their product)
    if R < 3 or any(None in t or len(set(map(type, grid[k]))) != 1 for k, t in texts.items()):
        return None  # a value that is not a number, or a key of ints and floats: one by one
    entry, check, fixed = cfg["problem"], cfg.get("check_derivatives", True), cfg["params"]
    names = [[f"{k}={name}" for name in _names(grid[k], texts[k])] for k in keys]
    inst_keys = [",".join(parts) for parts in itertools.product(*names)] if len(keys) > 1 else names[0]
    if len(set(inst_keys)) != R:
        return None
    built: dict[int, Any] = {}

    def build(i: int):
        if i not in built:
            what = f"{where}[{inst_keys[i]}]"
            built[i] = build_problem(what, entry, {**fixed, **combos[i]}, check)
        return built[i]

    with deferred_validation(), derivative_checks(check):
        family = family_of(build(0))
        plan = None if family is None else planning(family)
        if plan is None:
            return None
        if any(k not in family.shapes or family.shapes[k] != () for k in [*keys, *fixed]):
            return None
        axes = np.meshgrid(*(np.asarray(grid[k], dtype=float) for k in keys), indexing="ij")  # the last fastest
        columns = {k: axis.ravel() for k, axis in zip(keys, axes)}
        published = np.zeros(R, dtype=bool)
        if plan.published is not None:  # the factory returns the published problem at these values
            published[:] = True
            for k, v in plan.published.items():
                published &= columns[k] == v if k in columns else {**plan.published, **fixed}[k] == v
        general = np.flatnonzero(~published)
        if general.size < 2:
            return None
        first, last = int(general[0]), int(general[-1])
        rep = build(first)
        for i in np.flatnonzero(published).tolist():
            build(i)
        build(last)  # built to compare its identity with the arrays' (below)
        full = family.broadcast(columns, R)
        K, q0, p0, mass = family.rows(full)
        periods = plan.periods(full)
    if (rep.period is None) != (periods is None) or family_of(rep) is None:
        return None
    if not _rows_admissible(rep, family, K, q0, p0, mass, periods, published):
        return None
    # the instances
    t_end = None
    if "periods" in cfg and periods is not None:
        t_end = (float(cfg["periods"]) * periods).tolist()
        if not all(x > 0 for x in t_end):
            return None
    rep_t_end = _interval(f"{where}[{inst_keys[first]}]", cfg, rep)
    period_list = periods.tolist() if periods is not None else None
    instances = []
    for i, (key, values) in enumerate(zip(inst_keys, combos)):
        what = f"{where}[{key}]"
        pb = built.get(i)
        if pb is not None:
            ti, period = _interval(what, cfg, pb), pb.period
        else:
            ti = rep_t_end if t_end is None else t_end[i]
            period = None if period_list is None else period_list[i]
        instances.append(
            Instance(
                key,
                values,
                {**fixed, **values},
                pb,
                "",
                ti,
                period,
                where=what,
                problem_entry=entry,
                check_derivatives=check,
            )  # fmt: skip
        )
    if not _array_identities(plan, rep, built, instances, keys, grid, combos, first, last):
        return None  # the arrays do not give the instances' own identity: plan them one by one
    # what study._instances checks of the first instance of each code, and returns
    order = sorted({first, *np.flatnonzero(published).tolist()})
    representatives = [built[i] for i in order]
    conventions = None
    for i in order:
        _validate(instances[i].where, entry, built[i], check)
        conventions = _convention(instances[i].where, cfg, built[i])
    return instances, representatives, conventions


def _rows_admissible(rep, family, K, q0, p0, mass, periods, published) -> bool:
    """Whether the rows of the family's arrays (params K, q0, p0, the diagonal of M, the periods) are instances the
    arrays can plan: of the representative's sizes and mass form, finite, and (the general ones) consistent as
    ``Problem.validate`` checks one instance (|g(q0)|, the hidden constraint, the condition of G^T M^-1 G)."""
    from hbvm_core.problem import CONSISTENCY_TOL, MAX_CONDITION

    R = published.shape[0]  # the combinations
    m, nu = rep.m, rep.nu
    if q0.shape != (R, m) or not (np.isfinite(q0).all() and np.isfinite(p0).all()):
        return False
    if mass is None:
        if rep.M is not None:
            return False
        v = p0
    else:
        if not (np.isfinite(mass).all() and (mass > 0).all()) or (rep.M is None) != bool((mass == 1.0).all()):
            return False
        if rep._diag is None and rep.M is not None:  # a full mass matrix: not as rows
            return False
        v = p0 / mass
    if periods is not None and not (np.isfinite(periods).all() and (periods > 0).all()):
        return False
    if nu:  # inconsistent_instance's checks on every row
        with np.errstate(all="ignore"):
            g = np.asarray(family.g(q0, K), dtype=float).reshape(R, nu)
            G = np.asarray(family.G(q0, K), dtype=float).reshape(R, m, nu)
            if not (np.isfinite(g).all() and np.isfinite(G).all()):
                return False
            MG = G if mass is None else G / mass[:, :, None]
            scale = 1.0 + np.abs(q0).max(1) + np.abs(p0).max(1)
            hidden = np.einsum("rmk,rm->rk", G, v)
            A = np.einsum("rmi,rmj->rij", G, MG)
            bad = np.abs(g).max(1) > CONSISTENCY_TOL * scale
            bad |= np.abs(hidden).max(1) > CONSISTENCY_TOL * scale * (1.0 + np.abs(G).max((1, 2)))
            bad |= ~(np.linalg.cond(A) <= MAX_CONDITION)
        if bad[~published].any():
            return False
    return True


def _array_identities(
    plan, rep, built: dict, instances: list, keys: list, grid: dict, combos: list, first: int, last: int
) -> bool:
    """The instances' fingerprints and structures from a template of the first general one's params
    (``fingerprint.structures_at``), each probe left to be computed when first read (``study._Probe``); False where
    the arrays do not give the built instances' own identity."""
    from hbvm_core.fingerprint import fingerprint_of, problem_structure, structures_at

    # the identities: the general instances' structures from a template of the first one's params
    recorded = plan.recorded
    params = dict(rep.params)
    if any(k not in params or params[k] != recorded(combos[first][k]) for k in keys):
        return False
    marks = tuple(f"\x00{k}\x00" for k in keys)
    template = Template.of(params | dict(zip(keys, marks)), marks)
    if template is None:
        return False
    recorded_texts = [json_texts([recorded(v) for v in grid[k]]) for k in keys]
    if any(None in t for t in recorded_texts):
        return False
    params_texts = list(map(template.fill, *zip(*itertools.product(*recorded_texts))))
    structures = structures_at(rep, params_texts)
    if structures[last] != problem_structure(built[last]) or structures[first] != problem_structure(rep):
        return False
    for i, (inst, structure) in enumerate(zip(instances, structures)):
        if i in built:
            structure = problem_structure(built[i])
        inst.fingerprint, inst.structure = fingerprint_of(structure), structure
        inst.probe = None  # computed when first read (``study._Probe``)
    return True

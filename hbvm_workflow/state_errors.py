"""The state errors of a ``save: summary`` study's runs (docs/method.md section 5), from their saved states: e_s
against the reference (the closed form or the reference ODE, once per problem instance at its distinct sample times,
or the h/2 partner's states), e_hc, and a shard's partial results (``partials``: e_s, e_hc and the scale of its runs,
computed by the shard task and again by the aggregation where a partial is stale). Used by ``ensemble_errors`` and
``shard_worker``.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from hbvm_core.ensemble_runs import run_blocks

from .forking import forked_map
from .layout import shard_store
from .partials import COLUMNS
from .storage import ResultsMismatchError
from .study import Study
from .tables import reference_floor


def _norm(x: np.ndarray, norm) -> np.ndarray:
    """Norm over the last axis (1, 2 or inf) of x."""
    if x.shape[-1] == 0:
        return np.zeros(x.shape[:-1])
    if norm == "inf":
        return np.max(np.abs(x), axis=-1)
    return np.linalg.norm(x, ord=norm, axis=-1)


def sample_mask(n_saved: np.ndarray, N: np.ndarray, se: np.ndarray, S: int, sample) -> np.ndarray:
    """[run, point]: the saved points that are sample times of the convention's ``sample`` (point j of a run is
    step j * sample_every, for j <= N // sample_every; the extra last point of a run whose N is not a multiple is
    the final state only; ``periods`` leaves out t = 0)."""
    j = np.arange(S)[None, :]
    mask = (j < n_saved[:, None]) & (j <= (N // se)[:, None])
    if sample == "periods":
        mask &= j >= 1
    return mask


def _family_rows(instances: list):
    """The instances as arrays over them (``hbvm_core.ensemble_runs.Rows`` of their problem's Family: params rows,
    M), where the first instance's problem has a Family that takes their params; else None (a problem each)."""
    from hbvm_core.ensemble_runs import Rows
    from hbvm_core.problems.family import family_of

    if len(instances) < 2:
        return None
    family = family_of(instances[0].problem)
    keys = set(instances[0].params)
    if family is None or not keys <= set(family.shapes) or any(set(i.params) != keys for i in instances):
        return None
    values = {k: np.asarray([inst.params[k] for inst in instances], dtype=float) for k in keys}
    return Rows(family, family.broadcast(values, len(instances)))


def state_errors(
    study: Study, table, y, t, m: int, mask, ok, run, partner, workers: int = 1, accuracy: bool = True
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(e_s per row, e_hc per run, the reference's accuracy per instance): e_s against the reference at the row's
    sample points (the closed form or the reference ODE, evaluated once per instance at its distinct sample times,
    and the ODE's accuracy estimated there, ``tables.reference_floor``, NaN where none; a reference that is not the
    closed form by ``workers`` processes, ``forking.forked_map``), or against its h/2 partner's state at the same
    times (``errors.reference: self``: partner point 2 j sample_every / its sample_every). ``accuracy``: False
    leaves the reference's accuracy unestimated (NaN; a shard's partial results, ``partials``)."""
    from hbvm_core.references import reference_solution, resolved_kind

    c = study.convention
    R = table.runs
    e_s, e_hc = np.full(R, np.nan), np.full(R, np.nan)
    instances = study.instances or [study.instance_of("")]
    floors = np.full(len(instances), np.nan)
    hc_norm = c.norm if c.hc_norm is None else c.hc_norm
    points = []  # per instance with ok runs: its problem, runs, each point's run among them, states, distinct times
    family = _family_rows(instances)
    if family is not None:  # the hidden constraint of every instance's points, nothing built per instance
        rows = np.flatnonzero(ok)
        for block in run_blocks(rows, y.shape[1]):
            ri, pj = np.nonzero(mask[block])
            yq = y[block[ri], pj]
            at = table.combo[block[ri]]
            hc = np.einsum("nmk,nm->nk", family.G(yq[:, :m], at), family.minv(yq[:, m:], at))
            e_hc[block] = _max_per_run(_norm(hc, hc_norm), ri, block.size)
    by_combo = np.argsort(table.combo, kind="stable")  # the runs of each instance, found once (not a scan each)
    starts = np.searchsorted(table.combo[by_combo], np.arange(len(instances) + 1))
    for ci, inst in enumerate(instances):
        if family is not None and study.reference in ("none", "self"):
            break  # nothing else needs the instances' problems
        rows = np.sort(by_combo[starts[ci] : starts[ci + 1]])
        rows = rows[ok[rows]]
        if not rows.size:
            continue
        ri, pj = np.nonzero(mask[rows])
        yq = _own_state(y[rows[ri], pj], m, _size(inst, m))  # [points, 2 m_i]: q, p of this instance's size
        if family is None:
            mi = yq.shape[1] // 2
            hc = inst.problem.hidden_constraint(yq[:, :mi], yq[:, mi:])
            e_hc[rows] = _max_per_run(_norm(hc, hc_norm), ri, rows.size)
        if study.reference not in ("none", "self"):
            points.append((inst.problem, rows, ri, yq, *np.unique(t[rows[ri], pj], return_inverse=True), ci))

    reference_kind = c.reference_kind if c.reference == "reference" else "exact"

    def reference(i: int) -> tuple[np.ndarray, float | None]:  # y_ref at the instance's sample times, its accuracy
        problem, times = points[i][0], points[i][4]
        q_ref, p_ref, _ = reference_solution(problem, times, reference_kind=reference_kind, rtol=c.rtol)
        floor = reference_floor(study, instances[points[i][6]]) if accuracy else None
        return np.concatenate([q_ref, p_ref], axis=1), floor

    # a closed form costs microseconds (no process is worth it); an ODE solve some milliseconds per instance
    spread = workers if any(resolved_kind(problem, reference_kind) != "exact" for problem, *_ in points) else 1
    for (_, rows, ri, yq, _, inverse, ci), (y_ref, floor) in zip(points, forked_map(reference, len(points), spread)):
        e_s[rows] = _max_per_run(_norm(yq - y_ref[inverse.reshape(-1)], c.norm), ri, rows.size)
        floors[ci] = np.nan if floor is None else floor
    if study.reference != "self":  # the rows are the runs
        return e_s, e_hc, floors
    out = np.full(run.size, np.nan)
    both = np.flatnonzero(ok[run] & ok[partner])
    r, p = run[both], partner[both]
    k, j = np.nonzero(mask[r])
    se = table.sample_every
    pj = j * 2 * se[r[k]] // se[p[k]]  # the partner's point at the row's step j sample_every (h/2: twice as many)
    tr, tp = t[r[k], j], t[p[k], pj]
    off = np.abs(tr - tp) > 1e-9 * np.maximum(1.0, np.abs(tr))
    if off.any():  # the expansion checked the sampling: stored times that disagree are not this study's runs
        i = int(np.flatnonzero(off)[0])
        raise ResultsMismatchError(
            f"{shard_store(study.results, study.name)}: run {int(r[k[i]])} at t = {tr[i]!r} and its h/2 run "
            f"{int(p[k[i]])} at t = {tp[i]!r}: the sample times differ; run the solve step"
        )
    d = y[r[k], j] - y[p[k], pj]
    d[np.isnan(y[r[k], j]) & np.isnan(y[p[k], pj])] = 0.0  # past a smaller instance's size, in both of its runs
    out[both] = _max_per_run(_norm(d, c.norm), k, both.size)
    return out, e_hc, floors


def _scale(y: np.ndarray, n_saved: np.ndarray) -> np.ndarray:
    """max(1, max |y| over each run's saved points), a NaN entry left out (a failed run's state)."""
    out = np.ones(y.shape[0])
    valid = np.arange(y.shape[1])[None, :] < n_saved[:, None]
    for block in run_blocks(np.arange(y.shape[0]), y.shape[1]):
        a, b = block[0], block[-1] + 1
        where = np.broadcast_to(valid[a:b, :, None], y[a:b].shape)
        out[a:b] = np.fmax.reduce(np.abs(y[a:b]), axis=(1, 2), where=where, initial=1.0)
    return out


def _size(inst, m: int) -> int:
    """m of an instance's problem (the store's m: the largest instance's)."""
    return int(inst.problem.m)


def _own_state(yq: np.ndarray, m: int, mi: int) -> np.ndarray:
    """Rows of the store's state (q in [:m], p in [m:], NaN past an instance smaller than the largest) as the
    instance's own (q, p) of 2 m_i entries."""
    return yq if mi == m else np.concatenate([yq[:, :mi], yq[:, m : m + mi]], axis=1)


def _max_per_run(values: np.ndarray, run: np.ndarray, runs: int) -> np.ndarray:
    """max of ``values`` per run (``run``: the run of each value, sorted), 0 for a run without points."""
    out = np.zeros(runs)
    np.maximum.at(out, run, values)
    return out


class Instance:
    """A grid combination for ``compute``: its params, its problem built on first use (``problem``: a callable)."""

    def __init__(self, params: dict, build):
        self.params, self._build, self._problem = params, build, None

    @property
    def problem(self):
        if self._problem is None:
            self._problem = self._build()
        return self._problem


def partial_columns(errors: dict, instances: list, combo, N, sample_every, counts, t, y, m: int) -> np.ndarray:
    """The partial [run, COLUMNS] of a shard's runs (``combo``: each run's index into ``instances``, objects with
    ``problem`` and ``params``): e_s and e_hc as ``ensemble_errors._state_errors`` computes them (the same code),
    NaN for a failed run; the scale max(1, max |y| over its saved points)."""
    from hbvm_core.metrics import ErrorConvention

    n, S = y.shape[0], y.shape[1]
    status, n_saved = counts[:, 0], counts[:, 5]
    convention = ErrorConvention.from_config(errors["convention"])
    mask = sample_mask(n_saved, np.asarray(N), np.asarray(sample_every), S, convention.sample)
    ok = status == 0
    out = np.full((n, len(COLUMNS)), np.nan)
    out[:, 2] = _scale(y, n_saved)
    study = SimpleNamespace(reference=errors["reference"], convention=convention, instances=instances)
    table = SimpleNamespace(runs=n, combo=np.asarray(combo), sample_every=np.asarray(sample_every))
    runs = np.arange(n)
    e_s, e_hc, _ = state_errors(study, table, y, t, m, mask, ok, runs, np.full(n, -1), accuracy=False)
    out[:, 0] = np.where(ok, e_s, np.nan)
    out[:, 1] = np.where(ok, e_hc, np.nan)
    return out


def local(combos: np.ndarray) -> tuple[list[int], np.ndarray]:
    """(the distinct combinations in order, each run's index among them)."""
    distinct, inverse = np.unique(np.asarray(combos), return_inverse=True)
    return distinct.tolist(), inverse.reshape(-1)

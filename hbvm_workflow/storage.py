"""Trajectory stores: one Zarr store (an xarray Dataset) per run, written in chunks and published atomically.

Layout of a store (xarray names; ``xr.open_zarr(path)`` opens it)::

    t          (t)                 saved times n h (every save_every steps, and t_end)
    q, p       (t, dof)            positions and momenta
    H          (t)                 H(q_n, p_n)
    g          (t, constraint)     g(q_n)
    hc         (t, constraint)     hidden constraint G(q_n)^T M^-1 p_n
    tstep      (tstep)             start time of each saved step
    lam        (tstep, constraint) multiplier used on [tstep, tstep + h] (docs/method.md 3)
    iterations (tstep)             nonlinear iterations of the step

and attrs with every parameter (problem, method entry, h, t_end, solver
settings), the package versions, the wall time and ``complete``.

Atomicity: a store is written under ``<path>.tmp-<id>``, verified (every row
written, complete = True) and only then renamed to ``<path>``; so a store that
exists at its final path is complete, and a killed run leaves only temporaries
(removed by ``clean_temporaries``). A diverging run leaves no store but a
``<path>.failed.json`` marker naming the step, time and last increment.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import shutil
import uuid
import warnings
from pathlib import Path
from typing import Any

import numpy as np

FORMAT = "hbvm-trajectory/1"
TMP = ".tmp-"
OLD = ".old-"
FAILED = ".failed.json"
#: the status of a store: see ``store_status``
STATUSES = ("complete", "failed", "stale", "missing")


@contextlib.contextmanager
def quiet_zarr():
    """Zarr warns that consolidated metadata is not in the v3 spec; xarray reads it fine."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*[Cc]onsolidated metadata.*")
        yield


def saved_rows(N: int, save_every: int) -> tuple[int, int]:
    """(points, steps) saved by the time loop: points n % save_every == 0 or n == N; steps n % save_every == 0."""
    points = N // save_every + 1 + (1 if N % save_every else 0)
    steps = (N - 1) // save_every + 1
    return points, steps


def jsonable(value: Any) -> Any:
    """Convert numpy scalars/arrays and tuples so zarr attrs (JSON) accept them; NaN/inf become strings."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return jsonable(value.tolist())
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def versions() -> dict[str, str]:
    """The versions a store was written with (from the installed distributions: importing xarray costs a second)."""
    from importlib.metadata import PackageNotFoundError, version

    from hbvm_core import __version__

    found = {"hbvm": __version__, "numpy": np.__version__}
    for dist in ("zarr", "xarray"):
        try:
            found[dist] = version(dist)
        except PackageNotFoundError:
            found[dist] = "not installed"
    return found | {"python": platform.python_version()}


# --------------------------------------------------------------------------- writing
def _sync(coro):
    """Run a coroutine on zarr's own event loop (what zarr's synchronous API does for each call)."""
    from zarr.core.sync import sync

    return sync(coro)


async def _gather(*aws) -> list:
    import asyncio

    return list(await asyncio.gather(*aws))


class ZarrSink:
    """A sink for ``integrate``: writes each chunk of points and steps into a Zarr group at ``path``.

    Memory stays bounded by one chunk; H, g and the hidden constraint are computed
    per chunk from the problem. ``finish`` checks that every row was written.

    Zarr's synchronous API makes one round trip to its event loop per call (some
    milliseconds each); the sink goes through the asynchronous API instead, so
    creating the nine arrays, writing one chunk of them and finishing the store are
    one round trip each, their files written concurrently.
    """

    #: name: (dims, dtype, fill value, long_name, description)
    SPEC = {
        "t": (("t",), "f8", np.nan, "time", "saved times"),
        "q": (("t", "dof"), "f8", np.nan, "position", "q_n"),
        "p": (("t", "dof"), "f8", np.nan, "momentum", "p_n"),
        "H": (("t",), "f8", np.nan, "Hamiltonian", "H(q_n, p_n)"),
        "g": (("t", "constraint"), "f8", np.nan, "constraint", "g(q_n)"),
        "hc": (("t", "constraint"), "f8", np.nan, "hidden constraint", "G(q_n)^T M^-1 p_n"),
        "tstep": (("tstep",), "f8", np.nan, "step start time", "t_n of each saved step"),
        "lam": (("tstep", "constraint"), "f8", np.nan, "multiplier", "lambda_n, constant on [t_n, t_n + h]"),
        "iterations": (("tstep",), "i4", -1, "iterations", "nonlinear iterations of step n"),
    }

    def __init__(self, path: str | os.PathLike, problem, N: int, save_every: int = 1, chunk: int = 65536):
        self.path = str(path)
        self.problem = problem
        self.N, self.save_every = int(N), int(save_every)
        self.n_points, self.n_steps = saved_rows(self.N, self.save_every)
        self.written = {"points": 0, "steps": 0}
        size = {"t": self.n_points, "tstep": self.n_steps, "dof": problem.m, "constraint": problem.nu}
        rows = {"t": max(1, min(chunk, self.n_points)), "tstep": max(1, min(chunk, self.n_steps))}
        self.group, self.arrays = _sync(self._create(size, rows))

    async def _create(self, size: dict, rows: dict):
        import zarr.api.asynchronous as za

        group = await za.open_group(store=self.path, mode="w", zarr_format=3)

        def array(name, dims, dtype, fill, long_name, description):
            shape = tuple(size[d] for d in dims)
            chunks = (rows[dims[0]],) + tuple(max(1, n) for n in shape[1:])
            attrs = {"long_name": long_name, "description": description}
            return group.create_array(
                name, shape=shape, chunks=chunks, dtype=dtype, fill_value=fill, dimension_names=dims, attributes=attrs
            )

        arrays = await _gather(*(array(name, *spec) for name, spec in self.SPEC.items()))
        return group, dict(zip(self.SPEC, arrays))

    def _write(self, start: int, values: dict) -> None:
        sel = slice(start, start + len(next(iter(values.values()))))
        _sync(_gather(*(self.arrays[name].setitem(sel, np.asarray(v)) for name, v in values.items())))

    def points(self, start: int, t: np.ndarray, q: np.ndarray, p: np.ndarray) -> None:
        pb = self.problem
        values = {"t": t, "q": q, "p": p, "H": pb.hamiltonian(q, p)}
        if pb.nu:
            values |= {"g": pb.constraint(q), "hc": pb.hidden_constraint(q, p)}
        self._write(start, values)
        self.written["points"] += len(t)

    def steps(self, start: int, t: np.ndarray, lam: np.ndarray, iterations: np.ndarray) -> None:
        values = {"tstep": t, "iterations": iterations}
        if self.problem.nu:
            values["lam"] = lam
        self._write(start, values)
        self.written["steps"] += len(t)

    def finish(self, attrs: dict) -> None:
        """Verify that every row was written, then record ``attrs`` and complete = True; consolidate the metadata."""
        if self.written["points"] != self.n_points or self.written["steps"] != self.n_steps:
            raise RuntimeError(
                f"store {self.path}: wrote {self.written['points']}/{self.n_points} points and "
                f"{self.written['steps']}/{self.n_steps} steps"
            )
        attrs = jsonable({**attrs, "points": self.n_points, "step_rows": self.n_steps, "complete": True})
        with quiet_zarr():
            _sync(self._finish(attrs))

    async def _finish(self, attrs: dict) -> None:
        import zarr.api.asynchronous as za

        await self.group.update_attributes(attrs)
        await za.consolidate_metadata(self.path)


def publish(tmp: str, final: str) -> None:
    """Move a finished store from ``tmp`` into place; an older store at ``final`` is replaced."""
    Path(final).parent.mkdir(parents=True, exist_ok=True)
    old = None
    if os.path.exists(final):
        old = f"{final}{OLD}{uuid.uuid4().hex[:8]}"
        os.rename(final, old)
    os.rename(tmp, final)
    if old:
        shutil.rmtree(old, ignore_errors=True)


def write_json_atomic(path: str, payload: dict) -> None:
    tmp = f"{path}{TMP}{uuid.uuid4().hex[:8]}"
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(tmp, "w") as fh:
        json.dump(jsonable(payload), fh, indent=1, sort_keys=True)
        fh.write("\n")
    os.replace(tmp, path)


# --------------------------------------------------------------------------- reading
def read_attrs(path: str) -> dict | None:
    """The attrs of a store (None if there is no readable store at ``path``)."""
    meta = os.path.join(path, "zarr.json")
    try:
        with open(meta) as fh:
            doc = json.load(fh)
    except (OSError, ValueError):
        return None
    return doc.get("attributes", {})


def read_failure(path: str) -> dict | None:
    """The failure marker of the store at ``path``, if any."""
    try:
        with open(path + FAILED) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def store_status(path: str, job_hash: str | None = None) -> str:
    """complete (a verified store for this hash), failed (a failure marker for it), stale (other hash), missing."""
    attrs = read_attrs(path)
    if attrs is not None and attrs.get("complete") is True:
        return "complete" if job_hash is None or attrs.get("job_hash") == job_hash else "stale"
    fail = read_failure(path)
    if fail is not None:
        return "failed" if job_hash is None or fail.get("job_hash") == job_hash else "stale"
    return "missing" if attrs is None else "stale"


def clean_temporaries(folder: str, recursive: bool = True) -> list[str]:
    """Remove temporaries left by killed runs under ``folder`` (only in it when not ``recursive``).

    Call only while nothing writes there.
    """
    removed = []
    if not os.path.isdir(folder):
        return removed
    for root, dirs, files in os.walk(folder):
        if not recursive and root != folder:
            break
        for name in list(dirs) + files:
            if TMP in name or OLD in name:
                p = os.path.join(root, name)
                if name in dirs:
                    shutil.rmtree(p, ignore_errors=True)
                    dirs.remove(name)
                else:
                    with contextlib.suppress(FileNotFoundError):
                        os.remove(p)
                removed.append(p)
    return removed


def open_trajectory(path: str):
    """The store as a lazy xarray Dataset (``xr.open_zarr``)."""
    import xarray as xr

    with quiet_zarr():
        return xr.open_zarr(path, consolidated=True)


def load_trajectory(path: str, problem=None):
    """The store as an in-memory ``hbvm_core.Trajectory`` (problem and method rebuilt from the attrs)."""
    from hbvm_core.methods import from_spec
    from hbvm_core.problems import get_problem
    from hbvm_core.trajectory import Trajectory

    attrs = read_attrs(path)
    if attrs is None or attrs.get("complete") is not True:
        raise FileNotFoundError(f"no complete trajectory store at {path}")
    if problem is None:
        problem = get_problem(attrs["problem_spec"], **attrs.get("problem_params", {}))
    method = from_spec(attrs["method_entry"]) if "method_entry" in attrs else None
    names = ("t", "q", "p", "tstep", "lam", "iterations")
    with quiet_zarr():
        arr = dict(zip(names, _sync(_read_arrays(path, names))))
    keys = ("steps", "h", "t_end", "save_every", "compensated", "wall_s", "mean_iterations", "max_iterations")
    tattrs = {k: attrs[k] for k in keys if k in attrs} | {"backend": attrs.get("backend")}
    return Trajectory(problem=problem, method=method, h=float(attrs["h"]), attrs=tattrs, **arr)


async def _read_arrays(path: str, names) -> list:
    """Every array ``names`` of the store at ``path`` in full, read concurrently (one event-loop round trip)."""
    import zarr.api.asynchronous as za

    group = await za.open_group(store=path, mode="r")
    arrays = await _gather(*(group.getitem(name) for name in names))
    return await _gather(*(a.getitem(...) for a in arrays))


def write_dataset(ds, path: str) -> None:
    """Write an xarray Dataset to a Zarr store atomically (temporary path, then rename)."""
    tmp = f"{path}{TMP}{uuid.uuid4().hex[:8]}"
    try:
        with quiet_zarr():
            ds.to_zarr(tmp, mode="w", consolidated=True, zarr_format=3)
        publish(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


# --------------------------------------------------------------------------- a whole study
def open_errors(study: str, results: str = "results"):
    """A study's errors and rates (``<results>/<study>/errors.zarr``), loaded into memory.

    An ``xarray.Dataset`` over (scheme, h): ``scheme`` holds the method labels
    (``hbvm_k2_s2``) with ``k``, ``s`` and ``name`` along it, so::

        err = open_errors("table1")
        err.e_s.sel(scheme="hbvm_k2_s2", h=0.025).item()
        err.set_index(scheme=["k", "s"]).e_s.sel(k=2, s=2).to_series()
    """
    path = Path(results) / study / "errors.zarr"
    if not path.exists():
        raise FileNotFoundError(f"{path}: no aggregated study {study!r} under {results!r} (run snakemake first)")
    with open_trajectory(str(path)) as ds:
        return ds.load()


def open_study(study: str, results: str = "results"):
    """Open a study's results as one ``xarray.DataTree``.

    The root holds ``errors.zarr`` loaded into memory (dims scheme, h: e_s, rate_s, ...
    per method and step size, see ``open_errors``); each child ``<label>`` (e.g.
    ``hbvm_k2_s2``) holds one lazily opened trajectory Dataset per run, named by the
    run's store (``h=0.025``, ``n=20``; see ``layout.run_name``). See ``select_run``.
    """
    import xarray as xr

    base = Path(results) / study
    manifest = base / "solve.json"
    if not manifest.exists():
        raise FileNotFoundError(f"{manifest}: no solved study {study!r} under {results!r} (run snakemake first)")
    with open(manifest) as fh:
        jobs = json.load(fh)["jobs"]
    nodes: dict[str, Any] = {}
    errs = base / "errors.zarr"
    nodes["/"] = open_errors(study, results) if errs.exists() else xr.Dataset()
    for job in jobs:
        store = base / job["store"]
        if job["status"] == "ok" and store.exists():
            nodes[f"/{job['label']}/{store.name.removesuffix('.zarr')}"] = open_trajectory(str(store))
    tree = xr.DataTree.from_dict(nodes)
    tree.attrs.update({"study": study, "results": str(results)})
    return tree


def select_run(tree, h: float, k: int | None = None, s: int | None = None, label: str | None = None):
    """The trajectory Dataset of one run of an ``open_study`` tree, by (k, s) or label, and h (nearest)."""
    cands = []
    for child in tree.children.values():
        for run in child.children.values():
            a = run.attrs
            mk, ms = a.get("method_entry", {}).get("k"), a.get("method_entry", {}).get("s")
            if label is not None and a.get("label") != label:
                continue
            if (k is not None and mk != k) or (s is not None and ms != s):
                continue
            cands.append(run)
    if not cands:
        raise KeyError(f"no run with label={label!r} k={k!r} s={s!r}")
    best = min(cands, key=lambda r: abs(r.attrs["h"] - h))
    if not math.isclose(best.attrs["h"], h, rel_tol=1e-9):
        raise KeyError(f"no run with h = {h!r} (nearest {best.attrs['h']!r})")
    return best.to_dataset()

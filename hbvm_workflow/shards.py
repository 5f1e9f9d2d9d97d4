"""The sharded store of a ``save: summary`` study: all its runs in one Zarr v3 store, one shard per task.

``results/<study>/runs.zarr`` (``layout.shard_store``) holds the study's runs along the dimension ``run``, in
the order of the plan (method, grid combination, h decreasing):

- coordinates, written once by the solve step when it creates the store (``create``): ``hash`` (the run's
  identity ``Job.hash``, its 16 hex digits as a uint64), ``scheme`` (an index into the attribute ``schemes``,
  the method labels), ``combo`` (an index into ``combos``, the grid values), ``h``, ``n`` (-1: none), ``N``
  (steps) and ``sample_every`` (the steps between saved points);
- the summary of each run, written by the shard tasks (``shard_worker.solve_shard``) as ``hbvm_core.integrate_ensemble``
  returns it, packed into four arrays so that a shard is four files: ``counts`` int64 [run, count] (``COUNTS``:
  status, fail_step, steps, iterations, max_iterations, n_saved), ``scalars`` float64 [run, scalar] (1 + 2 nu:
  H_error, g_error per constraint, the multiplier of the last step), ``t`` [run, point] and ``y``
  [run, point, state] (2m: q, then p, at the saved points: the sample times of the study's errors and the final
  point; NaN beyond n_saved).

Every array carries its dimension names (``DIMS``) and the metadata of the root and its arrays is consolidated
into the root's ``zarr.json``, so that plain xarray (``xr.open_zarr``) and other Zarr readers open the store; the
root's attribute ``coordinates`` names q's components, as in a run store. Every data array is sharded along
``run`` by ``shard_runs`` rows (Zarr's sharding codec: one file per array and shard), in inner chunks of
``CHUNK_RUNS`` rows, each compressed (byte shuffle and LZ4: ``storage.state_compressors``) and ending with a CRC-32C
checksum; a coordinate is
one file (a shard of the whole length) of one checksummed chunk (it is only ever read whole). Shard ``slot``
covers the rows ``[slot * shard_runs, (slot + 1) * shard_runs)``.

Completeness: a shard is complete when its record exists and names the digest of its runs' hashes. The records
are Zarr groups of their own, outside the consolidated metadata: ``<store>/shards/<slot>/zarr.json``
(``layout.shard_record``), the record being the group's attributes (none: not complete). A task empties the
record first, writes its shard's files, then the record (each a file written in ``<study>/.tmp`` and renamed
into place): a killed task leaves a shard without a record, which the next solve computes again; a store that
exists always has its metadata, coordinates and empty records (it is created under ``.tmp`` and renamed into
place). Reuse (``prepare``) is per shard by the identity of its runs; a shard whose chunks fail their checksums is
set aside (its files moved to ``<study>/.tmp/damaged/``) and computed again. When the study's runs change (a grid
value added, an h changed), a new store is made and the old one kept as ``runs.previous.zarr`` until the new one
is complete: a task copies the rows of runs already computed there (by hash) and integrates only the others. A
store of an earlier format (``hbvm-shards/1``: records as files inside the store, arrays without dimension names)
is not read: the solve step makes a new store and computes its runs again, the readers refuse it in one line.
They are sealed there (``seal_store``: a digest of every metadata document and coordinate file in
``shards/zarr.json``; the records are not sealed, they change), and a shard's record names its files with their
sizes and digests: the solve step, the aggregation, the readers, ``list studies`` and ``verify`` refuse a store or
shard that is not as written (``store_problem``, ``shard_problem``), in one line naming the store, the shard and
its file; the solve step makes such a store again, copying the rows of its intact shards.

Stores are data: nothing read from one is imported or called; the problems and methods come from the plan.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import os
from dataclasses import dataclass, field

import numpy as np

from . import partials
from .integrity import file_digest, seal_files
from .layout import SHARD_RECORDS, previous_shard_store, shard_record, shard_store, tmp_dir
from .partials import errors_spec
from .runs import PlannedJobs, row_columns
from .script_support import plural
from .storage import (
    DAMAGED_DIR,
    TMP_DIR,
    MissingStoreError,
    StoreError,
    compressors,
    file_signature,
    new_temporary,
    quiet_zarr,
    remove_path,
    state_compressors,
)

FORMAT = "hbvm-shards/2"
#: the columns of ``counts``, as EnsembleResult names them
COUNTS = ("status", "fail_step", "steps", "iterations", "max_iterations", "n_saved")
#: the arrays a shard task writes (one file per shard each)
DATA = ("counts", "scalars", "t", "y")
#: the coordinates the solve step writes when it creates the store
COORDS = ("hash", "scheme", "combo", "h", "n", "N", "sample_every")
#: the dimension names of each array (a coordinate's: ``run``)
DIMS = {"counts": ("run", "count"), "scalars": ("run", "scalar"), "t": ("run", "point"), "y": ("run", "point", "state")}
#: rows of an inner chunk (the unit of a read and of a checksum)
CHUNK_RUNS = 1000
#: the default ``shard_runs`` (schema.yaml): runs of a shard, i.e. of one Dask task and of one file per array
SHARD_RUNS = 10000
#: the shards of a study whose problem has no compiled loop, where it gives no ``shard_runs`` (``shard_size``)
PER_RUN_SHARDS = 64


# --------------------------------------------------------------------------- the runs of a study as arrays
@dataclass
class RunTable:
    """The runs of a ``save: summary`` study as arrays along ``run`` (plan order), and what shapes the store."""

    hash: np.ndarray  # uint64
    scheme: np.ndarray  # int16, index into schemes
    combo: np.ndarray  # int32, index into combos
    h: np.ndarray
    n: np.ndarray  # int64, -1: none
    N: np.ndarray  # int64
    sample_every: np.ndarray  # int64
    schemes: list[str]
    combos: list[dict]
    grid: list[str]
    m: int
    nu: int
    shard_runs: int
    #: saved points of the longest run (the point dimension)
    S: int = 0
    layout: str = field(default="")

    def __post_init__(self) -> None:
        if not self.S:
            self.S = int(saved_points(self.N, self.sample_every).max(initial=1))
        if not self.layout:
            self.layout = layout_digest(self)

    @property
    def runs(self) -> int:
        return int(self.hash.size)

    def slots(self) -> list[tuple[int, int]]:
        """[(start, stop), ...]: the rows of each shard."""
        sr = self.shard_runs
        return [(a, min(a + sr, self.runs)) for a in range(0, self.runs, sr)]

    def digest(self, start: int, stop: int) -> str:
        """The identity of the runs of rows [start, stop): a digest of their hashes in order."""
        return slot_digest(self.hash[start:stop], self.sample_every[start:stop])


def saved_points(N: np.ndarray, sample_every: np.ndarray) -> np.ndarray:
    """Points an ensemble run saves: n = 0, sample_every, 2 sample_every, ... <= N, and N."""
    N, se = np.asarray(N, dtype=np.int64), np.asarray(sample_every, dtype=np.int64)
    return N // se + 1 + (N % se != 0)


def slot_digest(hashes: np.ndarray, sample_every: np.ndarray) -> str:
    """The identity of a block of runs: their hashes (``Job.hash``) and the steps between their saved points
    (what a summary saves depends on the errors' sampling, which the run's hash does not hold), in order."""
    h = np.ascontiguousarray(hashes, dtype="<u8").tobytes()
    return hashlib.sha256(h + np.ascontiguousarray(sample_every, dtype="<i8").tobytes()).hexdigest()[:16]


def layout_digest(table: RunTable) -> str:
    """The identity of a store's layout: its format, shapes and every run's hash in order."""
    shape = [FORMAT, table.runs, table.S, table.m, table.nu, table.shard_runs, CHUNK_RUNS]
    return hashlib.sha256((json.dumps(shape) + slot_digest(table.hash, table.sample_every)).encode()).hexdigest()[:16]


def sample_every(convention, h: np.ndarray, period: float | None, save_every: int = 1) -> np.ndarray:
    """Steps between the saved points of runs of step ``h``: the spacing of the error convention's sample times
    over h (``errors.sample``: every saved step for ``all``, i.e. every ``save_every``-th, as a trajectory keeps
    them; whole periods, or a time spacing, checked at expansion to be a whole number of steps)."""
    sample = convention.sample
    if sample == "all":
        return np.full(h.shape, max(1, int(save_every)), dtype=np.int64)
    d = period if sample == "periods" else float(sample)
    return np.maximum(1, np.rint(d / h)).astype(np.int64)


def run_table(study) -> RunTable:
    """The RunTable of a study (its jobs in plan order)."""
    schemes = [m.label for m in study.methods]
    si = {label: i for i, label in enumerate(schemes)}
    instances = study.instances or [study.instance_of("")]
    ci = {inst.key: i for i, inst in enumerate(instances)}
    n_of = {}
    for m in study.methods:
        cols = row_columns(m.rows)
        jobs, ns = cols["job"], cols["n"]
        if ns.count(None) < len(ns):  # the rows with a label n (the others: -1)
            n_of.update((j, n) for j, n in zip(jobs, ns) if n is not None)
    if isinstance(study.jobs, PlannedJobs):  # as columns (a plan, a summary study's expansion)
        c = study.jobs.columns()
    else:
        jobs = list(study.jobs.values())
        c = {"id": [j.id for j in jobs], "label": [j.label for j in jobs], "combo": [j.combo for j in jobs],
             "hash": [j.hash for j in jobs], "h": np.array([j.h for j in jobs], dtype=float),
             "steps": np.array([j.steps for j in jobs], dtype=np.int64)}  # fmt: skip
    R = len(c["id"])
    h = np.asarray(c["h"], dtype=float)
    no_n = np.full(R, -1, dtype=np.int64)
    m, nu = study.dims
    return RunTable(
        hash=hashes_as_integers(c["hash"]),
        scheme=np.fromiter(map(si.__getitem__, c["label"]), dtype=np.int16, count=R),
        combo=np.fromiter(map(ci.__getitem__, c["combo"]), dtype=np.int32, count=R),
        h=h,
        n=np.fromiter(map(n_of.get, c["id"], itertools.repeat(-1)), dtype=np.int64, count=R) if n_of else no_n,
        N=np.asarray(c["steps"], dtype=np.int64),
        sample_every=sample_every(study.convention, h, study.period, study.cfg.get("save_every", 1)),
        schemes=schemes,
        combos=[dict(inst.values) for inst in instances],
        grid=list(study.grid),
        m=int(m),
        nu=int(nu),
        shard_runs=shard_size(study, R),
    )


def coordinate_names(study, m: int) -> list[str] | None:
    """The names of q's components of the store (``Problem.coordinates``) of the study's largest instance, of
    ``m`` coordinates: the study's problem where it is that large (a grid of values), else the first instance of m
    (a chain over its number of links: x0, y0, ..., of the most links); None if none is."""
    problems = itertools.chain((study.built_problem,), (inst.problem for inst in study.instances or ()))
    largest = next((pb for pb in problems if pb.m == m), None)
    return list(largest.coordinates) if largest is not None and largest.coordinates else None


def shard_size(study, runs: int) -> int:
    """Runs per shard of a study of ``runs`` runs: its ``shard_runs``, else ``SHARD_RUNS`` where its problem has a
    compiled loop (a shard is one ensemble call), else as many as make ``PER_RUN_SHARDS`` shards: runs integrated
    one by one in numpy (``hbvm_core.per_run``: a chain over its number of links) are tasks of seconds each, which
    Dask spreads over its workers, the costliest first (``shard_spec``'s ``work``)."""
    given = study.cfg.get("shard_runs")
    if given:
        return int(given)
    if study.built_problem.kernels is not None:
        return SHARD_RUNS
    return max(1, -(-int(runs) // PER_RUN_SHARDS))


def hashes_as_integers(hashes: list[str]) -> np.ndarray:
    """Run hashes (``Job.hash``: 16 hex digits) as uint64, the number the digits write."""
    if set(map(len, hashes)) == {16}:  # one conversion of all the digits, big-endian 8 bytes each
        return np.frombuffer(bytes.fromhex("".join(hashes)), dtype=">u8").astype(np.uint64)
    return np.fromiter((int(x, 16) for x in hashes), dtype=np.uint64, count=len(hashes))


# --------------------------------------------------------------------------- the store
def _width(name: str, table: RunTable) -> tuple[int, ...]:
    """The shape of one run's row of a data array."""
    return {"counts": (len(COUNTS),), "scalars": (1 + 2 * table.nu,), "t": (table.S,), "y": (table.S, 2 * table.m)}[
        name
    ]


def inner_chunk(shard_runs: int) -> int:
    """Rows of an inner chunk of a data array: ``CHUNK_RUNS``, a whole shard of fewer runs, or, where ``shard_runs``
    is no multiple of it (Zarr makes a shard of whole chunks: 2500 in chunks of 1000 was refused), its largest
    divisor up to ``CHUNK_RUNS``; one chunk per shard where that divisor is under a tenth of it (a prime
    ``shard_runs`` would make chunks of one run)."""
    if shard_runs <= CHUNK_RUNS or shard_runs % CHUNK_RUNS == 0:
        return min(shard_runs, CHUNK_RUNS)
    d = max(d for d in range(1, CHUNK_RUNS + 1) if shard_runs % d == 0)
    return d if 10 * d >= CHUNK_RUNS else shard_runs


def create(path: str, table: RunTable, study: str, tmp: str, coordinates: list[str] | None = None) -> None:
    """Write the store's metadata (consolidated), coordinates and empty shard records under ``tmp`` and rename it to
    ``path`` (which must not exist): a store at ``path`` always has them. Its shards are written by the tasks.
    ``coordinates``: the names of q's components (``Problem.coordinates``; x0, x1, ... when not given)."""
    import zarr

    os.makedirs(tmp, exist_ok=True)
    work = new_temporary(tmp, path)
    sr, R = table.shard_runs, max(table.runs, 1)
    chunk = inner_chunk(sr)
    names = [str(c) for c in coordinates] if coordinates else [f"x{i}" for i in range(table.m)]
    attrs = {
        "format": FORMAT,
        "study": study,
        "layout": table.layout,
        "runs": table.runs,
        "shard_runs": sr,
        "chunk_runs": chunk,
        "S": table.S,
        "m": table.m,
        "nu": table.nu,
        "coordinates": names,
        "schemes": table.schemes,
        "combos": table.combos,
        "grid": table.grid,
        "counts": list(COUNTS),
    }
    nu = table.nu
    # what each column is, for a reader without hbvm; "coordinates": the CF attribute that makes xarray read the
    # arrays along run as its coordinates
    columns = {
        "counts": list(COUNTS),
        "scalars": ["H_error", *(f"g_error_{i}" for i in range(nu)), *(f"lam_{i}" for i in range(nu))],
        "y": [*(f"q_{c}" for c in names), *(f"p_{c}" for c in names)],
    }
    try:
        g = zarr.open_group(work, mode="w", zarr_format=3, attributes=attrs)
        for name in DATA:
            w = _width(name, table)
            fill = -1 if name == "counts" else np.nan
            dtype = "i8" if name == "counts" else "f8"
            meta = {"coordinates": " ".join(COORDS), **({"columns": columns[name]} if name in columns else {})}
            g.create_array(name, shape=(R, *w), chunks=(chunk, *w), shards=(sr, *w), dtype=dtype,
                           compressors=state_compressors(), fill_value=fill, dimension_names=DIMS[name],
                           attributes=meta)  # fmt: skip
        for name in COORDS:
            values = getattr(table, name)
            # one shard of the whole length: one file per coordinate, written here once and only ever read whole, of
            # one inner chunk (Zarr wants the shard a multiple of its chunks: chunks of CHUNK_RUNS refused a study of
            # 1500 runs; and the seven coordinates of 10^5 runs are written in 0.03 s instead of 0.15-0.18 s)
            a = g.create_array(name, shape=(R,), chunks=(R,), shards=(R,), dtype=values.dtype,
                               compressors=compressors(), fill_value=0, dimension_names=("run",))  # fmt: skip
            if table.runs:
                a[:] = values
        with quiet_zarr():
            zarr.consolidate_metadata(work)
        # the records after the consolidation: they change, the consolidated metadata does not
        _write_group(os.path.join(work, SHARD_RECORDS), {})
        for slot in range(len(table.slots())):
            _write_group(os.path.dirname(shard_record(work, slot)), {})
        seal_store(work)  # last: the metadata and coordinates as written (the records are not sealed)
        os.rename(work, path)
    except BaseException:
        remove_path(work)
        raise


def _group_document(attributes: dict) -> str:
    """The ``zarr.json`` of a Zarr v3 group with these attributes."""
    return json.dumps({"zarr_format": 3, "node_type": "group", "attributes": attributes})


def _write_group(folder: str, attributes: dict) -> None:
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "zarr.json"), "w") as fh:
        fh.write(_group_document(attributes))


def read_attrs(path: str) -> dict | None:
    """The root attributes of a sharded store of this format, or None (none there, or another format)."""
    attrs = _root_attrs(path)
    return attrs if attrs.get("format") == FORMAT else None


def _root_attrs(path: str) -> dict:
    try:
        with open(os.path.join(path, "zarr.json")) as fh:
            attrs = json.load(fh).get("attributes") or {}
    except (OSError, ValueError, AttributeError):
        return {}
    return attrs if isinstance(attrs, dict) else {}


def require_format(path: str) -> dict:
    """The root attributes of the sharded store at ``path``; MissingStoreError (one line) where there is none, or one
    of an earlier format (never read: its runs are computed again by the next solve)."""
    attrs = read_attrs(path)
    if attrs is not None:
        return attrs
    found = _root_attrs(path).get("format")
    if isinstance(found, str) and found.startswith("hbvm-shards/"):
        raise MissingStoreError(
            f"{path}: a sharded store of format {found}, written by an earlier version (this one reads {FORMAT}); "
            "run the workflow again to compute it anew"
        )
    raise MissingStoreError(f"{path}: no sharded store of format {FORMAT}")


def read_record(store: str, slot: int) -> dict | None:
    """The record of shard ``slot`` (its group's attributes), None when it has none."""
    try:
        with open(shard_record(store, slot)) as fh:
            rec = json.load(fh).get("attributes")
    except (OSError, ValueError, AttributeError):
        return None
    return rec if isinstance(rec, dict) and rec.get("format") == FORMAT else None


def _write_record(store: str, slot: int, record: dict) -> None:
    """Put the group of shard ``slot``'s record in place at once: written in the study's ``.tmp``, renamed."""
    path = shard_record(store, slot)
    tmp = new_temporary(os.path.join(os.path.dirname(os.path.abspath(store)), TMP_DIR), f"record-{slot}.json")
    with open(tmp, "w") as fh:
        fh.write(_group_document(record))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    os.replace(tmp, path)


def remove_record(store: str, slot: int) -> None:
    """Shard ``slot`` not complete: its record emptied (a group without attributes, so the store stays valid Zarr)
    and its partial results removed (``partials``)."""

    if read_record(store, slot) is not None:
        _write_record(store, slot, {})
    partials.remove(store, slot)


def shard_files(store: str, slot: int, group=None) -> dict[str, str]:
    """array -> the file of shard ``slot`` of each data array (``group``: the store's group, opened once by a caller
    that asks for every shard)."""
    import zarr

    g = zarr.open_group(store, mode="r") if group is None else group
    out = {}
    for name in DATA:
        a = g[name]
        key = a.metadata.encode_chunk_key((slot,) + (0,) * (a.ndim - 1))
        out[name] = os.path.join(store, name, *key.split("/"))
    return out


def shard_damage(store: str, slot: int, start: int, stop: int) -> tuple[str, str] | None:
    """(array, what) when a data array's shard ``slot`` cannot be read back intact (a missing shard file, a
    truncated one, a chunk failing its CRC-32C checksum), else None. Reads the shard (rows [start, stop))."""
    import zarr

    found = shard_problem(store, slot, read_record(store, slot), deep=True)
    if found is not None:
        return found[0], f"{os.path.relpath(found[1], store)}: {found[2]}"
    g = zarr.open_group(store, mode="r")
    files = shard_files(store, slot)
    for name in DATA:
        if not os.path.exists(files[name]):
            continue  # never written (its record says so): the fill value
        try:
            g[name][start:stop]
        except Exception as exc:  # noqa: BLE001 - any decoding failure is damage, named
            return name, f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
    return None


# --------------------------------------------------------------------------- the rule (integrity)
#: the seal of a store's metadata documents and coordinate files (``seal_store``): the attributes of the records'
#: group (``shards/zarr.json``, outside the consolidated metadata, a Zarr document plain readers accept)
SEAL = "zarr.json"


def sealed_files(store: str) -> list[str]:
    """The files of a store that ``seal_store`` seals: every metadata document (``zarr.json``: attributes, array
    metadata) and every coordinate file, i.e. all but the data arrays' shard files and the records."""
    out = []
    for root, dirs, files in os.walk(store):
        rel = os.path.relpath(root, store).replace(os.sep, "/")
        top = rel.split("/")[0]
        if rel == SHARD_RECORDS or (top in DATA and rel != top):
            dirs[:] = []
            continue
        out += [f if rel == "." else f"{rel}/{f}" for f in files if not f.startswith(".")]  # no reader reads those
    return sorted(out)


def seal_store(store: str) -> None:
    """Record a digest of each of the store's ``sealed_files`` as the attributes of ``<store>/shards/zarr.json``."""

    sealed = seal_files(store, sealed_files(store))
    _write_group(os.path.join(store, SHARD_RECORDS), {"format": FORMAT, "files": sealed})


def store_problems(store: str, only: set[str] | None = None) -> list[tuple[str, str]]:
    """(file, what) for each metadata document or coordinate file of the store that is not the one it was created
    with (``seal_store``: edited, removed, added), or for a store without a seal; ``only``: of these files."""

    try:
        with open(os.path.join(store, SHARD_RECORDS, SEAL)) as fh:
            sealed = json.load(fh)["attributes"]["files"]
        assert isinstance(sealed, dict)
    except (OSError, ValueError, KeyError, TypeError, AssertionError):
        return [(f"{SHARD_RECORDS}/{SEAL}", "no seal of its metadata and coordinates (recompute it)")]
    out = []
    for name in sorted(set(sealed) | set(sealed_files(store))):
        if only is not None and name not in only:
            continue
        if name not in sealed:
            out.append((name, "added after the store was created"))
            continue
        try:
            got = file_digest(os.path.join(store, *name.split("/")))
        except OSError:
            out.append((name, "missing"))
            continue
        if got != sealed[name]:
            out.append((name, "edited after the store was created"))
    return out


def store_problem(store: str, only: set[str] | None = None) -> tuple[str, str] | None:
    """The first of ``store_problems``, None when the store's metadata and coordinates are as sealed."""
    found = store_problems(store, only)
    return found[0] if found else None


def require_sealed(store: str) -> None:
    """StoreError naming the store and the file when ``store_problem`` finds one (the readers' check)."""
    found = store_problem(store)
    if found is not None:
        raise StoreError(store, *_named(*found))


def _named(file: str, what: str) -> tuple[str | None, str]:
    """(array, what) of a ``store_problem``: the array a file belongs to, and the file within it."""
    top, _, rest = file.partition("/")
    if top in DATA + COORDS and rest:
        return top, f"{rest}: {what}"
    return None, f"{file}: {what}"


def shard_file_record(store: str, slot: int) -> dict[str, list | None]:
    """array -> [size, digest] of its file of shard ``slot`` (None: no file, every chunk the fill value): what a
    shard's record says of its files."""

    out: dict[str, list | None] = {}
    for name, path in shard_files(store, slot).items():
        out[name] = [os.path.getsize(path), file_digest(path)] if os.path.exists(path) else None
    return out


def shard_problem(
    store: str, slot: int, record: dict | None, deep: bool = False, group=None
) -> tuple[str, str, str] | None:
    """(array, file, what) when a file of shard ``slot`` is not the one its ``record`` names: missing, of
    another size, or with ``deep`` of another digest (rewritten); a record without its files is not trusted.
    ``group``: as ``shard_files``."""

    files = shard_files(store, slot, group)
    kept = (record or {}).get("files")
    if not isinstance(kept, dict) or set(kept) != set(DATA):
        return DATA[0], files[DATA[0]], "its record names no files (recompute it)"
    for name in DATA:
        path, want = files[name], kept[name]
        if want is None:
            if os.path.exists(path):
                return name, path, "shard file added after the shard was written"
            continue
        try:
            size = os.path.getsize(path)
        except OSError:
            return name, path, "shard file missing"
        if size != want[0]:
            return name, path, f"shard file has {size} bytes, {want[0]} were written"
        if deep and file_digest(path) != want[1]:
            return name, path, "shard file changed after the shard was written (its digest differs)"
    return None


def shard_error(store: str, slot: int, found: tuple[str, str, str]) -> StoreError:
    """The one-line error of a reader for shard ``slot``'s ``found`` (array, file, what)."""
    array, path, what = found
    return StoreError(store, array, f"shard {slot} ({os.path.relpath(path, store)}): {what}")


def set_aside_shard(store: str, slot: int, study_dir: str) -> list[str]:
    """Move the files of shard ``slot`` (and its record) into ``<study>/.tmp/damaged/``; returns where they went."""
    remove_record(store, slot)
    out = []
    for name, path in shard_files(store, slot).items():
        if os.path.exists(path):
            aside = new_temporary(os.path.join(study_dir, TMP_DIR, DAMAGED_DIR), f"{slot}-{name}")
            os.makedirs(os.path.dirname(aside), exist_ok=True)
            os.rename(path, aside)
            out.append(aside)
    return out


def complete(store: str) -> bool:
    """Every shard of the store has its record for its runs."""
    attrs = read_attrs(store)
    if attrs is None or store_problem(store) is not None:
        return False
    import zarr

    hashes, se = _read_coord(store, "hash"), _read_coord(store, "sample_every")
    sr = attrs["shard_runs"]
    group = zarr.open_group(store, mode="r")  # once for every shard
    for slot, start in enumerate(range(0, attrs["runs"], sr)):
        rec = read_record(store, slot)
        if rec is None or rec.get("digest") != slot_digest(hashes[start : start + sr], se[start : start + sr]):
            return False
        if shard_problem(store, slot, rec, group=group) is not None:
            return False
    return True


def _read_coord(store: str, name: str) -> np.ndarray:
    import zarr

    attrs = read_attrs(store) or {}
    a = zarr.open_group(store, mode="r")[name]
    return np.asarray(a[: attrs.get("runs", a.shape[0])])


# --------------------------------------------------------------------------- the solve step
@dataclass
class Shard:
    """A shard to compute: its slot and rows, the rows to integrate and the rows copied from a store."""

    slot: int
    start: int
    stop: int
    digest: str
    compute: np.ndarray  # local rows to integrate
    sources: list[dict]  # {"store", "src": rows there, "dst": local rows}


def prepare(study, retry_failed: bool, log) -> tuple[RunTable, list[Shard], dict]:
    """The solve step's reuse: (the run table, the shards to compute, counts of the reused runs). Creates the
    store when there is none or its runs changed (the old one kept as ``runs.previous.zarr``, the source of the
    rows it holds); a damaged shard is set aside and logged, naming the array."""

    table = run_table(study)
    path = shard_store(study.results, study.name)
    prev = previous_shard_store(study.results, study.name)
    attrs = read_attrs(path)
    edited = store_problem(path) if attrs is not None else None
    if attrs is None or edited or attrs.get("layout") != table.layout or not _hashes_equal(path, table):
        if os.path.lexists(path):
            if os.path.lexists(prev):  # a relayout cut short before: keep the complete one of the two
                remove_path(prev if complete(path) else path)
            if os.path.lexists(path):
                os.rename(path, prev)
                if edited:  # its metadata or a coordinate not as created: made again, the intact shards' runs copied
                    log.warning(f"store {path}: {edited[0]}: {edited[1]}; made again, reusing the rows of its shards")
                else:
                    name = os.path.basename(path)
                    log.info(f"the study's runs changed: a new {name}, reusing the rows of the old one")
        names = coordinate_names(study, table.m)  # built here only when a store is made
        create(path, table, study.name, tmp_dir(study.results, study.name), names)
    source = _source_rows(prev, retry_failed) if os.path.lexists(prev) else {}
    shards, reused, failed = [], 0, 0
    for slot, (start, stop) in enumerate(table.slots()):
        digest = table.digest(start, stop)
        rec = read_record(path, slot)
        compute = np.arange(stop - start)
        sources: list[dict] = []
        if rec is not None and rec.get("digest") == digest:
            found = shard_damage(path, slot, start, stop)
            if found is None:
                status = read_rows(path, "counts", np.arange(start, stop))[:, 0]
                bad = np.flatnonzero(status != 0)
                if not (retry_failed and bad.size):
                    reused += stop - start
                    failed += int(bad.size)
                    continue
                ok = np.flatnonzero(status == 0)  # retry_failed: the failed runs again, the others copied
                sources, compute = [{"store": path, "src": start + ok, "dst": ok}], bad
            else:
                array, what = found
                aside = set_aside_shard(path, slot, study.dir)
                where = f"; set aside in {os.path.dirname(aside[0])}" if aside else ""
                log.warning(f"damaged shard {slot} of {path}: array {array}: {what}{where}; recomputing its runs")
        if source:
            keys = zip(table.hash[start:stop][compute].tolist(), table.sample_every[start:stop][compute].tolist())
            src = np.array([source.get(key, -1) for key in keys], dtype=np.int64)
            take = src >= 0
            if take.any():
                sources.append({"store": prev, "src": src[take], "dst": compute[take]})
                compute = compute[~take]
        shards.append(Shard(slot, start, stop, digest, compute, sources))
    todo = sum(s.compute.size for s in shards)
    copied = sum(int(src["dst"].size) for s in shards for src in s.sources)
    log.info(
        f"{plural(table.runs, 'run')} in {plural(len(table.slots()), 'shard')} of {table.shard_runs}: "
        f"{reused} reused in complete shards, {copied} copied, {todo} to compute"
    )
    return table, shards, {"reused": reused, "copied": copied, "failed_reused": failed}


def _hashes_equal(path: str, table: RunTable) -> bool:
    try:
        same = np.array_equal(_read_coord(path, "hash"), table.hash)
        return bool(same and np.array_equal(_read_coord(path, "sample_every"), table.sample_every))
    except Exception:  # noqa: BLE001 - a damaged coordinate: the store is made again
        return False


def _source_rows(store: str, retry_failed: bool) -> dict[int, int]:
    """(hash, sample_every) -> row of the runs of a store that lie in complete, intact shards (and did not fail, with
    ``retry_failed``): the rows a new store may copy."""
    attrs = read_attrs(store)
    if attrs is None or any(f.split("/")[0] in DATA for f, _ in store_problems(store)):
        return {}  # a data array's metadata edited: its rows cannot be trusted (an edited label or h can)
    try:
        hashes, se = _read_coord(store, "hash"), _read_coord(store, "sample_every")
    except Exception:  # noqa: BLE001 - a damaged old store: nothing to copy
        return {}
    out: dict[tuple, int] = {}
    sr = attrs["shard_runs"]
    for slot, start in enumerate(range(0, attrs["runs"], sr)):
        stop = min(start + sr, attrs["runs"])
        rec = read_record(store, slot)
        digest = slot_digest(hashes[start:stop], se[start:stop])
        if rec is None or rec.get("digest") != digest or shard_damage(store, slot, start, stop):
            continue
        rows = np.arange(start, stop)
        if retry_failed:
            rows = rows[read_rows(store, "counts", rows)[:, 0] == 0]
        out.update(zip(zip(hashes[rows].tolist(), se[rows].tolist()), rows.tolist()))
    return out


def read_rows(store: str, name: str, rows: np.ndarray) -> np.ndarray:
    import zarr

    a = zarr.open_group(store, mode="r")[name]
    rows = np.asarray(rows, dtype=np.int64)
    if rows.size and np.all(np.diff(rows) == 1):
        return np.asarray(a[int(rows[0]) : int(rows[-1]) + 1])
    return np.asarray(a.get_orthogonal_selection((rows,) + (slice(None),) * (a.ndim - 1)))


def shard_spec(study, table: RunTable, shard: Shard, modules: dict | None = None) -> dict:
    """What a shard task needs (plain data: arrays, the planned problem and method entries): ``solve_shard``'s
    argument."""

    a, b = shard.start, shard.stop
    rows = np.arange(a, b)[shard.compute]
    schemes = sorted(set(table.scheme[rows].tolist()))
    combos = sorted(set(table.combo[a:b].tolist()))  # the copied rows' too: the shard's partial results need them
    instances = study.instances or [study.instance_of("")]
    methods = study.methods
    checked = _checked_combos(study, instances, combos)
    return {
        "study": study.name,
        "store": os.path.abspath(shard_store(study.results, study.name)),
        "study_dir": os.path.abspath(study.dir),
        "slot": shard.slot,
        "start": a,
        "stop": b,
        "digest": shard.digest,
        "compute": shard.compute,
        "sources": [dict(s, store=os.path.abspath(s["store"])) for s in shard.sources],
        "scheme": table.scheme[a:b],
        "combo": table.combo[a:b],
        "h": table.h[a:b],
        "N": table.N[a:b],
        "sample_every": table.sample_every[a:b],
        "methods": {i: {"entry": methods[i].entry, "module": methods[i].module} for i in schemes},
        "problems": {
            i: {
                "problem": study.cfg["problem"],
                "params": instances[i].params,
                "structure": instances[i].structure,
                "probe": instances[i].probe if i in checked or not instances[i].probe_pending else None,
                "where": instances[i].where or f"studies.{study.name}",
                "module_file": (modules or {}).get(i, ""),
            }
            for i in combos
        },
        "errors": errors_spec(study),  # for the shard's partial results (``partials``)
        "compensated": bool(study.cfg["compensated"]),
        # the study's key; the shard task decides where it runs (``shard_worker.solve_shard``)
        "backend": study.cfg["backend"],
        "S": table.S,
        "m": table.m,
        "nu": table.nu,
        "work": shard_work(table, instances, rows),
    }


def shard_work(table: RunTable, instances: list, rows: np.ndarray) -> float:
    """The work of computing ``rows``, in steps times coordinates (an instance not built: the store's m), the order
    in which a solve submits its shards (the costliest first)."""
    m = np.array([inst.built.m if inst.built is not None else table.m for inst in instances], dtype=float)
    return float(np.sum(table.N[rows] * m[table.combo[rows]]))


def _checked_combos(study, instances: list, combos: list[int]) -> set[int]:
    """The grid combinations of a shard whose problem the shard task builds and checks against its planned probe
    (``shard_worker.Structures``): where the problem's Family takes the instances' params as arrays, the first
    only; otherwise each. Only these have their probe computed here (a sweep's probes are planned lazily)."""
    from hbvm_core.problems.family import family_of

    if len(combos) < 2:
        return set(combos)
    family = family_of(instances[combos[0]].problem)
    keys = set(instances[combos[0]].params)
    if family is None or not keys <= set(family.shapes) or any(set(instances[c].params) != keys for c in combos):
        return set(combos)
    return {combos[0]}


def shard_key(spec: dict) -> str:
    """The Dask key of a shard task: ``shard-<study>-<slot>-<digest>``."""
    return f"shard-{spec['study']}-{spec['slot']}-{spec['digest']}"


def write_shard(
    store: str,
    slot: int,
    start: int,
    arrays: dict[str, np.ndarray],
    digest: str,
    record: dict,
    partial: tuple | None = None,
) -> None:
    """Write the rows of shard ``slot`` (from row ``start``) of every data array (``arrays``: name -> rows), then
    its partial results (``partial``: (values, errors, problems), ``partials``), then its record (``digest``: of its
    runs' hashes; ``record``: what else it says). Its old record and partial are removed first (``remove_record``)."""
    import zarr

    remove_record(store, slot)
    g = zarr.open_group(store, mode="r+")
    n = len(arrays["counts"])
    for name in DATA:
        g[name][start : start + n] = arrays[name]
    files = shard_file_record(store, slot)  # what the readers check the shard's files by (``shard_problem``)
    head = {"format": FORMAT, "slot": slot, "digest": digest, "runs": n, "files": files}
    if partial is not None:
        values, errors, problems = partial
        partials.write(store, slot, values, os.path.join(os.path.dirname(os.path.abspath(store)), TMP_DIR))
        head["partial"] = {
            "key": partials.key(errors, problems, digest, files),
            "stats": partials.file_stats(shard_files(store, slot, g)),
            "sha256": partials.values_digest(values),
        }
    _write_record(store, slot, {**head, **record})


def run_lengths(values: np.ndarray) -> list[list]:
    """[[value, count], ...]: the values of a shard's runs in order, as runs of equal values (a record's
    ``backends``: a block of runs computed alike is one pair)."""
    out: list[list] = []
    for v in values.tolist():
        if out and out[-1][0] == v:
            out[-1][1] += 1
        else:
            out.append([v, 1])
    return out


def record_backends(record: dict | None, n: int) -> np.ndarray:
    """The backend that computed each of a shard's ``n`` runs, from its record (``backends``, ``run_lengths``); a
    record without them (written before they were kept): its one ``backend`` where it names one, else ""."""
    out = np.full(n, "", dtype=object)
    record = record or {}
    pairs = record.get("backends")
    if pairs and sum(c for _, c in pairs) == n:
        out[:] = np.repeat(np.array([v for v, _ in pairs], dtype=object), [c for _, c in pairs])
    elif record.get("backend") and "," not in record["backend"] and record["backend"] != "copied":
        out[:] = record["backend"]
    return out


def row_backends(store: str, rows: np.ndarray) -> np.ndarray:
    """The backend that computed each of the runs ``rows`` of a store (their shards' records)."""
    return rows_from_records(store, rows, lambda rec, n: {"backend": record_backends(rec, n)})["backend"]


def rows_from_records(store: str, rows: np.ndarray, per_run) -> dict[str, np.ndarray]:
    """What ``per_run(record, n)`` ({key: array over a shard's n runs}) says of each of the runs ``rows`` of a store,
    from their shards' records, read once each; "" for every key where the store has none."""
    rows = np.asarray(rows, dtype=np.int64)
    attrs = read_attrs(store)
    out: dict[str, np.ndarray] = {}
    sr, R = (attrs["shard_runs"], attrs["runs"]) if attrs is not None else (1, 0)
    slot_of = rows // sr
    for slot in np.unique(slot_of).tolist() if attrs is not None else []:
        mine, start = slot_of == slot, slot * sr
        for key, values in per_run(read_record(store, slot), min(sr, R - start)).items():
            out.setdefault(key, np.full(rows.size, "", dtype=object))[mine] = values[rows[mine] - start]
    return out or {key: np.full(rows.size, "", dtype=object) for key in per_run(None, 0)}


def finish(study) -> None:
    """After every shard of the study's store is complete: the old store of an earlier set of runs is removed."""
    path = shard_store(study.results, study.name)
    prev = previous_shard_store(study.results, study.name)
    if os.path.lexists(prev) and complete(path):
        remove_path(prev)


def manifest_entry(study, table: RunTable) -> dict:
    """What the manifest (solve.json) of a sharded study records: the store and each shard's record."""
    import zarr

    path = shard_store(study.results, study.name)
    group = zarr.open_group(path, mode="r")  # once: an open per shard cost 40 ms each
    shards = []
    for slot, (a, b) in enumerate(table.slots()):
        rec = read_record(path, slot) or {}
        shards.append({"slot": slot, "start": a, "stop": b, "digest": rec.get("digest"),
                       "computed": rec.get("computed"), "failed": rec.get("failed"), "wall_s": rec.get("wall_s"),
                       "backend": rec.get("backend"), "stat": signatures(path, slot, group)})  # fmt: skip

    sealed = {name: file_signature(os.path.join(path, name)) for name in sealed_files(path)}
    return {"store": os.path.relpath(path, study.dir), "runs": table.runs, "shards": shards, "sealed": sealed}


def signatures(store: str, slot: int, group=None) -> dict[str, list[int] | None]:
    """array -> (size, mtime) of its file of shard ``slot`` (``storage.file_signature``): what the manifest
    records, so that the next parse finds a changed shard by os.stat alone (``damaged_shards``). ``group``: as
    ``shard_files``."""

    return {name: file_signature(path) for name, path in shard_files(store, slot, group).items()}


def damaged_shards(manifest: dict, study_dir: str) -> list[tuple[str, str, str]]:
    """(shard, store, what) for each shard of a sharded study's manifest whose files are not the ones the solve
    step recorded (os.stat first; a changed one is then read and its checksums checked): ``what`` names the array
    and the damage, or is "changed" for an intact shard whose files were touched or replaced."""
    import zarr

    store = os.path.join(study_dir, manifest["store"])
    try:
        group = zarr.open_group(store, mode="r")  # once for every shard
    except Exception:  # noqa: BLE001 - each shard below says what is wrong
        group = None

    out = []
    # the metadata documents (small: the grid values, labels, array metadata) every time, against the store's seal;
    # a coordinate file when its size or time is not the manifest's
    sealed = manifest.get("sealed")
    if isinstance(sealed, dict):
        only = {n for n, v in sealed.items() if n.endswith("zarr.json") or file_signature(os.path.join(store, n)) != v}
        only |= set(sealed_files(store)) - set(sealed)
    found = store_problem(store, only if isinstance(sealed, dict) else None)
    if found is not None:
        array, what = _named(*found)
        out.append(("metadata", store, f"array {array}: {what}" if array else what))
    for entry in manifest.get("shards", []):
        slot = entry["slot"]
        try:
            if entry.get("stat") == signatures(store, slot, group):
                continue
            found = shard_damage(store, slot, entry["start"], entry["stop"])
        except Exception as exc:  # noqa: BLE001 - a store that cannot be opened at all
            found = ("metadata", f"{type(exc).__name__}: {exc}".splitlines()[0])
        what = "changed" if found is None else f"array {found[0]}: {found[1]}"
        out.append((f"shard {slot}", store, what))
    return out


# --------------------------------------------------------------------------- reading
def open_shards(path: str, chunks: dict | None = None):
    """The sharded store at ``path`` as one lazily loaded xarray Dataset over ``run`` (see ``reading.open_study``).

    The index of ``run`` is a MultiIndex of ``scheme`` (the method label), the grid keys and ``h``
    (``run_index.RunIndex``), so that ``ds.sel(scheme="hbvm_k2_s2", L=2.0, h=0.05)`` picks one run, a partial key a
    block of runs, and ``ds.sel(L=2.1, method="nearest")`` the nearest grid value; ``hash``, ``n``, ``N``, ``combo``
    and ``status`` are coordinates along ``run``. The data variables (``fail_step`` ... ``n_saved``, ``H_error``,
    ``g_error`` and ``lam`` [run, constraint], ``t`` [run, point], ``q``, ``p`` [run, point, dof], ``dof`` labelled
    with the problem's coordinate names) are read on demand, every chunk checked against its CRC-32C: lazily
    without dask by default (``.item()`` works), as dask arrays of the stored chunks with ``chunks={}``.
    MissingStoreError when a shard is not complete (no record for its runs) or the store is of an earlier format; a
    StoreError naming the store (and the shard and its file) for a store or shard not as written, and for a chunk that
    fails its checksum when it is read."""
    import pandas as pd
    import xarray as xr
    import zarr

    from .run_index import RunIndex

    attrs = require_format(path)
    require_sealed(path)  # its attributes, array metadata and coordinates as created
    R, m, nu = attrs["runs"], attrs["m"], attrs["nu"]
    g = zarr.open_group(path, mode="r")
    coords = {name: np.asarray(g[name][:R]) for name in COORDS}
    sr = attrs["shard_runs"]
    records = [read_record(path, slot) for slot in range(-(-R // sr))]
    missing = [
        slot
        for slot, a in enumerate(range(0, R, sr))
        if (records[slot] or {}).get("digest")
        != slot_digest(coords["hash"][a : a + sr], coords["sample_every"][a : a + sr])
    ]
    if missing:
        raise MissingStoreError(
            f"{path}: {len(missing)} of {-(-R // sr)} shards not complete (first: shard {missing[0]}); "
            "run the workflow again"
        )
    for slot, rec in enumerate(records):  # every file a shard wrote is there with its size (os.stat)
        found = shard_problem(path, slot, rec, group=g)
        if found is not None:
            raise shard_error(path, slot, found)
    raw = xr.Dataset({name: checked_variable(path, g[name], sr, chunks)[:R] for name in DATA})
    counts, scalars, y = raw["counts"], raw["scalars"], raw["y"]
    data = {c: counts[:, i] for i, c in enumerate(COUNTS) if c != "status"}
    data.update(
        H_error=scalars[:, 0],
        g_error=scalars[:, 1 : 1 + nu].rename(scalar="constraint"),
        lam=scalars[:, 1 + nu :].rename(scalar="constraint"),
        t=raw["t"],
        q=y[:, :, :m].rename(state="dof"),
        p=y[:, :, m:].rename(state="dof"),
    )
    data = {name: v.variable for name, v in data.items()}
    for v in data.values():
        v.attrs, v.encoding = {}, {}
    schemes = np.array(attrs["schemes"], dtype=object)[coords["scheme"]]
    levels = {"scheme": schemes}
    for key in attrs["grid"]:
        values = [c[key] for c in attrs["combos"]]
        levels[key] = np.asarray(values)[coords["combo"]]
    levels["h"] = coords["h"]
    index = RunIndex(pd.MultiIndex.from_arrays(list(levels.values()), names=list(levels)), "run")
    ds = xr.Dataset(data, coords=xr.Coordinates.from_xindex(index))
    status = np.asarray(_read_whole(path, g["counts"], R, sr, (slice(0, R), 0)))
    names = attrs.get("coordinates")
    ds = ds.assign_coords(
        hash=("run", np.array([f"{int(x):016x}" for x in coords["hash"]], dtype=object)),
        n=("run", coords["n"]),
        N=("run", coords["N"]),
        combo=("run", coords["combo"]),
        status=("run", status),
        dof=[str(c) for c in names] if isinstance(names, list) and len(names) == m else [f"x{i}" for i in range(m)],
        constraint=np.arange(nu),
    )
    ds.attrs.update({k: attrs[k] for k in ("study", "shard_runs", "m", "nu")})
    ds.attrs.update(schemes=json.dumps(attrs["schemes"]), grid=json.dumps(attrs["grid"]))
    return ds


def read_all(path: str, names: tuple[str, ...] = COORDS + DATA) -> tuple[dict, dict[str, np.ndarray]]:
    """(attrs, arrays): the coordinates and data arrays ``names`` (every one by default; ``hash`` and
    ``sample_every`` always) of a complete store, read into memory (the aggregation, ``verify``);
    MissingStoreError when a shard is not complete, a StoreError naming the array when a chunk is damaged."""
    import zarr

    attrs = require_format(path)
    require_sealed(path)  # its attributes, array metadata and coordinates as created
    R, sr = attrs["runs"], attrs["shard_runs"]
    g = zarr.open_group(path, mode="r")
    first = ("hash", "sample_every")  # what completeness is checked by, first
    arrays = {name: np.asarray(g[name][:R]) for name in first}
    for slot, a in enumerate(range(0, R, sr)):
        digest = slot_digest(arrays["hash"][a : a + sr], arrays["sample_every"][a : a + sr])
        rec = read_record(path, slot)
        if (rec or {}).get("digest") != digest:
            raise MissingStoreError(f"{path}: shard {slot} is not complete; run the workflow again")
        found = shard_problem(path, slot, rec, deep=True, group=g)  # every byte of its files as written
        if found is not None:
            raise shard_error(path, slot, found)
    for name in dict.fromkeys(names):
        if name not in arrays:
            arrays[name] = _read_whole(path, g[name], R, sr)
    return attrs, arrays


def _read_whole(store: str, array, R: int, sr: int, where: tuple | None = None) -> np.ndarray:
    """Rows [0, R) of a data array or coordinate (``where``: an orthogonal selection of them instead), in one read;
    a chunk that cannot be decoded raises a StoreError naming the store, the array and (a data array) the shard
    and its file."""
    try:
        return np.asarray(array[:R] if where is None else array.get_orthogonal_selection(where))
    except Exception as exc:  # noqa: BLE001 - a decoding failure: which shard, below
        what = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
    name = array.basename
    if name in DATA:
        for slot, a in enumerate(range(0, R, sr)):
            try:
                array[a : min(a + sr, R)]
            except Exception:  # noqa: BLE001 - this shard
                file = shard_files(store, slot)[name]
                raise shard_error(store, slot, (name, file, f"unreadable ({what})")) from None
    raise StoreError(store, name, f"unreadable ({what})")


class _CheckedArray:
    """A zarr array for ``dask.array.from_array`` whose reads raise a StoreError naming the store, the array, the
    shard and its file, instead of zarr's own error (a chunk failing its CRC-32C checksum)."""

    def __init__(self, store: str, array, shard_runs: int):
        self.store, self.array, self.sr = store, array, shard_runs
        self.shape, self.dtype, self.ndim = array.shape, array.dtype, array.ndim

    def __getitem__(self, key):
        return self._read(key, self.array.__getitem__)

    def oindex(self, key: tuple):
        """An orthogonal selection (``zarr.Array.get_orthogonal_selection``), named as ``__getitem__``'s."""
        return self._read(key, self.array.get_orthogonal_selection)

    def _read(self, key, read):
        try:
            return read(key)
        except Exception as exc:  # noqa: BLE001 - named in one line
            what = f"unreadable ({type(exc).__name__}: {exc})".splitlines()[0][:300]
            slot = self._failing_slot(key[0] if isinstance(key, tuple) else key)
            file = shard_files(self.store, slot)[self.array.basename]
            raise shard_error(self.store, slot, (self.array.basename, file, what)) from None

    def _failing_slot(self, rows) -> int:
        """The first shard among the rows a failed read selected whose own rows cannot be read."""
        R = self.shape[0]
        picked = np.arange(R)[rows] if not isinstance(rows, slice) else np.arange(*rows.indices(R))
        for slot in np.unique(np.atleast_1d(picked) // self.sr).tolist():
            try:
                self.array[slot * self.sr : min((slot + 1) * self.sr, R)]
            except Exception:  # noqa: BLE001 - this shard
                return int(slot)
        return int(np.atleast_1d(picked)[0] // self.sr) if np.size(picked) else 0


@functools.cache
def _backend_class() -> type:
    """``_CheckedArray`` as an xarray backend array (xarray's backend API: ``BackendArray``, read through
    ``explicit_indexing_adapter``), made when first needed: the parse imports this module without xarray."""
    from xarray.backends import BackendArray
    from xarray.core import indexing

    class CheckedBackend(BackendArray):
        def __init__(self, store: str, array, shard_runs: int):
            self.checked = _CheckedArray(store, array, shard_runs)
            self.shape, self.dtype = array.shape, array.dtype

        def __getitem__(self, key):
            support = indexing.IndexingSupport.OUTER
            return indexing.explicit_indexing_adapter(key, self.shape, support, self.checked.oindex)

    return CheckedBackend


def checked_variable(store: str, array, shard_runs: int, chunks: dict | None = None):
    """An xarray Variable of a data array of the store (its dimension names, ``DIMS``), read lazily without dask
    (``chunks`` None: ``.item()`` and ``.values`` read what they select) or as a dask array of its inner chunks
    (``chunks={}``); either way a read that fails names the store, the shard and its file."""
    import xarray as xr
    from xarray.core import indexing

    dims = DIMS[array.basename]
    if chunks is not None:
        return xr.Variable(dims, checked_dask(store, array, shard_runs))
    return xr.Variable(dims, indexing.LazilyIndexedArray(_backend_class()(store, array, shard_runs)))


def checked_dask(store: str, array, shard_runs: int):
    """A dask array of a data array of the store, in its inner chunks (each within one shard), whose reads name
    the shard that fails (``_CheckedArray``)."""
    import dask.array as da

    return da.from_array(_CheckedArray(store, array, shard_runs), chunks=array.chunks, name=False, asarray=True)

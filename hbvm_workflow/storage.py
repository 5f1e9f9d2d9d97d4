"""Trajectory stores: one Zarr store (an xarray Dataset) per run, written in chunks and published atomically.

A run's store is one file, ``<run>.zarr.zip``: a Zarr v3 store in a zip, written and read by
``zipstore`` (``xr.open_zarr(zarr.storage.ZipStore(path, mode="r"))`` opens it too). The
errors of a study (``write_dataset``: errors.zarr) are a folder store written by xarray.

Layout of a run store (xarray names)::

    t          (t)                 saved times n h (every save_every steps, and t_end)
    q, p       (t, dof)            positions and momenta
    H          (t)                 H(q_n, p_n)
    g          (t, constraint)     g(q_n)
    hc         (t, constraint)     hidden constraint G(q_n)^T M^-1 p_n
    tstep      (tstep)             start time of each saved step
    lam        (tstep, constraint) multiplier used on [tstep, tstep + h] (docs/method.md 3)
    iterations (tstep)             nonlinear iterations of the step

The names of the dof (``Problem.coordinates``: an expression problem's coordinates, else x0, x1, ...) are
the attr ``coordinates``; the readers (``open_trajectory``, ``open_study``) make them the ``dof``
coordinate and 0..nu-1 the ``constraint`` coordinate, so that ``run.q.sel(dof="z")`` and
``run.g.sel(constraint=0)`` work (plain xarray shows the dimensions without coordinates).

And attrs with every parameter (problem, method entry, h, t_end, solver
settings), the package versions, the wall time and ``complete``; the job hash
and the problem's fingerprint (``hbvm_core.fingerprint``) it was computed for;
the rows (``points``, ``step_rows``) and ``chunks``: per array, the chunks
it was written with (zip entries, or files of a folder store) and their sizes in bytes.

Stores are data: nothing read from one is imported, called or used to build a
problem or a method (``load_trajectory`` takes the problem from the caller and
refuses a store computed for another one).

Integrity: every chunk ends with a CRC-32C checksum (Zarr's ``crc32c`` codec,
after the compressor), and a zip entry has the zip's CRC-32. ``damage`` checks that
every recorded chunk exists with its size (the zip's directory, or os.stat for a
folder: what the solve step does before reusing a store);
reading a store checks the same first and names the store and the array when a
chunk is missing, truncated or fails its checksum (``StoreError``). Everything else a
reader takes from a store is sealed when it is written (``integrity``: every attribute,
every array's metadata, every zip entry's CRC-32, the group document's digest in the
zip's comment; every file of errors.zarr): ``damage`` compares the store with its seal,
so an edited attribute or coordinate is damage, named, wherever damage is checked.

Atomicity: a store is written under the study's temporary folder
(``<study>/.tmp/<id>-<name>``, ``layout.tmp_dir``), verified (every row written,
complete = True) and only then renamed to ``<path>``; so a store that exists at
its final path is complete, and a killed run leaves only temporaries in that
folder (emptied by ``clean_temporaries``). A diverging run leaves no store but
a ``<path>.failed.json`` marker naming the step, time and last increment.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import math
import os
import platform
import shutil
import typing
import uuid
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from hbvm_core.errors import HBVMError

from . import zipstore
from .integrity import folder_seal_problem, seal_folder
from .layout import errors_zarr, is_errors_store, study_of_path, tmp_dir
from .zipstore import ZipStoreError, ZipStoreWriter, is_zip_store, read_group

FORMAT = "hbvm-trajectory/4"
#: the name of a study's folder of temporaries (layout.tmp_dir)
TMP_DIR = ".tmp"
FAILED = ".failed.json"
#: where a damaged store is set aside in the study's folder of temporaries (``set_aside``; kept there)
DAMAGED_DIR = "damaged"
#: the status of a store: see ``store_status``
STATUSES = ("complete", "failed", "stale", "altered", "damaged", "missing")


class StoreError(HBVMError, RuntimeError):
    """A store that cannot be trusted: a missing, truncated or corrupt chunk, or no integrity record."""

    def __init__(self, store: str, array: str | None, what: str):
        self.store, self.array, self.what = str(store), array, what
        super().__init__(f"{self.store}: {f'array {array}: ' if array else ''}{what}")

    def __reduce__(self):  # raised in a forked process, it reaches the parent as itself
        return type(self), (self.store, self.array, self.what)


class MissingStoreError(HBVMError, FileNotFoundError):
    """A store that is not there: a run the solve step should have produced (deleted afterwards), a study not
    yet solved or aggregated."""


class RunNotFoundError(HBVMError, KeyError):
    """No run of a study matches the label, (k, s) or step size asked for (``select_run``)."""


class ResultsMismatchError(HBVMError, ValueError):
    """A study's files that do not hold its rows: errors.csv or timings.csv written for another set of runs."""


class StoreMismatchError(StoreError):
    """A store computed for another run (job hash) or another problem (fingerprint) than the caller's."""


def compressors() -> tuple:
    """The bytes-to-bytes codecs of every array: zstd, then a CRC-32C checksum of the compressed chunk."""
    from zarr.codecs import Crc32cCodec, ZstdCodec

    return (ZstdCodec(level=0), Crc32cCodec())


def state_compressors() -> tuple:
    """The bytes-to-bytes codecs of a sweep store's data arrays (``shards``: the saved states of every run, floats
    that zstd barely compresses): Blosc's byte shuffle and LZ4, then the CRC-32C checksum. On a sweep's 97 MB of
    states (10^4 runs, 101 points, 12 numbers): 83 MB written in 0.25-0.30 s, where zstd took 1.2-2.1 s for 93 MB
    (2 cores, load 3). Blosc is one of Zarr v3's core codecs: any Zarr reader opens the store."""
    from zarr.codecs import BloscCodec, Crc32cCodec

    return (BloscCodec(cname="lz4", clevel=5, shuffle="shuffle"), Crc32cCodec())


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


@functools.cache
def versions() -> dict[str, str]:
    """The versions a store was written with (from the installed distributions: importing xarray costs a second)."""
    from importlib.metadata import PackageNotFoundError, version

    from hbvm_core._version import __version__

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
    """A sink for ``integrate``: writes each chunk of points and steps into a one-file Zarr store at ``path``.

    The store is a zip file (``zipstore``): rows are buffered per array until a chunk is
    full, so memory stays bounded by about two chunks; H, g and the hidden constraint
    are computed per block from the problem. ``finish`` checks that every row was
    written, records the attrs and closes the zip; ``abort`` closes it unfinished.
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
        self.writer = ZipStoreWriter(self.path)
        try:
            for name, (dims, dtype, fill, long_name, description) in self.SPEC.items():
                shape = tuple(size[d] for d in dims)
                chunks = chunk_shape(rows[dims[0]], shape[1:])
                attrs = {"long_name": long_name, "description": description}
                self.writer.create(name, shape, chunks, dtype, fill, dims, attrs)
        except BaseException:  # a full disk already: close the zip here (the caller has no sink to abort)
            self.writer.abort()
            raise

    def _write(self, values: dict) -> None:
        for name, v in values.items():
            self.writer.append(name, v)

    def points(self, start: int, t: np.ndarray, q: np.ndarray, p: np.ndarray) -> None:
        pb = self.problem
        values = {"t": t, "q": q, "p": p, "H": pb.hamiltonian(q, p)}
        if pb.nu:
            values |= {"g": pb.constraint(q), "hc": pb.hidden_constraint(q, p)}
        self._write(values)
        self.written["points"] += len(t)

    def steps(self, start: int, t: np.ndarray, lam: np.ndarray, iterations: np.ndarray) -> None:
        values = {"tstep": t, "iterations": iterations}
        if self.problem.nu:
            values["lam"] = lam
        self._write(values)
        self.written["steps"] += len(t)

    def finish(self, attrs: dict) -> None:
        """Verify that every row was written, then record ``attrs``, the chunk record and complete = True."""
        if self.written["points"] != self.n_points or self.written["steps"] != self.n_steps:
            self.writer.abort()
            raise StoreError(
                self.path,
                None,
                f"wrote {self.written['points']}/{self.n_points} points and "
                f"{self.written['steps']}/{self.n_steps} steps",
            )
        self.writer.flush()
        rows = {"points": self.n_points, "step_rows": self.n_steps, "chunks": self.writer.sizes}
        names = {"coordinates": list(self.problem.coordinates)}
        self.writer.close(jsonable({**attrs, **names, **rows, "format": FORMAT, "complete": True}))

    def abort(self) -> None:
        """Close the unfinished zip (the caller removes it)."""
        self.writer.abort()


#: the most bytes of one chunk of a 2-d array (float64 rows of q, p, lam, g, hc): a 1000-link chain's q
#: (2000 values a row) is chunked over dof as well as over time, about this size
CHUNK_BYTES = 4 * 2**20
#: the most columns of one chunk: 4096 float64 values, 32 KiB a row
CHUNK_COLUMNS = 4096


def chunk_shape(rows: int, trailing: tuple) -> tuple:
    """(rows, columns) of a chunk: at most ``rows`` rows and CHUNK_COLUMNS columns, within CHUNK_BYTES of
    float64 (fewer rows where the columns are many); a 1-d array's chunk is ``rows`` rows."""
    if not trailing:
        return (rows,)
    columns = max(1, min(int(trailing[0]), CHUNK_COLUMNS))
    return (max(1, min(rows, CHUNK_BYTES // (8 * columns))), columns)


def chunk_record(path: str, names) -> dict[str, dict[str, int]]:
    """{array: {chunk key: size in bytes}} of the chunk files of the arrays ``names`` of the store at ``path``."""
    record = {}
    for name in names:
        folder = os.path.join(path, name)
        found = {}
        for root, _, files in os.walk(folder):
            for f in files:
                if root == folder and f == "zarr.json":
                    continue
                full = os.path.join(root, f)
                found[os.path.relpath(full, folder).replace(os.sep, "/")] = os.stat(full).st_size
        record[name] = dict(sorted(found.items()))
    return record


def new_temporary(tmp_dir: str, name: str) -> str:
    """A fresh path ``<tmp_dir>/<id>-<name>`` for writing ``name`` before it is published (tmp_dir created)."""
    os.makedirs(tmp_dir, exist_ok=True)
    return os.path.join(tmp_dir, f"{uuid.uuid4().hex[:12]}-{os.path.basename(name)}")


def default_tmp_dir(path: str) -> str:
    """The temporary folder for a store at ``path``: the study's (``layout.tmp_dir``) for a run store or a
    study's output, else a ``.tmp`` folder next to it."""

    study = study_of_path(path)
    return (
        tmp_dir(os.path.dirname(study), os.path.basename(study))
        if study
        else os.path.join(os.path.dirname(os.path.abspath(path)), TMP_DIR)
    )


def publish(tmp: str, final: str) -> None:
    """Move a finished store from ``tmp`` into place; an older store at ``final`` is replaced.

    The older store is first renamed into ``tmp``'s folder (the study's temporaries), then removed.
    """
    Path(final).parent.mkdir(parents=True, exist_ok=True)
    old = None
    if os.path.exists(final):
        old = new_temporary(os.path.dirname(tmp), "old-" + os.path.basename(final))
        os.rename(final, old)
    os.rename(tmp, final)
    if old:
        remove_path(old)


def remove_path(path: str) -> None:
    """Remove a file or a folder (a store of either layout); nothing if it is not there."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)


def write_json_atomic(path: str, payload: dict, tmp_dir: str | None = None) -> None:
    """Write ``payload`` as JSON at ``path`` through a temporary in ``tmp_dir`` (default: ``default_tmp_dir``)."""
    tmp = new_temporary(tmp_dir or default_tmp_dir(path), path)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    try:
        with open(tmp, "w") as fh:
            json.dump(jsonable(payload), fh, indent=1, sort_keys=True)
            fh.write("\n")
        os.replace(tmp, path)
    except BaseException:  # a full disk: no temporary left behind
        remove_path(tmp)
        raise


# --------------------------------------------------------------------------- reading
def read_attrs(path: str) -> dict | None:
    """The attrs of a store (None if there is no readable store at ``path``)."""

    try:
        if is_zip_store(path):
            doc = read_group(path)
        else:
            with open(os.path.join(path, "zarr.json")) as fh:
                doc = json.load(fh)
    except (OSError, ValueError, ZipStoreError):
        return None
    return doc.get("attributes", {})


def file_signature(path: str) -> list[int] | None:
    """[size, modification time in ns] of a store file (a folder store: of its zarr.json); None if absent.

    Recorded by the solve step's manifest: a store with another signature is not the file it wrote."""
    try:
        st = os.stat(os.path.join(path, "zarr.json") if os.path.isdir(path) else path)
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns]


def read_failure(path: str) -> dict | None:
    """The failure marker of the store at ``path``, if any."""
    try:
        with open(path + FAILED) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def damage(path: str, attrs: dict | None = None, reader=None) -> tuple[str | None, str] | None:
    """(array, what) for the first thing wrong with the store's files, None when intact (os.stat only).

    Checks the integrity record of the attrs: every recorded chunk file exists with its recorded size,
    and every array's metadata exists. A store without a record (written before checksums) is damaged.
    A run store is then compared with its seal (``integrity.run_seal_problem``: every attribute, every array's
    metadata, every zip entry's CRC-32): an edited attribute or coordinate is damage, named.
    """
    attrs = read_attrs(path) if attrs is None else attrs
    if attrs is None:
        return None, "no readable zarr.json"
    if attrs.get("format") not in (FORMAT, DATASET_FORMAT) or not isinstance(attrs.get("chunks"), dict):
        return None, "no integrity record (written by an older version; recompute it)"

    sealed = attrs.get("format") == FORMAT
    if reader is not None:
        return reader.damage(attrs["chunks"]) or (reader.seal_problem() if sealed else None)
    if zipstore.is_zip_store(path):
        return zipstore.damage(path, attrs["chunks"], sealed)
    for name, chunks in attrs["chunks"].items():
        folder = os.path.join(path, name)
        if not os.path.isfile(os.path.join(folder, "zarr.json")):
            return name, "array metadata (zarr.json) missing"
        for key, size in chunks.items():
            try:
                found = os.stat(os.path.join(folder, *key.split("/"))).st_size
            except OSError:
                return name, f"chunk {key} missing"
            if found != size:
                return name, f"chunk {key} has {found} bytes, {size} were written"

    return folder_seal_problem(path)


class DamagedStoreError(StoreError):
    """A damaged store, set aside (``set_aside``) where it could be: ``aside`` is where it went, else None."""

    def __init__(self, store: str, array: str | None, what: str, aside: str | None = None):
        self.aside = aside
        note = f"; set aside as {aside}: the next run of the workflow recomputes it" if aside else ""
        super().__init__(store, array, what + note)
        self.what = what

    def __reduce__(self):
        return type(self), (self.store, self.array, self.what, self.aside)


def damaged(path: str, array: str | None, what: str) -> DamagedStoreError:
    """The error of a reader that found the store at ``path`` damaged, the store set aside (``set_aside``)."""
    return DamagedStoreError(path, array, what, set_aside(path))


def require_intact(path: str, attrs: dict | None = None) -> dict:
    """The attrs of the store at ``path``; raises StoreError naming the store and array if ``damage`` finds any."""
    attrs = read_attrs(path) if attrs is None else attrs
    found = damage(path, attrs)
    if found is not None:
        raise damaged(path, *found)
    return attrs


@contextlib.contextmanager
def opened(path: str):
    """(attrs or None, reader or None) of the store at ``path``: a zip store opened once
    (``zipstore.ZipStoreReader``, for ``damage`` and ``read_arrays``); None for a folder store."""

    if not zipstore.is_zip_store(path):
        yield read_attrs(path), None
        return
    try:
        reader = zipstore.ZipStoreReader(path)
    except (OSError, zipstore.ZipStoreError):
        yield None, None
        return
    with reader:
        yield reader.attrs, reader


def store_status(path: str, job_hash: str | None = None, fingerprint: str | None = None) -> str:
    """complete (an intact store for this hash), failed (a failure marker for it), stale (other hash,
    format or problem ``fingerprint``), damaged (a store for this hash with a missing or truncated chunk:
    ``damage``), altered (a store of this hash whose attrs are not the planned run's: ``store_verdict``), missing."""
    return store_state(path, Expected(job_hash, fingerprint))[0]


#: the attrs of a run store that a reader takes as the run's (``load_trajectory``): each must be its job's
RUN_ATTRS = ("h", "t_end", "steps", "save_every", "compensated")


@dataclasses.dataclass(frozen=True)
class Expected:
    """What a store must record to be the run it claims to be (``store_verdict``); None: not checked.

    ``planned``: the planned problem identity (structure, probe values), compared as the readers compare it
    (``hbvm_core.fingerprint.identity_mismatch``); ``problem``: a problem whose own identity is compared
    instead; ``run``: the values of ``RUN_ATTRS``."""

    job_hash: str | None = None
    fingerprint: str | None = None
    planned: tuple[str, dict] | None = None
    problem: Any = None
    run: dict | None = None

    @classmethod
    def of_job(cls, job, planned: tuple[str, dict] | None = None) -> Expected:
        """What the store of ``job`` (a ``runs.Job``) must record: its hash, fingerprint, planned identity and
        run values; ``planned``: the identity already checked (``Instance.checked``), else the job's own."""
        if planned is None and job.problem_structure:
            planned = (job.problem_structure, _probe(job.problem_probe))
        run = {"h": float(job.h), "t_end": float(job.t_end), "steps": job.steps, "save_every": int(job.save_every)}
        run["compensated"] = bool(job.compensated)
        return cls(job.hash, job.problem_fingerprint or None, planned, None, run)


@functools.lru_cache(maxsize=64)
def _probe_text(text: str) -> dict | None:
    return json.loads(text) if text else None


def _probe(text: str) -> dict | None:
    """The probe record of a job (JSON text shared by its instance's runs), parsed once per text."""
    return _probe_text(text)


class Verdict(typing.NamedTuple):
    """``store_verdict``'s answer: a ``STATUSES`` value, what was read (the store's attrs, or a failure
    marker), and for a damaged or altered store why (the array and what is wrong with it, or a phrase)."""

    status: str
    attrs: dict | None
    why: str | None = None
    array: str | None = None


def store_verdict(path: str, expected: Expected | None = None, attrs=None, reader=None) -> Verdict:
    """Whether the store at ``path`` is the run it claims to be: the one predicate of the solve step, a retried
    batch, the aggregation, the readers and ``verify``.

    complete: the store says so, is of this format, job hash and problem fingerprint, records the planned
    identity and run values, and every recorded chunk is there with its size (``damage``: os.stat only; reading
    the data checks the checksums). stale: another format, hash or fingerprint (another run: recomputed and
    replaced). altered: this run's hash but an attr a reader checks disagrees (edited): ``why`` says which.
    damaged: a chunk missing or truncated. failed, missing: a failure marker of this hash; nothing.
    ``attrs``/``reader``: the store opened already (``opened``)."""
    from hbvm_core.fingerprint import identity_mismatch, problem_mismatch

    if attrs is None and reader is None:
        with opened(path) as (attrs, reader):
            return store_verdict(path, expected, attrs, reader) if attrs is not None else _marker(path, expected)
    want = expected or Expected()
    if attrs is None or attrs.get("complete") is not True:
        return _marker(path, expected, attrs)
    if attrs.get("format") != FORMAT:
        return Verdict("stale", attrs, f"format {attrs.get('format')!r}, expected {FORMAT!r}")
    if want.job_hash is not None and attrs.get("job_hash") != want.job_hash:
        return Verdict("stale", attrs, f"computed for hash {attrs.get('job_hash')}, expected {want.job_hash}")
    if want.fingerprint is not None and attrs.get("problem_fingerprint") != want.fingerprint:
        why = f"problem fingerprint {attrs.get('problem_fingerprint')!r}, planned {want.fingerprint!r}"
        return Verdict("altered" if want.job_hash is not None else "stale", attrs, why)
    recorded = attrs.get("problem_structure"), attrs.get("problem_probe")
    why = None
    if want.planned is not None and recorded != tuple(want.planned):
        why = identity_mismatch(*want.planned, *recorded)
    elif want.planned is None and want.problem is not None:
        why = problem_mismatch(want.problem, *recorded)
    why = why and f"computed for another problem: {why}"
    if why is None:
        off = [k for k, v in (want.run or {}).items() if attrs.get(k) != v]
        why = f"{off[0]} = {attrs.get(off[0])!r}, planned {want.run[off[0]]!r}" if off else None
    if why is not None:
        return Verdict("altered" if want.job_hash is not None else "stale", attrs, why)
    found = damage(path, attrs, reader)
    if found is not None:
        return Verdict("damaged", attrs, found[1], found[0])
    return Verdict("complete", attrs)


def _marker(path: str, expected: Expected | None, attrs: dict | None = None) -> Verdict:
    """The verdict of a path with no complete store: its failure marker (failed for this hash), else missing
    (stale: an unfinished store or a marker of another hash)."""
    fail = read_failure(path)
    job_hash = expected.job_hash if expected else None
    if fail is not None:
        return Verdict("failed" if job_hash is None or fail.get("job_hash") == job_hash else "stale", fail)
    return Verdict("missing" if attrs is None else "stale", attrs, None if attrs is None else "not complete")


def store_state(path: str, expected: Expected | str | None = None, fingerprint: str | None = None):
    """(``store_verdict``'s status, what it read: the store's attrs, or for a failed run its failure marker);
    ``expected``: an ``Expected``, or a job hash (and ``fingerprint``) only."""
    if not isinstance(expected, Expected):
        expected = Expected(expected, fingerprint)
    v = store_verdict(path, expected)
    return v.status, v.attrs


def clean_temporaries(study_dir: str) -> list[str]:
    """Remove everything in the study's folder of temporaries (``<study_dir>/.tmp``): what killed writers left.

    Nothing else is touched, whatever its name. Call only while nothing of this study writes (the
    holder of the study's lock).
    """
    folder = os.path.join(study_dir, TMP_DIR)
    removed = []
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return removed
    for name in names:
        if name == DAMAGED_DIR:
            continue  # damaged stores set aside, kept to be looked at (set_aside)
        p = os.path.join(folder, name)
        remove_path(p)
        removed.append(p)
    return removed


def set_aside(path: str) -> str | None:
    """Move the damaged store at ``path`` out of the study, into ``<study>/.tmp/damaged/<id>-<name>`` (a
    rename: the run is then missing, and the solve step recomputes it); returns where it went, None when it
    is not a run store of a study or cannot be moved (read-only)."""

    study = study_of_path(path)
    if is_errors_store(path):
        study = os.path.dirname(os.path.abspath(path))  # a study's aggregated errors
    if study is None or not os.path.lexists(path):
        return None
    try:
        aside = new_temporary(os.path.join(study, TMP_DIR, DAMAGED_DIR), path)
        os.rename(path, aside)
    except OSError:
        return None
    return aside


def corruption(path: str, attrs: dict | None = None, reader=None) -> tuple[str | None, str] | None:
    """(array, what) for the first thing wrong with the store at ``path``, None when intact: ``damage``, then
    every array read in full (each chunk's CRC-32C and the zip's CRC-32 checked)."""
    attrs = read_attrs(path) if attrs is None and reader is None else (reader.attrs if attrs is None else attrs)
    if attrs is None:
        return None, "no readable zarr.json (not a store, or a damaged one)"
    found = damage(path, attrs, reader)
    if found is not None:
        return found
    try:
        read_arrays(path, list(attrs["chunks"]), reader)
    except StoreError as exc:
        return exc.array, exc.what
    return None


def open_trajectory(path: str, load: bool = False, chunks: dict | None = None):
    """A run's store (its ``.zarr.zip``: the trajectory) as an xarray Dataset, after checking its chunk files.

    A study's errors.zarr has its own readers: ``open_errors`` (by the study's name), ``open_errors_at``.

    Parameters
    ----------
    path : str
        The run's store, a ``.zarr.zip`` file.
    load : bool
        Read every variable now. Otherwise the Dataset is lazy, and a chunk that fails its
        checksum raises a Zarr error only when it is read.
    chunks : dict, optional
        None (default): lazy numpy-backed variables, read on first use (indexing reads only the
        chunks it needs; ``.item()``, ``float()``, ``.values`` work). ``{}``: dask arrays of the
        stored chunks, for computations larger than memory (dask has no ``.item()``: use
        ``float(x.compute())``).

    Returns
    -------
    xarray.Dataset
        With the ``dof`` coordinate (the problem's coordinate names) and the ``constraint``
        coordinate (0..nu-1): ``run.q.sel(dof="y")``.

    Raises
    ------
    StoreError
        Naming the store and the array: a missing or truncated chunk (``require_intact``), or
        with ``load`` a chunk that fails its checksum.
    """
    return with_coordinates(_open_checked(path, load, chunks))


def with_coordinates(ds):
    """A run's Dataset with its ``dof`` coordinate (the attr ``coordinates``; x0, x1, ... for a store written
    before it was recorded) and its ``constraint`` coordinate 0..nu-1."""
    dof = ds.attrs.get("coordinates")
    m, nu = ds.sizes.get("dof", 0), ds.sizes.get("constraint", 0)
    if not isinstance(dof, list) or len(dof) != m:
        dof = [f"x{i}" for i in range(m)]
    return ds.assign_coords(dof=[str(c) for c in dof], constraint=np.arange(nu))


def _open_checked(path: str, load: bool, chunks: dict | None = None):
    """The store at ``path`` (a run's or errors.zarr) as an xarray Dataset, its chunk files checked first
    (``open_trajectory``, ``open_errors_at``); ``chunks``: as ``open_trajectory``'s."""
    import xarray as xr

    require_intact(path)
    with quiet_zarr():
        ds = xr.open_zarr(zarr_store(path), consolidated=True, chunks=chunks)
        if load:
            for name in ds.variables:
                try:
                    ds[name].load(scheduler="synchronous")  # a few small chunks: no cluster needed or used
                except Exception as exc:  # noqa: BLE001 - a checksum mismatch, a bad codec
                    raise damaged(path, str(name), f"unreadable ({type(exc).__name__}: {exc})") from None
    return ds


def zarr_store(path: str):
    """What ``xr.open_zarr`` and ``zarr.open_group`` take for the store at ``path``: a read-only
    ``zarr.storage.ZipStore`` for a run store (one zip file), the path for a folder store."""

    if is_zip_store(path):
        from zarr.storage import ZipStore

        return ZipStore(path, mode="r")
    return path


def load_trajectory(path: str, problem, *, job_hash: str | None = None, method=None, planned=None, job=None):
    """A run's store as an in-memory ``hbvm_core.Trajectory``.

    Nothing in the store is used to build the problem or the method: they come from the caller.

    Parameters
    ----------
    path : str
        The run's store.
    problem : hbvm_core.Problem
        The problem the run was computed for, built from the config (``Study.built_problem``).
    job_hash : str, optional
        The run's expected hash (``Job.hash``).
    method : hbvm_core.methods.Method, optional
        Only attached to the trajectory.
    planned : (str, dict), optional
        The identity (structure, probe values) that ``problem`` is known to have (``Instance.checked``): the
        store's record is compared with it, without evaluating the problem again for each store.
    job : hbvm_workflow.runs.Job, optional
        The planned run: the store must be it (``store_verdict``: its hash, identity and run values).

    Returns
    -------
    hbvm_core.Trajectory

    Raises
    ------
    MissingStoreError
        No complete store at ``path`` (a FileNotFoundError).
    StoreMismatchError
        One line naming the run: another store format, ``job_hash``, problem fingerprint or run values.
    StoreError
        Naming the store and the array: a missing, truncated or corrupt chunk.
    """
    if job is not None:
        expected = Expected.of_job(job, planned)
    else:
        expected = Expected(job_hash, None, planned, None if planned else problem)
    with opened(path) as (attrs, reader):
        return _trajectory(path, problem, attrs, reader, expected, method)


def _trajectory(path: str, problem, attrs: dict | None, reader, expected: Expected, method):
    """load_trajectory's checks (``store_verdict``) and read, on a store opened once (``opened``)."""
    from hbvm_core.trajectory import Trajectory

    if attrs is None or attrs.get("complete") is not True:
        raise MissingStoreError(f"no complete trajectory store at {path}")
    verdict = store_verdict(path, expected, attrs, reader)
    run = attrs.get("job_id") or path
    if verdict.status == "damaged":
        raise damaged(path, verdict.array, verdict.why)
    if verdict.status != "complete":
        raise StoreMismatchError(path, None, f"run {run} {mismatch_phrase(verdict)}")
    names = ("t", "q", "p", "tstep", "lam", "iterations")
    try:
        arr = dict(zip(names, read_arrays(path, names, reader)))
    except StoreError as exc:
        raise damaged(path, exc.array, exc.what) from None
    keys = ("steps", "h", "t_end", "save_every", "compensated", "wall_s", "mean_iterations", "max_iterations")
    tattrs = {k: attrs[k] for k in keys if k in attrs} | {
        k: attrs.get(k) for k in ("backend", "linear_algebra", "sparse_sweep", "worker", "host", "cpu")
    }
    return Trajectory(problem=problem, method=method, h=float(attrs["h"]), attrs=tattrs, **arr)


def mismatch_phrase(verdict: Verdict) -> str:
    """What a stale or altered ``store_verdict`` says of the run: 'is not the run it claims to be: <why>'."""
    return f"is not the run it claims to be: {verdict.why}"


def read_arrays(path: str, names, reader=None) -> list:
    """Every array ``names`` of the store at ``path`` in full; StoreError naming the array if one cannot be read.

    ``reader``: the zip store already opened (``opened``)."""

    if reader is not None or zipstore.is_zip_store(path):
        try:
            found = reader.read_arrays(names) if reader is not None else zipstore.read_arrays(path, names)
        except zipstore.ZipStoreError as exc:
            raise StoreError(path, exc.array, exc.what) from None
        return [found[name] for name in names]
    with quiet_zarr():
        got = _sync(_read_arrays(path, names))
    for name, value in zip(names, got):
        if isinstance(value, BaseException):
            raise StoreError(path, name, f"unreadable ({type(value).__name__}: {value})")
    return got


async def _read_arrays(path: str, names) -> list:
    """Every array ``names`` of the store at ``path`` in full, read concurrently (one event-loop round trip);
    an array that cannot be read gives its exception instead."""
    import zarr.api.asynchronous as za

    group = await za.open_group(store=path, mode="r")

    async def one(name):
        try:
            return await (await group.getitem(name)).getitem(...)
        except Exception as exc:  # noqa: BLE001 - a checksum mismatch, a bad codec, a truncated chunk
            return exc

    return await _gather(*(one(name) for name in names))


#: the format of a dataset store written by ``write_dataset`` (errors.zarr)
DATASET_FORMAT = "hbvm-dataset/1"


def write_dataset(ds, path: str, tmp_dir: str | None = None) -> None:
    """Write an xarray Dataset to a Zarr store atomically (a temporary in ``tmp_dir``, then rename),
    every chunk checksummed, its chunk files recorded in the attrs (``damage``), every file sealed
    (``integrity.seal_folder``)."""
    import zarr

    tmp = new_temporary(tmp_dir or default_tmp_dir(path), path)
    try:
        encoding = {name: {"compressors": compressors()} for name in ds.variables}
        with quiet_zarr():
            ds.to_zarr(tmp, mode="w", consolidated=True, zarr_format=3, encoding=encoding)
            group = zarr.open_group(tmp, mode="r+")
            record = chunk_record(tmp, list(group.array_keys()))
            group.attrs.update({"format": DATASET_FORMAT, "chunks": record})
            zarr.consolidate_metadata(tmp)
        seal_folder(tmp)  # last: every byte as written
        publish(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


# --------------------------------------------------------------------------- a whole study
def open_errors(study: str, results: str = "results"):
    """A study's errors and rates (``<results>/<study>/errors.zarr``), loaded into memory.

    Parameters
    ----------
    study : str
        The study's name.
    results : str
        The results folder.

    Returns
    -------
    xarray.Dataset
        Over (scheme, h): ``scheme`` holds the method labels (``hbvm_k2_s2``) with ``k``, ``s``
        and ``name`` along it; every variable has CF ``long_name`` and ``units``::

            err = open_errors("table1")
            err.e_s.sel(scheme="hbvm_k2_s2", n=3).item()  # h = 0.1 * 2^-3
            err.set_index(scheme=["k", "s"]).e_s.sel(k=2, s=2).to_series()

        Where each h has one step number n (``halvings``, ``period_divisions``), ``n`` is an
        indexed coordinate along ``h``: ``.sel(n=24)`` picks h = T/24 exactly.

    Raises
    ------
    MissingStoreError
        The study has not been aggregated (a FileNotFoundError).
    StoreError
        A damaged errors store (naming the array).
    """

    path = Path(errors_zarr(results, study))
    if not path.exists():
        raise MissingStoreError(f"{path}: no aggregated study {study!r} under {results!r} (run snakemake first)")
    ds = open_errors_at(str(path))
    if "n" in ds.coords and ds["n"].dims == ("h",):
        ds = ds.set_xindex("n")
    return ds


def open_errors_at(path: str):
    """The errors store (errors.zarr) at ``path``, checked and loaded (``open_errors`` by a study's name)."""
    return _open_checked(path, load=True)


def select_run(
    tree, h: float | None = None, *, n: int | None = None, method: str | None = None, label: str | None = None, **entry
):
    """The trajectory Dataset of one run of an ``open_study`` tree, by what a user types.

    Parameters
    ----------
    tree : xarray.DataTree
        From ``open_study``; in a study with a grid, the subtree of one combination
        (``tree["hbvm_k2_s2/L=0.5"]``), since every combination has a run of each h.
    h : float, optional
        The run's step size (matched to a relative 1e-9).
    n : int, optional
        Instead of h: the run's step number, its name ``n=<n>`` (``halvings``, ``period_divisions``).
    method : str, optional
        The method: its label (``hbvm_k2_s2``, ``rattle``), its display name (``HBVM(2,2)``) or its
        entry's ``method`` value (``hbvm``, ``rattle``, ``dop853``).
    label : str, optional
        The method's label (the same as ``method=<label>``).
    **entry
        Keys of the method entry, compared with the run's (``k=2, s=2``, ``solver="blended"``,
        ``rtol=1e-8``).

    Returns
    -------
    xarray.Dataset
        Lazy, as stored, with the ``dof`` and ``constraint`` coordinates (``open_trajectory``).

    Raises
    ------
    RunNotFoundError
        No such run, or several (naming them), or neither h nor n given (a KeyError; naming
        the nearest step size when only h is off).
    """
    asked = {"method": method, "label": label, **entry}
    asked = ", ".join(f"{k}={v!r}" for k, v in asked.items() if v is not None) or "any method"
    if (h is None) == (n is None):
        raise RunNotFoundError(f"select_run({asked}): give the run's step size h= or its step number n=, one of them")
    cands = []
    for run in tree.subtree:  # the runs are the nodes with a step size (below the label, or the combination)
        a = run.attrs
        if run is tree or "h" not in a:
            continue
        got = a.get("method_entry", {})
        if method is not None and method not in (a.get("label"), a.get("method_name"), got.get("method")):
            continue
        if label is not None and a.get("label") != label:
            continue
        if any(got.get(key) != value for key, value in entry.items()):
            continue
        cands.append(run)
    if not cands:
        have = sorted({run.attrs.get("label", "") for run in tree.subtree if run is not tree and "h" in run.attrs})
        raise RunNotFoundError(f"no run with {asked} (the study's methods: {', '.join(have) or 'none'})")
    if n is not None:
        chosen = [r for r in cands if r.name == f"n={n}"]
        if not chosen:
            named = sorted({r.name for r in cands})
            raise RunNotFoundError(f"no run n={n} with {asked} (runs: {', '.join(named)})")
    else:
        best = min(cands, key=lambda r: abs(r.attrs["h"] - h))
        if not math.isclose(best.attrs["h"], h, rel_tol=1e-9):
            raise RunNotFoundError(f"no run with h = {h!r} (nearest {best.attrs['h']!r})")
        chosen = [r for r in cands if math.isclose(r.attrs["h"], h, rel_tol=1e-9)]
    if len(chosen) > 1:
        which = ", ".join(sorted(r.path for r in chosen))
        raise RunNotFoundError(
            f"{len(chosen)} runs match {asked}: {which}; name the method (label=, k=, s=), or pass the subtree of "
            "one grid combination"
        )
    run = chosen[0].to_dataset()  # a node inherits the study's coordinates (h, scheme): only its own dims stay
    return run.drop_dims(
        [d for d in run.dims if not any(d in v.dims for v in run.variables.values() if v.dims != (d,))]
    )

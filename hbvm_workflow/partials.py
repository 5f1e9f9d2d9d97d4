"""Per-shard partial results of a ``save: summary`` study: the per-run columns of its errors that need the saved
states, computed by the shard task that wrote them, so that the aggregation reads kilobytes per shard, not its states.

For each run of a shard, ``COLUMNS``: e_s (against the study's reference, ``ensemble_errors`` section 5 rules;
NaN with ``reference: none``), e_hc (the hidden constraint's maximum over the sample points) and the run's state
scale max(1, max |y|) (its round-off floor's scale). They are a Zarr array ``partial`` [run, column] in the shard's
group (``<store>/shards/<slot>/partial``, beside its record, outside the sealed metadata), written by the task
before the record; the record's ``partial`` says what they were computed from (``key``: the error convention, the
grid combinations' problems as planned, the shard's run digest and its files' digests), the data files' sizes and
modification times then (``stats``) and a digest of the array's values (``sha256``).

The aggregation (``ensemble_errors.summary_columns``) takes a shard's partial only where all three agree with the
plan and the shard as they are now; otherwise (none written, a shard rewritten or edited, a changed problem or
convention, a partial edited) it computes the columns again from the shard's states, in memory, and says so on its
log. ``reference: self`` has no partial (a run's h/2 partner may be in another shard): the aggregation reads the
states as before.
"""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np

from .layout import shard_record
from .storage import compressors, new_temporary, remove_path

#: the columns of a shard's partial array
COLUMNS = ("e_s", "e_hc", "scale")
#: the array's name in the shard's group
NAME = "partial"
FORMAT = "hbvm-partial/1"


def errors_spec(study) -> dict:
    """What a shard task needs of the study's errors: its reference and error convention (plain data)."""
    return {"reference": study.reference, "convention": study.convention.as_dict()}


def problems_identity(problems: dict) -> str:
    """The grid combinations' problems as planned (combination -> [problem, params, structure]); not their probes,
    which a plan records only for the combinations a shard task checks (a Family's group: its first)."""
    ident = {str(c): [p["problem"], p["params"], p["structure"]] for c, p in sorted(problems.items())}
    return json.dumps(ident, sort_keys=True, default=repr)


def study_problems(study, combos) -> dict:
    """The planned problems of the combinations ``combos`` in ``shards.shard_spec``'s form, as far as the key reads
    it (``problems_identity``): not their probes, whose computing builds each combination's problem."""
    instances = study.instances or [study.instance_of("")]
    return {
        int(c): {"problem": study.cfg["problem"], "params": instances[c].params, "structure": instances[c].structure}
        for c in sorted(set(np.asarray(combos).tolist()))
    }


def key(errors: dict, problems: dict, digest: str, files: dict) -> str:
    """The identity of what a shard's partial is computed from: the errors (``errors_spec``), the combinations'
    problems (``problems_identity``), the shard's run digest and its files' digests (its record's ``files``)."""
    text = json.dumps([FORMAT, errors, problems_identity(problems), digest, files], sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def values_digest(values: np.ndarray) -> str:
    """A digest of a partial array's values (float64, C order)."""
    return hashlib.sha256(np.ascontiguousarray(values, dtype=np.float64).tobytes()).hexdigest()[:32]


def file_stats(files: dict[str, str]) -> dict[str, list | None]:
    """array -> [size, modification time in ns] of each shard file (None: no file)."""
    out: dict[str, list | None] = {}
    for name, path in files.items():
        try:
            st = os.stat(path)
        except FileNotFoundError:
            out[name] = None
            continue
        out[name] = [st.st_size, st.st_mtime_ns]
    return out


def write(store: str, slot: int, values: np.ndarray, tmp: str) -> None:
    """The partial of shard ``slot`` as a Zarr array in its group, written under ``tmp`` and renamed into place."""
    import zarr

    folder = new_temporary(tmp, f"partial-{slot}")
    a = zarr.create_array(
        folder,
        shape=values.shape,
        chunks=values.shape,
        dtype="float64",
        compressors=compressors(),
        dimension_names=("run", "column"),
        attributes={"format": FORMAT, "columns": list(COLUMNS)},
        fill_value=np.nan,
    )
    a[...] = values
    target = os.path.join(os.path.dirname(shard_record(store, slot)), NAME)
    remove_path(target)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    os.replace(folder, target)


def remove(store: str, slot: int) -> None:
    """Shard ``slot``'s partial removed (its shard is being written again)."""

    remove_path(os.path.join(os.path.dirname(shard_record(store, slot)), NAME))


def read(store: str, slot: int, record: dict | None, want_key: str, files: dict[str, str], runs: int):
    """(values, "") of shard ``slot``'s partial where its record's ``partial`` has ``want_key``, the shard's files
    have the sizes and modification times it names, and the array's values their digest; else (None, why)."""
    import zarr

    meta = (record or {}).get("partial")
    if not isinstance(meta, dict):
        return None, "no partial results"
    if meta.get("key") != want_key:
        return None, "its partial results were computed for another shard, problem or error convention"
    if meta.get("stats") != file_stats(files):
        return None, "its files changed after its partial results were computed"
    try:
        values = np.asarray(
            zarr.open_array(os.path.join(os.path.dirname(shard_record(store, slot)), NAME), mode="r")[...]
        )
    except Exception as exc:  # noqa: BLE001 - missing or undecodable: computed again
        return None, f"its partial results are unreadable ({type(exc).__name__})"
    if values.shape != (runs, len(COLUMNS)) or values_digest(values) != meta.get("sha256"):
        return None, "its partial results are not those its record names (their digest differs)"
    return values, ""


# END

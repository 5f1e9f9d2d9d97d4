"""The rule of what makes a store the run or shard it claims to be, beyond its chunks' checksums: a seal.

A checksum (a chunk's CRC-32C, a zip entry's CRC-32) finds damage, not an edit: a tool that rewrites a store's
``zarr.json`` or a coordinate writes valid checksums. So what a reader takes from a store besides checksummed
data is sealed when it is written, and every reader, the solve step, the aggregation, ``list studies`` and
``verify`` compare the store with its seal (``storage.damage`` for a run store, ``shards.store_problem`` and
``shards.shard_problem`` for the sharded store):

- a run store (one zip): its attributes record ``sealed``: a digest of each attribute, of each array's metadata
  (the consolidated metadata xarray reads) and of the rest of the group document, and the zip's CRC-32 of every
  entry (the array documents zarr reads, every chunk); the zip's comment holds a digest of the group document's
  bytes, record included (``seal_run``, ``comment``, ``run_seal_problem``). An edited attribute, array metadata
  or chunk is named.
- the sharded store: ``<store>/shards/zarr.json`` records a digest of every metadata document and coordinate
  file, written when the store is created (``seal_files``); each shard's record names its files with their sizes
  and digests.
- a folder store (a study's errors.zarr): its attributes record a digest of every other file and of the root
  document (``seal_folder``, ``folder_seal_problem``).

A store without its seal (written by an older version) is not trusted.
"""

from __future__ import annotations

import hashlib
import json
import os

#: the attribute of a run store that holds its seal
SEAL = "sealed"


def digest(value) -> str:
    """A digest of a JSON value (its canonical text: sorted keys, no spaces)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def file_digest(path: str) -> str:
    """A digest of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:16]


# --------------------------------------------------------------------------- a run store (one zip)
def _rest(group: dict) -> dict:
    """The group document without its attributes and its arrays' metadata."""
    rest = {k: v for k, v in group.items() if k != "attributes"}
    if isinstance(rest.get("consolidated_metadata"), dict):
        rest["consolidated_metadata"] = {k: v for k, v in rest["consolidated_metadata"].items() if k != "metadata"}
    return rest


def _record(attrs: dict, arrays: dict, group: dict, entries: dict[str, int]) -> dict:
    return {
        "attributes": {str(k): digest(v) for k, v in attrs.items() if k != SEAL},
        "arrays": {str(k): digest(v) for k, v in arrays.items()},
        "group": digest(_rest(group)),
        "entries": dict(sorted(entries.items())),
    }


def comment(document: bytes) -> bytes:
    """The zip comment that seals a run store's group document (its bytes as written): a digest of them."""
    return b"hbvm-seal " + hashlib.sha256(document).hexdigest()[:32].encode()


def seal_run(group: dict, entries: dict[str, int]) -> dict:
    """The group document ``group`` of a run store with its seal record added to its attributes; ``entries``: the
    zip's CRC-32 of every entry written before it (array documents, chunks). The document's bytes are then sealed
    by the zip's comment (``comment``)."""
    attrs = group.get("attributes", {})
    arrays = (group.get("consolidated_metadata") or {}).get("metadata") or {}
    return group | {"attributes": attrs | {SEAL: _record(attrs, arrays, group, entries)}}


def run_seal_problem(
    group: dict, entries: dict[str, int], document: bytes, zip_comment: bytes
) -> tuple[str | None, str] | None:
    """(array or None, what) for the first thing of a run store that is not what was sealed, None when all of it
    is: ``group`` its group document (``document``: its bytes), ``entries`` name -> CRC-32 from the zip's directory,
    ``zip_comment`` the zip's comment.

    One digest of the document's bytes decides (no JSON is written again); only a store that fails it is
    compared part by part, to name what was edited."""
    attrs = group.get("attributes") or {}
    rec = attrs.get(SEAL)
    if not isinstance(rec, dict) or not all(isinstance(rec.get(k), dict) for k in ("attributes", "arrays", "entries")):
        return None, "no seal of its metadata (written by an older version; recompute it)"
    sealed = zip_comment == comment(document)
    found = None if sealed else _named_edit(group, attrs, rec)
    return found or _entry_problem(entries, rec["entries"]) or (None if sealed else _UNSEALED)


#: a group document whose parts all match the record, but not the zip's comment: the record itself was changed,
#: or the zip rewritten by a tool (that drops the comment)
_UNSEALED = None, "zarr.json or the zip's comment (its seal) changed after the run was written"


def _entry_problem(entries: dict[str, int], sealed: dict[str, int]) -> tuple[str, str] | None:
    """(array, what) for the first zip entry missing, added or of another CRC-32 than ``sealed``."""
    for entry in sorted(set(entries) | set(sealed)):
        if entry == "zarr.json":
            continue
        array, _, key = entry.partition("/")
        what = "metadata (zarr.json)" if key == "zarr.json" else f"chunk {key}"
        if entry not in sealed:
            return array, f"{what} added after the run was written"
        if entry not in entries:
            return array, f"{what} missing"
        if entries[entry] != sealed[entry]:
            crcs = f"CRC-32 {entries[entry]:08x}, sealed {sealed[entry]:08x}"
            return array, f"{what} rewritten after the run was written ({crcs})"
    return None


def _named_edit(group: dict, attrs: dict, rec: dict) -> tuple[str | None, str] | None:
    """What of a group document that fails its seal was edited: an attribute, an array's metadata, the rest."""
    kept = rec["attributes"]
    for key in sorted((set(attrs) - {SEAL}) | set(kept)):
        if key not in kept:
            return None, f"attribute {key} added after the run was written"
        if key not in attrs:
            return None, f"attribute {key} removed after the run was written"
        if digest(attrs[key]) != kept[key]:
            return None, f"attribute {key} edited after the run was written"
    arrays = (group.get("consolidated_metadata") or {}).get("metadata") or {}
    for name in sorted(set(arrays) | set(rec["arrays"])):
        if name not in arrays or digest(arrays[name]) != rec["arrays"].get(name):
            return name, "metadata (consolidated in zarr.json) edited after the run was written"
    if digest(_rest(group)) != rec.get("group"):
        return None, "group metadata (zarr.json) edited after the run was written"
    return None


# --------------------------------------------------------------------------- files of a folder store
def seal_files(root: str, names: list[str]) -> dict[str, str]:
    """{name: digest} of the files ``names`` (paths relative to ``root``, '/'-separated)."""
    return {name: file_digest(os.path.join(root, *name.split("/"))) for name in sorted(names)}


# --------------------------------------------------------------------------- a folder store (errors.zarr)
def _folder_files(root: str) -> list[str]:
    """Every file of a folder store but its root ``zarr.json`` and hidden files (Snakemake's
    ``.snakemake_timestamp`` of a folder output: no reader reads them), '/'-separated, sorted."""
    out = []
    for folder, _, files in os.walk(root):
        rel = os.path.relpath(folder, root).replace(os.sep, "/")
        out += [f if rel == "." else f"{rel}/{f}" for f in files if not f.startswith(".")]
    return sorted(f for f in out if f != "zarr.json")


def _group_digest(doc: dict) -> str:
    attrs = {k: v for k, v in (doc.get("attributes") or {}).items() if k != SEAL}
    return digest(doc | {"attributes": attrs})


def seal_folder(root: str) -> None:
    """Seal a finished folder store: its root attributes record a digest of every other file (array metadata,
    chunks) and of the root document itself (``folder_seal_problem``)."""
    path = os.path.join(root, "zarr.json")
    with open(path) as fh:
        doc = json.load(fh)
    sealed = {"files": seal_files(root, _folder_files(root)), "group": _group_digest(doc)}
    doc.setdefault("attributes", {})[SEAL] = sealed
    with open(path, "w") as fh:
        json.dump(doc, fh)


def folder_seal_problem(root: str) -> tuple[str | None, str] | None:
    """(array or None, what) for the first file of a folder store that is not as ``seal_folder`` sealed it."""
    try:
        with open(os.path.join(root, "zarr.json")) as fh:
            doc = json.load(fh)
        sealed = doc["attributes"][SEAL]
        files = sealed["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return None, "no seal of its metadata (written by an older version; recompute it)"
    if _group_digest(doc) != sealed.get("group"):
        return None, "group metadata (zarr.json) edited after the store was written"
    for name in sorted(set(files) | set(_folder_files(root))):
        array, _, rest = name.partition("/")
        if name not in files:
            return array, f"{rest or name} added after the store was written"
        try:
            got = file_digest(os.path.join(root, *name.split("/")))
        except OSError:
            return array, f"{rest or name} missing"
        if got != files[name]:
            return array, f"{rest or name} changed after the store was written (its digest differs)"
    return None

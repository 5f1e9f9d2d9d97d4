"""Helpers to damage or tamper with a run store (one zip file) the way a disk, a person or a bug could."""

from __future__ import annotations

import json
import zipfile

Q_CHUNK = "q/c/0/0"


def rewrite(path, change) -> None:
    """Rewrite the zip store at ``path`` with ``change(name, data)`` applied to each entry (None drops it);
    the zip's own CRC-32 of each entry is recomputed, so only hbvm's checks can tell."""
    with zipfile.ZipFile(path) as zf:
        entries = [(info, zf.read(info)) for info in zf.infolist()]
    with zipfile.ZipFile(path, "w") as zf:
        for info, data in entries:
            new = change(info.filename, data)
            if new is not None:
                zf.writestr(info, new)


def drop(path, entry: str = Q_CHUNK) -> None:
    rewrite(path, lambda name, data: None if name == entry else data)


def truncate(path, size: int, entry: str = Q_CHUNK) -> None:
    rewrite(path, lambda name, data: data[:size] if name == entry else data)


def group_doc(path) -> dict:
    with zipfile.ZipFile(path) as zf:
        return json.loads(zf.read("zarr.json"))


def set_group_doc(path, doc: dict) -> None:
    rewrite(path, lambda name, data: json.dumps(doc).encode() if name == "zarr.json" else data)

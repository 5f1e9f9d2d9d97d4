"""A run's Zarr store as one zip file: the small writer and reader of the layout hbvm writes.

A run store is a Zarr v3 store in a zip file (the layout of ``zarr.storage.ZipStore``:
``zarr.json`` with the group's attributes and its consolidated metadata, and per
array ``<name>/zarr.json`` and its chunks ``<name>/c/<i>/<j>``), so that
``xr.open_zarr(zarr.storage.ZipStore(path, mode="r"))`` and ``zarr.open_group`` read it.
The zip entries are stored uncompressed (the chunks are zstd-compressed already),
each with the zip's CRC-32; every chunk also ends with its CRC-32C (Zarr's
``crc32c`` codec, after ``zstd``).

Why not Zarr's own API: it costs some 14 ms to create and fill nine small arrays
(one event-loop round trip per operation), which is most of a sweep run's cost.
The arrays of a run are fixed (``storage.ZarrSink.SPEC``): regular chunks along
the first dimension, codecs bytes (little endian) -> zstd -> crc32c; this module
writes exactly that and reads exactly that back (anything else is refused), and
the tests check both directions against zarr and xarray.

Memory stays bounded by about two chunks per array: rows wait in a buffer until a
chunk is full (a block handed in may overfill it), then are encoded and appended to the zip.
"""

from __future__ import annotations

import functools
import json
import math
import os
import zipfile
from collections.abc import Iterable
from itertools import product

import numpy as np

from hbvm_core.errors import HBVMError

from .integrity import comment, run_seal_problem, seal_run

#: the codec chain of every array (Zarr v3 metadata)
CODECS = [
    {"name": "bytes", "configuration": {"endian": "little"}},
    {"name": "zstd", "configuration": {"level": 0, "checksum": False}},
    {"name": "crc32c"},
]
DTYPES = {"f8": "float64", "i4": "int32"}
NUMPY = {v: np.dtype(k).newbyteorder("<") for k, v in DTYPES.items()}
#: a fixed date for every entry: the same run gives the same bytes
EPOCH = (1980, 1, 1, 0, 0, 0)


class ZipStoreError(HBVMError, RuntimeError):
    """(array, what): a zip store that cannot be read as hbvm wrote it."""

    def __init__(self, array: str | None, what: str):
        self.array, self.what = array, what
        super().__init__(f"{f'array {array}: ' if array else ''}{what}")

    def __reduce__(self):
        return type(self), (self.array, self.what)


@functools.cache
def _zstd():
    from numcodecs import Zstd

    return Zstd(level=0)


def _crc32c(data: bytes) -> bytes:
    import google_crc32c

    return int(google_crc32c.value(data)).to_bytes(4, "little")


def _fill_json(fill) -> object:
    return "NaN" if isinstance(fill, float) and math.isnan(fill) else fill


def _fill_value(meta: dict):
    fill = meta["fill_value"]
    return float("nan") if fill == "NaN" else fill


def array_metadata(shape: tuple, chunk_shape: tuple, dtype: str, fill, dims: tuple, attrs: dict) -> dict:
    """The Zarr v3 metadata document of one array (what ``zarr.create_array`` writes for these settings)."""
    return {
        "shape": list(shape),
        "data_type": DTYPES[dtype],
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(chunk_shape)}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": _fill_json(fill),
        "codecs": CODECS,
        "attributes": attrs,
        "dimension_names": list(dims),
        "zarr_format": 3,
        "node_type": "array",
        "storage_transformers": [],
    }


def encode_chunk(block: np.ndarray, dtype: np.dtype) -> bytes:
    """bytes (little endian, C order) -> zstd -> crc32c, as Zarr's codecs of ``CODECS`` encode a chunk."""
    comp = _zstd().encode(np.ascontiguousarray(block, dtype=dtype).tobytes())
    return bytes(comp) + _crc32c(comp)


def decode_chunk(data: bytes, dtype: np.dtype, chunk_shape: tuple) -> np.ndarray:
    """The inverse of ``encode_chunk``; ValueError when the CRC-32C does not match."""
    comp, crc = data[:-4], data[-4:]
    if len(data) < 4 or _crc32c(comp) != crc:
        raise ValueError("chunk fails its CRC-32C checksum")
    return np.frombuffer(_zstd().decode(comp), dtype=dtype).reshape(chunk_shape)


class ZipStoreWriter:
    """Writes a run store into a new zip file at ``path``: arrays are declared, filled row-wise, then closed.

    ``append(name, rows)`` takes the next rows of an array (along its first dimension);
    full chunks are encoded and written at once, the last (padded with the fill
    value, as Zarr stores edge chunks) by ``close``, which writes the group's
    ``zarr.json`` (attributes and consolidated metadata) last and closes the zip.
    """

    def __init__(self, path: str):
        self.path = path
        self.zip = zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED, allowZip64=True)
        self.meta: dict[str, dict] = {}
        self.pending: dict[str, list[np.ndarray]] = {}
        self.done: dict[str, int] = {}  # chunks written along the first dimension
        self.sizes: dict[str, dict[str, int]] = {}
        self.crcs: dict[str, int] = {}  # entry -> the zip's CRC-32 (sealed by ``close``)

    def _put(self, key: str, data: bytes) -> None:
        info = zipfile.ZipInfo(key, date_time=EPOCH)
        info.compress_type = zipfile.ZIP_STORED
        self.zip.writestr(info, data)
        self.crcs[key] = info.CRC

    def create(self, name: str, shape: tuple, chunk_shape: tuple, dtype: str, fill, dims: tuple, attrs: dict) -> None:
        meta = array_metadata(shape, chunk_shape, dtype, fill, dims, attrs)
        self.meta[name] = meta
        self.pending[name], self.done[name], self.sizes[name] = [], 0, {}
        self._put(f"{name}/zarr.json", json.dumps(meta).encode())

    def append(self, name: str, rows: np.ndarray) -> None:
        self.pending[name].append(np.asarray(rows))
        rows_per_chunk = self.meta[name]["chunk_grid"]["configuration"]["chunk_shape"][0]
        if sum(len(b) for b in self.pending[name]) >= rows_per_chunk:
            block = np.concatenate(self.pending[name])
            full = len(block) // rows_per_chunk * rows_per_chunk
            for start in range(0, full, rows_per_chunk):
                self._write_chunk(name, block[start : start + rows_per_chunk])
            self.pending[name] = [block[full:]] if full < len(block) else []

    def _write_chunk(self, name: str, block: np.ndarray) -> None:
        meta = self.meta[name]
        chunk_shape = meta["chunk_grid"]["configuration"]["chunk_shape"]
        if any(n == 0 for n in meta["shape"]):
            return  # an empty array (no constraint) has no chunks
        dtype = NUMPY[meta["data_type"]]
        if block.shape[0] < chunk_shape[0]:  # the edge chunk, padded with the fill value
            pad = np.full((chunk_shape[0] - block.shape[0],) + block.shape[1:], _fill_value(meta), dtype=dtype)
            block = np.concatenate([block.astype(dtype), pad])
        i = self.done[name]
        # a 2-d array may be chunked over its second dimension too (storage.chunk_shape): one chunk per
        # column block, the edge block padded with the fill value as the edge rows are
        width = block.shape[1] if block.ndim > 1 else 1
        step = chunk_shape[1] if len(chunk_shape) > 1 else 1
        for j, start in enumerate(range(0, width, step)):
            part = block[:, start : start + step] if block.ndim > 1 else block
            if part.ndim > 1 and part.shape[1] < step:
                pad = np.full((part.shape[0], step - part.shape[1]), _fill_value(meta), dtype=dtype)
                part = np.concatenate([part.astype(dtype), pad], axis=1)
            key = "c/" + "/".join([str(i), str(j)][: len(chunk_shape)])
            data = encode_chunk(part, dtype)
            self._put(f"{name}/{key}", data)
            self.sizes[name][key] = len(data)
        self.done[name] = i + 1

    def flush(self) -> None:
        """Write the last, partial chunk of every array."""
        for name, blocks in self.pending.items():
            if blocks and sum(len(b) for b in blocks):
                self._write_chunk(name, np.concatenate(blocks))
            self.pending[name] = []

    def close(self, attrs: dict) -> None:
        """Write the group's ``zarr.json`` (``attrs`` and the consolidated metadata, sealed:
        ``integrity.seal_run``) and close the zip."""

        self.flush()
        group = {
            "attributes": attrs,
            "zarr_format": 3,
            "consolidated_metadata": {"kind": "inline", "must_understand": False, "metadata": self.meta},
            "node_type": "group",
        }
        document = json.dumps(seal_run(group, self.crcs)).encode()
        self._put("zarr.json", document)
        self.zip.comment = comment(document)
        self.zip.close()

    def abort(self) -> None:
        """Close the unfinished zip; what it cannot write (a full disk) is dropped, the file is closed."""
        try:
            self.zip.close()
        except OSError:
            pass


def is_zip_store(path: str) -> bool:
    """A store in the one-file layout: a file (whatever its name), or a path ending in ``.zip``."""
    return os.path.isfile(path) or str(path).endswith(".zip")


class ZipStoreReader:
    """The zip store at ``path``, opened once: its group document, its entries' sizes, its arrays.

    Raises ZipStoreError when the file is not a readable zip (truncated, overwritten) or has no
    ``zarr.json``; OSError when it cannot be opened.
    """

    def __init__(self, path: str):
        self.path = path
        try:
            self.zip = zipfile.ZipFile(path)
        except zipfile.BadZipFile as exc:
            raise ZipStoreError(None, f"not a readable zip store ({exc})") from None
        try:
            self.document = self.zip.read("zarr.json")
            self.group = json.loads(self.document)
        except KeyError:
            self.zip.close()
            raise ZipStoreError(None, "no zarr.json in the zip") from None
        except (zipfile.BadZipFile, ValueError) as exc:
            self.zip.close()
            raise ZipStoreError(None, f"no readable zarr.json ({exc})") from None
        self.sizes = {i.filename: i.file_size for i in self.zip.infolist()}
        self.crcs = {i.filename: i.CRC for i in self.zip.infolist()}

    def __enter__(self) -> ZipStoreReader:
        return self

    def __exit__(self, *exc) -> None:
        self.zip.close()

    @property
    def attrs(self) -> dict:
        return self.group.get("attributes", {})

    def damage(self, record: dict) -> tuple[str | None, str] | None:
        """(array, what) for the first entry of ``record`` ({array: {chunk key: bytes}}) missing from the
        zip's directory or of another size, or an array without its metadata; None when all are there."""
        for name, chunks in record.items():
            if f"{name}/zarr.json" not in self.sizes:
                return name, "array metadata (zarr.json) missing"
            for key, size in chunks.items():
                found = self.sizes.get(f"{name}/{key}")
                if found is None:
                    return name, f"chunk {key} missing"
                if found != size:
                    return name, f"chunk {key} has {found} bytes, {size} were written"
        return None

    def seal_problem(self) -> tuple[str | None, str] | None:
        """(array, what) for the first thing of the store that is not what its seal records
        (``integrity.run_seal_problem``: attributes, array metadata, every entry's CRC-32), None when all is."""

        return run_seal_problem(self.group, self.crcs, self.document, self.zip.comment)

    def read_arrays(self, names: Iterable[str]) -> dict[str, np.ndarray]:
        """The arrays ``names`` in full, every chunk's CRC-32 (the zip's) and CRC-32C checked.

        Raises ZipStoreError naming the array: not in the store, codecs or data type other than hbvm
        writes, a chunk failing a checksum.
        """
        metas = (self.group.get("consolidated_metadata") or {}).get("metadata") or {}
        return {name: _read_array(self.zip, self.sizes, name, metas.get(name)) for name in names}


def read_group(path: str) -> dict:
    """The group document (``zarr.json``) of the zip store at ``path``; OSError / ZipStoreError if unreadable."""
    with ZipStoreReader(path) as store:
        return store.group


def damage(path: str, record: dict, sealed: bool = False) -> tuple[str | None, str] | None:
    """``ZipStoreReader.damage`` of the store at ``path`` (and with ``sealed`` its ``seal_problem``); (None, what)
    when it is not a readable zip store."""
    try:
        with ZipStoreReader(path) as store:
            return store.damage(record) or (store.seal_problem() if sealed else None)
    except (OSError, ZipStoreError) as exc:
        return None, str(exc.what if isinstance(exc, ZipStoreError) else exc)


def read_arrays(path: str, names: Iterable[str]) -> dict[str, np.ndarray]:
    """``ZipStoreReader.read_arrays`` of the store at ``path``."""
    try:
        with ZipStoreReader(path) as store:
            return store.read_arrays(names)
    except OSError as exc:
        raise ZipStoreError(None, f"not a readable zip store ({exc})") from None


def _read_array(zf: zipfile.ZipFile, entries, name: str, meta: dict | None) -> np.ndarray:
    if meta is None:
        raise ZipStoreError(name, "not in the store")
    if meta.get("codecs") != CODECS or meta.get("data_type") not in NUMPY:
        raise ZipStoreError(name, "codecs or data type other than hbvm writes")
    shape = tuple(meta["shape"])
    chunk_shape = tuple(meta["chunk_grid"]["configuration"]["chunk_shape"])
    dtype = NUMPY[meta["data_type"]]
    grid = [math.ceil(n / c) for n, c in zip(shape, chunk_shape)]
    if grid == [1] * len(shape) and shape == chunk_shape:  # one chunk, no padding: most runs
        key = "c/" + "/".join("0" * len(shape))
        if f"{name}/{key}" in entries:
            return _decode(zf, name, key, dtype, chunk_shape).copy()  # writable, as zarr gives it
    padded = tuple(g * c for g, c in zip(grid, chunk_shape))
    full = np.full(padded, _fill_value(meta), dtype=dtype)
    for index in product(*(range(g) for g in grid)):
        key = "c/" + "/".join(map(str, index))
        entry = f"{name}/{key}"
        if entry not in entries:
            continue  # never written: the fill value (Zarr's rule)
        block = _decode(zf, name, key, dtype, chunk_shape)
        where = tuple(slice(i * c, (i + 1) * c) for i, c in zip(index, chunk_shape))
        full[where] = block
    return full[tuple(slice(0, n) for n in shape)]


def _decode(zf: zipfile.ZipFile, name: str, key: str, dtype: np.dtype, chunk_shape: tuple) -> np.ndarray:
    """One chunk of an array, checked (the zip's CRC-32 on reading, then the CRC-32C)."""
    try:
        return decode_chunk(zf.read(f"{name}/{key}"), dtype, chunk_shape)
    except (zipfile.BadZipFile, ValueError, RuntimeError) as exc:
        raise ZipStoreError(name, f"chunk {key} unreadable ({exc})") from None

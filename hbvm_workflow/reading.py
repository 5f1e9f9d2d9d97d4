"""A solved study as xarray objects, whichever store it was saved in (``open_study``).

Above both stores: a ``save: trajectory`` study's run stores (``storage``) and a ``save: summary`` study's
sharded store (``shards``), chosen by what the study's manifest records.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .layout import errors_zarr, manifest_path, study_dir
from .shards import open_shards
from .storage import MissingStoreError, open_errors, open_trajectory


def open_study(study: str, results: str = "results", chunks: dict | None = None):
    """A study's results: one lazily loaded ``xarray.Dataset`` over all runs of a ``save: summary`` study (its
    sharded store), or an ``xarray.DataTree`` of the run stores of a ``save: trajectory`` study.

    Parameters
    ----------
    study : str
        The study's name.
    results : str
        The results folder.
    chunks : dict, optional
        None (default): the runs' variables are read lazily without dask (``.item()`` works); ``{}``: dask arrays
        of the stored chunks (as ``open_trajectory``'s).

    Returns
    -------
    xarray.Dataset or xarray.DataTree
        A summary study: ``shards.open_shards`` of ``<results>/<study>/runs.zarr``, over ``run`` indexed by
        (scheme, the grid keys, h): ``ds.sel(scheme="hbvm_k2_s2", L=2.0, h=0.05)``, ``ds.sel(L=2.1,
        method="nearest")``; q and p over ``dof``, the problem's coordinate names.
        A trajectory study: the root holds ``errors.zarr`` loaded into memory (see ``open_errors``); each child
        ``<label>`` (e.g. ``hbvm_k2_s2``) holds one lazily opened trajectory Dataset per run,
        named by the run's store (``h=0.025``, ``n=20``; see ``layout.run_name``). See
        ``select_run``.

    Raises
    ------
    MissingStoreError
        The study has not been solved (a FileNotFoundError).
    """
    import xarray as xr

    base = Path(study_dir(results, study))
    manifest = Path(manifest_path(results, study))
    if not manifest.exists():
        raise MissingStoreError(f"{manifest}: no solved study {study!r} under {results!r} (run snakemake first)")
    with open(manifest) as fh:
        record = json.load(fh)
    if record.get("save") == "summary":  # one sharded store of all the runs
        return open_shards(str(base / record["store"]), chunks=chunks)
    jobs = record["jobs"]
    nodes: dict[str, Any] = {}
    errs = Path(errors_zarr(results, study))
    nodes["/"] = open_errors(study, results) if errs.exists() else xr.Dataset()
    for job in jobs:
        store = base / job["store"]
        if job["status"] == "ok" and store.exists():
            # /<label>/<run>, or /<label>/<combo>/<run> in a study with a grid (the store's folders under runs/)
            parts = Path(job["store"]).parts
            inner = parts[parts.index("runs") + 1 :] if "runs" in parts else (job["label"], store.name)
            nodes["/" + "/".join(inner).removesuffix(".zip").removesuffix(".zarr")] = open_trajectory(
                str(store), chunks=chunks
            )
    tree = xr.DataTree.from_dict(nodes)
    tree.attrs.update({"study": study, "results": str(results)})
    return tree

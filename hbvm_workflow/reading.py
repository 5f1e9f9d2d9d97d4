"""A solved study as xarray objects, whichever store it was saved in (``open_study``).

Above both stores: a ``save: trajectory`` study's run stores (``storage``) and a ``save: summary`` study's
sharded store (``shards``), chosen by what the study's manifest records.
"""

from __future__ import annotations

import json
from pathlib import Path

from .layout import manifest_path, study_dir
from .storage import MissingStoreError
from .store_kinds import recorded_kind


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
    base = Path(study_dir(results, study))
    manifest = Path(manifest_path(results, study))
    if not manifest.exists():
        raise MissingStoreError(f"{manifest}: no solved study {study!r} under {results!r} (run snakemake first)")
    with open(manifest) as fh:
        record = json.load(fh)
    return recorded_kind(record).open(record, str(base), study, str(results), chunks)

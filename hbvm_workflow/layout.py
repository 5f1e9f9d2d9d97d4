"""The results layout: every path the workflow reads or writes, defined once.

The Snakemake rules (``workflow/rules/*.smk``), the job scripts and the rest of ``hbvm_workflow`` take
their paths from here and build none of their own: a rule's input or output is a call of a function
below (with the wildcard ``"{study}"`` as the study where the rule's output is a pattern) or another
rule's output (``rules.<name>.output.<key>``); ``tests/unit/test_layout.py`` pins the published names
and finds any file name written out in a rule file.

<results>/<study>/runs/<label>/<run>.zarr.zip      one trajectory store per run (one file: a Zarr zip store)
<results>/<study>/runs/<label>/<combo>/<run>.zarr.zip  the same in a study with a grid (combo: L=0.5)
<results>/<study>/runs/<label>/<run>.zarr.zip.failed.json   a run whose iteration diverged
<results>/<study>/.tmp/                             temporaries: written here, then renamed into place
<results>/<study>/solve.json                        the manifest of the solve step (manifest_path)
<results>/<study>/.runs-<digest>                    the solve step's marker of the study's runs (runs_marker)
<results>/<study>/.lock                             the study's writer lock (hbvm_workflow.locks)
<results>/<study>/.snakemake.lock                   held by the Snakemake run that builds the study
<results>/<study>/errors.zarr, errors.csv, timings.csv     the numbers (errors_outputs: rule aggregate)
<results>/<study>/table.{md,tex,html}, <study>.{png,pdf}  the tables and figure (render_outputs: rule render)
<results>/<study>/<kind>.{md,csv}                   a work_precision or long_time study's table (beyond_table)
<results>/beyond/<kind>.{png,pdf,md,csv}            the beyond-the-paper summaries (beyond_summary)
<results>/beyond/time_to_accuracy.csv               their machine-readable time to accuracy
<results>/.plans/<key>.json                         the studies as the parse expanded them (hbvm_workflow.plan)
logs/<study>/<step>.log                             one log per study and step (log_path; logs/beyond/ too)
"""

from __future__ import annotations

import os

#: a run store's file suffix: a Zarr store in one zip file
STORE_SUFFIX = ".zarr.zip"
#: the file names in a study's folder
MANIFEST = "solve.json"
ERRORS_ZARR = "errors.zarr"
ERRORS_CSV = "errors.csv"
TIMINGS_CSV = "timings.csv"
TABLE = "table"  # table.<ext>, ext in TABLES
#: the tables (table.<ext>) and figures (<study>.<ext>) of a study, by their names in rule render
TABLES = ("md", "tex", "html")
FIGURES = ("png", "pdf")
#: the folder under <results> of the summaries over all beyond-the-paper studies (and of their lock)
BEYOND = "beyond"
#: the files of one such summary: <results>/beyond/<kind>.<ext>
SUMMARIES = ("png", "pdf", "md", "csv")
TIME_TO_ACCURACY = "time_to_accuracy"
#: the logs' folder, relative to the working directory
LOGS = "logs"
#: the worker jobs' logs of a Dask cluster on SLURM (dask-jobqueue), unless ``dask.slurm.log_directory`` says
SLURM_LOGS = os.path.join(LOGS, "dask-slurm")


def study_dir(results: str, study: str) -> str:
    return os.path.join(results, study)


def tmp_dir(results: str, study: str) -> str:
    """<results>/<study>/.tmp: where the study's stores, failure markers and errors.zarr are written before
    they are renamed into place (same file system); only ``storage.clean_temporaries`` removes anything here."""
    return os.path.join(results, study, ".tmp")


def study_of_path(path: str) -> str | None:
    """The study folder of a run store or failure marker path (<study>/runs/<label>/<name>, or
    <study>/runs/<label>/<combination>/<name> in a study with a grid), else None."""
    folder = os.path.dirname(os.path.abspath(path))
    for _ in range(2):
        runs = os.path.dirname(folder)
        if os.path.basename(runs) == "runs":
            return os.path.dirname(runs)
        folder = runs
    return None


def runs_dir(results: str, study: str) -> str:
    return os.path.join(results, study, "runs")


#: a ``save: summary`` study's one sharded store of all its runs (``hbvm_workflow.shards``), and the store of an
#: earlier set of runs while a new one is filled from it
SHARD_STORE = "runs.zarr"
PREVIOUS_SHARD_STORE = "runs.previous.zarr"
#: the group of a sharded store that holds one completeness record per shard (the group ``<slot>``'s attributes)
SHARD_RECORDS = "shards"


def shard_store(results: str, study: str) -> str:
    """<results>/<study>/runs.zarr: the sharded store of a ``save: summary`` study."""
    return os.path.join(results, study, SHARD_STORE)


def previous_shard_store(results: str, study: str) -> str:
    """<results>/<study>/runs.previous.zarr: the sharded store of the study's earlier runs, read while the runs of
    a changed study are written (``shards.prepare``), removed once every shard of the new store is complete."""
    return os.path.join(results, study, PREVIOUS_SHARD_STORE)


def shard_record(store: str, slot: int) -> str:
    """<store>/shards/<slot>/zarr.json: the record that shard ``slot`` of a sharded store is complete (a Zarr group's
    metadata, the record its attributes)."""
    return os.path.join(store, SHARD_RECORDS, str(slot), "zarr.json")


def short_h(h: float) -> str:
    """A step size as the config writes it (``repr`` of the float read from YAML: 0.1, 5.0) when that
    has at most 12 significant digits, else 12 digits: the h/2 partner of 0.1 -> '0.05', of a
    computed step -> a short stable form (never 0.26417540005910617)."""
    exact, short = repr(float(h)), f"{float(h):.12g}"
    return exact if float(short) == float(h) else short


def run_stem(h: float, n: int | None = None) -> str:
    """A run's name in its method's folder (and in its job id), without .zarr.zip.

    ``n=<n>`` for a row of a numbered rule (``halvings``: h0 2^-n; ``period_divisions``:
    T / n), its h/2 partner named by the n of the halved step (n + 1; 2 n); else
    ``h=<h>`` as the config writes it (``short_h``).
    """
    return f"n={int(n)}" if n is not None else f"h={short_h(h)}"


def run_name(h: float, n: int | None = None) -> str:
    """The file name of a run's store in its method's folder: ``run_stem`` + '.zarr.zip' (one file)."""
    return run_stem(h, n) + STORE_SUFFIX


def legacy_store(path: str) -> str | None:
    """The folder a run store had before stores were one file (``<run>.zarr``), None for another path."""
    return path.removesuffix(".zip") if path.endswith(STORE_SUFFIX) else None


def store_path(results: str, study: str, label: str, h: float, n: int | None = None, combo: str = "") -> str:
    """<results>/<study>/runs/<label>/<run_name(h, n)>; in a study with a grid
    <results>/<study>/runs/<label>/<combo>/<run_name(h, n)> (``combo``: ``combo_name``, e.g. ``L=0.5``)."""
    return os.path.join(runs_dir(results, study), label, *([combo] if combo else []), run_name(h, n))


def combo_name(values: dict) -> str:
    """The folder (and job id part) of one combination of a study's grid: ``key=value`` joined by ','
    in the grid's key order; floats as the config writes them (``short_h``), lists joined by '_'."""

    def fmt(v) -> str:
        if isinstance(v, (list, tuple)):
            return "_".join(fmt(x) for x in v)
        if isinstance(v, float):
            return short_h(v)
        return str(v)

    return ",".join(f"{k}={fmt(v)}" for k, v in values.items())


def lock_path(results: str, study: str) -> str:
    """<results>/<study>/.lock: held by the one process writing the study (hbvm_workflow.locks.study_lock)."""
    return os.path.join(results, study, ".lock")


def snakemake_lock_path(results: str, study: str) -> str:
    """<results>/<study>/.snakemake.lock: held by the main process of the Snakemake run that builds the study
    (from any working directory), so that another run deletes none of its outputs meanwhile."""
    return os.path.join(results, study, ".snakemake.lock")


def manifest_path(results: str, study: str) -> str:
    """<results>/<study>/solve.json: the solve step's manifest of the study's runs."""
    return os.path.join(results, study, MANIFEST)


RUNS_MARKER = ".runs-"


def runs_marker(results: str, study: str, digest: str) -> str:
    """<results>/<study>/.runs-<digest>: the solve step's record that the manifest is of the runs whose
    ``Study.runs_digest`` is ``digest`` (a changed set of runs has another marker, missing: Snakemake reruns the
    solve step). It holds the runs' [id, hash] list; the solve step removes the study's other markers."""
    return os.path.join(results, study, f"{RUNS_MARKER}{digest}")


def plan_dir(results: str) -> str:
    """<results>/.plans: the plans of the workflow runs (``hbvm_workflow.plan``), one file per config."""
    return os.path.join(results, ".plans")


def plan_path(results: str, key: str) -> str:
    """<results>/.plans/<key>.json: the studies of one config as its parse expanded them (``plan.plan_key``)."""
    return os.path.join(plan_dir(results), f"{key}.json")


def manifest_of_store(store: str) -> str:
    """The manifest of the study a run store belongs to (<study>/runs/<label>/[<combo>/]<run> -> <study>/solve.json)."""
    study = study_of_path(store) or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(store))))
    return os.path.join(study, MANIFEST)


def errors_zarr(results: str, study: str) -> str:
    """<results>/<study>/errors.zarr: the errors and rates (an xarray Dataset in a Zarr folder store)."""
    return os.path.join(results, study, ERRORS_ZARR)


def errors_csv(results: str, study: str) -> str:
    """<results>/<study>/errors.csv: the same as a table (``COLUMNS``, ``EXTRA``)."""
    return os.path.join(results, study, ERRORS_CSV)


def timings_csv(results: str, study: str) -> str:
    """<results>/<study>/timings.csv: what was measured, one row per run (``TIMINGS``)."""
    return os.path.join(results, study, TIMINGS_CSV)


def timings_beside(errors_csv_path: str) -> str:
    """The timings.csv in the folder of an errors.csv (a study's folder, wherever it lies)."""
    return os.path.join(os.path.dirname(errors_csv_path), TIMINGS_CSV)


def is_errors_store(path: str) -> bool:
    """Whether ``path`` is a study's errors.zarr: so named, next to the study's manifest."""
    folder = os.path.dirname(os.path.abspath(path))
    return os.path.basename(os.path.normpath(path)) == ERRORS_ZARR and os.path.isfile(os.path.join(folder, MANIFEST))


def table_path(results: str, study: str, ext: str) -> str:
    """<results>/<study>/table.<ext> (ext in ``TABLES``)."""
    return os.path.join(results, study, f"{TABLE}.{ext}")


def figure_path(results: str, study: str, ext: str) -> str:
    """<results>/<study>/<study>.<ext> (ext in ``FIGURES``)."""
    return os.path.join(results, study, f"{study}.{ext}")


def errors_outputs(results: str, study: str) -> dict[str, str]:
    """Rule aggregate's outputs of one study, by their names in the rule: zarr, csv, timings."""
    return {
        "zarr": errors_zarr(results, study),
        "csv": errors_csv(results, study),
        "timings": timings_csv(results, study),
    }


def render_outputs(results: str, study: str) -> dict[str, str]:
    """Rule render's outputs of one study, by their names in the rule: md, tex, html, png, pdf."""
    out = {ext: table_path(results, study, ext) for ext in TABLES}
    return out | {ext: figure_path(results, study, ext) for ext in FIGURES}


def aggregate_outputs(results: str, study: str) -> dict[str, str]:
    """The aggregate and render steps' outputs of one study, by kind (zarr, csv, timings, md, tex, html, png, pdf)."""
    return errors_outputs(results, study) | render_outputs(results, study)


def beyond_table(results: str, study: str, study_kind: str, ext: str) -> str:
    """<results>/<study>/<study_kind>.<ext> (study_kind: work_precision or long_time; ext: md or csv)."""
    return os.path.join(results, study, f"{study_kind}.{ext}")


def study_files(results: str, study: str, study_kind: str, names: tuple[str, ...]) -> list[str]:
    """The files of a study of ``study_kind`` by their keys (``hbvm_workflow.kinds``): those of
    ``aggregate_outputs``, and ``kind_md``, ``kind_csv`` for its kind's table (``beyond_table``)."""
    files = aggregate_outputs(results, study)
    files |= {f"kind_{ext}": beyond_table(results, study, study_kind, ext) for ext in ("md", "csv")}
    return [files[name] for name in names]


def beyond_summary(results: str, study_kind: str, ext: str) -> str:
    """<results>/beyond/<study_kind>.<ext>: the summary over every study of ``study_kind`` (ext in ``SUMMARIES``)."""
    return os.path.join(results, BEYOND, f"{study_kind}.{ext}")


def time_to_accuracy_csv(results: str) -> str:
    """<results>/beyond/time_to_accuracy.csv: the time to accuracy over every work_precision study."""
    return os.path.join(results, BEYOND, f"{TIME_TO_ACCURACY}.csv")


def log_path(study: str, step: str) -> str:
    """logs/<study>/<step>.log (relative to the working directory, as Snakemake writes it; ``study`` may be a
    wildcard, "{study}", or ``BEYOND`` for the summaries' logs)."""
    return os.path.join(LOGS, study, f"{step}.log")


# --------------------------------------------------------------------------- the CSV files' columns
#: errors.csv starts with exactly these columns (then EXTRA)
COLUMNS = (
    "problem",
    "k",
    "s",
    "h",
    "e_s",
    "rate_s",
    "e_lambda",
    "rate_lambda",
    "e_H",
    "e_g",
    "e_hc",
    "rate_hc",
    "order_s",
    "order_lambda",
    "order_hc",
    "steps",
    "mean_iterations",
)
EXTRA = ("study", "method", "name", "n", "t_end", "status", "error")
#: timings.csv: one row per run (methods in config order, h decreasing), what was measured when it ran
TIMINGS = ("study", "method", "name", "h", "steps", "wall_s", "backend", "worker", "host", "status")
#: and in a work_precision study: the best of ``repeats`` timed repeats of each run's time loop (``beyond.measure``)
MEASURED = ("best_wall_s", "repeats")

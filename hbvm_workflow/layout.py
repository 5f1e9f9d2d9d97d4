"""The results layout: every path the workflow reads or writes, defined once.

<results>/<study>/runs/<label>/<run>.zarr.zip      one trajectory store per run (one file: a Zarr zip store)
<results>/<study>/runs/<label>/<combo>/<run>.zarr.zip  the same in a study with a grid (combo: L=0.5)
<results>/<study>/runs/<label>/<run>.zarr.zip.failed.json   a run whose iteration diverged
<results>/<study>/.tmp/                             temporaries: written here, then renamed into place
<results>/<study>/solve.json                        the manifest of the solve step
<results>/<study>/.lock                             the study's writer lock (hbvm_workflow.locks)
<results>/<study>/.snakemake.lock                   held by the Snakemake run that builds the study
<results>/<study>/errors.zarr, errors.csv, timings.csv, table.{md,tex,html}, <study>.{png,pdf}
<results>/beyond/<kind>.{png,pdf,md,csv}            the beyond-the-paper summaries
<results>/.plans/<key>.json                         the studies as the parse expanded them (hbvm_workflow.plan)
logs/<study>/<step>.log                             one log per study and step
"""

from __future__ import annotations

import os

#: the outputs of the aggregate step of one study, by their names in the rule
TABLES = ("md", "tex", "html")
#: a run store's file suffix: a Zarr store in one zip file
STORE_SUFFIX = ".zarr.zip"
FIGURES = ("png", "pdf")


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
    return os.path.join(results, study, "solve.json")


def runs_marker(results: str, study: str, digest: str) -> str:
    """<results>/<study>/.runs-<digest>: the solve step's record that the manifest is of the runs whose
    ``Study.runs_digest`` is ``digest`` (a changed set of runs has another marker, missing: Snakemake reruns the
    solve step). It holds the runs' [id, hash] list; the solve step removes the study's other markers."""
    return os.path.join(results, study, f".runs-{digest}")


def plan_dir(results: str) -> str:
    """<results>/.plans: the plans of the workflow runs (``hbvm_workflow.plan``), one file per config."""
    return os.path.join(results, ".plans")


def plan_path(results: str, key: str) -> str:
    """<results>/.plans/<key>.json: the studies of one config as its parse expanded them (``plan.plan_key``)."""
    return os.path.join(plan_dir(results), f"{key}.json")


def manifest_of_store(store: str) -> str:
    """The manifest of the study a run store belongs to (<study>/runs/<label>/[<combo>/]<run> -> <study>/solve.json)."""
    study = study_of_path(store) or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(store))))
    return os.path.join(study, "solve.json")


def aggregate_outputs(results: str, study: str) -> dict[str, str]:
    """The aggregate step's outputs of one study, by kind (zarr, csv, timings, md, tex, html, png, pdf)."""
    d = study_dir(results, study)
    out = {"zarr": f"{d}/errors.zarr", "csv": f"{d}/errors.csv", "timings": f"{d}/timings.csv"}
    out |= {ext: f"{d}/table.{ext}" for ext in TABLES}
    out |= {ext: f"{d}/{study}.{ext}" for ext in FIGURES}
    return out


def beyond_table(results: str, study: str, kind: str, ext: str) -> str:
    """<results>/<study>/<kind>.<ext> (kind: work_precision or long_time; ext: md or csv)."""
    return os.path.join(results, study, f"{kind}.{ext}")


def beyond_summary(results: str, kind: str, ext: str) -> str:
    return os.path.join(results, "beyond", f"{kind}.{ext}")


def log_path(study: str, step: str) -> str:
    """logs/<study>/<step>.log (relative to the working directory, as Snakemake writes it)."""
    return os.path.join("logs", study, f"{step}.log")


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
    "steps",
    "mean_iterations",
)
EXTRA = ("study", "method", "name", "n", "t_end", "status", "error")
#: timings.csv: one row per run (methods in config order, h decreasing), what was measured when it ran
TIMINGS = ("study", "method", "name", "h", "steps", "wall_s", "backend", "worker", "host", "status")

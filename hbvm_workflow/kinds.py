"""Study kinds: each one entry here (its plots, its files, when the default target builds it, whether it
takes a grid), read by the config schema (the ``kind`` and ``plot`` enums), the study expansion and the
Snakemake rules (``workflow/rules/common.smk``: a study's targets).

A study of any kind is solved by the rule ``solve`` and aggregated by the rule ``aggregate`` (a study with
``save: summary``: both by one job of the rule ``solve_summary``, ``summary_job``): errors.csv, and its figure
``<study>.png``/``.pdf`` by ``plot_dispatch.study_plot`` from its ``plot`` key; the files a kind adds are written by
rules of their own (``workflow/rules/beyond.smk``: ``<kind>.md``, ``<kind>.csv``).
"""

from __future__ import annotations

from dataclasses import dataclass

from .layout import study_files

#: a convergence study's files under results/<study>/, by their keys in ``layout.study_files``: errors.csv,
#: errors.zarr, table.md, table.tex, table.html, <study>.png, <study>.pdf
CONVERGENCE_FILES = ("csv", "zarr", "md", "tex", "html", "png", "pdf")
#: a beyond-the-paper study's: errors.csv, its figure and its kind's table (<kind>.md and .csv, rules/beyond.smk)
BEYOND_FILES = ("csv", "png", "pdf", "kind_md", "kind_csv")


@dataclass(frozen=True)
class StudyKind:
    """One kind of study.

    plots: the figures it may draw (``plot``; the first is the default); files: what it builds under
    results/<study>/ (keys of ``layout.study_files``); opt_in: None (in the default target), "beyond" (with
    config ``beyond: true`` or named in ``select:``) or "select" (only when named in ``select:``); grid: whether
    it takes a ``grid``; grid_keys: how many keys its grid must have (None: any number, none included).
    """

    name: str
    plots: tuple[str, ...]
    files: tuple[str, ...]
    opt_in: str | None = None
    grid: bool = False
    grid_keys: int | None = None
    save: str = "trajectory"

    def targets(self, results: str, study: str) -> list[str]:
        """The files a study of this kind builds."""
        return study_files(results, study, self.name, self.files)

    def in_default(self, study: str, config: dict) -> bool:
        """Whether the default target builds the study (of the selected ones)."""
        if self.opt_in is None:
            return True
        named = study in (config.get("select") or [])
        return named or (self.opt_in == "beyond" and bool(config.get("beyond", False)))


KINDS: dict[str, StudyKind] = {
    kind_def.name: kind_def
    for kind_def in (
        StudyKind(
            "convergence", ("convergence", "solution_error", "invariants", "constraint_panels"), CONVERGENCE_FILES,
            grid=True,
        ),
        StudyKind("work_precision", ("work_precision",), BEYOND_FILES, opt_in="beyond"),  # hbvm_workflow.beyond
        StudyKind("long_time", ("long_time",), BEYOND_FILES, opt_in="beyond"),
        # a one-key grid: error constants and iterations against the value (plots.sweep_plot)
        StudyKind("sweep", ("sweep",), CONVERGENCE_FILES, opt_in="select", grid=True, grid_keys=1, save="summary"),
    )
}  # fmt: skip


def plot_names() -> list[str]:
    """Every plot of every kind, in order."""
    return list(dict.fromkeys(p for kind_def in KINDS.values() for p in kind_def.plots))

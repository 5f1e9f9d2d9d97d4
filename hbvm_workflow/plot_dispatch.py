"""A study's figure by its ``plot`` key: the convergence and published figures (``plots``) or a
beyond-the-paper figure (``beyond``)."""

from __future__ import annotations

from . import plots
from .beyond import study_figure
from .storage import open_errors_at
from .study import Study


def study_plot(study: Study, errors_zarr: str, png: str, pdf: str) -> None:
    """The study's figure (its ``plot`` key) as PNG and PDF."""

    if study.plot == "convergence":
        plots.convergence_plot(study, open_errors_at(errors_zarr), png, pdf)
    elif study.plot == "sweep":
        plots.sweep_plot(study, open_errors_at(errors_zarr), png, pdf)
    elif study.plot in ("work_precision", "long_time"):
        study_figure(study, png, pdf)
    else:
        plots.PLOTS[study.plot](study, png, pdf)

"""hbvm_workflow: the convergence-study workflow around ``hbvm_core``.

The config model and study expansion (``study``), the results layout (``layout``),
trajectory stores (``storage``), what a worker runs for a job (``worker``), the Dask cluster
(``cluster``), tables, plots and the beyond-the-paper studies, the kernel-released
locks (``locks``: one writer per study, a run's processes) and the recovery of
killed runs. It imports the numerics core; the core never imports it.
"""

from .reading import open_study
from .storage import load_trajectory, open_errors, open_trajectory, select_run

__all__ = ["load_trajectory", "open_errors", "open_study", "open_trajectory", "select_run"]

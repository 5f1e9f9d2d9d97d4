"""Rules solve / solve_study / solve_summary: the job of ``hbvm_workflow.solve_step`` (the missing runs of the
studies computed on one Dask cluster, then their manifests written)."""

import os
import sys

# One BLAS/OpenMP thread here and in the (forked) workers: the workers are the parallelism. Numba may use up to
# the rule's threads: a shard task on a local cluster with fewer tasks than cores runs its ensemble on several
# (``spread``); this process never runs a parallel loop, so its forked workers may start their own thread pools.
# Before anything imports numpy or numba.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"
if "numba" not in sys.modules:  # (a test that runs this script in its own process: numba's config is read already)
    os.environ["NUMBA_NUM_THREADS"] = str(max(1, int(getattr(globals().get("snakemake"), "threads", 1) or 1)))

if __name__ == "__main__":
    from hbvm_workflow.script_support import end_process
    from hbvm_workflow.solve_step import main

    main(snakemake)  # noqa: F821
    end_process()  # its outputs written: no teardown of the solve's modules and objects

"""Rule aggregate: errors and rates of one solved study -> errors.zarr, errors.csv, table.md/.tex/.html,
timings.csv (each run's wall time, backend, worker), and the study's figure <study>.png/.pdf."""

import logging
import sys
import time


def main(smk) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from hbvm_core.plots import study_plot
    from hbvm_core.study import expand_study
    from hbvm_core.tables import aggregate

    config = smk.config
    name = smk.wildcards.study
    logging.basicConfig(
        level=logging.INFO,
        format=f"%(asctime)s [{name}] %(message)s",
        datefmt="%H:%M:%S",
        handlers=[logging.FileHandler(smk.log[0], mode="w"), logging.StreamHandler(sys.stderr)],
    )
    t0 = time.perf_counter()
    study = expand_study(name, config["studies"][name], results=config.get("results", "results"))
    out = smk.output
    rows = aggregate(study, out.zarr, out.csv, out.md, out.tex, out.html, out.timings)
    failed = sum(r["status"] != "ok" for r in rows)
    t1 = time.perf_counter()
    logging.info(f"aggregated {len(rows)} rows ({failed} not ok) in {t1 - t0:.2f} s")
    study_plot(study, out.zarr, out.png, out.pdf)
    logging.info(f"{study.plot} plot written in {time.perf_counter() - t1:.2f} s")


if __name__ == "__main__":
    main(snakemake)  # noqa: F821

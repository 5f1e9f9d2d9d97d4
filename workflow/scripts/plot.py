"""Rule plot: the study's figure (convergence plot or fig1/fig2/fig3) as PNG and PDF."""

import logging
import sys
import time


def main(smk) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from hbvm_core.plots import study_plot
    from hbvm_core.study import expand_study

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
    study_plot(study, smk.input.zarr, smk.output.png, smk.output.pdf)
    logging.info(f"{study.plot} plot written in {time.perf_counter() - t0:.2f} s")


if __name__ == "__main__":
    main(snakemake)  # noqa: F821

# Parameter sweeps: a study with `kind: sweep` and a one-key `grid` is solved and
# aggregated like a convergence study (errors.csv with the grid column and a row per
# run), its tables a summary over the grid (hbvm_workflow.grid_tables), its figure the
# error constant, the iteration count, e_H and e_g against the grid value
# (hbvm_workflow.plots.sweep_plot). By default (`save: summary`) its
# runs are solved by shards, one Dask task each, into one sharded store
# (hbvm_workflow.shards: results/<study>/runs.zarr) and aggregated in the same job, rule solve_summary.
#
# Opt-in, as the beyond-the-paper studies: `snakemake --cores 2 sweep`, or name the
# study in `select:` to put it in the default target.

# (sweep_names: rules/common.smk)


rule sweep:
    input:
        [t for n in sweep_names() for t in study_targets(n)],

"""Reports built only from HDF5 result files (docs/reports.md).

collect: gather run files, enforcing provenance · table2: InCLAD Table 2, per-method table, MultiDataset selection ·
timing: Tables 4-5 · heatmaps: Appendix F · routing: task-bank routing · bootstrap: ROC-AUC_CL intervals ·
aggregate: `make aggregate` / `make verify` · cli: their subcommands.
"""

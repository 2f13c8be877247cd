"""Cluster runs: grids → submitit job arrays (SLURM, local, debug), submission records, status, resubmit."""

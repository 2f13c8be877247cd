"""Reports built only from HDF5 result files: Table 2, timing tables, heatmaps."""

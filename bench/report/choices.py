"""The report commands' choices, importable without pandas: `python -m bench` builds every subcommand's parser
before it runs one, and `make` asks it for a dataset's track on every routed target."""

from __future__ import annotations

# the MultiDataset selection's criterion -> (level, protocol) of the ROC-AUC_CL it ranks methods by
SELECT_BY = {"image-cl": ("image", "cl"), "image-ncl": ("image", "ncl"), "pixel-cl": ("pixel", "cl"),
             "pixel-ncl": ("pixel", "ncl")}
POOLS = ("entries", "methods")  # the two readings of Table 2's "averaged across methods and backbones"

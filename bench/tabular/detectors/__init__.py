"""Tabular detectors, one file each: the CAD framework's construction detectors (CONSTRUCTION_MODELS, below)
and the detectors that validate its scenarios; `bench.registry.specs("tabular")` lists them all.

Each registers a `ModelSpec(track="tabular")` in bench.registry; `factory(**hparams)` returns an object
with the tabular contract of base.TabularDetector.
"""

# The CAD framework's phase-1 detectors: what scenario construction runs by default (`bench tabular scenarios
# --models`, bench.tabular.scenario.MODELS), here so the CLI lists them without importing a detector (torch).
CONSTRUCTION_MODELS = ("autoencoder", "iforest", "ae1svm")

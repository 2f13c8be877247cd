"""Tabular detectors (phase 1 of the CAD framework: Autoencoder, Isolation Forest, AE1SVM), one file each.

Each registers a `ModelSpec(track="tabular")` in bench.registry; `factory(**hparams)` returns an object
with the tabular contract of base.TabularDetector.
"""

# The CAD framework's phase-1 detectors: what scenario construction runs by default (`bench tabular scenarios
# --models`, bench.tabular.scenario.MODELS), here so the CLI lists them without importing a detector (torch).
CONSTRUCTION_MODELS = ("autoencoder", "iforest", "ae1svm")

"""Tabular detectors (phase 1 of the CAD framework: Autoencoder, Isolation Forest, AE1SVM), one file each.

Each registers a `ModelSpec(track="tabular")` in bench.registry; `factory(**hparams)` returns an object
with the tabular contract of base.TabularDetector.
"""

"""Image detectors: one file per detector, each registering a `ModelSpec` (bench.registry).

Nothing is re-exported here: callers ask the registry (`bench.registry.get(name)`), whose spec resolves
hyperparameters (`resolve`), names the backbone layers (`layers`) and builds the detector (`factory`).
"""

"""Scenario extraction (InCLAD §3, App. E): single-task-expert difficulty, curricula, Spearman agreement,
the multi-dataset stream, and the versioned manifests in data/scenarios/ that `--ordering` reads."""

"""Continual anomaly detection benchmark suite."""

__version__ = "0.1.0"

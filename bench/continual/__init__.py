"""Continual protocols and the runner that drives a detector through a task stream."""

"""The continual-protocol base every track's strategies build on (the image track's task banks and replay, the
tabular track's protocols): `learn(split, step)` one task, `predict(split, idx)`, a plain-data state for the
checkpoint. It lives with the engine, not with either track's detectors: the runner drives any Protocol."""

from __future__ import annotations

import numpy as np
import torch


def step_seed(seed: int, step: int) -> int:
    """Independent, reproducible seed per (run seed, step): a resumed run draws what an uninterrupted one did."""
    return int(np.random.SeedSequence([seed, step]).generate_state(1)[0])


class Protocol:
    """A continual strategy wrapping a detector: `learn(split, step)` one task, `predict(split, idx)`."""

    routes = False  # True for task-bank protocols: predictions say which bank scored each image

    def __init__(self, detector, seed: int):
        self.detector, self.seed = detector, seed

    def hand_over(self, context) -> None:
        """Give the runner's training context (epoch checkpoints, progress, losses) to the detector that learns
        next. The one place it is handed over: a protocol that replaces its detector does so through `replace`."""
        self.context = self.detector.context = context

    def replace(self, detector) -> None:
        """Make `detector` (a fresh expert, a new model) the one that learns next, under the same context."""
        self.detector = detector
        if hasattr(self, "context"):  # before the first hand-over the detector keeps the one it was built with
            detector.context = self.context

    def step_seed(self, step: int) -> int:
        return step_seed(self.seed, step)

    def learn(self, split, step: int) -> None:
        raise NotImplementedError

    def predict(self, split, idx):
        raise NotImplementedError

    def state_dict(self) -> dict:
        raise NotImplementedError

    def load_state_dict(self, state: dict) -> None:
        raise NotImplementedError

    def state_bytes(self) -> int:
        return tensor_bytes(self.state_dict())

    def record(self, arrays: dict, step: int, n_tasks: int) -> None:
        """Add what this step measured beyond R to the run's arrays (HDF5 datasets): nothing by default."""


def tensor_bytes(obj) -> int:
    """Bytes held by the tensors in a (nested) state dict: what a method keeps between tasks."""
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, np.ndarray):
        return obj.nbytes
    if isinstance(obj, dict):
        return sum(tensor_bytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(tensor_bytes(v) for v in obj)
    return 0

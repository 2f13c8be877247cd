"""Continual protocols: how a detector meets a stream of tasks.

NCL (naive): train on the current task only, continuing from the current state. CL: the detector's own
continual adaptation (task banks for PatchCore, PaDiM, CFA — InCLAD App. C) or, for the other methods,
replay of a bounded buffer of past samples.
"""

from __future__ import annotations

import numpy as np

from bench.errors import ConfigError, choice_error
from bench.models.base import tensor_bytes

PROTOCOLS = ("ncl", "cl")


def step_seed(seed: int, step: int) -> int:
    """Independent, reproducible seed per (run seed, step): a resumed run draws what an uninterrupted one did."""
    return int(np.random.SeedSequence([seed, step]).generate_state(1)[0])


class Protocol:
    routes = False  # True for task-bank protocols: predictions say which bank scored each image

    def __init__(self, detector, seed: int):
        self.detector, self.seed = detector, seed

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


class Naive(Protocol):
    """NCL: the detector learns each task as it comes, with no access to past data."""

    def learn(self, split, step: int) -> None:
        self.detector.fit(split, self.step_seed(step))

    def predict(self, split, idx):
        return self.detector.predict(split, idx)

    def state_dict(self) -> dict:
        return self.detector.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.detector.load_state_dict(state)


def make_protocol(name: str, detector, seed: int) -> Protocol:
    if name == "ncl":
        return Naive(detector, seed)
    if name == "cl":
        protocol = detector.continual(seed)
        if protocol is None:
            raise ConfigError(f"model {detector.name!r} has no continual (cl) variant yet")
        return protocol
    raise choice_error("protocol", name, PROTOCOLS)

"""Replay of past tasks: the size rule and a bounded, seeded, task-balanced buffer. Shared by CFA's task banks
(InCLAD App. C.3), the generic Replay and Cumulative protocols of gradient-trained detectors (bench.image.protocols;
the task splits they keep are (de)serialised by bench.data.tasks) and the tabular track's replay.

The buffer stores opaque items (row indices, paths, tensors...) under a task name. At most `capacity` items are
kept over all tasks; when a new task arrives every task is cut back to its share. Two share rules:
- "water" (the suite's): water filling, a task with fewer items keeps them all and the others share what it leaves;
- "floor" (the released code's, pyCLAD v0.3.0 `strategies/replay/buffers/adaptive_balanced.py:20`, used by InCLAD
  and the CAD framework): every task keeps at most ⌊capacity / tasks⌋ items, nothing is redistributed, so the
  buffer may hold fewer than `capacity` items although more were offered. Which items survive is decided once, by a seeded random
order drawn when the task is added: a task's kept items are always a prefix of that order, so the buffer only
ever drops items and its content depends on nothing but (seed per task, stream order, capacity).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from bench.errors import ConfigError


REPLAY_FRACTION = 0.2  # InCLAD's code: the buffer holds 20% of a mean training task
SHARE_RULES = ("water", "floor")  # see the module docstring


def default_replay_size(train_sizes: Sequence[int]) -> int:
    """The replay buffer size when none is given: round(0.2 × mean training-task size) over the run's stream,
    at least 1 image."""
    if not len(train_sizes):
        raise ValueError("the replay size rule needs the training-task sizes of the stream")
    return max(1, round(REPLAY_FRACTION * sum(train_sizes) / len(train_sizes)))


def equal_shares(counts: Sequence[int], capacity: int, share: str = "water") -> list[int]:
    """How many items each task keeps. "water": min(count, level), plus one for the earliest tasks above the
    level, with the largest level that fits the capacity (water filling). "floor": min(count, ⌊capacity / tasks⌋)."""
    if share not in SHARE_RULES:
        raise ConfigError(f"replay share rule {share!r} is not known (expected one of {', '.join(SHARE_RULES)})")
    if share == "floor":
        per_task = capacity // len(counts) if counts else 0
        return [min(c, per_task) for c in counts]
    if sum(counts) <= capacity:
        return list(counts)
    level = capacity // len(counts)
    while sum(min(c, level + 1) for c in counts) <= capacity:
        level += 1
    shares = [min(c, level) for c in counts]
    spare = capacity - sum(shares)
    for i, c in enumerate(counts):
        if spare and c > level:
            shares[i] += 1
            spare -= 1
    return shares


class ReplayBuffer:
    """At most `capacity` items of past tasks, split between tasks by `share`; see the module docstring."""

    def __init__(self, capacity: int, share: str = "water"):
        if not isinstance(capacity, int) or capacity < 0:
            raise ConfigError(f"replay buffer capacity must be a non-negative integer, got {capacity!r}")
        if share not in SHARE_RULES:
            raise ConfigError(f"replay share rule {share!r} is not known (expected one of {', '.join(SHARE_RULES)})")
        self.capacity = capacity
        self.share = share
        self.items_: dict[str, list] = {}  # task → kept items, in the task's seeded order (insertion-ordered)

    def add(self, task: str, items: Sequence, seed: int) -> None:
        """Offer all of one task's items; a permutation drawn from `seed` decides which are kept longest."""
        if task in self.items_:
            raise ValueError(f"task {task!r} is already in the replay buffer")
        order = np.random.default_rng(seed).permutation(len(items))
        self.items_[task] = [items[i] for i in order]
        shares = equal_shares([len(v) for v in self.items_.values()], self.capacity, self.share)
        for (name, kept), share in zip(list(self.items_.items()), shares):
            self.items_[name] = kept[:share]

    def items(self) -> list[tuple[str, object]]:
        """(task, item) pairs, task by task in arrival order."""
        return [(task, item) for task, kept in self.items_.items() for item in kept]

    def __len__(self) -> int:
        return sum(len(v) for v in self.items_.values())

    def state_dict(self) -> dict:
        return {"capacity": self.capacity, "share": self.share,
                "items": {task: list(kept) for task, kept in self.items_.items()}}

    def load_state_dict(self, state: dict) -> None:
        self.capacity = state["capacity"]
        self.share = state.get("share", "water")  # checkpoints written before the share rule existed
        self.items_ = {task: list(kept) for task, kept in state["items"].items()}

"""Continual protocols over record tasks (CAD framework, scenario validation): Naive, Replay, Cumulative, MSTE.

Shaped like bench.image.protocols (the same `Protocol` base, `learn(split, step)`, `predict(split, idx)`,
state_dict, `record`), so one runner drives both tracks; a split here is a `RecordSplit` (a task's feature rows).

- ncl (Naive): the detector learns each task as it comes, continuing from its current state (the torch detectors
  warm-start; Isolation Forest and the other non-gradient ones can only refit).
- cl (Replay): the current task plus a bounded buffer of past records — bench.training.replay.ReplayBuffer, the
  image track's: water filling between past tasks (a task with fewer records keeps them all, the others share
  the rest), or under the `released` preset pyCLAD's ⌊capacity / tasks⌋ per task (`replay_share`), each share a
  nested seeded subset, updated after training. Size `replay_size`, default 25,000 records, the released
  framework's. Only the buffered rows are kept.
- cumulative: the union of every training set seen so far (an unbounded buffer); the torch detectors continue
  from their weights on it, as the image track's Cumulative does, the others refit. Files under this name keep
  this meaning (a warm-started Cumulative).
- cumulative_fresh: the same union, learned by a NEW model at every step (seeded by the step). This is the CAD
  framework's Cumulative as its released code runs it: the paper's non-continual reference with access to all
  past data, no state carried over.
- mste: one single-task expert per task, each fresh; a test record is scored by the expert of its own task (the
  task's identity is given: an oracle reference). No expert changes after its task, so every column of R is
  constant below the diagonal and Chaudhry's FM is exactly 0. A task not learned yet (a cross-evaluated run, the
  `released` preset's) is scored 0 for every record, ROC-AUC 0.5, as pyCLAD's MSTE does
  (src/pyclad/strategies/baselines/mste.py:23): the released FM then counts an expert below chance.

Every detector passes the pointwise audit (bench.tabular.audit) or is marked transductive; for those, every
scoring call's batch (step, task, records) is recorded as `scoring/batch_records` next to the numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bench.config import TABULAR_PROTOCOLS, TABULAR_REPLAY_RECORDS
from bench.errors import ConfigError, choice_error
from bench.continual.protocol import Protocol
from bench.tabular.audit import require_pointwise
from bench.training.replay import ReplayBuffer

# what make_protocol builds; ste (one expert per task, for scenario construction) is bench.tabular.ste's Expert
PROTOCOLS = tuple(p for p in TABULAR_PROTOCOLS if p != "ste")
REPLAY_RECORDS = TABULAR_REPLAY_RECORDS  # the released CAD framework's replay buffer (a run's replay_size)


@dataclass(frozen=True)
class RecordSplit:
    """One task's records of one split: their feature rows [n, d] (float32) and their record ids."""

    task: str
    X: np.ndarray
    record_ids: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.X)


class Naive(Protocol):
    def __init__(self, detector, seed: int, transductive: bool = False):
        super().__init__(detector, seed)
        self.transductive = transductive
        self.step_ = -1
        self.trained_ = 0  # records trained on at the last step
        self.batches_: list[tuple[int, str, int]] = []  # (step, task, records) of each scoring call

    def _train(self, X: np.ndarray, step: int) -> None:
        self.step_, self.trained_ = step, len(X)
        self.detector.fit(X, self.step_seed(step))

    def learn(self, split: RecordSplit, step: int) -> None:
        self._train(split.X, step)

    def _scorer(self, split: RecordSplit):
        return self.detector

    def predict(self, split: RecordSplit, idx) -> np.ndarray:
        rows = split.X[np.asarray(idx)]
        if self.transductive:
            self.batches_.append((self.step_, split.task, len(rows)))
        return np.asarray(self._scorer(split).score(rows), dtype=np.float64)

    def state_dict(self) -> dict:
        return {"detector": self.detector.state_dict(), "step": self.step_, "batches": list(self.batches_)}

    def load_state_dict(self, state: dict) -> None:
        self.detector.load_state_dict(state["detector"])
        self.step_, self.batches_ = state["step"], [tuple(b) for b in state["batches"]]

    def record(self, arrays: dict, step: int, n_tasks: int) -> None:
        """`scoring/batch_records` [step, task]: records in the scoring call of each number (transductive only)."""
        if not self.transductive or not self.batches_:
            return
        order = list(dict.fromkeys(t for _, t, _ in self.batches_))
        out = arrays.setdefault("scoring/batch_records", np.zeros((n_tasks, n_tasks), dtype=np.int64))
        for s, task, n in self.batches_:
            out[s, order.index(task)] = n


class Replay(Naive):
    """Current task ∪ buffered past records; `capacity=None` keeps every record (Cumulative)."""

    def __init__(self, detector, seed: int, capacity: int | None, transductive: bool = False, share: str = "water"):
        super().__init__(detector, seed, transductive)
        if capacity is not None and (not isinstance(capacity, int) or capacity < 0):
            raise ConfigError(f"replay_size must be a non-negative integer, got {capacity!r}")
        self.capacity = capacity
        self.buffer_ = ReplayBuffer(capacity if capacity is not None else np.iinfo(np.int64).max, share)
        self.rows_: dict[str, np.ndarray] = {}  # task → its buffered feature rows, in the buffer's seeded order
        self.composition_: dict[str, int] = {}  # past task → records replayed at the last step

    def learn(self, split: RecordSplit, step: int) -> None:
        if split.task in self.rows_:
            raise ConfigError(f"task {split.task!r} appears twice in the stream")
        self.composition_ = {task: len(rows) for task, rows in self.rows_.items()}
        self._train(np.concatenate([split.X, *self.rows_.values()]) if self.rows_ else split.X, step)
        self.buffer_.add(split.task, range(len(split)), self.step_seed(step))
        self.rows_[split.task] = split.X[np.fromiter(self.buffer_.items_[split.task], dtype=np.int64)]
        for task, kept in self.buffer_.items_.items():  # shares only shrink, and a share is a prefix
            self.rows_[task] = self.rows_[task][: len(kept)]

    def buffered(self) -> int:
        return sum(len(r) for r in self.rows_.values())

    def state_dict(self) -> dict:
        return {**super().state_dict(), "buffer": self.buffer_.state_dict(), "rows": dict(self.rows_),
                "composition": dict(self.composition_)}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.buffer_.load_state_dict(state["buffer"])
        self.rows_ = {task: np.asarray(rows) for task, rows in state["rows"].items()}
        self.composition_ = dict(state["composition"])

    def record(self, arrays: dict, step: int, n_tasks: int) -> None:
        """Also `replay/composition` [step, task]: past records of each task trained on at each step."""
        super().record(arrays, step, n_tasks)
        order = list(self.rows_)
        out = arrays.setdefault("replay/composition", np.zeros((n_tasks, n_tasks), dtype=np.int64))
        for task, count in self.composition_.items():
            out[step, order.index(task)] = count


class FreshCumulative(Replay):
    """Cumulative as the CAD framework's released code runs it: at every step a new model learns the union of all
    training sets so far (Replay with an unbounded buffer, its detector replaced before each training)."""

    def __init__(self, factory, seed: int, transductive: bool = False):
        super().__init__(factory(), seed, None, transductive)
        self.factory = factory

    def _train(self, X: np.ndarray, step: int) -> None:
        if self.step_ >= 0:  # a model has been trained: replace it, under the runner's context (epoch checkpoints)
            self.replace(self.factory())
        super()._train(X, step)


class MSTE(Naive):
    """One fresh expert per task; a record of task j is scored by expert j (the task's identity is given)."""

    def __init__(self, factory, seed: int, transductive: bool = False):
        super().__init__(factory(), seed, transductive)
        self.factory = factory
        self.experts_: dict[str, object] = {}

    def learn(self, split: RecordSplit, step: int) -> None:
        if split.task in self.experts_:
            raise ConfigError(f"task {split.task!r} appears twice in the stream")
        if self.experts_:  # the current detector is the last expert: train a new one, under the runner's context
            self.replace(self.factory())
        self._train(split.X, step)
        self.experts_[split.task] = self.detector

    def _scorer(self, split: RecordSplit):
        return self.experts_[split.task]

    def predict(self, split: RecordSplit, idx) -> np.ndarray:
        if split.task not in self.experts_:  # not learned yet (cross evaluation): pyCLAD's MSTE scores zeros
            return np.zeros(len(np.asarray(idx)), dtype=np.float64)
        return super().predict(split, idx)

    def state_dict(self) -> dict:
        return {"experts": {task: e.state_dict() for task, e in self.experts_.items()}, "step": self.step_,
                "batches": list(self.batches_)}

    def load_state_dict(self, state: dict) -> None:
        self.experts_ = {task: self.factory().load_state_dict(s) for task, s in state["experts"].items()}
        if self.experts_:
            self.detector = list(self.experts_.values())[-1]
        self.step_, self.batches_ = state["step"], [tuple(b) for b in state["batches"]]


def make_protocol(name: str, spec, hparams: dict, seed: int, replay_size: int = REPLAY_RECORDS,
                  replay_share: str = "water") -> Naive:
    """The record protocol `name` around the tabular detector `spec` with resolved `hparams` (Replay's buffer:
    `replay_size` records shared by `replay_share`); refuses a detector that fails the pointwise audit unless its
    spec is marked transductive."""
    require_pointwise(spec)
    transductive = spec.transductive
    if name == "ncl":
        return Naive(spec.factory(**hparams), seed, transductive)
    if name == "cl":
        return Replay(spec.factory(**hparams), seed, replay_size, transductive, replay_share)
    if name == "cumulative":
        return Replay(spec.factory(**hparams), seed, None, transductive)
    if name == "cumulative_fresh":
        return FreshCumulative(lambda: spec.factory(**hparams), seed, transductive)
    if name == "mste":
        return MSTE(lambda: spec.factory(**hparams), seed, transductive)
    raise choice_error("protocol", name, PROTOCOLS)

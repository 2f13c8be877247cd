"""The image track's continual protocols: how a detector meets a stream of tasks.

NCL (naive): train on the current task only, continuing from the current state (gradient detectors: warm-start
fine-tuning with a fresh optimizer per task, as InCLAD's code does). CL: the detector's own continual adaptation
(task banks for PatchCore, PaDiM, CFA — InCLAD App. C) or, for gradient-trained detectors, Replay (InCLAD §4.3):
train on the current task plus a bounded buffer of raw past images, split between past tasks by the detector's
`replay_share` (floor: ⌊capacity / tasks⌋ each, the released pyCLAD buffer InCLAD ran, under `inclad`; water:
water filling, under `original`), each task's share a nested seeded random subset, the buffer updated after
training. Cumulative: train on every training image
seen so far (warm start), the usual upper reference.
"""

from __future__ import annotations

import numpy as np

from bench.config import IMAGE_PROTOCOLS
from bench.data.tasks import rerooted, split_from_state, split_state
from bench.errors import ConfigError, choice_error
from bench.continual.protocol import Protocol, tensor_bytes
from bench.models.gradient import GradientDetector
from bench.training.replay import ReplayBuffer, default_replay_size


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


class Replay(Naive):
    """CL of gradient detectors: train on the current task ∪ the buffer of past images (rows of the past tasks'
    training splits, re-read from disk: raw images, not features), then add the current task to the buffer.
    `capacity=None` keeps every image: that is Cumulative."""

    def __init__(self, detector: GradientDetector, seed: int, capacity: int | None):
        super().__init__(detector, seed)
        self.capacity = capacity
        self.kept_: list = []  # training splits of the past tasks (their rows, not their images)
        self.buffer_ = ReplayBuffer(capacity if capacity is not None else np.iinfo(np.int64).max,
                                    detector.replay_share)
        self.composition_: dict[str, int] = {}  # past task → images replayed at the last step

    def learn(self, split, step: int) -> None:
        seed = self.step_seed(step)
        self.kept_ = rerooted(self.kept_, split)
        by_task = {s.task: s for s in self.kept_}
        replay = [(by_task[task], row) for task, row in self.buffer_.items()]
        self.composition_ = {task: len(rows) for task, rows in self.buffer_.items_.items()}
        self.detector.fit_samples([(split, i) for i in range(len(split))] + replay, seed)
        self.kept_.append(split)
        self.buffer_.add(split.task, list(range(len(split))), seed)

    def state_dict(self) -> dict:
        return {"detector": self.detector.state_dict(), "kept": [split_state(s) for s in self.kept_],
                "buffer": self.buffer_.state_dict(), "composition": dict(self.composition_)}

    def load_state_dict(self, state: dict) -> None:
        self.detector.load_state_dict(state["detector"])
        self.kept_ = [split_from_state(s) for s in state["kept"]]
        self.buffer_.load_state_dict(state["buffer"])
        self.composition_ = dict(state["composition"])

    def state_bytes(self) -> int:
        """The detector's weights plus the buffered raw images (3 × S × S bytes each at the input size)."""
        size = self.detector.image_size
        return tensor_bytes(self.detector.state_dict()) + 3 * size * size * len(self.buffer_)

    def record(self, arrays: dict, step: int, n_tasks: int) -> None:
        """`replay/composition` [step, task]: past images of each task trained on at each step."""
        tasks = [s.task for s in self.kept_]
        out = arrays.setdefault("replay/composition", np.zeros((n_tasks, n_tasks), dtype=np.int64))
        for task, count in self.composition_.items():
            out[step, tasks.index(task)] = count


def check_protocol(name: str, spec) -> None:
    """Refuse, before any work, a protocol the registered detector `spec` cannot run. Cumulative retrains on every
    past image, which only a gradient-trained detector does; a factory that is a class says so without building
    it (any other factory is checked by make_protocol when the detector is built)."""
    if name == "cumulative" and isinstance(spec.factory, type) and not issubclass(spec.factory, GradientDetector):
        raise ConfigError(_cumulative_refusal(spec.name))


def _cumulative_refusal(model: str) -> str:
    valid = ", ".join(p for p in IMAGE_PROTOCOLS if p != "cumulative")
    return (f"protocol 'cumulative' retrains on all past data: it needs a gradient-trained detector, not "
            f"{model!r} (valid protocols for {model}: {valid})")


def make_protocol(name: str, detector, seed: int, train_sizes=()) -> Protocol:
    """The protocol `name` around `detector`. `train_sizes` (training images per task of the stream) resolves
    `replay_size=0` to the rule round(0.2 × mean training-task size)."""
    if getattr(detector, "replay_size", None) == 0 and len(train_sizes):
        detector.replay_size = default_replay_size(train_sizes)
    if name == "ncl":
        return Naive(detector, seed)
    if name == "cl":
        protocol = detector.continual(seed)
        if protocol is None and isinstance(detector, GradientDetector):
            protocol = Replay(detector, seed, detector.replay_size)
        if protocol is None:
            raise ConfigError(f"model {detector.name!r} has no continual (cl) variant yet")
        return protocol
    if name == "cumulative":
        if not isinstance(detector, GradientDetector):
            raise ConfigError(_cumulative_refusal(detector.name))
        return Replay(detector, seed, None)
    raise choice_error("protocol", name, IMAGE_PROTOCOLS)

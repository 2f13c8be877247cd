"""Tracks: the contract between the continual runner and a track, and the tracks by name.

The generic runner (bench.continual.runner) runs any track through one loop, but it must not import a track: a
track is built on the runner, not the other way round. So each track's module registers how to prepare its runs
here, and is imported by its module name the first time a run of that track is prepared (the same way detectors
are discovered). What the runner asks of the object a track prepares is `Track` below: the members it reads and
the calls it makes, each with a no-op default where a track may have nothing to do.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Callable

import numpy as np

from bench.errors import choice_error


@dataclass(frozen=True)
class ScoreRecord:
    """The per-sample scores of one evaluated cell: after learning step `step`, task `task`'s test samples got
    `values` (float64) and have `labels` (int8). A track whose samples are records of an index adds each one's row
    there (`record`) and, where its test split has a stream order, the position in it (`order`); the result file
    stores them as scores/<field>."""

    step: int
    task: int
    labels: np.ndarray
    values: np.ndarray
    record: np.ndarray | None = None
    order: np.ndarray | None = None

    EXTRA = ("record", "order")  # the optional per-sample columns, in the order a file lists them

    def __post_init__(self):
        arrays = [self.labels, self.values, *(a for a in self.extras().values())]
        if not all(isinstance(a, np.ndarray) and a.ndim == 1 and len(a) == len(self.values) for a in arrays):
            raise ValueError(f"score record of step {self.step}, task {self.task}: every column must be a 1-d array "
                             f"of the same length")

    def extras(self) -> dict[str, np.ndarray]:
        return {name: getattr(self, name) for name in self.EXTRA if getattr(self, name) is not None}

    def to_plain(self) -> dict:
        """Plain data for a checkpoint (bench.checkpoint stores no objects)."""
        return {"step": self.step, "task": self.task, "labels": self.labels, "values": self.values,
                **self.extras()}

    @classmethod
    def from_plain(cls, data) -> "ScoreRecord":
        """A record from a checkpoint: the plain dict `to_plain` wrote. ValueError/TypeError/KeyError when it is
        not one (the runner then sets the checkpoint aside)."""
        if isinstance(data, (list, tuple)) and 4 <= len(data) <= 4 + len(cls.EXTRA):
            # a checkpoint written before records were typed: (step, task, labels, values, *EXTRA) in this order
            data = dict(zip(("step", "task", "labels", "values", *cls.EXTRA), data))
        if not isinstance(data, dict) or not set(data) <= {"step", "task", "labels", "values", *cls.EXTRA}:
            raise ValueError("not a score record")
        step, task = data["step"], data["task"]
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (step, task)):
            raise TypeError("a score record's step and task are integers")
        return cls(step, task, data["labels"], data["values"], data.get("record"), data.get("order"))


@dataclass(frozen=True)
class Cell:
    """One cell (step, task) of the run the runner asks a track to evaluate: the protocol after learning step
    `step` scores task `task`'s test split. The track writes its metrics into `arrays` (its `matrices`, each
    [n, n], at [step, task]) and appends the cell's per-sample scores to `scores` as one `ScoreRecord`; `routing`
    is [n, n, n] counts for protocols that route (routing[step, task, bank] += images sent to bank), else None."""

    config: object  # the run's RunConfig
    protocol: object  # a bench.continual.protocol.Protocol
    step: int  # 0-based index of the task just learned
    task: int  # 0-based index, in config.tasks, of the task evaluated
    arrays: dict
    scores: list
    routing: np.ndarray | None = None
    progress: bool = False  # may draw a progress bar (a terminal); otherwise log a line now and then

    @property
    def task_name(self) -> str:
        return self.config.tasks[self.task]


class Track(ABC):
    """What a track's `prepare` returns and the runner drives (bench/continual/runner.py). A track names its
    metric levels (`levels`, the first is the one the run log prints) and the [n, n] arrays they fill
    (`matrices`), holds its tasks' data (`splits`: {task: TaskData(train, test)}, each split with `len`, the test
    one with `labels`), builds a fresh protocol, and evaluates one cell. Everything else has a default that does
    nothing: a track with no backbone to load, no cache to free and nothing to add to the file's attributes
    overrides only `protocol` and `evaluate`."""

    name: str  # the track's name in bench.tracks.TRACKS, recorded in every result file
    levels: tuple[str, ...]  # metric levels: R/<level> is one of `matrices`
    matrices: tuple[str, ...]  # every [n, n] array `evaluate` fills, e.g. R/<level>
    unit = "samples"  # what a training split holds, as the run log counts it
    weights_id = "none"  # the run key's id of pretrained inputs (none: nothing pretrained)
    splits: dict  # {task: TaskData}; may be a property that reads them when first needed

    def start(self, cfg, device, progress: bool, log, out_dir) -> None:
        """Before the first step: load what the run computes with (a backbone), on `device`."""

    @abstractmethod
    def protocol(self, cfg):
        """A fresh, untrained bench.continual.protocol.Protocol for run `cfg`."""

    @abstractmethod
    def evaluate(self, cell: Cell) -> None:
        """Score `cell.task`'s test split with `cell.protocol`; write the cell's metrics and scores (Cell)."""

    def probe(self, cfg, protocol) -> np.ndarray:
        """Scores of a few test samples of the first task under a restored protocol: a resumed run checks them
        (NaN or infinite: the checkpoint does not fit this run). Scoring must be pointwise, so nothing measured
        changes. By default none: a resumed state is then checked when the next step first scores."""
        return np.empty(0)

    def drop_training(self, task: str) -> None:
        """NCL's hint: `task`'s training split is never read again (its test split is)."""

    def close(self) -> None:
        """After the run, also when it failed: free caches and spill files."""

    def attrs(self) -> dict:
        """Attributes this track adds to the result file (what it computed, e.g. images through the backbone)."""
        return {}


@dataclass(frozen=True)
class TrackEntry:
    module: str  # registers the track's `prepare` here when imported
    detectors: str  # the package whose modules are its built-in detectors (each registers a ModelSpec)
    spec_inputs: tuple[str, ...]  # what a detector spec's `inputs` may say on this track
    # whether its detectors' operations are large enough to share across threads: a run of a track that is not runs
    # on one thread unless a SLURM allocation or OMP_NUM_THREADS says otherwise (bench.devices.choose_threads)
    parallel_ops: bool = True


# The one table of tracks: every other list of track names (config's run inputs, the registry's checks,
# bench.testing's subjects) is derived from it or checked against it.
TRACKS = {
    "image": TrackEntry("bench.image.track", "bench.models", ("features", "images")),
    "tabular": TrackEntry("bench.tabular.track", "bench.tabular.detectors", ("records",), parallel_ops=False),
}
TRACK_NAMES = tuple(TRACKS)
TRACK_MODULES = {name: t.module for name, t in TRACKS.items()}
DETECTOR_PACKAGES = {name: t.detectors for name, t in TRACKS.items()}

_PREPARE: dict[str, Callable] = {}


def parallel_ops(track: str) -> bool:
    """TrackEntry.parallel_ops of `track`; a track registered from outside this table (a plugin's, a test's toy)
    keeps the caller's thread count."""
    entry = TRACKS.get(track)
    return entry.parallel_ops if entry else True


def register(name: str, prepare: Callable) -> None:
    """Called once by a track's module: `prepare(config) -> (Track, index_sha256)`; bad input fails there,
    before any work."""
    _PREPARE[name] = prepare


def prepare(config):
    """(Track, index_sha256) of a run of `config.track`, from the track's registered `prepare`."""
    if config.track not in _PREPARE:
        if config.track not in TRACK_MODULES:
            raise choice_error("track", config.track, TRACK_MODULES)
        importlib.import_module(TRACK_MODULES[config.track])
    track, index_sha = _PREPARE[config.track](config)
    if not isinstance(track, Track):  # a track's own mistake, said where it is made rather than mid-run
        raise TypeError(f"track {config.track!r}: prepare returned a {type(track).__name__}, expected a "
                        f"bench.tracks.Track")
    return track, index_sha

"""The typed records the stream-assembly parts exchange: a budgeted corpus, an arm (one assembly of it), the
positional split, and what a detector returns. Every module of `bench.assembly` reads these; none passes
positional tuples or bare dicts across a module boundary.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Corpus:
    """A budgeted corpus in its canonical order (a stable timestamp sort within each capture, captures in date
    order). Row i of every array is record i; `record_id` is the record's identity across arms (a permutation of
    the rows is an arm)."""

    name: str  # the result set's corpus name, e.g. "cicids2017", "litnet", "synthetic"
    X: np.ndarray  # float64 [n, d], the non-finite policy already applied (counts in manifest)
    y: np.ndarray  # int8 [n], 1 = attack
    label: np.ndarray  # int16 [n], index into `label_names` (the cleaned source label)
    label_names: tuple[str, ...]
    capture: np.ndarray  # int16 [n], index into `captures` (CICIDS2017: the day; LITNET-2020: the capture)
    captures: tuple[str, ...]  # in date order
    timestamp: np.ndarray  # int64 [n], nanoseconds since the epoch (naive local clock of the capture)
    record_id: np.ndarray  # int64 [n], stable identity of each record (its row in the canonical order)
    feature_names: tuple[str, ...]
    manifest: dict = field(default_factory=dict)  # JSON-able: inputs' SHA-256, budgets, per-capture counts, ...

    @property
    def n(self) -> int:
        return int(self.y.shape[0])


@dataclass(frozen=True)
class Arm:
    """One assembly of (part of) a corpus: `rows` are corpus rows in stream order."""

    name: str  # e.g. "timestamp", "day_round_robin", "capture:<name>", "pooled"
    rows: np.ndarray  # int64 [m], rows of the corpus in the order the stream presents them
    description: str = ""


@dataclass(frozen=True)
class SplitRule:
    """The positional split of a stream of n records: train [0, i_tr), validation [i_tr, i_va), test [i_va, n).
    Released: i_tr = int(0.70 n), i_va = i_tr + int(0.15 n)."""

    train: float = 0.70
    validation: float = 0.15

    def bounds(self, n: int) -> tuple[int, int]:
        i_tr = int(self.train * n)
        return i_tr, i_tr + int(self.validation * n)


class Kind(enum.Enum):
    ONLINE = "online"  # scores each record, then learns it, in stream order
    BATCH = "batch"  # fitted on benign training rows, scores a recorded batch


@dataclass(frozen=True)
class StreamScores:
    """What an online detector returns for a chunk of records: the deployed score of each record (computed
    before the record is learned) and, for a composed score, the branches it was composed from."""

    score: np.ndarray  # float64 [m]
    branches: dict[str, np.ndarray] = field(default_factory=dict)  # name -> float64 [m]


@dataclass(frozen=True)
class BatchRecord:
    """The batch a batch-dependent detector's scores were computed in: its size and a digest of its record ids
    (in the order scored), so every such score names its batch."""

    size: int
    ids_sha256: str


@dataclass(frozen=True)
class ScoredStream:
    """One detector's scores over one arm of a corpus: what an assembly run file holds and every analysis reads.
    Position i is the i-th record the arm presents; `rows[i]` is its corpus row (record identity across arms)."""
    corpus: str  # the corpus's name
    corpus_sha256: str  # manifest digest of the corpus (bench.assembly.corpus.manifest_sha256)
    arm: str
    detector: str
    preset: str
    seed: int
    kind: Kind
    rows: np.ndarray  # int64 [n], corpus rows in stream order
    y: np.ndarray  # int8 [n], 1 = attack, in stream order
    bounds: tuple[int, int]  # (i_tr, i_va): train [0, i_tr), validation [i_tr, i_va), test [i_va, n)
    score: np.ndarray  # float64 [n]; online: every record, scored before it is learned; batch: NaN outside its batch
    branches: dict[str, np.ndarray] = field(default_factory=dict)  # name -> float64 [n], same positions as score
    batch: BatchRecord | None = None  # batch detectors: the batch the scored positions formed

    @property
    def n(self) -> int:
        return int(self.y.shape[0])

    def test(self) -> slice:
        """The held-out slice's positions."""
        return slice(self.bounds[1], self.n)

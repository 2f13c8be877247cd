"""What several analyses share: checking a set of ScoredStreams, locating records across arms, and refitting a
batch detector on an arm's benign training rows to score a batch of one's choosing."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from bench.assembly import records
from bench.errors import ConfigError

# (history arm, corpus rows in the order to score, as one batch) -> float64 scores: a batch detector refitted on
# that arm's benign training rows (or any callable with that meaning, e.g. a fixed function in a test)
Rescore = Callable[[str, np.ndarray], np.ndarray]


def check_same_corpus(streams: list[records.ScoredStream], what: str) -> None:
    digests = {(s.corpus, s.corpus_sha256) for s in streams}
    if len(digests) > 1:
        raise ConfigError(f"{what}: the score files come from different corpora ({sorted(digests)})")


def positions_of(stream: records.ScoredStream, rows: np.ndarray) -> np.ndarray:
    """Each corpus row's position in the stream (ConfigError if a row is not in it)."""
    where = np.full(int(max(stream.rows.max(), rows.max())) + 1, -1, np.int64)
    where[stream.rows] = np.arange(stream.n)
    pos = where[rows]
    if (pos < 0).any():
        raise ConfigError(f"arm {stream.arm!r} of {stream.detector}: corpus row {int(rows[pos < 0][0])} is not in it")
    return pos


def benign_training_rows(rows: np.ndarray, y: np.ndarray, train_end: int) -> np.ndarray:
    """The corpus rows a batch detector is fitted on, as released: the benign ones among `rows` at positions
    [0, train_end) (labels `y`, aligned with `rows`), or all of them if none is benign."""
    rows, y = rows[:train_end], y[:train_end]
    return rows[y == 0] if (y == 0).any() else rows


@dataclass(frozen=True)
class BatchScore:
    """A batch detector's scores over one arm: NaN before the training end, then the one batch it scored."""

    score: np.ndarray  # float64, one per row of the arm
    batch: records.BatchRecord


def score_batch(detector, corpus: records.Corpus, rows: np.ndarray, y: np.ndarray, train_end: int) -> BatchScore:
    """The released batch call: fit `detector` on the benign training rows (`benign_training_rows`), score every
    row from `train_end` on (validation + test) as one batch. A run file's scores and the in-memory ones both come
    from here, so they cannot drift apart."""
    detector.fit(corpus.X[benign_training_rows(rows, y, train_end)])
    batch_rows = rows[train_end:]
    score = np.full(len(rows), np.nan)
    score[train_end:] = detector.score(corpus.X[batch_rows])
    return BatchScore(score, detector.batch_record(corpus.record_id[batch_rows]))


class FittedRescore:
    """A `Rescore` from a corpus and a batch detector spec: one model per (arm, training end), fitted on that
    arm's benign rows before the end (default: the stream's i_tr), scoring any rows as one batch."""

    def __init__(self, corpus: records.Corpus, spec, streams: dict[str, records.ScoredStream],
                 preset: str = "released", seed: int = 0):
        if spec.kind is not records.Kind.BATCH:
            raise ConfigError(f"rescoring needs a batch detector; {spec.name!r} is {spec.kind.value}")
        self.corpus, self.spec, self.streams, self.preset, self.seed = corpus, spec, streams, preset, seed
        self._models: dict[tuple[str, int], object] = {}

    def model(self, arm: str, train_end: int | None = None):
        stream = self.streams[arm]
        end = stream.bounds[0] if train_end is None else int(train_end)
        if (arm, end) not in self._models:
            det = self.spec.create(self.preset, self.seed)
            det.fit(self.corpus.X[benign_training_rows(stream.rows, stream.y, end)])
            self._models[(arm, end)] = det
        return self._models[(arm, end)]

    def __call__(self, arm: str, rows: np.ndarray, train_end: int | None = None) -> np.ndarray:
        return self.model(arm, train_end).score(self.corpus.X[rows])


def scored_stream(arm: str, rows, y, bounds: tuple[int, int], score, *, detector: str = "scorer",
                  kind: records.Kind = records.Kind.ONLINE, branches: dict | None = None, corpus: str = "crafted",
                  corpus_sha256: str = "0" * 64, preset: str = "released", seed: int = 0) -> records.ScoredStream:
    """A ScoredStream from arrays (what a run file holds), for scores computed outside a run."""
    return records.ScoredStream(corpus, corpus_sha256, arm, detector, preset, seed, kind,
                                np.asarray(rows, np.int64), np.asarray(y, np.int8), tuple(bounds),
                                np.asarray(score, np.float64),
                                {k: np.asarray(v, np.float64) for k, v in (branches or {}).items()})

"""§6.1: both arms restricted to the records both held out.

The shared records are the corpus rows in both arms' held-out slices, taken in corpus (canonical) order, the
order the released analysis used (`np.intersect1d` of the held-out positions). Each scorer is evaluated on them
under each arm's history: an online detector's stored scores restricted (its prefix is the arm's); a
batch-dependent detector under two batches — `slice`, its arm's whole held-out slice scored as one batch and
restricted afterwards, and `shared`, the shared records scored as their own batch under the same fitted model
(the batch-controlled comparison). A batch detector that is not batch-dependent has one value (`stream`: its
stored scores restricted). Margins between scorers carry paired block-bootstrap intervals on the shared records.

What is held fixed is the evaluated sample, not the model state: the online prefix and the batch detector's
training rows still differ between the arms.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from bench.assembly import records
from bench.assembly.analyses import bootstrap, metrics
from bench.assembly.analyses.common import Rescore, check_same_corpus, positions_of
from bench.errors import ConfigError

STREAM, SLICE, SHARED = "stream", "slice", "shared"  # where a score comes from (the batch it was computed in)


@dataclass(frozen=True)
class SharedRecords:
    rows: np.ndarray  # corpus rows held out by both arms, in corpus order
    y: np.ndarray
    positions: dict[str, np.ndarray]  # arm -> each shared row's position in that arm

    @property
    def records(self) -> int:
        return int(self.rows.size)


def shared_records(a: records.ScoredStream, b: records.ScoredStream) -> SharedRecords:
    rows = np.intersect1d(a.rows[a.test()], b.rows[b.test()])
    pa, pb = positions_of(a, rows), positions_of(b, rows)
    if not np.array_equal(a.y[pa], b.y[pb]):
        raise ConfigError(f"arms {a.arm!r} and {b.arm!r}: the shared records' labels differ between the score files")
    return SharedRecords(rows, a.y[pa].astype(np.int8), {a.arm: pa, b.arm: pb})


@dataclass(frozen=True)
class SharedCell:
    scorer: str
    history: str  # the arm whose history (prefix, training rows) produced the scores
    batch: str  # STREAM, SLICE or SHARED
    value: metrics.Scored


@dataclass(frozen=True)
class SharedResult:
    arms: tuple[str, str]
    shared: SharedRecords
    held_out: dict[str, int]  # arm -> held-out records
    cells: tuple[SharedCell, ...]
    intervals: tuple[bootstrap.SliceBootstrap, ...]  # one per (history arm, batch), margins between scorers

    def cell(self, scorer: str, history: str, batch: str) -> SharedCell:
        return next(c for c in self.cells if (c.scorer, c.history, c.batch) == (scorer, history, batch))

    def history_moves(self) -> dict[tuple[str, str], float]:
        """(scorer, batch) -> AP under the second arm's history minus under the first's, on the same records."""
        a, b = self.arms
        return {(c.scorer, c.batch): self.cell(c.scorer, b, c.batch).value.ap - c.value.ap
                for c in self.cells if c.history == a}


def _scores_per_batch(streams: dict[str, records.ScoredStream], sh: SharedRecords,
                      rescore: Rescore | None, batch_dependent: bool) -> dict[tuple[str, str], np.ndarray]:
    """(history arm, batch) -> the scorer's scores of the shared records."""
    out = {}
    for arm, s in streams.items():
        pos = sh.positions[arm]
        if not batch_dependent:
            out[(arm, STREAM)] = s.score[pos]
            continue
        if rescore is None:
            raise ConfigError(f"shared records: {s.detector!r} is batch-dependent; its rescoring needs the corpus "
                              "and the detector spec (or a rescore callable)")
        test_rows = s.rows[s.test()]
        slice_scores = rescore(arm, test_rows)
        out[(arm, SLICE)] = slice_scores[pos - s.bounds[1]]
        out[(arm, SHARED)] = rescore(arm, sh.rows)
    return out


def analyse(streams: dict[str, dict[str, records.ScoredStream]], *, rescore: dict[str, Rescore] | None = None,
            batch_dependent: frozenset[str] = frozenset(), pairs=None, resamples: int = bootstrap.RELEASED_RESAMPLES,
            seed: int = bootstrap.RELEASED_SEED) -> SharedResult:
    """`streams`: scorer -> arm -> its ScoredStream (two arms, one corpus). `batch_dependent` names the scorers
    scored under both batches through `rescore[scorer]`. `pairs`: the margins (default: every pair of scorers)."""
    flat = [s for per_arm in streams.values() for s in per_arm.values()]
    check_same_corpus(flat, "shared records")
    arms = tuple(next(iter(streams.values())))
    if len(arms) != 2 or any(tuple(v) != arms for v in streams.values()):
        raise ConfigError(f"shared records: every scorer needs the same two arms, got "
                          f"{ {k: list(v) for k, v in streams.items()} }")
    first = next(iter(streams.values()))
    sh = shared_records(first[arms[0]], first[arms[1]])
    per = {name: _scores_per_batch(v, sh, (rescore or {}).get(name), name in batch_dependent)
           for name, v in streams.items()}
    cells = tuple(SharedCell(name, arm, batch, metrics.scored(sh.y, s))
                  for name, v in per.items() for (arm, batch), s in v.items())
    return SharedResult(arms, sh, {a: first[a].n - first[a].bounds[1] for a in arms}, cells,
                        _intervals(per, sh, arms, pairs, resamples, seed))


def _intervals(per, sh: SharedRecords, arms, pairs, resamples, seed) -> tuple[bootstrap.SliceBootstrap, ...]:
    rule = bootstrap.block_rule(sh.y)
    dependent = any((arms[0], SLICE) in v for v in per.values())
    out = []
    for arm in arms:
        for batch in ((SLICE, SHARED) if dependent else (STREAM,)):
            # a batch-independent scorer joins every batch's comparison with its stored scores
            scores = {name: v.get((arm, batch), v.get((arm, STREAM))) for name, v in per.items()}
            chosen = pairs or list(itertools.combinations(scores, 2))
            out.append(bootstrap.bootstrap_slice(f"shared|{arm}|{batch}", sh.y, scores, chosen, rule=rule,
                                                 resamples=resamples, seed=seed))
    return tuple(out)


def tables(r: SharedResult) -> dict:
    """`shared_summary` (the shared records per arm pair), `shared_values` (every cell: AP beside chance,
    normalised lift, AUC), `shared_history` (each scorer's AP move between the two histories) and the
    bootstrap tables of the margins."""
    import pandas as pd

    summary = pd.DataFrame([{"arm_a": r.arms[0], "arm_b": r.arms[1], "shared_records": r.shared.records,
                             "shared_attacks": int(r.shared.y.sum()),
                             "prevalence": float(r.shared.y.mean()) if r.shared.records else float("nan"),
                             **{f"held_out_{a}": n for a, n in r.held_out.items()},
                             "overlap_share": r.shared.records / r.held_out[r.arms[0]]}])
    values = pd.DataFrame([{"scorer": c.scorer, "history": c.history, "batch": c.batch, **c.value.row()}
                           for c in r.cells])
    history = pd.DataFrame([{"scorer": s, "batch": b, f"ap_{r.arms[1]}_minus_{r.arms[0]}": d}
                            for (s, b), d in r.history_moves().items()])
    boot = bootstrap.tables(list(r.intervals))
    return {"shared_summary": summary, "shared_values": values, "shared_history": history,
            "shared_margins": boot["bootstrap_margins"]}

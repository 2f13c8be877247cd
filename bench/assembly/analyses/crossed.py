"""§11, first bullet: the crossed history × sample design, for an online detector (the design the paper names
and did not run).

For two arms A and B of one corpus, cell (h, s) evaluates the detector on arm s's held-out slice (its records in
s's order, scored prequentially as in a run) after a history presented in arm h's order. The history is the same
record set in every cell of a column: every record outside s's held-out slice, in h's order. So:
- the diagonal cells (h = s) are the arms' own runs (history = the arm's train + validation segments);
- within a column (fixed sample s), the two cells differ only in the *order* in which one set of history records
  was presented: their difference is the history (assembly-order) effect on that sample, measured on the whole
  sample and separately on its records shared with the other arm's held-out slice and its unshared ones;
- within a row (fixed history order h), the two cells differ in the evaluated sample and, necessarily, in the
  history's membership (the complement of each sample), so a row contrast is a sample-and-membership effect.

What it identifies: history's order effect on a fixed sample, and whether it is larger on the unshared records
than on the shared ones (the assumption the paper's shared-record attribution rests on). Per-record score changes
between the two histories are reported beside AP and AUC, because an unshared subset may hold one class (AP
undefined), while a score change is always defined.

What it does not identify: the effect of *which* records form the history (membership is tied to the sample), a
batch detector's training-row effect (the shared-record analysis holds that), or any effect of the split rule
itself; and it is one draw of each order: a deterministic detector gives exact cells, a seeded one needs seeds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from bench.assembly import records
from bench.assembly.analyses import metrics
from bench.errors import ConfigError

DESIGN_NOTE = (
    "Crossed history × sample: cell (h, s) scores arm s's held-out records, in s's order, after every other record "
    "presented in arm h's order. Down a column the history's records are identical and only their order differs, "
    "so the column contrast is the history-order effect on one fixed sample, shown on the records both arms held "
    "out and on the rest. Along a row the sample and the history's membership change together, so a row contrast "
    "is not a pure sample effect. The design does not separate which records form the history from the sample, "
    "and does not apply to a batch detector's training rows.")
SUBSETS = ("all", "shared", "unshared")


@dataclass(frozen=True)
class CellScores:
    history: str
    sample: str
    rows: np.ndarray  # the sample's corpus rows, in the sample arm's order
    y: np.ndarray
    score: np.ndarray
    shared: np.ndarray  # bool: the record is also in the other arm's held-out slice


@dataclass(frozen=True)
class CrossedCell:
    history: str
    sample: str
    subset: str  # SUBSETS
    value: metrics.Scored


@dataclass(frozen=True)
class HistoryEffect:
    """On sample s: the other arm's history order minus s's own, per subset of the sample."""

    sample: str
    subset: str
    records: int
    ap_change: float
    auc_change: float
    mean_abs_score_change: float
    max_abs_score_change: float


@dataclass(frozen=True)
class CrossedResult:
    detector: str
    arms: tuple[str, str]
    cells: tuple[CrossedCell, ...]
    effects: tuple[HistoryEffect, ...]
    design_note: str = DESIGN_NOTE

    def effect(self, sample: str, subset: str) -> HistoryEffect:
        return next(e for e in self.effects if (e.sample, e.subset) == (sample, subset))


def history_rows(history: records.Arm, sample_rows: np.ndarray) -> np.ndarray:
    """The history arm's rows outside the sample, in the history arm's order."""
    return history.rows[~np.isin(history.rows, sample_rows)]


def run_cell(make: Callable[[], object], corpus: records.Corpus, history: records.Arm, sample: records.Arm,
             other: records.Arm, rule: records.SplitRule) -> CellScores:
    """One cell: a fresh detector learns the history (its scores discarded), then scores the sample."""
    s_rows = sample.rows[rule.bounds(len(sample.rows))[1]:]
    o_rows = other.rows[rule.bounds(len(other.rows))[1]:]
    det = make()
    hist = history_rows(history, s_rows)
    if hist.size:
        det.score_learn(corpus.X[hist])
    out = det.score_learn(corpus.X[s_rows]).score
    return CellScores(history.name, sample.name, s_rows, corpus.y[s_rows].astype(np.int8),
                      np.asarray(out, np.float64), np.isin(s_rows, o_rows))


def _subset(c: CellScores, subset: str) -> np.ndarray:
    return {"all": np.ones(c.rows.size, bool), "shared": c.shared, "unshared": ~c.shared}[subset]


def crossed(make: Callable[[], object], corpus: records.Corpus, a: records.Arm, b: records.Arm,
            rule: records.SplitRule = records.SplitRule(), detector: str = "detector") -> CrossedResult:
    """The 2 × 2 design for the online detector `make()` builds (a fresh one per cell)."""
    if len(a.rows) != len(b.rows) or not np.array_equal(np.sort(a.rows), np.sort(b.rows)):
        raise ConfigError(f"crossed design: arms {a.name!r} and {b.name!r} must hold the same records")
    arms = {a.name: a, b.name: b}
    other = {a.name: b, b.name: a}
    scores = {(h, s): run_cell(make, corpus, arms[h], arms[s], other[s], rule) for s in arms for h in arms}
    cells = tuple(CrossedCell(h, s, sub, metrics.scored(c.y[m], c.score[m]))
                  for (h, s), c in scores.items() for sub in SUBSETS for m in [_subset(c, sub)])
    effects = []
    for s in arms:
        own, cross = scores[(s, s)], scores[(other[s].name, s)]
        for sub in SUBSETS:
            m = _subset(own, sub)
            d = np.abs(cross.score[m] - own.score[m])
            va, vb = metrics.scored(own.y[m], own.score[m]), metrics.scored(own.y[m], cross.score[m])
            effects.append(HistoryEffect(s, sub, int(m.sum()), vb.ap - va.ap, vb.auc - va.auc,
                                         float(d.mean()) if d.size else float("nan"),
                                         float(d.max()) if d.size else float("nan")))
    return CrossedResult(detector, (a.name, b.name), cells, tuple(effects))


def tables(r: CrossedResult) -> dict:
    """`crossed_cells` (history × sample × subset: AP beside chance, normalised lift, AUC), `crossed_history`
    (the history-order effect per sample and subset) and `crossed_design` (what the design identifies)."""
    import pandas as pd

    cells = pd.DataFrame([{"detector": r.detector, "history": c.history, "sample": c.sample, "subset": c.subset,
                           **c.value.row()} for c in r.cells])
    effects = pd.DataFrame([{"detector": r.detector, **e.__dict__} for e in r.effects])
    return {"crossed_cells": cells, "crossed_history": effects,
            "crossed_design": pd.DataFrame([{"design_note": r.design_note}])}

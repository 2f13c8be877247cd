"""§6.3: a batch detector's scores of fixed records inside different batches, with the model held fixed.

- The ladder (released `scripts/run_review_analyses.py`): one arm's held-out records scored by the arm's fitted
  model inside batches of growing size, each the held-out slice preceded by the last part of the validation
  segment: none, a quarter, a half and all of it (240,000, 300,000, 360,000 and 480,000 records on the paper's
  corpus; the last is the released validation + test call). AP and AUC of the same records at each rung, and
  the span (largest minus smallest).
- Composition at equal size (released `scripts/run_ecod_composition.py`): the records both arms held out, scored
  by the first arm's fitted model inside the first arm's held-out slice and inside the second arm's (equal
  size, different content).
- A contrast's margin against the span: whether it (and its interval's near bound) exceeds the batch effect.

A pointwise detector (IForest) gives identical scores at every rung; a batch-dependent one (ECOD) does not.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from bench.assembly import records
from bench.assembly.analyses import bootstrap, metrics
from bench.assembly.analyses.common import Rescore
from bench.assembly.analyses.shared import shared_records
from bench.assembly.detectors import batch_record

RELEASED_LADDER = (0.0, 0.25, 0.5, 1.0)  # share of the validation segment scored ahead of the held-out slice


@dataclass(frozen=True)
class Rung:
    prepended: int  # validation records ahead of the evaluated ones in the batch
    batch: records.BatchRecord  # size and digest of the batch's corpus rows, in scored order
    value: metrics.Scored  # of the evaluated records only
    max_abs_change: float  # largest change of an evaluated record's score from the first rung


@dataclass(frozen=True)
class Ladder:
    scorer: str
    model_arm: str
    evaluated: int
    rungs: tuple[Rung, ...]

    @property
    def span_ap(self) -> float:
        aps = [r.value.ap for r in self.rungs]
        return max(aps) - min(aps)

    @property
    def span_auc(self) -> float:
        aucs = [r.value.auc for r in self.rungs]
        return max(aucs) - min(aucs)

    @property
    def scores_identical(self) -> bool:
        return all(r.max_abs_change == 0.0 for r in self.rungs)


def ladder(rescore: Rescore, stream: records.ScoredStream, fractions=RELEASED_LADDER,
           scorer: str | None = None) -> Ladder:
    """The arm's held-out records scored inside growing batches by the arm's model (`rescore(arm, rows)`)."""
    i_tr, i_va = stream.bounds
    held = stream.rows[i_va:]
    y = stream.y[i_va:]
    rungs, first = [], None
    for f in fractions:
        k = int(round(f * (i_va - i_tr)))
        rows = stream.rows[i_va - k:]
        s = np.asarray(rescore(stream.arm, rows), np.float64)[k:]
        first = s if first is None else first
        rungs.append(Rung(k, batch_record(rows), metrics.scored(y, s), float(np.max(np.abs(s - first)))))
    return Ladder(scorer or stream.detector, stream.arm, int(held.size), tuple(rungs))


@dataclass(frozen=True)
class Composition:
    scorer: str
    model_arm: str
    batch_arms: tuple[str, str]
    batch_size: tuple[int, int]
    differing: int  # records in which the two batches differ
    values: tuple[metrics.Scored, metrics.Scored]  # the shared records under each batch

    @property
    def delta_ap(self) -> float:
        return self.values[1].ap - self.values[0].ap

    @property
    def delta_auc(self) -> float:
        return self.values[1].auc - self.values[0].auc


def composition(rescore: Rescore, a: records.ScoredStream, b: records.ScoredStream,
                scorer: str | None = None) -> Composition:
    """The records both arms held out, scored by arm a's model inside a's held-out slice and inside b's."""
    sh = shared_records(a, b)
    values = []
    for s in (a, b):
        batch = s.rows[s.test()]
        scores = np.asarray(rescore(a.arm, batch), np.float64)
        values.append(metrics.scored(sh.y, scores[sh.positions[s.arm] - s.bounds[1]]))
    sizes = (a.n - a.bounds[1], b.n - b.bounds[1])
    return Composition(scorer or a.detector, a.arm, (a.arm, b.arm), sizes, int(sizes[1] - sh.records),
                       (values[0], values[1]))


@dataclass(frozen=True)
class MarginVsSpan:
    contrast: str
    margin: float
    near_bound: float  # the interval bound nearer 0 (NaN without an interval)
    span: float

    @property
    def exceeds(self) -> bool:
        return abs(self.margin) > self.span

    @property
    def bound_exceeds(self) -> bool:
        return not math.isnan(self.near_bound) and self.near_bound > self.span


def against_span(span: float, margins: dict[str, float | bootstrap.Margin]) -> tuple[MarginVsSpan, ...]:
    """Each contrast's margin (a float, or a bootstrap Margin whose primary interval gives the near bound)
    against a batch effect's span."""
    out = []
    for name, m in margins.items():
        if isinstance(m, bootstrap.Margin):
            iv = m.intervals[m.primary_block]
            near = min(abs(iv.lo), abs(iv.hi)) if iv.excludes(0.0) else 0.0
            out.append(MarginVsSpan(name, m.point, near, span))
        else:
            out.append(MarginVsSpan(name, float(m), math.nan, span))
    return tuple(out)


def tables(ladders=(), compositions=(), comparisons=()) -> dict:
    """`batch_ladder` (per rung: batch size, AP beside chance, AUC, largest score change), `batch_span`,
    `batch_composition` and `batch_margin_vs_span`."""
    import pandas as pd

    rungs = [{"scorer": ld.scorer, "model_arm": ld.model_arm, "evaluated": ld.evaluated, "prepended": r.prepended,
              "batch_size": r.batch.size, "batch_sha256": r.batch.ids_sha256, **r.value.row(),
              "max_abs_score_change": r.max_abs_change} for ld in ladders for r in ld.rungs]
    spans = [{"scorer": ld.scorer, "model_arm": ld.model_arm, "span_ap": ld.span_ap, "span_auc": ld.span_auc,
              "scores_identical": ld.scores_identical} for ld in ladders]
    comps = [{"scorer": c.scorer, "model_arm": c.model_arm, "batch_a": c.batch_arms[0], "batch_b": c.batch_arms[1],
              "batch_size": c.batch_size[0], "differing": c.differing, "ap_a": c.values[0].ap,
              "ap_b": c.values[1].ap, "delta_ap": c.delta_ap, "delta_auc": c.delta_auc} for c in compositions]
    vs = [{"contrast": m.contrast, "margin": m.margin, "near_bound": m.near_bound, "span": m.span,
           "exceeds": m.exceeds, "bound_exceeds": m.bound_exceeds} for m in comparisons]
    return {"batch_ladder": pd.DataFrame(rungs), "batch_span": pd.DataFrame(spans),
            "batch_composition": pd.DataFrame(comps), "batch_margin_vs_span": pd.DataFrame(vs)}

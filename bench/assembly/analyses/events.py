"""§11, second bullet: range-based precision and recall over attack runs (Tatbul, Lee, Zdonik, Alam, Gottschlich:
"Precision and Recall for Time Series", NeurIPS 2018), beside flow-wise AP.

Real ranges are the stream's attack runs, predicted ranges the runs of alerts. For a real range R and the
predicted ranges P:
  recall(R) = α · [R overlaps some P] + (1 − α) · γ(R) · Σ_P ω(R, R ∩ P)
and for a predicted range P: precision(P) = γ(P) · Σ_R ω(P, P ∩ R) (no existence term). Recall and precision
average over the real and the predicted ranges. ω(A, O) = Σ_{i in A, i in O} δ(i, |A|) / Σ_{i in A} δ(i, |A|), with
the positional bias δ: flat 1, front |A| − i + 1, back i, middle i up to the middle and |A| − i + 1 after it
(i = 1 … |A| the position inside A). γ, the cardinality factor, is 1 when one range overlaps the other side at
most once, else 1/x for x overlapping ranges (`reciprocal`; `one` disables it). Defaults: α = 0, flat bias,
reciprocal cardinality — the setting in which range-based recall of one run is the share of it alerted, split
among as many alert runs as cover it.

No alert run: precision is NaN; no attack run: recall is NaN. `curve` sweeps thresholds (the scores' quantiles)
and gives the area under the range-based precision–recall steps (Σ Δrecall · precision, as AP's), so an ordering of
scorers can be read under both metrics.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

import numpy as np

from bench.errors import ConfigError


class Bias(enum.Enum):
    FLAT = "flat"
    FRONT = "front"
    BACK = "back"
    MIDDLE = "middle"


class Cardinality(enum.Enum):
    RECIPROCAL = "reciprocal"  # γ = 1 / (number of overlapping ranges)
    ONE = "one"  # γ = 1: fragmentation not penalised


@dataclass(frozen=True)
class RangeParams:
    alpha: float = 0.0  # weight of the existence reward in recall
    bias: Bias = Bias.FLAT
    cardinality: Cardinality = Cardinality.RECIPROCAL

    def __post_init__(self):
        if not 0.0 <= self.alpha <= 1.0:
            raise ConfigError(f"range-based recall alpha {self.alpha!r}: expected a number in [0, 1]")


@dataclass(frozen=True)
class RangePR:
    precision: float
    recall: float
    real_ranges: int
    predicted_ranges: int

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r > 0 else (0.0 if p == p and r == r else math.nan)


def ranges(flags) -> tuple[np.ndarray, np.ndarray]:
    """Starts and (exclusive) ends of the runs of 1 in a 0/1 sequence."""
    edges = np.diff(np.concatenate([[0], np.asarray(flags, np.int8), [0]]))
    return np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)


def _bias_weights(length: np.ndarray, i: np.ndarray, bias: Bias) -> np.ndarray:
    """δ(i, L) for positions i = 1 … L (arrays of equal shape)."""
    if bias is Bias.FLAT:
        return np.ones(i.shape)
    if bias is Bias.FRONT:
        return (length - i + 1).astype(np.float64)
    if bias is Bias.BACK:
        return i.astype(np.float64)
    return np.where(i <= length / 2, i, length - i + 1).astype(np.float64)


def _side(target: np.ndarray, other: np.ndarray, params: RangeParams, alpha: float) -> tuple[float, int]:
    """Mean over `target`'s ranges of α · existence + (1 − α) · γ · ω against `other`'s ranges."""
    starts, ends = ranges(target)
    if starts.size == 0:
        return math.nan, 0
    lengths = ends - starts
    owner = np.repeat(np.arange(starts.size), lengths)  # range of each covered position
    pos = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths) + np.repeat(starts, lengths)
    i = pos - np.repeat(starts, lengths) + 1
    w = _bias_weights(np.repeat(lengths, lengths), i, params.bias)
    hit = np.asarray(other, np.int8)[pos] == 1
    total = np.bincount(owner, w, starts.size)
    covered = np.bincount(owner, w * hit, starts.size)
    o_starts, _ = ranges(other)
    run_id = np.zeros(len(other) + 1, np.int64)
    run_id[o_starts + 1] = 1
    run_id = np.cumsum(run_id)[1:] * (np.asarray(other, np.int8) == 1)  # the other side's run of each position
    first = hit & ((i == 1) | (run_id[pos] != run_id[np.maximum(pos - 1, 0)]))
    x = np.bincount(owner, first, starts.size)  # distinct overlapping ranges
    gamma = np.ones(starts.size) if params.cardinality is Cardinality.ONE else 1.0 / np.maximum(x, 1)
    score = alpha * (x > 0) + (1 - alpha) * gamma * covered / total
    return float(score.mean()), int(starts.size)


def range_pr(y, alert, params: RangeParams = RangeParams()) -> RangePR:
    y, alert = np.asarray(y, np.int8), np.asarray(alert, np.int8)
    if y.shape != alert.shape:
        raise ConfigError(f"range-based precision/recall: {alert.size} alerts for {y.size} records")
    recall, n_real = _side(y, alert, params, params.alpha)
    precision, n_pred = _side(alert, y, params, 0.0)
    return RangePR(precision, recall, n_real, n_pred)


@dataclass(frozen=True)
class RangeCurve:
    thresholds: np.ndarray  # decreasing
    precision: np.ndarray
    recall: np.ndarray

    @property
    def area(self) -> float:
        """Σ over thresholds (decreasing) of Δrecall · precision; NaN precision (no alert) counts as 0 weight."""
        r = np.concatenate([[0.0], self.recall])
        p = np.nan_to_num(self.precision, nan=0.0)
        return float(np.sum(np.clip(np.diff(r), 0, None) * p))


def curve(y, score, params: RangeParams = RangeParams(), points: int = 100) -> RangeCurve:
    """Range-based precision and recall with alert = score ≥ t, t over `points` quantiles of the scores."""
    score = np.asarray(score, np.float64)
    t = np.unique(np.quantile(score, np.linspace(0, 1, points)))[::-1]
    prs = [range_pr(y, score >= v, params) for v in t]
    return RangeCurve(t, np.array([p.precision for p in prs]), np.array([p.recall for p in prs]))


def tables(rows: list[dict]) -> dict:
    """`events`: one row per (slice, scorer) as the caller assembles them: flow-wise AP and chance beside the
    range-based precision, recall and F1 at the scorer's threshold and the range-based curve's area."""
    import pandas as pd

    return {"events": pd.DataFrame(rows)}


def evaluate(y, score, threshold: float, params: RangeParams = RangeParams(), points: int = 100) -> dict:
    """One scorer on one slice: flow-wise AP beside the chance level, and the range-based metrics at `threshold`
    (alert = score ≥ threshold) and over the threshold sweep."""
    from bench.assembly.analyses import metrics

    y = np.asarray(y, np.int8)
    at = range_pr(y, np.asarray(score) >= threshold, params)
    return {"prevalence": float(y.mean()), "flow_ap": metrics.ap(y, score), "threshold": threshold,
            "range_precision": at.precision, "range_recall": at.recall, "range_f1": at.f1,
            "real_ranges": at.real_ranges, "predicted_ranges": at.predicted_ranges,
            "range_pr_area": curve(y, score, params, points).area, "alpha": params.alpha, "bias": params.bias.value,
            "cardinality": params.cardinality.value}

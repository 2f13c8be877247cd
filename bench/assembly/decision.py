"""Decisions on detector scores as the stream-assembly paper's released code made them.

- The paper's detector alerts when its score reaches Elkan's prior-inclusive cutoff
  t = C_FP (1 − ρ) / (C_FP (1 − ρ) + C_FN ρ), with the released costs C_FP = 1, C_FN = 10 and the configured
  incident prior ρ (`src/bocpd/slo.py: posterior_threshold`; the paper's text gives the cost-only
  C_FP / (C_FP + C_FN) instead). ρ = 0.05 gives 0.655172, ρ = 0.22 gives 0.261745.
- The baselines alert at the threshold maximising F1 on the validation slice, Elkan's cutoff when the slice has
  one class (`run_streaming_eval.py: _threshold_from_validation`).
- Detection delay is counted in records, not time (`src/eval/latency.py`): an attack run starts at an attack
  record that follows a benign one (or opens the stream); its delay is the number of records from its start to
  its first alert. Released details, kept: the window reaches one record past the run (an alert on the first
  benign record after the run detects it, with delay = the run's length); a closed run without an alert counts
  as undetected (NaN); a run still open at the stream's end counts only if it was detected — undetected, it is
  left out. Summaries are over detected runs only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bench.errors import ConfigError, DatasetError


@dataclass(frozen=True)
class Costs:
    false_positive: float = 1.0
    false_negative: float = 10.0


RELEASED_COSTS = Costs()


def elkan_cutoff(prior: float, costs: Costs = RELEASED_COSTS) -> float:
    """The score at which alerting costs less than staying silent, for incident prior `prior`."""
    if not 0 < prior < 1:
        raise ConfigError(f"incident prior {prior!r}: expected a probability strictly between 0 and 1")
    if costs.false_positive <= 0 or costs.false_negative <= 0:
        raise ConfigError(f"costs {costs}: expected both positive")
    benign = costs.false_positive * (1.0 - prior)
    return benign / (benign + costs.false_negative * prior)


def validation_f1_threshold(y_val, scores_val, default: float) -> float:
    """The released baselines' threshold: the score maximising F1 on the validation slice (the first of ties,
    over scikit-learn's precision–recall thresholds); `default` when that slice holds one class or no records."""
    from sklearn.metrics import precision_recall_curve

    y_val, scores_val = np.asarray(y_val, dtype=int), np.asarray(scores_val, dtype=float)
    if len(scores_val) == 0 or len(np.unique(y_val)) < 2:
        return float(default)
    precision, recall, thresholds = precision_recall_curve(y_val, scores_val)
    f1 = 2 * precision[:-1] * recall[:-1] / np.maximum(precision[:-1] + recall[:-1], 1e-12)
    return float(thresholds[int(np.nanargmax(f1))])


@dataclass(frozen=True)
class RunDelays:
    """Every attack run of a stream: where it starts, how long it is, and its detection delay in records (NaN:
    no alert in its window). `open_at_end`: the last run was still running when the stream ended."""

    start: np.ndarray  # int64 [runs]
    length: np.ndarray  # int64 [runs]
    delay: np.ndarray  # float64 [runs]
    open_at_end: bool

    def released(self) -> np.ndarray:
        """The delays the released `detection_latencies` returns: every closed run (NaN when undetected), and
        the open run only when it was detected."""
        keep = np.ones(len(self.delay), dtype=bool)
        if self.open_at_end and np.isnan(self.delay[-1]):
            keep[-1] = False
        return self.delay[keep]


def detection_delays(y, alert) -> RunDelays:
    y, alert = _binary(y, "labels"), _binary(alert, "alerts")
    if y.shape != alert.shape:
        raise DatasetError(f"detection delay: {len(y)} labels but {len(alert)} alerts")
    n = len(y)
    before = np.r_[0, y[:-1]]
    starts = np.flatnonzero((y == 1) & (before == 0))
    closes = np.flatnonzero((y == 0) & (before == 1))  # the first benign record after each closed run
    open_at_end = len(starts) > len(closes)
    ends = np.r_[closes, n] if open_at_end else closes
    last = np.minimum(ends, n - 1)  # released: the closing benign record is still in the run's window
    alerts = np.flatnonzero(alert == 1)
    nxt = np.searchsorted(alerts, starts)  # the first alert at or after each run's start
    first_alert = np.full(len(starts), n)
    has = nxt < len(alerts)
    first_alert[has] = alerts[nxt[has]]
    detected = first_alert <= last
    delay = np.where(detected, first_alert - starts, np.nan).astype(np.float64)
    return RunDelays(start=starts.astype(np.int64), length=(ends - starts).astype(np.int64), delay=delay,
                     open_at_end=bool(open_at_end))


@dataclass(frozen=True)
class DelaySummary:
    mean: float
    p50: float
    p95: float
    p99: float
    detected: int
    undetected: int  # closed runs without an alert (an undetected open run is not counted, as released)


def summarise(delays: RunDelays) -> DelaySummary:
    kept = delays.released()
    finite = kept[np.isfinite(kept)]
    undetected = int(np.isnan(kept).sum())
    if len(finite) == 0:
        return DelaySummary(np.nan, np.nan, np.nan, np.nan, 0, undetected)
    p50, p95, p99 = np.percentile(finite, [50, 95, 99])
    return DelaySummary(float(finite.mean()), float(p50), float(p95), float(p99), len(finite), undetected)


def _binary(values, what: str) -> np.ndarray:
    arr = np.asarray(values)
    if arr.ndim != 1 or not np.isin(arr, (0, 1)).all():
        raise DatasetError(f"detection delay: {what} must be a 1-D array of 0/1 (or booleans)")
    return arr.astype(np.int8)

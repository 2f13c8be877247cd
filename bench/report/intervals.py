"""Chance levels, bootstrap intervals and seed summaries for per-record scores (stream-assembly paper, §5 and §11).

- Chance level of AP: `bench.metrics.expected_random_ap`, the mean AP of a uniformly random ranking. It is not the
  prevalence k/n on small test sets (n = 200, k = 20: 0.122, not 0.100), so tables show it next to p.
- Intervals: a moving-block bootstrap (Künsch 1989) over the records in stream (timestamp) order where one exists:
  attacks come in contiguous runs, and resampling single records would treat a 70-record run as 70 independent
  draws and give intervals that are too narrow. Blocks of `block` consecutive records (default 100, the paper's;
  `run_length_stats` reports the runs that justify it), starts drawn uniformly from the n − block + 1 possible
  ones, ⌈n / block⌉ blocks per resample, the last cut to length. Without an order: a stratified bootstrap (normals
  and anomalies resampled separately, so every resample holds both classes). 1000 resamples, 2.5/97.5 percentiles.
- Differences between two strategies scored on the same records use the same resample for both (paired: `r_samples`
  draws a test set's resamples from the seed and the task alone), so the interval covers the difference, not two
  overlapping single values.

A resample is a column of record counts; the statistics take a whole [n, B] block of columns at once (one sort of
the scores serves every resample: `bench.report.bootstrap.weighted_auc` for ROC-AUC, `weighted_ap` here), and the
resamples are processed in chunks sized so that the count matrix stays near `_CHUNK_CELLS` cells whatever n.
The intervals cover the sampling of the evaluated records only, not seeds, training data or task order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from bench.errors import ConfigError
from bench.report.bootstrap import weighted_auc

BLOCK = 100  # records per block: the stream-assembly paper's, longer than its p90 attack run
N_BOOT = 1000
_CHUNK_CELLS = 1 << 24  # count-matrix cells per chunk of resamples (~128 MB of float64 temporaries)
METRICS = ("roc_auc", "ap", "npr_auc")


def run_lengths(labels) -> np.ndarray:
    """Lengths of the maximal runs of consecutive anomalous records, in stream order."""
    y = np.asarray(labels).astype(bool).ravel()
    edges = np.diff(np.concatenate(([0], y.view(np.int8), [0])))
    return np.flatnonzero(edges == -1) - np.flatnonzero(edges == 1)


def run_length_stats(labels) -> dict:
    """Count, median, 90th percentile, max and mean of the anomaly runs: the block must exceed the typical run."""
    runs = run_lengths(labels)
    if not runs.size:
        return {"runs": 0, "median": math.nan, "p90": math.nan, "max": 0, "mean": math.nan}
    return {"runs": int(runs.size), "median": float(np.median(runs)), "p90": float(np.percentile(runs, 90)),
            "max": int(runs.max()), "mean": float(runs.mean())}


def stream_blocks(streams: list) -> tuple[int, int]:
    """(block, sensitivity block) of one scenario, from the labels of each of its test sets in stream order: the
    stream-assembly paper's block is max(BLOCK, p90 of the attack-run lengths + 1), and its sensitivity run uses
    the longest run + 1. The runs of all test sets are pooled (each test set is resampled on its own, so a run
    never spans two). Without any attack run both are BLOCK."""
    runs = np.concatenate([run_lengths(y) for y in streams]) if streams else np.zeros(0, dtype=int)
    if not runs.size:
        return BLOCK, BLOCK
    return max(BLOCK, int(math.ceil(np.percentile(runs, 90))) + 1), int(runs.max()) + 1


def block_weights(n: int, block: int, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """[n, n_boot] counts of each stream position in moving-block resamples (each column sums to n)."""
    if block >= n:
        raise ConfigError(f"block bootstrap: a block of {block} records on {n} records resamples nothing "
                          f"(every resample is the whole sequence); use a shorter block")
    return _coverage(n, block, rng.integers(0, n - block + 1, size=(n_boot, -(-n // block))))


def _coverage(n: int, block: int, starts: np.ndarray) -> np.ndarray:
    """[n, B] counts of the resamples whose blocks begin at `starts` [B, ⌈n / block⌉] (the last block cut so
    that each resample holds n records)."""
    n_boot, n_blocks = starts.shape
    lengths = np.full(n_blocks, block)
    lengths[-1] = n - block * (n_blocks - 1)
    # +1 where a block starts, −1 just after it ends; the running sum down each column is then the coverage.
    cols = np.arange(n_boot)[:, None]
    up = np.bincount((starts * n_boot + cols).ravel(), minlength=(n + 1) * n_boot)
    down = np.bincount(((starts + lengths) * n_boot + cols).ravel(), minlength=(n + 1) * n_boot)
    diff = (up - down).astype(np.int32).reshape(n + 1, n_boot)[:n]
    return np.cumsum(diff, axis=0, dtype=np.int32)


def stratified_weights(labels: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """[n, n_boot] counts of an IID bootstrap drawn within each class separately (class sizes kept)."""
    flat = []
    for members in (np.flatnonzero(labels), np.flatnonzero(~labels)):
        if not members.size:
            continue
        picks = members[rng.integers(0, members.size, size=(n_boot, members.size))]
        flat.append((picks * n_boot + np.arange(n_boot)[:, None]).ravel())
    counts = np.bincount(np.concatenate(flat), minlength=labels.size * n_boot)
    return counts.astype(np.int32).reshape(labels.size, n_boot)


def weighted_ap(scores: np.ndarray, positive: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Average precision (as `bench.metrics.normalized_pr_auc`: tied scores form one threshold) of `scores` [n]
    for every column of `weights` [n, B]; one descending sort serves all B resamples.

    Only thresholds whose tie group holds a positive add to AP, so the records are summed segment by segment up
    to those thresholds (one pass, no [n, B] running sum)."""
    order = np.argsort(scores, kind="stable")[::-1]
    ranked, is_pos = scores[order], positive[order]
    ends = np.flatnonzero(np.append(ranked[1:] != ranked[:-1], True))  # last position of each tie group
    pos_at = np.flatnonzero(is_pos)
    group_end = ends[np.searchsorted(ends, pos_at)]  # the threshold at which each positive is counted
    thresholds, first_pos = np.unique(group_end, return_index=True)
    w = weights[order[: thresholds[-1] + 1]]
    drawn = np.cumsum(np.add.reduceat(w, np.r_[0, thresholds[:-1] + 1], axis=0), axis=0, dtype=np.float64)
    gained = np.add.reduceat(w[pos_at], first_pos, axis=0).astype(np.float64)
    true_pos = np.cumsum(gained, axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (gained * np.where(gained > 0, true_pos / drawn, 0.0)).sum(0) / true_pos[-1]


def _statistic(metric: str, scores: np.ndarray, labels: np.ndarray, weights: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        if metric == "roc_auc":
            return weighted_auc(scores, labels, weights)
        ap = weighted_ap(scores, labels, weights)
        if metric == "ap":
            return ap
        p = weights[labels].sum(0) / weights.sum(0)
        return (ap - p) / (1 - p)


@dataclass(frozen=True)
class Interval:
    value: float  # the statistic on the records as they are
    low: float
    high: float
    method: str  # "block" | "stratified"
    block: int | None  # records per block (block bootstrap only)
    n_boot: int
    undefined: int  # resamples without both classes (left out of the percentiles)


def _prepared(labels, scores: list, order) -> tuple[np.ndarray, list[np.ndarray]]:
    labels = np.asarray(labels).astype(bool).ravel()
    scores = [np.asarray(s, dtype=np.float64).ravel() for s in scores]
    if any(s.shape != labels.shape for s in scores):
        raise ConfigError(f"bootstrap: {labels.size} labels but scores of {[s.size for s in scores]} records")
    if labels.all() or not labels.any():
        raise ConfigError(f"bootstrap: the {labels.size} records hold one class only; ROC-AUC and AP need both")
    if order is not None:
        order = np.argsort(np.asarray(order).ravel(), kind="stable")
        if order.size != labels.size:
            raise ConfigError(f"bootstrap: {order.size} timestamps for {labels.size} records")
        labels, scores = labels[order], [s[order] for s in scores]
    return labels, scores


def _samples(metric: str, labels: np.ndarray, scores: np.ndarray, timestamps, block: int, n_boot: int,
             seed: int) -> np.ndarray:
    """[n_boot] replicates of metric(scores) over resampled records."""
    if metric not in METRICS:
        raise ConfigError(f"unknown bootstrap metric {metric!r} (valid: {', '.join(METRICS)})")
    if block < 1 or n_boot < 1:
        raise ConfigError(f"bootstrap needs block ≥ 1 and n_boot ≥ 1, got block={block}, n_boot={n_boot}")
    rng = np.random.default_rng(seed)
    chunk = max(1, min(n_boot, _CHUNK_CELLS // labels.size))
    out = []
    for start in range(0, n_boot, chunk):
        b = min(chunk, n_boot - start)
        weights = block_weights(labels.size, block, b, rng) if timestamps is not None else \
            stratified_weights(labels, b, rng)
        out.append(_statistic(metric, scores, labels, weights))
    return np.concatenate(out)


def _interval(metric, labels, scores, timestamps, block, n_boot, seed, level) -> Interval:
    samples = _samples(metric, labels, scores, timestamps, block, n_boot, seed)
    value = _statistic(metric, scores, labels, np.ones((labels.size, 1)))[0]
    finite = samples[np.isfinite(samples)]
    low, high = np.percentile(finite, [50 * (1 - level), 50 * (1 + level)]) if finite.size else (np.nan,) * 2
    return Interval(float(value), float(low), float(high), "block" if timestamps is not None else "stratified",
                    block if timestamps is not None else None, n_boot, int(samples.size - finite.size))


def interval(labels, scores, timestamps=None, metric: str = "roc_auc", block: int = BLOCK, n_boot: int = N_BOOT,
             seed: int = 0, level: float = 0.95) -> Interval:
    """Percentile bootstrap interval of `metric` ("roc_auc", "ap" or "npr_auc") over the records: block bootstrap
    in the order of `timestamps` when given (ties keep the records' order), stratified bootstrap otherwise."""
    labels, (scores,) = _prepared(labels, [scores], timestamps)
    return _interval(metric, labels, scores, timestamps, block, n_boot, seed, level)


def r_samples(scores: dict, labels: dict, n_tasks: int, timestamps: dict | None = None, metric: str = "roc_auc",
              block: int = BLOCK, n_boot: int = N_BOOT, seed: int = 0) -> np.ndarray:
    """[n_boot, N, N] bootstrap replicates of a run's R matrix (NaN where nothing was evaluated).

    `scores[(i, j)]`: per-record scores of task j's test set after step i; `labels[j]` (and `timestamps[j]` for the
    block bootstrap) describe that test set. One resample of task j's records serves every cell of column j, as
    the run scored the same records at every step, and it is drawn from (seed, j) alone: two strategies evaluated
    on the same test sets with the same seed get the same resamples, so differences of their summaries are paired.
    """
    out = np.full((n_boot, n_tasks, n_tasks), np.nan)
    for j in range(n_tasks):
        steps = sorted(i for (i, jj) in scores if jj == j)
        if not steps:
            continue
        stamps = None if timestamps is None else timestamps.get(j)
        y, cells = _prepared(labels[j], [scores[(i, j)] for i in steps], stamps)
        rng = np.random.default_rng([seed, j])
        chunk = max(1, min(n_boot, _CHUNK_CELLS // y.size))
        for start in range(0, n_boot, chunk):
            b = min(chunk, n_boot - start)
            weights = block_weights(y.size, block, b, rng) if stamps is not None else stratified_weights(y, b, rng)
            for i, s in zip(steps, cells):
                out[start:start + b, i, j] = _statistic(metric, s, y, weights)
    return out


def seed_summary(values: dict) -> dict:
    """Mean and sample sd of one number over seeds, with every seed's value listed ({seed: value})."""
    seeds = sorted(values)
    v = np.array([values[s] for s in seeds], dtype=float)
    return {"mean": float(v.mean()), "sd": float(v.std(ddof=1)) if v.size > 1 else math.nan, "n_seeds": v.size,
            "values": {s: float(values[s]) for s in seeds}}


def placement_flips(values: dict) -> dict:
    """Which orderings between entries (strategies, models...) are not the same at every seed.

    `values` is {entry: {seed: value}} over the same seeds. A pair whose order reverses between seeds, or ties
    at some seed, is listed in "flips" and carries no placement; "stable" is True only when no pair flips."""
    entries = list(values)
    seeds = sorted(values[entries[0]]) if entries else []
    if any(sorted(values[e]) != seeds for e in entries):
        raise ConfigError("placement_flips: every entry needs a value for the same seeds")
    table = np.array([[values[e][s] for s in seeds] for e in entries], dtype=float)  # [entries, seeds]
    signs = np.sign(table[:, None, :] - table[None, :, :])  # [a, b, seed]
    unsettled = (signs.min(-1) != signs.max(-1)) | (signs == 0).any(-1)
    flips = [(entries[a], entries[b]) for a, b in zip(*np.nonzero(np.triu(unsettled, 1)))]
    return {"flips": flips, "stable": not flips,
            "summary": {e: seed_summary(values[e]) for e in entries}}

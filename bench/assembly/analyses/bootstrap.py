"""The paired moving-block bootstrap of one slice (Künsch, 1989), as the released analyses ran it
(`scripts/run_referee_analyses.py`, `run_bootstrap_robustness.py`), vectorised over resamples.

A resample of an m-record slice is ceil(m / L) blocks of L consecutive records, each block's start drawn uniformly
from [0, m − L], concatenated and cut to m records. Every scorer of one call is evaluated on the *same* resampled
records, so a margin between two scorers is paired. Interval: the 2.5th and 97.5th percentiles (numpy's linear
rule) of the resampled statistic over the resamples in which both classes occur (the others are dropped, as
released). Released: L = 100 records, 1,000 resamples, `numpy.random.default_rng(11)`. Here each slice (and each
block length) draws from its own generator seeded with `seed`; the released run drew its slices one after another
from one generator, so its archived bounds are reproduced in distribution, not digit for digit.

Speed: a resample only changes how many times each record counts, and records with equal scores always count
together, so each scorer is sorted once; one compiled pass per resample turns the block starts into counts (a
difference array) and walks every scorer's fixed order once, computing AP exactly as sklearn's
`average_precision_score` (Σ over distinct thresholds of Δrecall · precision) and AUC-ROC with ties as ½. The
straightforward loop (`loop_statistics`: index the slice, call sklearn, per resample) gives the same numbers.
The report's block bootstrap (bench/report/intervals.py: per-record weights from block starts, `weighted_ap`,
`bench.report.bootstrap.weighted_auc`) computes the same statistics from the same draws, to the last digit, but
builds a weight vector per resample and re-sorts per call: on this workload (240,000 records, 1,000 resamples, two
scorers) it took 8-15× the CPU of this kernel (measured side by side on 2026-12-07, 2-core CI-class machine), so
the slices keep their own pass.

Block rule (`block_rule`): the smallest multiple of 100 records longer than the slice's p90 attack run (the
released 100 against a p90 of 70), rerun at 250 and at the smallest multiple of 100 longer than the longest run
(the released 2600 against 2522). A conclusion (an interval excluding 0 for a margin) that differs between block
lengths is flagged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numba
import numpy as np

from bench.assembly.analyses import metrics
from bench.errors import ConfigError

RELEASED_BLOCK = 100
RELEASED_RESAMPLES = 1000
RELEASED_SEED = 11
RELEASED_ROBUST_BLOCK = 250  # the first rerun length; the second is the rule's longer-than-the-longest-run length
METRICS = ("ap", "auc")


# ------------------------------------------------------------------ resampling

def block_starts(m: int, block: int, resamples: int, seed: int = RELEASED_SEED) -> np.ndarray:
    """int64 [resamples, ceil(m / block)]: each resample's block starts, drawn as the released loop draws them
    (one `rng.integers(0, m − L + 1, size=nb)` per resample from one generator: the same stream)."""
    if not 1 <= block <= m:
        raise ConfigError(f"bootstrap block length {block}: expected 1 … the slice's {m} records")
    if resamples < 1:
        raise ConfigError(f"bootstrap resamples {resamples}: expected at least 1")
    nb = math.ceil(m / block)
    return np.random.default_rng(seed).integers(0, m - block + 1, size=(resamples, nb))


def resample_indices(starts_row: np.ndarray, m: int, block: int) -> np.ndarray:
    """The resampled positions of one resample (the released `block_indices`), for the reference loop."""
    return (starts_row[:, None] + np.arange(block)[None, :]).ravel()[:m]


@dataclass(frozen=True)
class _Sorted:
    """Scorers sorted once: positions by descending score, labels in that order, and where a tie group starts."""

    order: np.ndarray  # int64 [k, m]
    y: np.ndarray  # int8 [k, m]
    new_group: np.ndarray  # bool [k, m]


def _sort(y: np.ndarray, scores: list[np.ndarray]) -> _Sorted:
    orders, ys, groups = [], [], []
    for s in scores:
        o = np.argsort(-s, kind="stable")
        so = s[o]
        g = np.ones(len(s), bool)
        g[1:] = so[1:] != so[:-1]
        orders.append(o), ys.append(y[o]), groups.append(g)
    return _Sorted(np.array(orders, np.int64), np.array(ys, np.int8), np.array(groups, bool))


@numba.njit(cache=True, nogil=True)
def _counts(starts_row, m, block, out):
    """How many times each record occurs in one resample: a difference array over the blocks, summed."""
    out[:] = 0
    for j in range(starts_row.shape[0]):
        length = min(block, m - j * block)
        out[starts_row[j]] += 1
        out[starts_row[j] + length] -= 1
    run = 0
    for i in range(m):
        run += out[i]
        out[i] = run


@numba.njit(cache=True, nogil=True)
def _ap_auc(order, ys, new_group, w, P, N):
    """AP (sklearn's step sum over distinct thresholds) and AUC-ROC (ties ½) of one scorer under record
    multiplicities w, with P and N the weighted positives and negatives."""
    m = order.shape[0]
    tp = 0.0
    fp = 0.0
    tp_prev = 0.0
    ap = 0.0
    auc = 0.0
    gp = 0.0
    gn = 0.0
    for i in range(m):
        c = w[order[i]]
        if ys[i] == 1:
            tp += c
            gp += c
        else:
            fp += c
            gn += c
        if i + 1 == m or new_group[i + 1]:  # the end of a tie group: one threshold
            if tp + fp > 0:
                ap += (tp - tp_prev) * (tp / (tp + fp))
            auc += gp * ((N - fp) + 0.5 * gn)
            tp_prev = tp
            gp = 0.0
            gn = 0.0
    return ap / P, auc / (P * N)


@numba.njit(cache=True, nogil=True, parallel=True)
def _resample_all(starts, m, block, y, order, ys, new_group, out):
    """Every resample (in parallel: each writes its own column of `out`, so the result does not depend on the
    number of threads), every scorer."""
    for b in numba.prange(starts.shape[0]):
        counts = np.empty(m + 1, np.int32)
        _counts(starts[b], m, block, counts)
        P = 0.0
        N = 0.0
        for i in range(m):
            if y[i] == 1:
                P += counts[i]
            else:
                N += counts[i]
        for k in range(order.shape[0]):
            if P == 0.0 or N == 0.0:
                out[k, 0, b] = np.nan
                out[k, 1, b] = np.nan
            else:
                a, r = _ap_auc(order[k], ys[k], new_group[k], counts, P, N)
                out[k, 0, b] = a
                out[k, 1, b] = r


def _check(y, scores: dict[str, np.ndarray]) -> tuple[np.ndarray, list[np.ndarray]]:
    y = np.asarray(y, np.int8)
    arrays = []
    for name, s in scores.items():
        s = np.asarray(s, np.float64)
        if s.shape != y.shape:
            raise ConfigError(f"bootstrap scorer {name!r}: {s.shape[0]} scores for {y.shape[0]} records")
        if not np.isfinite(s).all():
            raise ConfigError(f"bootstrap scorer {name!r}: non-finite scores in the slice (score the whole slice)")
        arrays.append(s)
    return y, arrays


def statistics(y, scores: dict[str, np.ndarray], block: int, resamples: int = RELEASED_RESAMPLES,
               seed: int = RELEASED_SEED) -> dict[str, dict[str, np.ndarray]]:
    """scorer -> metric ('ap', 'auc') -> float64 [resamples]: each scorer on the same resampled records
    (NaN where a resample holds one class)."""
    y, arrays = _check(y, scores)
    starts = block_starts(len(y), block, resamples, seed)
    srt = _sort(y, arrays)
    out = np.empty((len(arrays), 2, resamples))
    _resample_all(starts, len(y), block, y, srt.order, srt.y, srt.new_group, out)
    return {name: {"ap": out[k, 0], "auc": out[k, 1]} for k, name in enumerate(scores)}


def loop_statistics(y, scores: dict[str, np.ndarray], block: int, resamples: int = RELEASED_RESAMPLES,
                    seed: int = RELEASED_SEED) -> dict[str, dict[str, np.ndarray]]:
    """The straightforward loop (index the slice per resample, call sklearn): the reference `statistics` must
    equal, and the baseline its speed is measured against."""
    y, arrays = _check(y, scores)
    starts = block_starts(len(y), block, resamples, seed)
    out = {name: {"ap": np.empty(resamples), "auc": np.empty(resamples)} for name in scores}
    for b in range(resamples):
        idx = resample_indices(starts[b], len(y), block)
        for name, s in zip(scores, arrays):
            out[name]["ap"][b] = metrics.ap(y[idx], s[idx])
            out[name]["auc"][b] = metrics.auc(y[idx], s[idx])
    return out


# ------------------------------------------------------------------ intervals

@dataclass(frozen=True)
class Interval:
    lo: float
    hi: float
    resamples: int  # resamples with both classes (the others dropped)

    def excludes(self, value: float) -> bool:
        """Whether the interval lies wholly on one side of `value` (False for an empty interval: no resample
        held both classes)."""
        return self.lo > value or self.hi < value

    def overlaps(self, other: Interval) -> bool:
        return self.lo <= other.hi and other.lo <= self.hi


def percentile_interval(draws: np.ndarray) -> Interval:
    ok = draws[np.isfinite(draws)]
    if ok.size == 0:
        return Interval(math.nan, math.nan, 0)
    return Interval(float(np.percentile(ok, 2.5)), float(np.percentile(ok, 97.5)), int(ok.size))


@dataclass(frozen=True)
class BlockRule:
    """The slice's attack runs and the block lengths the rule gives."""

    p90_run: float
    max_run: int
    primary: int  # smallest multiple of 100 longer than the p90 run (released: 100)
    robust: tuple[int, ...]  # 250 and the smallest multiple of 100 longer than the longest run

    @property
    def lengths(self) -> tuple[int, ...]:
        return (self.primary, *[b for b in self.robust if b != self.primary])


def _longer_than(run: float, step: int = 100) -> int:
    return int((math.floor(run) // step + 1) * step)


def block_rule(y, stream_y=None) -> BlockRule:
    """Block lengths for a slice with labels `y` (runs measured on `stream_y` when given, as released: the
    labelled stream's runs). Lengths are capped at the slice's size."""
    from bench.assembly.audit import run_lengths

    runs = run_lengths(np.asarray(y if stream_y is None else stream_y, np.int8))
    m = len(y)
    primary = min(_longer_than(runs.p90), m)
    robust = tuple(dict.fromkeys(min(b, m) for b in (RELEASED_ROBUST_BLOCK, _longer_than(runs.max))))
    return BlockRule(runs.p90, runs.max, primary, robust)


# ------------------------------------------------------------------ one slice, every block length

@dataclass(frozen=True)
class ValueInterval:
    """One scorer's statistic on the slice and its interval at every block length."""

    scorer: str
    metric: str
    point: float
    intervals: dict[int, Interval]


@dataclass(frozen=True)
class Margin:
    """a − b on one slice (paired: the same resampled records for both) at every block length."""

    a: str
    b: str
    metric: str
    point: float
    intervals: dict[int, Interval]
    primary_block: int

    def excludes_zero(self, block: int) -> bool:
        return self.intervals[block].excludes(0.0)

    @property
    def conclusion(self) -> str:
        iv = self.intervals[self.primary_block]
        return f"{self.a} > {self.b}" if iv.lo > 0 else f"{self.b} > {self.a}" if iv.hi < 0 else "not resolved"

    @property
    def changes_with_block(self) -> bool:
        """Whether 'the interval excludes 0' differs between any two block lengths (the flag on a conclusion)."""
        return len({self.excludes_zero(b) for b in self.intervals}) > 1


@dataclass(frozen=True)
class SliceBootstrap:
    slice: str
    prevalence: float
    rule: BlockRule
    resamples: int
    seed: int
    values: tuple[ValueInterval, ...]
    margins: tuple[Margin, ...]


def bootstrap_slice(name: str, y, scores: dict[str, np.ndarray], pairs=(), *, rule: BlockRule | None = None,
                    resamples: int = RELEASED_RESAMPLES, seed: int = RELEASED_SEED) -> SliceBootstrap:
    """Every scorer's AP and AUC and every pair's margins (a − b) on one slice, at each of the rule's block
    lengths, one seeded draw per length (the released robustness rerun reuses seed 11 at each length)."""
    y = np.asarray(y, np.int8)
    rule = rule or block_rule(y)
    unknown = [s for pair in pairs for s in pair if s not in scores]
    if unknown:
        raise ConfigError(f"bootstrap slice {name!r}: margin names unknown scorer {unknown[0]!r} "
                          f"(scorers: {', '.join(scores)})")
    draws = {b: statistics(y, scores, b, resamples, seed) for b in rule.lengths}
    point = {s: {"ap": metrics.ap(y, v), "auc": metrics.auc(y, v)} for s, v in scores.items()}
    values = tuple(ValueInterval(s, m, point[s][m], {b: percentile_interval(draws[b][s][m]) for b in draws})
                   for s in scores for m in METRICS)
    margins = tuple(Margin(a, b_, m, point[a][m] - point[b_][m],
                           {b: percentile_interval(draws[b][a][m] - draws[b][b_][m]) for b in draws}, rule.primary)
                    for a, b_ in pairs for m in METRICS)
    return SliceBootstrap(name, float(y.mean()) if y.size else math.nan, rule, resamples, seed, values, margins)


def tables(results: list[SliceBootstrap]) -> dict:
    """`bootstrap_values` (each scorer's AP beside the chance level, AUC, intervals per block length) and
    `bootstrap_margins` (each margin, its interval per block length, the conclusion and its flag)."""
    import pandas as pd

    values, margins = [], []
    for r in results:
        base = {"slice": r.slice, "prevalence": r.prevalence, "p90_run": r.rule.p90_run, "max_run": r.rule.max_run,
                "resamples": r.resamples}
        for v in r.values:
            row = {**base, "scorer": v.scorer, "metric": v.metric, "value": v.point}
            if v.metric == "ap":
                row["normalised_lift"] = metrics.normalised_lift(v.point, r.prevalence)
            values.append({**row, **_interval_columns(v.intervals)})
        for mg in r.margins:
            margins.append({**base, "a": mg.a, "b": mg.b, "metric": mg.metric, "margin": mg.point,
                            **_interval_columns(mg.intervals), "conclusion": mg.conclusion,
                            "changes_with_block": mg.changes_with_block})
    return {"bootstrap_values": pd.DataFrame(values), "bootstrap_margins": pd.DataFrame(margins)}


def _interval_columns(intervals: dict[int, Interval]) -> dict:
    out = {}
    for b, iv in intervals.items():
        out[f"lo_b{b}"], out[f"hi_b{b}"] = iv.lo, iv.hi
    return out

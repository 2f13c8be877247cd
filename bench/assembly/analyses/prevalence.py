"""§8: one arm resampled to named prevalence levels (released `scripts/prevalence_lib.py`,
`scripts/run_prevalence_sweep.py`).

A draw keeps records of the arm, never duplicates one and keeps their stream order; it is stratified over the
arm's split segments (train, validation, test by the split rule) so each segment reaches the level:
- level ≤ the arm's prevalence: every benign record of a segment is kept and its attacks are thinned to
  round(t · benign / (1 − t)) (at least 1, at most all);
- level above it: the largest stream size n' whose split can hold the level in every segment
  (min over segments of attacks / (t · r), benign / ((1 − t) · r), r the segment's share) is taken, and each
  segment draws round(t · r · n') attacks and round((1 − t) · r · n') benign records (n' < 100: refused).
The resampled stream is split again by the same rule; a draw whose three segments are not all within the
tolerance (released: 1 percentage point) of the level is redrawn with seed + 100000 · attempt (up to 20
redraws). Released levels: 5 %, 10 %, the arm's own prevalence ("natural", not resampled: every seed sees the
identical stream), 40 %, 64 %; seeds 11, 23, 47. Each resampled stream is a new stream: detectors run on it
afresh. The achieved held-out prevalence is AP's chance level; additive lift AP − p and normalised lift
(AP − p) / (1 − p) are both reported (their orderings across levels differ).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from bench.assembly import records
from bench.assembly.analyses import bootstrap, metrics
from bench.errors import ConfigError

NATURAL = "natural"
RELEASED_LEVELS = ("5", "10", NATURAL, "40", "64")  # percent, or the arm's own prevalence
RELEASED_SEEDS = (11, 23, 47)
RELEASED_TOLERANCE_PP = 1.0
RELEASED_MAX_REDRAWS = 20
REDRAW_STRIDE = 100_000  # attempt k draws with seed + 100000 · k


def _segments(n: int, rule: records.SplitRule) -> list[tuple[int, int]]:
    i_tr, i_va = rule.bounds(n)
    return [(0, i_tr), (i_tr, i_va), (i_va, n)]


def segment_prevalences(y: np.ndarray, rule: records.SplitRule = records.SplitRule()) -> tuple[float, ...]:
    return tuple(float(y[lo:hi].mean()) if hi > lo else float("nan") for lo, hi in _segments(len(y), rule))


def _thin_attacks(y, t, segments, rng) -> list[np.ndarray]:
    kept = []
    for lo, hi in segments:
        att, ben = np.flatnonzero(y[lo:hi] == 1) + lo, np.flatnonzero(y[lo:hi] == 0) + lo
        quota = max(1, min(int(round(t * len(ben) / (1.0 - t))), len(att))) if len(att) else 0
        kept += [ben, rng.choice(att, size=quota, replace=False) if quota else att[:0]]
    return kept


def _thin_both(y, t, segments, rng) -> list[np.ndarray]:
    n = len(y)
    share = [(hi - lo) / n for lo, hi in segments]
    caps = []
    for (lo, hi), r in zip(segments, share):
        a, b = int(y[lo:hi].sum()), int((y[lo:hi] == 0).sum())
        caps.append(min(a / (t * r), b / ((1.0 - t) * r)) if a and b else 0.0)
    n_prime = int(min(caps))
    if n_prime < 100:
        raise ConfigError(f"prevalence level {100 * t:g}%: structurally unachievable on this arm "
                          f"(its segments hold at most {n_prime} records at that level)")
    kept = []
    for (lo, hi), r in zip(segments, share):
        att, ben = np.flatnonzero(y[lo:hi] == 1) + lo, np.flatnonzero(y[lo:hi] == 0) + lo
        qa = min(int(round(t * r * n_prime)), len(att))
        qb = min(int(round((1.0 - t) * r * n_prime)), len(ben))
        kept += [rng.choice(att, size=qa, replace=False), rng.choice(ben, size=qb, replace=False)]
    return kept


def draw_positions(y, target: float, rng: np.random.Generator,
                   rule: records.SplitRule = records.SplitRule()) -> np.ndarray:
    """One stratified draw: kept positions of the arm, sorted (stream order), no duplicates."""
    y = np.asarray(y, np.int8)
    if not 0.0 < target < 1.0:
        raise ConfigError(f"prevalence level {target!r}: expected a fraction strictly between 0 and 1")
    if y.sum() == 0 or y.sum() == len(y):
        raise ConfigError("prevalence sweep: the arm must hold both classes")
    segments = _segments(len(y), rule)
    thin = _thin_attacks if target <= y.mean() else _thin_both
    return np.sort(np.concatenate(thin(y, target, segments, rng)))


@dataclass(frozen=True)
class Draw:
    level: str  # the level's name: a percent, or NATURAL
    target: float  # the fraction aimed at (the arm's own prevalence for NATURAL)
    seed: int
    redraws: int
    effective_seed: int
    positions: np.ndarray  # kept positions of the arm, in stream order
    achieved: tuple[float, float, float]  # train, validation, test prevalence of the resampled stream

    @property
    def chance(self) -> float:
        """AP's chance level on the resampled held-out slice."""
        return self.achieved[2]


def resample(y, level: str, seed: int, *, rule: records.SplitRule = records.SplitRule(),
             tolerance_pp: float = RELEASED_TOLERANCE_PP, max_redraws: int = RELEASED_MAX_REDRAWS) -> Draw:
    y = np.asarray(y, np.int8)
    if level == NATURAL:
        pos = np.arange(len(y))
        return Draw(level, float(y.mean()), seed, 0, seed, pos, segment_prevalences(y, rule))
    try:
        target = float(level) / 100.0
    except ValueError:
        raise ConfigError(f"prevalence level {level!r}: expected a percent or {NATURAL!r}") from None
    for attempt in range(max_redraws + 1):
        effective = seed + REDRAW_STRIDE * attempt
        pos = draw_positions(y, target, np.random.default_rng(effective), rule)
        achieved = segment_prevalences(y[pos], rule)
        if all(abs(p - target) <= tolerance_pp / 100.0 for p in achieved):
            return Draw(level, target, seed, attempt, effective, pos, achieved)
    raise ConfigError(f"prevalence level {level}%: no draw put every segment within {tolerance_pp} points "
                      f"after {max_redraws} redraws (seed {seed})")


def sub_arm(arm: records.Arm, draw: Draw) -> records.Arm:
    return records.Arm(f"{arm.name}@{draw.level}#{draw.seed}", arm.rows[draw.positions],
                       f"{arm.name} resampled to {draw.level} (seed {draw.seed}, effective {draw.effective_seed})")


@dataclass(frozen=True)
class LevelCell:
    draw: Draw
    scorer: str
    value: metrics.Scored  # on the resampled held-out slice; its prevalence is the chance level
    intervals: bootstrap.SliceBootstrap | None = None  # AP / AUC intervals on that slice (the paper had none)


# (resampled arm, scorer name) -> its ScoredStream (a fresh run on the resampled stream)
Score = Callable[[records.Arm, str], records.ScoredStream]


def sweep(arm: records.Arm, y_arm, scorers: list[str], score: Score, *, levels=RELEASED_LEVELS,
          seeds=RELEASED_SEEDS, rule: records.SplitRule = records.SplitRule(),
          tolerance_pp: float = RELEASED_TOLERANCE_PP, resamples: int = 0) -> tuple[LevelCell, ...]:
    """Every (level, seed) draw of the arm scored by every scorer; `resamples` > 0 adds block-bootstrap
    intervals of each cell's AP and AUC on its resampled held-out slice."""
    cells = []
    for level in levels:
        for seed in seeds:
            d = resample(y_arm, level, seed, rule=rule, tolerance_pp=tolerance_pp)
            sub = sub_arm(arm, d)
            for name in scorers:
                s = score(sub, name)
                te = s.test()
                boot = bootstrap.bootstrap_slice(f"prevalence|{level}|{seed}|{name}", s.y[te], {name: s.score[te]},
                                                 resamples=resamples) if resamples else None
                cells.append(LevelCell(d, name, metrics.scored(s.y[te], s.score[te]), boot))
    return tuple(cells)


def tables(cells: tuple[LevelCell, ...]) -> dict:
    """`prevalence_draws` (per level, seed and scorer: achieved segment prevalences, redraws, AP beside the chance
    level, additive and normalised lift, AUC) and `prevalence_levels` (means over the draws)."""
    import pandas as pd

    rows = [{"level": c.draw.level, "target": c.draw.target, "seed": c.draw.seed, "redraws": c.draw.redraws,
             "effective_seed": c.draw.effective_seed, "records": int(c.draw.positions.size),
             "achieved_train": c.draw.achieved[0], "achieved_validation": c.draw.achieved[1],
             "chance": c.draw.chance, "scorer": c.scorer, "ap": c.value.ap, "lift": c.value.lift,
             "normalised_lift": c.value.normalised_lift, "auc": c.value.auc} for c in cells]
    for row, c in zip(rows, cells):
        if c.intervals is not None:
            ap_iv = next(v for v in c.intervals.values if v.metric == "ap").intervals[c.intervals.rule.primary]
            row.update(ap_lo=ap_iv.lo, ap_hi=ap_iv.hi, block=c.intervals.rule.primary)
    draws = pd.DataFrame(rows)
    if draws.empty:
        return {"prevalence_draws": draws, "prevalence_levels": draws}
    levels = (draws.groupby(["level", "scorer"], sort=False)[["chance", "ap", "lift", "normalised_lift", "auc"]]
              .mean().reset_index())
    return {"prevalence_draws": draws, "prevalence_levels": levels}

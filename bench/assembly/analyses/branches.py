"""§7: the branches of a composed score against the deployed score, on an arm's held-out slice.

For any detector whose ScoredStream stores branches: the deployed score and each stored branch alone, AP beside
the chance level and AUC-ROC, with paired block-bootstrap intervals (each branch's margin over the deployed score
uses the same resampled records), and — where the composition is a weighted maximum — the share of records on
which each branch sets the deployed score. The released truncated BOCPD composes clip(max(tail, 0.25 ·
short_run), 0, 1): the short-run branch sets the score exactly where 0.25 · short_run exceeds the tail (a tie
goes to the tail, the first branch). `COMPOSITIONS` holds the known maxima; pass `weights` for another detector.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from bench.assembly import records
from bench.assembly.analyses import bootstrap
from bench.errors import ConfigError

DEPLOYED = "deployed"
# detector -> {branch: weight} of a max-composition, in tie-break order (the first branch wins a tie)
COMPOSITIONS = {"bocpd": {"tail": 1.0, "short_run": 0.25}}


@dataclass(frozen=True)
class BindingShare:
    branch: str
    records: int  # records on which this branch's weighted value sets the deployed score
    share: float


@dataclass(frozen=True)
class BranchResult:
    scorer: str
    arm: str
    values: bootstrap.SliceBootstrap  # 'deployed' and every branch; margins: branch − deployed
    binding: tuple[BindingShare, ...]  # empty when the composition is not a known maximum

    def value(self, name: str, metric: str) -> bootstrap.ValueInterval:
        return next(v for v in self.values.values if (v.scorer, v.metric) == (name, metric))

    def separated(self, a: str, b: str, metric: str, block: int | None = None) -> bool:
        """Whether a's and b's intervals do not overlap (the released check 'tail above deployed')."""
        block = block or self.values.rule.primary
        return not self.value(a, metric).intervals[block].overlaps(self.value(b, metric).intervals[block])


def binding_shares(branches: dict[str, np.ndarray], weights: dict[str, float]) -> tuple[BindingShare, ...]:
    missing = [b for b in weights if b not in branches]
    if missing:
        raise ConfigError(f"branch shares: the composition names branch {missing[0]!r}, the scores store "
                          f"{', '.join(branches) or 'none'}")
    stacked = np.stack([weights[b] * branches[b] for b in weights])
    winner = np.argmax(stacked, axis=0)  # first maximum: ties go to the earlier branch
    m = stacked.shape[1]
    return tuple(BindingShare(b, int((winner == k).sum()), float((winner == k).sum() / m) if m else math.nan)
                 for k, b in enumerate(weights))


def analyse(stream: records.ScoredStream, weights: dict[str, float] | None = None, *,
            resamples: int = bootstrap.RELEASED_RESAMPLES, seed: int = bootstrap.RELEASED_SEED) -> BranchResult:
    if not stream.branches:
        raise ConfigError(f"{stream.detector!r} on arm {stream.arm!r} stores no branches")
    te = stream.test()
    y = stream.y[te]
    scores = {DEPLOYED: stream.score[te], **{k: v[te] for k, v in stream.branches.items()}}
    pairs = [(b, DEPLOYED) for b in stream.branches]
    values = bootstrap.bootstrap_slice(f"branches|{stream.detector}|{stream.arm}", y, scores, pairs,
                                       resamples=resamples, seed=seed)
    weights = weights if weights is not None else COMPOSITIONS.get(stream.detector)
    binding = binding_shares({k: v[te] for k, v in stream.branches.items()}, weights) if weights else ()
    return BranchResult(stream.detector, stream.arm, values, binding)


def tables(results: list[BranchResult]) -> dict:
    """`branch_values` (deployed and each branch: AP beside chance, normalised lift, AUC, intervals),
    `branch_margins` (each branch minus the deployed score) and `branch_binding` (the share of records on which
    each branch sets the score)."""
    import pandas as pd

    boot = bootstrap.tables([r.values for r in results])
    binding = pd.DataFrame([{"scorer": r.scorer, "arm": r.arm, "branch": b.branch, "records": b.records,
                             "share": b.share} for r in results for b in r.binding])
    return {"branch_values": boot["bootstrap_values"], "branch_margins": boot["bootstrap_margins"],
            "branch_binding": binding}

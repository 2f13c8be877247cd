"""Scoring an arm in memory, without run files: the ScoredStream a run file would hold, for the analyses' tests,
their perf entry and small studies. Online: one pass over the whole arm, each record scored before it is learned.
Batch: fitted on the benign training rows, scoring validation + test as one batch (the released call), NaN
elsewhere."""

from __future__ import annotations

from bench.assembly import records
from bench.assembly.analyses.common import score_batch, scored_stream


def score_arm(corpus: records.Corpus, arm: records.Arm, spec, rule: records.SplitRule = records.SplitRule(),
              preset: str = "released", seed: int = 0, **overrides) -> records.ScoredStream:
    y = corpus.y[arm.rows]
    bounds = rule.bounds(len(arm.rows))
    det = spec.create(preset, seed, **overrides)
    if spec.kind is records.Kind.ONLINE:
        out = det.score_learn(corpus.X[arm.rows])
        score, branches, batch = out.score, out.branches, None
    else:
        scored = score_batch(det, corpus, arm.rows, y, bounds[0])
        score, branches, batch = scored.score, {}, scored.batch
    s = scored_stream(arm.name, arm.rows, y, bounds, score, detector=spec.name, kind=spec.kind, branches=branches,
                      corpus=corpus.name, preset=preset, seed=seed)
    return records.ScoredStream(**{**s.__dict__, "batch": batch})

"""§6.2: where the split falls. The chronological cut sweep, both arms at every cut (released
`scripts/run_referee_analyses.py`, part E): 7 cuts from 60 % to 90 % of the stream (`numpy.linspace`), the
evaluated slice at a cut c the records [int(c · n), n).

An online detector's score of a record depends only on the records before it, so one stored pass serves every cut:
the sweep slices the stored scores and never reruns the detector. A batch detector is refit at each cut, as
released, on the benign rows before the training end int(train / (train + validation) · cut) (0.70 / 0.85 of the
cut), and scores the evaluated slice itself as its batch. At each cut the two arms' orderings of every pair of
scorers are compared ("agree": both arms order the pair the same way).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from bench.assembly import records
from bench.assembly.analyses import bootstrap, metrics
from bench.assembly.analyses.common import check_same_corpus
from bench.errors import ConfigError

RELEASED_CUTS = tuple(float(c) for c in np.linspace(0.60, 0.90, 7))
# (arm, corpus rows scored as one batch, training end) -> scores: a batch detector refitted on the arm's benign
# rows before the training end (common.FittedRescore is one)
Refit = Callable[..., np.ndarray]


def training_end(cut: int, rule: records.SplitRule = records.SplitRule()) -> int:
    """The released training-end rule at a cut: int(train / (train + validation) · cut)."""
    return int(rule.train / (rule.train + rule.validation) * cut)


def cut_position(fraction: float, n: int) -> int:
    return int(fraction * n)


def cut_scores(stream: records.ScoredStream, cut: int) -> np.ndarray:
    """An online detector's scores of the records [cut, n): a slice of its one stored pass."""
    if stream.kind is not records.Kind.ONLINE:
        raise ConfigError(f"{stream.detector!r} is a batch detector: the sweep refits it per cut")
    return stream.score[cut:]


@dataclass(frozen=True)
class CutCell:
    fraction: float
    cut: int
    train_end: int | None  # batch detectors: where their training rows ended
    arm: str
    scorer: str
    value: metrics.Scored


@dataclass(frozen=True)
class CutAgreement:
    fraction: float
    a: str
    b: str
    a_leads: dict[str, bool]  # arm -> whether a's AP exceeds b's at this cut

    @property
    def agree(self) -> bool:
        return len(set(self.a_leads.values())) == 1


@dataclass(frozen=True)
class CutSweep:
    fractions: tuple[float, ...]
    arms: tuple[str, ...]
    cells: tuple[CutCell, ...]
    agreements: tuple[CutAgreement, ...]
    intervals: tuple[bootstrap.SliceBootstrap, ...]  # per (arm, cut): margins between scorers

    def cell(self, fraction: float, arm: str, scorer: str) -> CutCell:
        return next(c for c in self.cells if (c.fraction, c.arm, c.scorer) == (fraction, arm, scorer))


def _arm_at_cut(streams: dict[str, records.ScoredStream], refit: dict[str, Refit], cut: int,
                rule: records.SplitRule) -> tuple[dict[str, np.ndarray], int]:
    scores, end = {}, training_end(cut, rule)
    for name, s in streams.items():
        if s.kind is records.Kind.ONLINE:
            scores[name] = cut_scores(s, cut)
        elif name not in refit:
            raise ConfigError(f"cut sweep: batch detector {name!r} needs its refit (corpus and detector spec)")
        else:
            scores[name] = np.asarray(refit[name](s.arm, s.rows[cut:], train_end=end), np.float64)
    return scores, end


def sweep(streams: dict[str, dict[str, records.ScoredStream]], *, refit: dict[str, Refit] | None = None,
          fractions=RELEASED_CUTS, rule: records.SplitRule = records.SplitRule(), pairs=None, intervals: bool = True,
          resamples: int = bootstrap.RELEASED_RESAMPLES, seed: int = bootstrap.RELEASED_SEED) -> CutSweep:
    """`streams`: scorer -> arm -> ScoredStream (every scorer over the same arms of one corpus); `refit`: scorer
    -> Refit for the batch detectors."""
    check_same_corpus([s for v in streams.values() for s in v.values()], "cut sweep")
    arms = tuple(next(iter(streams.values())))
    names = list(streams)
    pairs = list(pairs or itertools.combinations(names, 2))
    cells, agreements, boots = [], [], []
    for f in fractions:
        leads = {p: {} for p in pairs}
        for arm in arms:
            per = {name: streams[name][arm] for name in names}
            y_all = per[names[0]].y
            cut = cut_position(f, len(y_all))
            scores, end = _arm_at_cut(per, refit or {}, cut, rule)
            y = y_all[cut:]
            vals = {name: metrics.scored(y, s) for name, s in scores.items()}
            cells += [CutCell(f, cut, end if per[n].kind is records.Kind.BATCH else None, arm, n, v)
                      for n, v in vals.items()]
            for a, b in pairs:
                leads[(a, b)][arm] = vals[a].ap > vals[b].ap
            if intervals:
                boots.append(bootstrap.bootstrap_slice(f"cut{round(100 * f)}|{arm}", y, scores, pairs,
                                                       resamples=resamples, seed=seed))
        agreements += [CutAgreement(f, a, b, leads[(a, b)]) for a, b in pairs]
    return CutSweep(tuple(fractions), arms, tuple(cells), tuple(agreements), tuple(boots))


def tables(r: CutSweep) -> dict:
    """`cut_values` (per cut, arm and scorer: AP beside the chance level, normalised lift, AUC), `cut_orderings`
    (per cut and pair: who leads in each arm, and whether the arms agree) and the margins' intervals."""
    import pandas as pd

    values = pd.DataFrame([{"cut_pct": round(100 * c.fraction, 6), "cut": c.cut, "train_end": c.train_end,
                            "arm": c.arm, "scorer": c.scorer, **c.value.row()} for c in r.cells])
    orderings = pd.DataFrame([{"cut_pct": round(100 * g.fraction, 6), "a": g.a, "b": g.b,
                               **{f"{g.a}_leads_{arm}": lead for arm, lead in g.a_leads.items()},
                               "agree": g.agree} for g in r.agreements])
    out = {"cut_values": values, "cut_orderings": orderings}
    if r.intervals:
        out["cut_margins"] = bootstrap.tables(list(r.intervals))["bootstrap_margins"]
    return out

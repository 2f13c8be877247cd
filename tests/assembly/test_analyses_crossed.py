"""§11 crossed design: history's effect is found for a detector that adapts and is exactly zero for a fixed
function."""

import dataclasses

import numpy as np
import pytest

from bench.assembly import arms as arms_mod
from bench.assembly import records
from bench.assembly.analyses import crossed
from bench.assembly.analyses.inmemory import score_arm
from bench.assembly.detectors import get
from bench.assembly.perf import stand_in
from bench.errors import ConfigError


class FixedFunction:
    """Scores a record by a fixed function of its features: nothing is learned."""

    def score_learn(self, X):
        return records.StreamScores(np.abs(X).sum(axis=1))


class Ewma:
    """Adapts and forgets: the distance from an exponentially weighted mean, so the order of its history matters
    (a plain running mean would not: it ends at the same value in any order)."""

    def __init__(self, alpha=0.05):
        self.alpha, self.mean = alpha, None

    def score_learn(self, X):
        out = np.empty(len(X))
        for i, x in enumerate(X):
            out[i] = 0.0 if self.mean is None else float(np.abs(x - self.mean).sum())
            self.mean = x.copy() if self.mean is None else self.mean + self.alpha * (x - self.mean)
        return records.StreamScores(out)


@pytest.fixture(scope="module")
def study():
    c = stand_in(1600)
    rng = np.random.default_rng(0)
    drift = np.repeat(rng.normal(0, 2, (5, 4)), np.bincount(c.capture), axis=0)  # each day its own level
    c = dataclasses.replace(c, X=c.X[:, :4] + drift + 1.5 * c.y[:, None], feature_names=c.feature_names[:4])
    return c, arms_mod.make_arm(c, "timestamp"), arms_mod.make_arm(c, "day_round_robin")


def test_history_effect_is_found_for_an_adaptive_detector(study):
    c, a, b = study
    r = crossed.crossed(Ewma, c, a, b, detector="ewma")
    for s in (a.name, b.name):
        e = r.effect(s, "all")
        assert e.records == c.n - records.SplitRule().bounds(c.n)[1]
        assert e.mean_abs_score_change > 0
    assert any(abs(r.effect(s, "all").auc_change) > 0 for s in (a.name, b.name))
    assert r.effect(a.name, "shared").records + r.effect(a.name, "unshared").records == r.effect(a.name, "all").records


def test_history_effect_is_exactly_zero_for_a_fixed_function(study):
    c, a, b = study
    r = crossed.crossed(FixedFunction, c, a, b, detector="fixed")
    for e in r.effects:
        assert e.max_abs_score_change == 0.0 or np.isnan(e.max_abs_score_change)
        assert e.ap_change == 0.0 or np.isnan(e.ap_change)
        assert e.auc_change == 0.0 or np.isnan(e.auc_change)


def test_the_diagonal_is_the_arms_own_run(study):
    c, a, b = study
    make = lambda: get("bocpd").create("released", max_run_length=10)  # noqa: E731
    cell = crossed.run_cell(make, c, b, b, a, records.SplitRule())
    own = score_arm(c, b, get("bocpd"), max_run_length=10)
    np.testing.assert_array_equal(cell.score, own.score[own.test()])
    # the history of a column holds the same records whichever arm orders it
    s_rows = cell.rows
    assert np.array_equal(np.sort(crossed.history_rows(a, s_rows)), np.sort(crossed.history_rows(b, s_rows)))


def test_tables_and_design_note(study):
    c, a, b = study
    t = crossed.tables(crossed.crossed(FixedFunction, c, a, b))
    assert len(t["crossed_cells"]) == 12 and len(t["crossed_history"]) == 6
    assert "history" in t["crossed_design"].loc[0, "design_note"]


def test_arms_with_different_records_are_refused(study):
    c, a, b = study
    with pytest.raises(ConfigError, match="same records"):
        crossed.crossed(FixedFunction, c, a, records.Arm("part", b.rows[:-1]))

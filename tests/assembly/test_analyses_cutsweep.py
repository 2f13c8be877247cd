"""§6.2: one online pass serves every cut; the batch detector is refit per cut with the released training end."""

import dataclasses

import numpy as np
import pytest

from bench.assembly import arms as arms_mod
from bench.assembly.analyses import cutsweep
from bench.assembly.analyses.common import FittedRescore
from bench.assembly.analyses.inmemory import score_arm
from bench.assembly.detectors import get
from bench.assembly.perf import stand_in

BOCPD = {"max_run_length": 20}


@pytest.fixture(scope="module")
def study():
    c = stand_in(1600)
    X = c.X[:, :6] + 1.5 * c.y[:, None]  # attacks shifted: both scorers have signal
    c = dataclasses.replace(c, X=X, feature_names=c.feature_names[:6])
    arms = {name: arms_mod.make_arm(c, name) for name in ("timestamp", "day_round_robin")}
    streams = {"bocpd": {a: score_arm(c, arm, get("bocpd"), **BOCPD) for a, arm in arms.items()},
               "ecod": {a: score_arm(c, arm, get("ecod")) for a, arm in arms.items()}}
    return c, arms, streams


def test_released_cuts_and_training_end():
    assert cutsweep.RELEASED_CUTS == pytest.approx([0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9])
    assert cutsweep.training_end(1_360_000) == int(0.7 / 0.85 * 1_360_000) == 1_120_000


def test_online_scores_at_a_cut_equal_a_fresh_run_stopped_there(study):
    c, arms, streams = study
    s = streams["bocpd"]["timestamp"]
    for f in (0.6, 0.9):
        cut = cutsweep.cut_position(f, s.n)
        fresh = get("bocpd").create("released", **BOCPD)
        fresh.score_learn(c.X[s.rows[:cut]])  # the history up to the cut
        np.testing.assert_array_equal(cutsweep.cut_scores(s, cut), fresh.score_learn(c.X[s.rows[cut:]]).score)


def test_the_batch_detector_is_refit_per_cut_with_the_released_training_end(study):
    c, arms, streams = study
    calls = []
    ecod = FittedRescore(c, get("ecod"), streams["ecod"])

    def refit(arm, rows, train_end):
        calls.append((arm, len(rows), train_end))
        return ecod(arm, rows, train_end=train_end)

    r = cutsweep.sweep(streams, refit={"ecod": refit}, intervals=False)
    n = c.n
    expected = [(arm, n - int(f * n), int(0.7 / 0.85 * int(f * n)))
                for f in cutsweep.RELEASED_CUTS for arm in ("timestamp", "day_round_robin")]
    assert calls == expected
    for arm, _, end in expected:  # each model saw exactly the benign rows before its training end
        s = streams["ecod"][arm]
        assert ecod.model(arm, end).model_.X_train.shape[0] == int((s.y[:end] == 0).sum())
    assert len(ecod._models) == 14
    # the sweep's AP at a cut is the AP of the sliced pass / of the refit's scores
    from bench.assembly.analyses.metrics import ap
    s = streams["bocpd"]["day_round_robin"]
    cut = int(0.75 * n)
    assert r.cell(0.75, "day_round_robin", "bocpd").value.ap == ap(s.y[cut:], s.score[cut:])
    assert len(r.agreements) == 7 and all(isinstance(g.agree, bool) for g in r.agreements)
    t = cutsweep.tables(r)
    assert set(t) == {"cut_values", "cut_orderings"} and len(t["cut_values"]) == 28


def test_agreement_marks_cuts_where_both_arms_order_the_pair_alike():
    g = cutsweep.CutAgreement(0.6, "a", "b", {"x": True, "y": True})
    h = cutsweep.CutAgreement(0.6, "a", "b", {"x": True, "y": False})
    assert g.agree and not h.agree


def test_intervals_per_arm_and_cut(study):
    c, arms, streams = study
    r = cutsweep.sweep(streams, refit={"ecod": FittedRescore(c, get("ecod"), streams["ecod"])},
                       fractions=(0.8,), resamples=30)
    assert [b.slice for b in r.intervals] == ["cut80|timestamp", "cut80|day_round_robin"]
    assert "cut_margins" in cutsweep.tables(r)

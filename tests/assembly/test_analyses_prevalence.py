"""§8: stratified resampling to named prevalence levels."""

import numpy as np
import pytest

from bench.assembly import records
from bench.assembly.analyses import prevalence as pv
from bench.assembly.analyses.common import scored_stream
from bench.assembly.analyses.perf import runs_stream
from bench.errors import ConfigError

Y = runs_stream(20_000, seed=3, mean_run=8, prevalence=0.25)


@pytest.mark.parametrize("level", ["5", "10", "40", "64"])
def test_each_segment_within_tolerance_order_kept_no_duplicates(level):
    for seed in pv.RELEASED_SEEDS:
        d = pv.resample(Y, level, seed)
        assert np.all(np.diff(d.positions) > 0)  # stream order kept, no record twice
        assert d.positions.min() >= 0 and d.positions.max() < len(Y)
        for p in pv.segment_prevalences(Y[d.positions]):
            assert abs(p - float(level) / 100) <= 0.01
        assert d.achieved == pv.segment_prevalences(Y[d.positions])


def test_the_unresampled_level_is_the_identity():
    draws = [pv.resample(Y, pv.NATURAL, s) for s in pv.RELEASED_SEEDS]
    for d in draws:
        assert np.array_equal(d.positions, np.arange(len(Y))) and d.redraws == 0
        assert d.target == pytest.approx(Y.mean())


def test_the_redraw_rule():
    # attempt k draws with seed + 100000 · k; with a tolerance only some attempts meet, the first that does is kept
    y = runs_stream(3000, seed=4, mean_run=5, prevalence=0.3)

    def deviation(k):
        pos = pv.draw_positions(y, 0.10, np.random.default_rng(11 + 100_000 * k))
        return max(abs(p - 0.10) for p in pv.segment_prevalences(y[pos]))

    devs = [deviation(k) for k in range(30)]
    tol = min(devs)
    assert devs[0] > tol  # the first draw misses
    d = pv.resample(y, "10", 11, tolerance_pp=100 * tol + 1e-9, max_redraws=29)
    first_ok = next(k for k, v in enumerate(devs) if v <= tol + 1e-11)
    assert d.redraws == first_ok and d.effective_seed == 11 + 100_000 * first_ok
    assert np.array_equal(d.positions, pv.draw_positions(y, 0.10, np.random.default_rng(d.effective_seed)))


def test_thinning_below_and_above_the_arms_prevalence():
    below = pv.resample(Y, "5", 11)
    assert ((Y[below.positions] == 0).sum()) == (Y == 0).sum()  # below: every benign record kept
    above = pv.resample(Y, "64", 11)
    assert (Y[above.positions] == 1).sum() <= Y.sum() and len(above.positions) < len(Y)


def test_unachievable_and_bad_levels_are_one_line_errors():
    with pytest.raises(ConfigError, match="expected a percent"):
        pv.resample(Y, "lots", 11)
    y = np.zeros(1000, np.int8)
    y[:3] = 1
    with pytest.raises(ConfigError, match="unachievable"):
        pv.resample(y, "64", 11)


def test_sweep_reports_the_achieved_chance_level_and_both_lifts():
    arm = records.Arm("a", np.arange(len(Y)))

    def score(sub, name):  # a fixed function of the label with noise: AP above chance at every level
        y = Y[sub.rows]
        rng = np.random.default_rng(len(y))
        return scored_stream(sub.name, sub.rows, y, records.SplitRule().bounds(len(y)), y + rng.normal(0, 1, len(y)))

    cells = pv.sweep(arm, Y, ["f"], score, levels=("5", pv.NATURAL), seeds=(11, 23), resamples=50)
    t = pv.tables(cells)
    d = t["prevalence_draws"]
    assert len(d) == 4 and (d["ap"] > d["chance"]).all()
    np.testing.assert_allclose(d["normalised_lift"], (d["ap"] - d["chance"]) / (1 - d["chance"]))
    assert set(t["prevalence_levels"]["level"]) == {"5", pv.NATURAL}
    assert ((d["ap_lo"] <= d["ap"]) & (d["ap"] <= d["ap_hi"])).all()

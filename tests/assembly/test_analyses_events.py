"""Range-based precision and recall (Tatbul et al., 2018) against values computed by hand on crafted runs."""

import math

import numpy as np
import pytest

from bench.assembly.analyses import events as ev
from bench.assembly.analyses.events import Bias, Cardinality, RangeParams
from bench.errors import ConfigError

#            0  1  2  3  4  5  6  7  8  9
Y = np.array([0, 1, 1, 1, 1, 0, 0, 1, 1, 0])  # real ranges: [1, 5) (length 4) and [7, 9) (length 2)


def test_flat_defaults_by_hand():
    alert = np.array([0, 0, 1, 1, 0, 0, 0, 0, 0, 1])  # predicted: [2, 4) and [9, 10)
    r = ev.range_pr(Y, alert)
    # recall: R1 covered 2 of 4 (one alert run), R2 not at all -> (0.5 + 0) / 2
    # precision: P1 inside R1 entirely, P2 outside every run -> (1 + 0) / 2
    assert (r.recall, r.precision, r.real_ranges, r.predicted_ranges) == (0.25, 0.5, 2, 2)
    assert r.f1 == pytest.approx(2 * 0.25 * 0.5 / 0.75)


def test_existence_reward_alpha():
    alert = np.array([0, 0, 1, 1, 0, 0, 0, 0, 0, 1])
    r = ev.range_pr(Y, alert, RangeParams(alpha=0.5))
    assert r.recall == pytest.approx((0.5 * 1 + 0.5 * 0.5 + 0) / 2)  # R1: existence 1, overlap 0.5
    assert r.precision == 0.5  # precision has no existence term


@pytest.mark.parametrize("bias, expected", [(Bias.FLAT, 2 / 4), (Bias.FRONT, (4 + 3) / 10),
                                            (Bias.BACK, (1 + 2) / 10), (Bias.MIDDLE, (1 + 2) / (1 + 2 + 2 + 1))])
def test_positional_bias_on_the_front_of_a_run(bias, expected):
    alert = np.array([0, 1, 1, 0, 0, 0, 0, 1, 1, 0])  # the first two records of R1, all of R2
    r = ev.range_pr(Y, alert, RangeParams(bias=bias))
    assert r.recall == pytest.approx((expected + 1.0) / 2)


def test_cardinality_splits_a_run_covered_by_two_alert_runs():
    alert = np.array([0, 1, 0, 1, 0, 0, 0, 0, 0, 0])  # two alert runs inside R1
    assert ev.range_pr(Y, alert).recall == pytest.approx((0.5 * (1 / 4 + 1 / 4) + 0) / 2)
    assert ev.range_pr(Y, alert, RangeParams(cardinality=Cardinality.ONE)).recall == pytest.approx(0.5 / 2)
    # one alert run across both real runs: its precision is split between them, γ = 1/2
    wide = np.array([0, 0, 0, 0, 1, 1, 1, 1, 0, 0])  # [4, 8): 1 record of R1, 2 gap, 1 of R2
    r = ev.range_pr(Y, wide)
    assert r.precision == pytest.approx(0.5 * (1 / 4 + 1 / 4))
    assert r.recall == pytest.approx((1 / 4 + 1 / 2) / 2)


def test_no_alert_and_no_attack_are_nan():
    r = ev.range_pr(Y, np.zeros(10))
    assert math.isnan(r.precision) and r.recall == 0.0
    assert math.isnan(ev.range_pr(np.zeros(10), Y).recall)


def test_curve_area_and_flow_ap_side_by_side():
    rng = np.random.default_rng(0)
    y = np.repeat(rng.integers(0, 2, 200), rng.integers(1, 20, 200))
    perfect = y + 0.01 * rng.random(len(y))
    noise = rng.random(len(y))
    good, bad = ev.evaluate(y, perfect, 0.5), ev.evaluate(y, noise, 0.5)
    assert good["range_precision"] == 1.0 and good["range_recall"] == 1.0
    assert good["range_pr_area"] > bad["range_pr_area"] and good["flow_ap"] > bad["flow_ap"]
    assert list(ev.tables([good, bad])["events"]["bias"]) == ["flat", "flat"]


def test_bad_settings_are_refused():
    with pytest.raises(ConfigError, match="alpha"):
        RangeParams(alpha=1.5)
    with pytest.raises(ConfigError, match="9 alerts for 10 records"):
        ev.range_pr(Y, np.zeros(9))

"""Decisions as the released code made them (bench.assembly.decision): Elkan's prior-inclusive cutoff with the
released costs, the baselines' validation-F1 threshold, and detection delay in records."""

from __future__ import annotations

import numpy as np
import pytest

from bench.assembly.decision import (
    RELEASED_COSTS, Costs, detection_delays, elkan_cutoff, summarise, validation_f1_threshold)
from bench.errors import ConfigError, DatasetError


def test_elkan_cutoff_with_the_released_costs():
    """The released verify_score_threshold.py's SThreeThresholdLitnet / SThreeThresholdCicids (rounded to 6)."""
    assert RELEASED_COSTS == Costs(false_positive=1.0, false_negative=10.0)
    assert round(elkan_cutoff(0.05), 6) == 0.655172
    assert round(elkan_cutoff(0.22), 6) == 0.261745
    assert elkan_cutoff(0.5, Costs(1.0, 1.0)) == 0.5
    with pytest.raises(ConfigError, match="prior"):
        elkan_cutoff(1.0)


def test_validation_f1_threshold_picks_the_best_f1_cut_or_falls_back():
    y = np.array([0, 0, 0, 1, 1, 0, 1])
    s = np.array([0.1, 0.2, 0.3, 0.8, 0.9, 0.85, 0.7])
    assert validation_f1_threshold(y, s, 0.5) == 0.7  # alerts on 0.7..0.9: precision 3/4, recall 1
    assert validation_f1_threshold(np.zeros(3), [0.1, 0.2, 0.3], 0.655) == 0.655


def _released_loop(y, alert):
    """The released rule, record by record (src/eval/latency.py's algorithm, written out here as the check)."""
    out, in_attack, start, detected = [], False, 0, False
    for i, label in enumerate(y):
        if label == 1 and not in_attack:
            in_attack, start, detected = True, i, False
        if in_attack and alert[i] == 1 and not detected:
            out.append(float(i - start))
            detected = True
        if label == 0 and in_attack:
            if not detected:
                out.append(np.nan)
            in_attack = False
    return np.asarray(out)


def test_delay_on_a_crafted_stream_with_an_open_undetected_run():
    y = np.array([0, 1, 1, 1, 0, 0, 1, 1, 0, 1, 1])
    alert = np.array([0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0])
    d = detection_delays(y, alert)
    np.testing.assert_array_equal(d.start, [1, 6, 9])
    np.testing.assert_array_equal(d.length, [3, 2, 2])
    # run 2's alert is on the benign record right after it: released counts it, delay = its length
    np.testing.assert_array_equal(d.delay, [2.0, 2.0, np.nan])
    assert d.open_at_end
    np.testing.assert_array_equal(d.released(), [2.0, 2.0])  # the open undetected run is left out
    s = summarise(d)
    assert (s.mean, s.p50, s.detected, s.undetected) == (2.0, 2.0, 2, 0)


def test_undetected_closed_runs_are_nan_and_a_detected_open_run_counts():
    d = detection_delays([1, 1, 0, 0, 1, 0], [0, 0, 0, 1, 0, 0])  # the alert at 3 is a false alarm
    np.testing.assert_array_equal(d.released(), [np.nan, np.nan])
    assert not d.open_at_end and summarise(d).undetected == 2 and np.isnan(summarise(d).mean)
    d = detection_delays([0, 1, 1], [0, 0, 1])
    assert d.open_at_end and d.released().tolist() == [1.0]


@pytest.mark.parametrize("seed", range(5))
def test_delays_equal_the_released_rule_record_by_record(seed):
    rng = np.random.default_rng(seed)
    y = (np.cumsum(rng.random(400) < 0.08) % 2).astype(int)  # runs of attacks, some open at the end
    alert = (rng.random(400) < 0.15).astype(int)
    np.testing.assert_array_equal(detection_delays(y, alert).released(), _released_loop(y, alert))


def test_no_attacks_and_bad_input():
    d = detection_delays(np.zeros(5, int), np.ones(5, int))
    assert len(d.delay) == 0 and not d.open_at_end
    with pytest.raises(DatasetError, match="0/1"):
        detection_delays([0, 2], [0, 1])
    with pytest.raises(DatasetError, match="labels"):
        detection_delays([0, 1], [0, 1, 1])

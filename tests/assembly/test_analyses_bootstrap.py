"""The paired moving-block bootstrap: exact against the per-resample sklearn loop, degenerate on a scorer against
itself, near-nominal coverage on a stream with runs, and the block rule."""

import numpy as np
import pytest

from bench.assembly.analyses import bootstrap as bs
from bench.assembly.analyses.perf import runs_stream
from bench.assembly.audit import run_lengths
from bench.errors import ConfigError


def _stream(m, seed, effect=0.8):
    """Labels with attack runs, and two scorers whose errors are shared within a run (so records are dependent)."""
    rng = np.random.default_rng(seed)
    y = runs_stream(m, seed=seed, mean_run=15.0, prevalence=0.3)
    run_id = np.cumsum(np.concatenate([[1], np.diff(y) != 0]))
    shock = rng.normal(0, 0.7, run_id.max() + 1)[run_id]
    a = effect * y + shock + rng.normal(0, 1, m)
    b = 0.5 * effect * y + shock + rng.normal(0, 1, m)
    return y, a, b


def test_vectorised_equals_the_straightforward_loop_with_ties():
    y, a, b = _stream(4000, 1)
    b = np.round(b, 1)  # many ties: AP's thresholds and AUC's ½ must match sklearn
    fast = bs.statistics(y, {"a": a, "b": b}, 100, 30, seed=5)
    slow = bs.loop_statistics(y, {"a": a, "b": b}, 100, 30, seed=5)
    for k in "ab":
        for m in ("ap", "auc"):
            np.testing.assert_allclose(fast[k][m], slow[k][m], rtol=0, atol=1e-12)


def test_block_starts_are_the_released_draw_sequence():
    rng = np.random.default_rng(11)
    released = np.stack([rng.integers(0, 1000 - 100 + 1, size=10) for _ in range(7)])
    assert np.array_equal(bs.block_starts(1000, 100, 7), released)


def test_a_scorer_against_itself_gives_zero_zero():
    y, a, _ = _stream(3000, 2)
    r = bs.bootstrap_slice("s", y, {"a": a, "a2": a.copy()}, [("a", "a2")], resamples=100)
    for mg in r.margins:
        for iv in mg.intervals.values():
            assert (iv.lo, iv.hi) == (0.0, 0.0)
        assert mg.conclusion == "not resolved" and not mg.changes_with_block


def test_one_class_resamples_are_dropped():
    y = np.zeros(500, np.int8)
    y[:20] = 1  # one run at the start: many resamples miss it
    s = np.arange(500.0)[::-1]
    st = bs.statistics(y, {"s": s}, 50, 200)["s"]["ap"]
    assert np.isnan(st).any() and np.isfinite(st).any()
    assert bs.percentile_interval(st).resamples == int(np.isfinite(st).sum())
    empty = bs.percentile_interval(np.full(5, np.nan))
    assert empty.resamples == 0 and not empty.excludes(0.0)


def test_intervals_cover_a_known_margin_at_about_the_nominal_rate():
    # the known margin: the mean of the finite-slice AP margin over many independent streams of the same process
    from bench.assembly.analyses.metrics import ap

    m = 3000
    truth = np.mean([(lambda y, a, b: ap(y, a) - ap(y, b))(*_stream(m, 1000 + i)) for i in range(150)])
    hits = 0
    reps = 120
    for i in range(reps):
        y, a, b = _stream(m, i)
        iv = bs.percentile_interval(
            (lambda d: d["a"]["ap"] - d["b"]["ap"])(bs.statistics(y, {"a": a, "b": b}, 100, 200, seed=i)))
        hits += iv.lo <= truth <= iv.hi
    assert 0.85 <= hits / reps <= 0.99, hits / reps


def test_block_rule_picks_a_block_longer_than_the_p90_run():
    y = np.zeros(40_000, np.int8)
    pos = 0
    for length in [30] * 8 + [150] * 2 + [170]:  # p90 of these runs: 150; longest 170
        y[pos + 100: pos + 100 + length] = 1
        pos += 100 + length
    runs = run_lengths(y)
    rule = bs.block_rule(y)
    assert rule.primary > runs.p90 and rule.primary == 200
    assert rule.lengths == (200, 250) and max(rule.robust) > runs.max


def test_released_rule_on_the_paper_runs():
    assert bs._longer_than(70) == 100 and bs._longer_than(2522) == 2600


def test_a_flag_when_the_conclusion_changes_between_block_lengths():
    mg = bs.Margin("a", "b", "ap", 0.01, {100: bs.Interval(0.001, 0.02, 10), 250: bs.Interval(-0.01, 0.03, 10)},
                   100)
    assert mg.conclusion == "a > b" and mg.changes_with_block


def test_bad_inputs_are_one_line_errors():
    with pytest.raises(ConfigError, match="block length"):
        bs.block_starts(10, 20, 5)
    with pytest.raises(ConfigError, match="3 scores for 4 records"):
        bs.statistics(np.array([0, 1, 0, 1]), {"x": np.zeros(3)}, 2, 2)
    with pytest.raises(ConfigError, match="unknown scorer 'c'"):
        bs.bootstrap_slice("s", np.array([0, 1] * 50), {"a": np.zeros(100)}, [("a", "c")])

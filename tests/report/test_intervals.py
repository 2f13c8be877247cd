"""Chance level of AP, block/stratified bootstrap intervals, paired differences, run lengths, seed placements."""

from itertools import combinations

import numpy as np
import pytest

from bench.errors import ConfigError
from bench.metrics import continual_roc_auc, expected_random_ap, forgetting, normalized_pr_auc, roc_auc
from bench.report import intervals as iv
from bench.report.bootstrap import weighted_auc


def _ap(labels, scores):
    nap, p = normalized_pr_auc(labels, scores)
    return nap * (1 - p) + p


def test_expected_random_ap_equals_enumeration_and_simulation():
    # Exact: every placement of k = 2 positives among n = 6 ranks, equally likely.
    n, k = 6, 2
    aps = [np.mean([(i + 1) / (r + 1) for i, r in enumerate(ranks)]) for ranks in combinations(range(n), k)]
    assert expected_random_ap(n, k) == pytest.approx(np.mean(aps), abs=1e-12)
    # Monte Carlo at the example: 200 records, 20 anomalies.
    rng = np.random.default_rng(0)
    n, k, sims = 200, 20, 40000
    ranks = np.sort(np.argsort(rng.random((sims, n)), axis=1)[:, :k], axis=1) + 1  # 1-based ranks of positives
    ap = (np.arange(1, k + 1) / ranks).mean(1)
    expected = expected_random_ap(n, k)
    assert abs(expected - ap.mean()) < 4 * ap.std() / np.sqrt(sims)
    assert expected == pytest.approx(0.122, abs=5e-4) and expected > k / n + 0.02
    assert expected_random_ap(1_000_000, 100_000) == pytest.approx(0.1, abs=1e-4)  # large sets: → p
    np.testing.assert_allclose(expected_random_ap(np.array([6, 200]), np.array([2, 20])), [np.mean(aps), expected])


def test_run_lengths():
    y = np.array([0, 1, 1, 0, 0, 1, 0, 1, 1, 1, 1])
    np.testing.assert_array_equal(iv.run_lengths(y), [2, 1, 4])
    stats = iv.run_length_stats(y)
    assert stats["runs"] == 3 and stats["median"] == 2 and stats["max"] == 4
    assert iv.run_length_stats(np.zeros(5))["runs"] == 0


def test_block_coverage_equals_explicit_concatenation():
    rng = np.random.default_rng(1)
    n, block = 23, 5
    starts = rng.integers(0, n - block + 1, size=(7, 5))
    counts = iv._coverage(n, block, starts)
    for b in range(7):
        picked = np.concatenate([np.arange(s, s + block) for s in starts[b]])[:n]
        np.testing.assert_array_equal(counts[:, b], np.bincount(picked, minlength=n))
    weights = iv.block_weights(n, block, 50, rng)
    assert weights.shape == (n, 50) and (weights.sum(0) == n).all()


def test_stratified_weights_keep_class_sizes():
    labels = np.arange(30) % 4 == 0
    w = iv.stratified_weights(labels, 40, np.random.default_rng(2))
    assert (w[labels].sum(0) == labels.sum()).all() and (w[~labels].sum(0) == (~labels).sum()).all()


def test_weighted_statistics_equal_the_metrics_on_repeated_records():
    rng = np.random.default_rng(3)
    labels = rng.random(300) < 0.2
    scores = np.round(rng.normal(size=300) + labels, 1)  # rounded: many ties
    weights = np.concatenate([np.ones((300, 1), int), iv.block_weights(300, 17, 4, rng),
                              iv.stratified_weights(labels, 4, rng)], axis=1)
    ap = iv.weighted_ap(scores, labels, weights)
    auc = weighted_auc(scores, labels, weights)
    for b in range(weights.shape[1]):
        rep = np.repeat(np.arange(300), weights[:, b])
        assert ap[b] == pytest.approx(_ap(labels[rep], scores[rep]), abs=1e-12)
        assert auc[b] == pytest.approx(roc_auc(labels[rep], scores[rep]), abs=1e-12)
    one = iv.interval(labels, scores, n_boot=5)
    assert one.value == pytest.approx(roc_auc(labels, scores))
    nap = iv.interval(labels, scores, metric="npr_auc", n_boot=5).value
    assert nap == pytest.approx(normalized_pr_auc(labels, scores)[0])


def _runs_stream(rng, n_runs=20, run=150, gap=350):
    """Anomalies in long runs; how detectable a run is varies from run to run (one attack, one behaviour)."""
    labels, scores = [], []
    for shift in rng.normal(1.5, 1.5, n_runs):
        labels += [0] * gap + [1] * run
        scores += list(rng.normal(size=gap)) + list(rng.normal(shift, 1, run))
    return np.array(labels, bool), np.array(scores)


def test_block_bootstrap_is_wider_than_iid_on_long_anomaly_runs():
    labels, scores = _runs_stream(np.random.default_rng(4))
    t = np.arange(labels.size)
    width = {}
    for name, stamps, block in (("block", t, 300), ("iid", None, 1)):
        out = iv.interval(labels, scores, stamps, block=block, n_boot=300, seed=0)
        assert out.low < out.value < out.high
        width[name] = out.high - out.low
    assert width["block"] > 2 * width["iid"]
    # Control: the same records in random order carry no runs, and blocks then add nothing.
    perm = np.random.default_rng(5).permutation(labels.size)
    shuffled = iv.interval(labels[perm], scores[perm], t, block=300, n_boot=300, seed=0)
    assert shuffled.high - shuffled.low < 1.5 * width["iid"]


def test_bad_input_is_a_bench_error():
    with pytest.raises(ConfigError, match="one class"):
        iv.interval(np.zeros(10), np.arange(10.0))
    with pytest.raises(ConfigError, match="unknown bootstrap metric"):
        iv.interval(np.arange(10) % 2, np.arange(10.0), metric="f1")
    with pytest.raises(ConfigError, match="timestamps"):
        iv.interval(np.arange(10) % 2, np.arange(10.0), timestamps=np.arange(9))


def test_seed_summary_and_placement_flips():
    values = {"naive": {0: 0.6, 1: 0.62, 2: 0.58}, "replay": {0: 0.7, 1: 0.61, 2: 0.75},
              "mste": {0: 0.9, 1: 0.91, 2: 0.92}}
    out = iv.placement_flips(values)
    assert out["flips"] == [("naive", "replay")] and not out["stable"]
    s = out["summary"]["replay"]
    assert s["mean"] == pytest.approx(np.mean([0.7, 0.61, 0.75])) and s["values"] == values["replay"]
    assert iv.placement_flips({k: v for k, v in values.items() if k != "replay"})["stable"]
    tie = iv.placement_flips({"a": {0: 0.5, 1: 0.6}, "b": {0: 0.5, 1: 0.4}})
    assert tie["flips"] == [("a", "b")]


def _stream_run(rng, n_tasks=3, n=400, decay=0.0):
    """Per-record scores of a run: task j's records, scored after every step i ≥ j; `decay` blurs older tasks."""
    labels = {j: rng.random(n) < 0.2 for j in range(n_tasks)}
    base = {j: rng.normal(size=n) + 1.5 * labels[j] for j in range(n_tasks)}
    scores = {(i, j): base[j] + decay * (i - j) * rng.normal(size=n) for i in range(n_tasks) for j in range(i + 1)}
    return scores, labels


def test_r_samples_keep_a_column_paired_and_strategies_paired():
    rng = np.random.default_rng(7)
    still, labels = _stream_run(rng)  # MSTE-like: a task's scores never change after its step
    fading, _ = _stream_run(np.random.default_rng(7), decay=1.5)  # same test sets, blurred later
    stamps = {j: np.arange(400) for j in range(3)}
    a = iv.r_samples(still, labels, 3, stamps, block=20, n_boot=200)
    assert a.shape == (200, 3, 3) and np.isnan(a[:, 0, 1]).all()
    np.testing.assert_array_equal(a[:, 2, 0], a[:, 0, 0])  # one resample per column, reused at every step
    assert _percentiles(a, forgetting) == (0.0, 0.0)
    b = iv.r_samples(fading, labels, 3, stamps, block=20, n_boot=200)
    assert _percentiles(b, forgetting)[0] > 0
    diff = _percentiles(a, continual_roc_auc, minus=b)
    unpaired = _percentiles(a, continual_roc_auc, minus=iv.r_samples(fading, labels, 3, stamps, block=20,
                                                                      n_boot=200, seed=1))
    assert 0 < diff[0] and diff[1] - diff[0] < unpaired[1] - unpaired[0]
    assert _percentiles(a, continual_roc_auc, minus=a) == (0.0, 0.0)


def _percentiles(samples, summary, minus=None) -> tuple:
    """2.5/97.5 percentiles of a summary (ROC-AUC_CL, FM) of R replicates, or of its paired differences."""
    values = np.array([summary(r) for r in samples])
    if minus is not None:
        values = values - np.array([summary(r) for r in minus])
    return tuple(float(v) for v in np.percentile(values, [2.5, 97.5]))


def test_a_block_as_long_as_the_sequence_is_refused():
    with pytest.raises(ConfigError, match="resamples nothing"):
        iv.interval(np.arange(50) % 2, np.arange(50.0), timestamps=np.arange(50), block=50)

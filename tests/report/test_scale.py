"""Aggregating at campaign scale (issue 29 §4): collected runs keep only what the tables need of their per-image
scores (memory: one run's scores at a time), and nothing derived from a file is served stale once it changes."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from bench import results
from bench.metrics import normalized_pr_auc, roc_auc
from bench.report.aggregate import INTERVALS, Options, aggregate, interval_deriver, verify
from bench.report.bootstrap import run_intervals
from bench.report.collect import SCORE_ARRAYS, collect
from test_report import TASKS, write

N_BOOT = 60
LABELS = np.array([0] * 6 + [1] * 4, dtype=np.int8)


def scored(outputs, seed: int, shift: float, tied: bool = False):
    """A three-task run with per-image scores (anomalous images `shift` higher; `tied`: every normal image scores
    0, so each cell is mostly tied) and R/image, R/image_npr_auc recomputed from them."""
    rng = np.random.default_rng(seed)
    n, step, task, val = 3, [], [], []
    image, npr = np.full((n, n), np.nan), np.full((n, n), np.nan)
    for i in range(n):
        for j in range(i + 1):
            v = rng.normal(size=LABELS.size) + shift * LABELS
            if tied:
                v[LABELS == 0] = 0.0
            step += [i] * v.size
            task += [j] * v.size
            val.append(v)
            image[i, j], npr[i, j] = roc_auc(LABELS, v), normalized_pr_auc(LABELS, v)[0]
    extra = {"scores/step": np.array(step, np.int16), "scores/task": np.array(task, np.int16),
             "scores/label": np.tile(LABELS, len(val)), "scores/value": np.concatenate(val), "R/image_npr_auc": npr}
    return write(outputs, tasks=TASKS[:3], seed=seed, image=image, extra=extra)


def test_collected_runs_keep_no_score_arrays_but_their_intervals_and_rows(tmp_path):
    outputs = tmp_path / "outputs"
    paths = [scored(outputs, seed, 1.0, tied=seed == 2) for seed in (0, 1, 2)]
    c = collect(outputs, "synthetic", interval_deriver(Options(bootstrap=N_BOOT)))
    assert len(c.details) == 3
    for path in paths:
        fresh = results.read_run(path)
        kept = c.details[fresh["attrs"]["run_key"]]
        assert not [k for k in kept if k.startswith("scores/")]
        assert kept[INTERVALS] == run_intervals(fresh, N_BOOT)
        np.testing.assert_array_equal(kept["R/image"], fresh["R/image"])
    # the rows were made while the scores were there: the tied cells are counted from them (all 6 of seed 2's)
    assert all(e["scores_checked"] for e in c.inputs)
    assert dict(zip(c.runs["seed"], c.runs["tied_cells"])) == {0: 0, 1: 0, 2: 6}
    # without a deriver nothing is dropped (other callers read the scores themselves)
    assert all(set(SCORE_ARRAYS) <= set(run) for run in collect(outputs, "synthetic").details.values())


def test_a_changed_file_is_not_served_stale(tmp_path):
    """Rewriting one run's file (same run key, other scores) changes its intervals and R in the next aggregation:
    the intervals reused from the previous runs.csv are keyed by the file's SHA-256, and `verify` agrees."""
    outputs = tmp_path / "outputs"
    options = Options(bootstrap=N_BOOT, figure_formats=())
    paths = [scored(outputs, seed, 1.0) for seed in (0, 1)]
    quiet = lambda *_: None  # noqa: E731
    aggregate(outputs, "synthetic", options, log=quiet)
    before = pd.read_csv(outputs / "synthetic/tables/runs.csv").set_index("seed")
    scored(outputs, 1, 3.0)  # the same run, rewritten: its scores and R change
    aggregate(outputs, "synthetic", options, log=quiet)
    after = pd.read_csv(outputs / "synthetic/tables/runs.csv").set_index("seed")
    fresh = results.read_run(paths[1])
    expected = run_intervals(fresh, N_BOOT)
    assert (after.loc[1, "image_roc_auc_cl_ci_low"], after.loc[1, "image_roc_auc_cl_ci_high"]) == \
        pytest.approx(expected["roc_auc_cl"], abs=1e-12)
    assert after.loc[1, "image_roc_auc_cl_ci_low"] != before.loc[1, "image_roc_auc_cl_ci_low"]
    assert after.loc[1, "image_roc_auc_cl"] == pytest.approx(results.summary_row(fresh)["image_roc_auc_cl"])
    assert after.loc[0].equals(before.loc[0])  # the unchanged run is as it was
    assert verify(outputs, "synthetic", log=quiet) == []


def test_intervals_drawn_another_way_are_recomputed_and_verify_says_to_reaggregate(tmp_path):
    """A result set aggregated by code that drew its resamples otherwise (a manifest without this code's
    bootstrap.DRAWS) has its intervals recomputed, not reused, and `verify` says so in one line instead of a
    mismatch per interval."""
    import json

    from bench.report import aggregate as agg

    outputs = tmp_path / "outputs"
    options = Options(bootstrap=N_BOOT, figure_formats=())
    scored(outputs, 0, 1.0)
    quiet = lambda *_: None  # noqa: E731
    aggregate(outputs, "synthetic", options, log=quiet)
    manifest_path = outputs / "synthetic" / agg.MANIFEST
    manifest = json.loads(manifest_path.read_text())
    assert manifest["bootstrap_draws"] == agg.DRAWS
    del manifest["bootstrap_draws"]  # as the code before DRAWS wrote it
    manifest_path.write_text(json.dumps(manifest))
    problems = verify(outputs, "synthetic", log=quiet)
    assert len(problems) == 1 and "rerun `make aggregate DATASET=synthetic`" in problems[0]
    assert agg._published_intervals(outputs / "synthetic", manifest, options) == {}
    aggregate(outputs, "synthetic", options, log=quiet)
    assert verify(outputs, "synthetic", log=quiet) == []


def test_resample_counts_are_a_uniform_multinomial():
    """Each resample draws k of k items with replacement: counts sum to k, each item's count has mean 1 and
    variance (k - 1) / k, and two seeds give other draws."""
    from bench.report.bootstrap import resample_counts

    k, n_boot = 16, 20_000
    counts = resample_counts(np.random.default_rng(0), k, n_boot)
    assert counts.shape == (k, n_boot) and (counts.sum(0) == k).all() and (counts >= 0).all()
    assert counts.mean() == pytest.approx(1.0)
    assert counts.var(axis=1) == pytest.approx(np.full(k, (k - 1) / k), rel=0.05)
    # covariance of two items' counts: -1/k
    assert np.cov(counts[0], counts[1])[0, 1] == pytest.approx(-1 / k, abs=0.02)
    assert not np.array_equal(counts, resample_counts(np.random.default_rng(1), k, n_boot))

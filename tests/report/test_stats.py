"""The report's statistics: paired tests over (dataset × ordering) blocks and the bootstrap intervals of a run."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from bench.metrics import summarize
from bench.report import stats
from bench.report.bootstrap import continual_metrics, run_intervals

METHODS = ("patchcore", "padim", "cfa", "fastflow")
BLOCKS = [(d, o) for d in ("mvtec", "visa", "btad", "mpdd") for o in ("easy_to_hard", "random")]


def hand_table() -> tuple[pd.DataFrame, dict]:
    """8 blocks × 4 methods × 2 protocols; padim has two seeds per cell (their mean is its value). Returns the
    runs frame and {(protocol, model): [value per block]} averaged by hand."""
    rng = np.random.default_rng(3)
    rows, expected = [], {}
    for protocol in ("ncl", "cl"):
        for m, model in enumerate(METHODS):
            values = []
            for dataset, ordering in BLOCKS:
                shift = 0.03 * m + (0.05 if protocol == "cl" else 0)
                seeds = rng.uniform(0.5, 0.9, 2 if model == "padim" else 1) + shift
                values.append(sum(seeds) / len(seeds))
                rows += [{"dataset": dataset, "ordering": ordering, "model": model, "backbone": "resnet18",
                          "weights": "none", "protocol": protocol, "seed": s, "image_roc_auc_cl": v,
                          "pixel_roc_auc_cl": np.nan} for s, v in enumerate(seeds)]
            expected[(protocol, model)] = values
    return pd.DataFrame(rows), expected


def test_friedman_equals_scipy_on_a_hand_made_table():
    """stats.friedman: the statistic and p of scipy.stats.friedmanchisquare over the 8 blocks (seeds averaged
    first), and the mean ranks by hand (rank 1 = highest)."""
    runs, expected = hand_table()
    tests, ranks = stats.friedman(runs, levels=("image",))
    for protocol in ("ncl", "cl"):
        columns = [expected[(protocol, m)] for m in sorted(METHODS)]
        want = sps.friedmanchisquare(*columns)
        row = tests[tests["protocol"] == protocol].iloc[0]
        assert (row["n_blocks"], row["n_methods"], row["note"]) == (8, 4, "")
        # two tests (NCL, CL) and neither adjusted for the other: the row says so rather than leaving it blank
        assert row["correction"].startswith("none")
        assert row["statistic"] == pytest.approx(want.statistic, rel=1e-12)
        assert row["p"] == pytest.approx(want.pvalue, rel=1e-12)
        assert row["critical_difference"] == pytest.approx(stats.critical_difference(4, 8))
        for m in METHODS:
            by_hand = np.mean([1 + sum(expected[(protocol, o)][b] > expected[(protocol, m)][b] for o in METHODS)
                               for b in range(len(BLOCKS))])
            got = ranks[(ranks["protocol"] == protocol) & (ranks["model"] == m)]["mean_rank"].item()
            assert got == pytest.approx(by_hand)


def test_wilcoxon_holm_equals_scipy_and_holms_rule():
    """stats.cl_vs_ncl: per method scipy.stats.wilcoxon(CL, NCL) over the blocks; p_holm = Holm's step-down
    max_{r' ≤ r} min(1, (m − r' + 1) p_(r')) across the four methods, computed here by hand."""
    runs, expected = hand_table()
    table = stats.cl_vs_ncl(runs, levels=("image",))
    p = {m: sps.wilcoxon(expected[("cl", m)], expected[("ncl", m)]).pvalue for m in METHODS}
    order = sorted(METHODS, key=p.get)
    holm, running = {}, 0.0
    for r, m in enumerate(order):
        running = max(running, min(1.0, (len(order) - r) * p[m]))
        holm[m] = running
    for m in METHODS:
        row = table[table["model"] == m].iloc[0]
        assert row["n_blocks"] == 8 and row["test"] == stats.WILCOXON and row["correction"] == "Holm"
        assert row["p"] == pytest.approx(p[m], rel=1e-12) and row["p_holm"] == pytest.approx(holm[m], rel=1e-12)


def test_holm_keeps_order_and_nan():
    assert stats.holm([0.04, np.nan, 0.01, 0.03]) == pytest.approx([0.06, np.nan, 0.03, 0.06], nan_ok=True)


def test_too_few_blocks_are_said_not_tested():
    """5 paired blocks cannot give a two-sided exact Wilcoxon p below 2/2^5 = 0.0625; 2 blocks of 3 methods
    cannot give a Friedman p below chi2.sf(4, 2) = 0.135: both rows say so and carry no p."""
    runs, _ = hand_table()
    in_blocks = lambda n: np.array([b in BLOCKS[:n] for b in zip(runs["dataset"], runs["ordering"])])  # noqa: E731
    w = stats.cl_vs_ncl(runs[in_blocks(5)], levels=("image",))
    assert (w["n_blocks"] == 5).all() and w["p"].isna().all() and w["p_holm"].isna().all()
    assert w["note"].str.startswith("too few blocks (5)").all() and "0.0625" in w["note"].iloc[0]
    tests, _ = stats.friedman(runs[in_blocks(2) & runs["model"].isin(METHODS[:3])], levels=("image",))
    assert (tests["n_blocks"] == 2).all() and tests["p"].isna().all()
    assert tests["note"].str.startswith("too few blocks (2)").all()


@pytest.mark.parametrize("k, q05, q10", [(2, 1.960, 1.645), (3, 2.343, 2.052), (4, 2.569, 2.291),
                                          (5, 2.728, 2.459), (6, 2.850, 2.589), (7, 2.949, 2.693),
                                          (8, 3.031, 2.780), (9, 3.102, 2.855), (10, 3.164, 2.920)])
def test_critical_difference_follows_demsar(k, q05, q10):
    """CD = q_α √(k(k+1)/(6N)) with Demšar (2006) Table 5(a)/(b)'s two-tailed Nemenyi q_0.05 and q_0.10 (printed
    to three decimals, some truncated: within 0.001), and his
    worked example (§3.2.2): 4 classifiers on 14 data sets, q_0.05 = 2.569, CD = 1.25."""
    scale = math.sqrt(k * (k + 1) / (6 * 14))
    assert stats.critical_difference(k, 14) == pytest.approx(q05 * scale, abs=1e-3 * scale)
    assert stats.critical_difference(k, 14, alpha=0.10) == pytest.approx(q10 * scale, abs=1e-3 * scale)
    if k == 4:
        assert round(stats.critical_difference(4, 14), 2) == 1.25


def test_cliques_join_methods_within_the_critical_difference():
    # sorted ranks 1.0, 1.5, 2.4, 3.9: CD 1.0 joins (1.0, 1.5) and (1.5, 2.4); 3.9 stands alone
    assert stats.cliques([2.4, 1.0, 3.9, 1.5], 1.0) == [(0, 1), (1, 2)]
    assert stats.cliques([1.0, 2.0, 3.0], 5.0) == [(0, 2)]


def test_vectorised_continual_metrics_equal_metrics_summarize():
    """bootstrap.continual_metrics over a stack [B, N, N] (NaN cells included) equals bench.metrics.summarize
    of each matrix: ROC-AUC_CL (Eq. 1), BWT (Eq. 2), BWT as released (consecutive differences), FM (Chaudhry)."""
    rng = np.random.default_rng(0)
    R = np.tril(rng.uniform(0.4, 1.0, (20, 5, 5))) + np.triu(np.full((5, 5), np.nan), 1)
    R[3, 2, 1] = R[7, 4, 0] = R[9, 1, 1] = np.nan
    got = continual_metrics(R)
    for b in range(len(R)):
        want = summarize(R[b])
        for ours, theirs in (("roc_auc_cl", "roc_auc_cl"), ("bwt", "bwt"), ("bwt_released", "bwt_released"),
                             ("forgetting", "forgetting")):
            assert got[ours][b] == pytest.approx(want[theirs], nan_ok=True)


def _simulated_run(rng, gaps, n_pos=40, n_neg=60) -> dict:
    """A 2-task run's per-image scores: cell (i, j) draws normal N(0,1) and anomalous N(gap, 1) scores, so its
    true ROC-AUC is Φ(gap/√2); task j's test labels are the same at every step, as in a real run."""
    step, task, label, value = [], [], [], []
    y = np.r_[np.zeros(n_neg, bool), np.ones(n_pos, bool)]
    for (i, j), gap in gaps.items():
        step.append(np.full(y.size, i))
        task.append(np.full(y.size, j))
        label.append(y)
        value.append(rng.normal(size=y.size) + gap * y)
    return {"attrs": {"steps_done": 2, "n_tasks": 2, "run_name": "simulated"},
            "scores/step": np.concatenate(step), "scores/task": np.concatenate(task),
            "scores/label": np.concatenate(label), "scores/value": np.concatenate(value)}


def test_bootstrap_intervals_cover_the_true_auc_at_about_the_nominal_rate():
    """The 95 % interval of ROC-AUC_CL (mean of the 3 cells' true AUCs Φ(gap/√2)) covers it in 93-97 % of 400
    simulated runs (seeded: the same count every time; at n = 400 the binomial sd of a 95 % rate is 1.1 %, so
    the band is ±2 sd around nominal; a broken resample, e.g. one that ignores the pairing of a column or
    resamples a fixed test set, lands far outside it)."""
    gaps = {(0, 0): 1.2, (1, 0): 0.8, (1, 1): 1.6}
    truth = np.mean([sps.norm.cdf(g / math.sqrt(2)) for g in gaps.values()])
    rng = np.random.default_rng(2024)
    hits = 0
    for trial in range(400):
        lo, hi = run_intervals(_simulated_run(rng, gaps), n_boot=400, seed=trial)["roc_auc_cl"]
        hits += lo <= truth <= hi
    assert 0.93 * 400 <= hits <= 0.97 * 400, hits


def test_one_task_runs_have_no_bwt_or_fm_interval():
    rng = np.random.default_rng(1)
    run = _simulated_run(rng, {(0, 0): 1.0})
    run["attrs"].update(steps_done=1, n_tasks=1)
    out = run_intervals(run, 50)
    assert all(math.isnan(v) for v in out["bwt"] + out["bwt_released"] + out["forgetting"])
    assert out["roc_auc_cl"][0] < out["roc_auc_cl"][1]


def test_blocks_are_dataset_by_ordering():
    runs, _ = hand_table()
    table = stats.block_table(runs, "image", "cl")
    assert list(table.index) == sorted(BLOCKS) and len(table.columns) == len(METHODS)
    assert list(itertools.chain(*table.isna().to_numpy())) == [False] * (len(BLOCKS) * len(METHODS))


def test_released_bwt_interval_comes_from_the_same_resamples_as_eq2():
    """With two tasks the consecutive-difference BWT (as released) is Eq. 2 term for term, so drawn from the same
    resamples its interval equals Eq. 2's exactly; with three it is another number, and its interval is finite."""
    rng = np.random.default_rng(4)
    two = run_intervals(_simulated_run(rng, {(0, 0): 1.4, (1, 0): 0.7, (1, 1): 1.2}), n_boot=200, seed=3)
    assert two["bwt_released"] == two["bwt"] and two["bwt"][0] < two["bwt"][1]
    gaps = {(i, j): 1.5 - 0.3 * (i - j) for i in range(3) for j in range(i + 1)}
    run = _simulated_run(rng, gaps)
    run["attrs"].update(steps_done=3, n_tasks=3)
    three = run_intervals(run, n_boot=200, seed=3)
    assert three["bwt_released"] != three["bwt"] and np.isfinite(three["bwt_released"]).all()

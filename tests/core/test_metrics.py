"""Metrics match scikit-learn and explicit double loops over R (InCLAD Eq. 1–2, Chaudhry et al. 2018)."""

import math
import warnings

import numpy as np
import pytest
from sklearn.metrics import average_precision_score, roc_auc_score

from bench.metrics import (
    OneClassWarning,
    PixelRocAuc,
    bwt,
    bwt_consecutive,
    continual_roc_auc,
    forgetting,
    forgetting_released,
    normalized_pr_auc,
    pixel_roc_auc,
    roc_auc,
    summarize,
)

SEEDS = range(40)


def random_binary(seed: int, ties: bool):
    """Labels with both classes and scores; `ties` draws integer-valued scores from a handful of values."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 400))
    labels = rng.random(n) < rng.uniform(0.05, 0.95)
    labels[:2] = [False, True]
    rng.shuffle(labels)
    if ties:
        scores = rng.integers(0, int(rng.integers(2, 8)), n).astype(float)
    else:
        scores = rng.normal(size=n) + labels * rng.uniform(0, 2)
    return labels, scores


# ---------------------------------------------------------------- image-level ROC-AUC and PR-AUC


@pytest.mark.parametrize("ties", [False, True])
def test_roc_auc_equals_sklearn(ties):
    for seed in SEEDS:
        labels, scores = random_binary(seed, ties)
        assert roc_auc(labels, scores) == pytest.approx(roc_auc_score(labels, scores), abs=1e-12)


def test_roc_auc_accepts_integer_scores_and_01_labels():
    labels = np.array([0, 1, 0, 1, 1, 0])
    scores = np.array([3, 3, 1, 5, 2, 4], dtype=np.uint8)
    assert roc_auc(labels, scores) == pytest.approx(roc_auc_score(labels, scores))
    assert roc_auc(labels.tolist(), scores.tolist()) == roc_auc(labels, scores)


def test_roc_auc_uses_raw_scores():
    # Large scores that a sigmoid would map to the same float64 (1.0), i.e. to ties and AUC 0.5.
    labels = [0, 1, 0, 1]
    scores = [40.0, 50.0, 55.0, 60.0]
    assert 1 / (1 + math.exp(-40.0)) == 1 / (1 + math.exp(-60.0))
    assert roc_auc(labels, scores) == 0.75


def test_roc_auc_does_not_modify_inputs():
    labels, scores = random_binary(0, ties=False)
    before = scores.copy()
    roc_auc(labels, scores)
    np.testing.assert_array_equal(scores, before)


@pytest.mark.parametrize("labels", [[0, 0, 0], [1, 1], []])
def test_roc_auc_one_class_is_nan_with_warning(labels):
    with pytest.warns(OneClassWarning):
        assert math.isnan(roc_auc(labels, np.arange(len(labels), dtype=float)))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_scores_raise(bad):
    with pytest.raises(ValueError, match="non-finite"):
        roc_auc([0, 1, 1], [0.1, bad, 0.3])
    with pytest.raises(ValueError, match="non-finite"):
        normalized_pr_auc([0, 1, 1], [0.1, bad, 0.3])


def test_invalid_binary_inputs_raise():
    with pytest.raises(ValueError, match="shape"):
        roc_auc([0, 1, 1], [0.1, 0.2])
    with pytest.raises(ValueError, match="labels must be 0"):
        roc_auc([0, 1, 2], [0.1, 0.2, 0.3])


@pytest.mark.parametrize("ties", [False, True])
def test_normalized_pr_auc_equals_sklearn_average_precision(ties):
    for seed in SEEDS:
        labels, scores = random_binary(seed, ties)
        p = labels.mean()
        expected = (average_precision_score(labels, scores) - p) / (1 - p)
        npr, prevalence = normalized_pr_auc(labels, scores)
        assert prevalence == pytest.approx(p)
        assert npr == pytest.approx(expected, abs=1e-12)


def test_normalized_pr_auc_bounds():
    labels = [0, 0, 0, 1]
    assert normalized_pr_auc(labels, [0.1, 0.2, 0.3, 0.9]) == (1.0, 0.25)
    # All scores tied: one threshold at which precision = prevalence, so chance level 0.
    assert normalized_pr_auc(labels, [1, 1, 1, 1]) == (0.0, 0.25)


def test_normalized_pr_auc_one_class_is_nan_with_prevalence():
    with pytest.warns(OneClassWarning):
        npr, p = normalized_pr_auc([1, 1, 1], [0.1, 0.2, 0.3])
    assert math.isnan(npr) and p == 1.0


# ---------------------------------------------------------------- pixel-level ROC-AUC


def random_maps(seed: int, batch: int, ties: bool):
    rng = np.random.default_rng(seed)
    masks = rng.random((batch, 12, 10)) < 0.1
    maps = rng.normal(size=masks.shape) + 0.7 * masks
    if ties:
        maps = np.round(maps * 2) / 2
    return maps, masks


@pytest.mark.parametrize("ties", [False, True])
def test_pixel_roc_auc_streams_to_sklearn_value(ties):
    for seed in range(10):
        batches = [random_maps(100 * seed + k, batch=k + 1, ties=ties) for k in range(4)]
        metric = PixelRocAuc()
        for maps, masks in batches:
            metric.update(maps, masks)
        maps = np.concatenate([m for m, _ in batches])
        masks = np.concatenate([k for _, k in batches])
        # Stored as float32 (the documented precision): the reference sees the same float32 values.
        expected = roc_auc_score(masks.ravel(), maps.astype(np.float32).ravel())
        assert metric.compute() == pytest.approx(expected, abs=1e-12)
        assert pixel_roc_auc(masks, maps) == metric.compute()
        assert metric.n_pixels == masks.size
        assert metric.n_positive == masks.sum()


def test_pixel_roc_auc_update_after_compute():
    first, second = random_maps(1, 3, ties=False), random_maps(2, 2, ties=False)
    metric = PixelRocAuc()
    metric.update(*first)
    metric.compute()  # sorts the buffers in place
    metric.update(*second)
    both = [np.concatenate(pair) for pair in zip(first, second)]
    assert metric.compute() == pixel_roc_auc(both[1], both[0])


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_pixel_roc_auc_accepts_any_float_maps_and_255_masks(dtype):
    maps, masks = random_maps(3, 2, ties=False)
    maps = maps.astype(dtype)
    expected = roc_auc_score(masks.ravel(), maps.astype(np.float32).ravel())
    assert pixel_roc_auc(masks.astype(np.uint8) * 255, maps) == pytest.approx(expected, abs=1e-12)


def test_pixel_roc_auc_one_class_is_nan_with_warning():
    metric = PixelRocAuc()
    with pytest.warns(OneClassWarning):
        assert math.isnan(metric.compute())
    metric.update(np.ones((2, 4, 4), np.float32), np.zeros((2, 4, 4), bool))
    with pytest.warns(OneClassWarning):
        assert math.isnan(metric.compute())


def test_pixel_roc_auc_rejects_bad_batches():
    metric = PixelRocAuc()
    with pytest.raises(ValueError, match="shape"):
        metric.update(np.zeros((2, 4, 4), np.float32), np.zeros((2, 4, 5), bool))
    maps = np.zeros((1, 4, 4), np.float32)
    maps[0, 1, 1] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        metric.update(maps, np.zeros((1, 4, 4), bool))
    with pytest.raises(ValueError, match="non-finite"):  # finite in float64, inf in float32
        metric.update(np.full((1, 2, 2), 1e300), np.zeros((1, 2, 2), bool))
    assert metric.n_pixels == 0


# ---------------------------------------------------------------- continual summaries of R


def ref_continual(R):
    n, total, count = len(R), 0.0, 0
    for i in range(n):
        for j in range(i + 1):
            if not math.isnan(R[i][j]):
                total, count = total + R[i][j], count + 1
    return total / count if count else math.nan


def ref_bwt(R, consecutive=False):
    n, total, count = len(R), 0.0, 0
    for i in range(1, n):
        for j in range(i):
            term = R[i][j] - (R[i - 1][j] if consecutive else R[j][j])
            if not math.isnan(term):
                total, count = total + term, count + 1
    return total / count if count else math.nan


def ref_forgetting(R):
    n, total, count = len(R), 0.0, 0
    for j in range(n - 1):
        cells = [R[l][j] for l in range(j, n - 1)] + [R[n - 1][j]]
        if any(math.isnan(c) for c in cells):
            continue
        total, count = total + max(cells[:-1]) - cells[-1], count + 1
    return total / count if count else math.nan


def random_R(seed: int, n: int, nan_cells: int = 0):
    rng = np.random.default_rng(seed)
    R = np.full((n, n), np.nan)
    rows, cols = np.tril_indices(n)
    R[rows, cols] = rng.uniform(0.4, 1.0, rows.size)
    for k in rng.choice(rows.size, size=min(nan_cells, rows.size), replace=False):
        R[rows[k], cols[k]] = np.nan
    return R


def assert_same(actual, expected):
    if math.isnan(expected):
        assert math.isnan(actual)
    else:
        assert actual == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("n", range(1, 8))
@pytest.mark.parametrize("nan_cells", [0, 2])
def test_continual_metrics_equal_double_loops(n, nan_cells):
    for seed in range(10):
        R = random_R(seed, n, nan_cells)
        assert_same(continual_roc_auc(R), ref_continual(R))
        assert_same(bwt(R), ref_bwt(R))
        assert_same(bwt_consecutive(R), ref_bwt(R, consecutive=True))
        assert_same(forgetting(R), ref_forgetting(R))


# By hand, 0-based: Eq. 1 = (0.9 + 0.8 + 0.7 + 0.6 + 0.75 + 0.5) / 6 = 4.25 / 6.
# Eq. 2 pairs: R10−R00 = −0.1, R20−R00 = −0.3, R21−R11 = +0.05 → −0.35 / 3.
# Consecutive: R10−R00 = −0.1, R20−R10 = −0.2, R21−R11 = +0.05 → −0.25 / 3.
# Forgetting: j=0: max(0.9, 0.8) − 0.6 = 0.3; j=1: 0.7 − 0.75 = −0.05 → 0.25 / 2. Last row: 1.85 / 3.
# Released (CAD 675a9c9, f_0 = 0, divided by N): f_1 = 0.9 − 0.8 = 0.1; f_2 = (0.3 + max(0, −0.05)) / 2 = 0.15
# → 0.25 / 3. With R10 = NaN: f_1 is skipped; f_2's j=0 takes the max over the evaluated 0.9 and 0.6 → 0.15 / 2.
HAND_R = [[0.9, np.nan, np.nan], [0.8, 0.7, np.nan], [0.6, 0.75, 0.5]]


def test_hand_computed_3x3():
    assert summarize(HAND_R) == pytest.approx(
        {"roc_auc_cl": 4.25 / 6, "bwt": -0.35 / 3, "bwt_released": -0.25 / 3, "forgetting": 0.125,
         "forgetting_released": 0.25 / 3, "final_mean": 1.85 / 3, "n_cells": 6, "nan_cells": 0}
    )
    assert bwt_consecutive(HAND_R) == pytest.approx(-0.25 / 3)


def test_hand_computed_3x3_with_a_nan_cell():
    # R10 = NaN: Eq. 1 = (0.9 + 0.7 + 0.6 + 0.75 + 0.5) / 5; Eq. 2 keeps −0.3 and +0.05; consecutive keeps only
    # R21−R11 (both R10−R00 and R20−R10 touch the NaN); forgetting drops j=0 (its max touches R10) → −0.05.
    R = np.array(HAND_R)
    R[1, 0] = np.nan
    assert summarize(R) == pytest.approx(
        {"roc_auc_cl": 3.45 / 5, "bwt": -0.125, "bwt_released": 0.05, "forgetting": -0.05,
         "forgetting_released": 0.075, "final_mean": 1.85 / 3, "n_cells": 6, "nan_cells": 1}
    )
    assert bwt_consecutive(R) == pytest.approx(0.05)


def test_the_two_forgetting_measures_differ_where_a_task_recovers():
    """Task 0 drops at step 1 and recovers at step 2; task 1 drops at step 2.
    Chaudhry (last step only): j=0: max(0.9, 0.6) − 0.9 = 0; j=1: 0.8 − 0.5 = 0.3 → 0.15.
    Released: f_0 = 0; f_1 = 0.9 − 0.6 = 0.3; f_2 = (0 + 0.3) / 2 = 0.15 → (0 + 0.3 + 0.15) / 3 = 0.15."""
    R = [[0.9, np.nan, np.nan], [0.6, 0.8, np.nan], [0.9, 0.5, 0.7]]
    assert forgetting(R) == pytest.approx(0.15)
    assert forgetting_released(R) == pytest.approx(0.15)
    assert forgetting_released([[0.8]]) == 0.0  # as released: the mean of f_0 = 0 alone
    # a negative drop (a task evaluated higher than before) counts 0 in the released form, negatively in Chaudhry's
    up = [[0.6, np.nan], [0.9, 0.7]]
    assert forgetting(up) == pytest.approx(-0.3) and forgetting_released(up) == 0.0


def test_one_class_column_is_skipped_and_counted():
    R = random_R(0, 4)
    R[1:, 1] = np.nan  # task 1's test set has one class: its whole column is NaN
    summary = summarize(R)
    assert summary["nan_cells"] == 3 and summary["n_cells"] == 10
    assert summary["roc_auc_cl"] == pytest.approx(ref_continual(R))
    assert summary["bwt"] == pytest.approx(ref_bwt(R))
    assert summary["forgetting"] == pytest.approx(ref_forgetting(R))
    assert summary["final_mean"] == pytest.approx(np.mean(R[3, [0, 2, 3]]))


def test_cells_above_the_diagonal_are_ignored():
    """All summaries but the CAD framework's released FM, whose max runs over rows before a task was learned too
    (CAD 675a9c9 src/cadbench/pyclad/forgetting_measure.py:35: t in range(learned_task + 1))."""
    R = random_R(1, 5)
    filled = np.where(np.isnan(R), 123.0, R)
    full, lower = summarize(filled), summarize(R)
    assert full.pop("forgetting_released") > lower.pop("forgetting_released")
    assert full == lower


def test_single_task():
    summary = summarize([[0.8]])
    assert summary["roc_auc_cl"] == summary["final_mean"] == 0.8
    assert math.isnan(summary["bwt"]) and math.isnan(summary["forgetting"]) and math.isnan(bwt_consecutive([[0.8]]))


def test_all_nan_gives_nan():
    summary = summarize(np.full((3, 3), np.nan))
    assert all(math.isnan(summary[k]) for k in ("roc_auc_cl", "bwt", "forgetting", "final_mean"))
    assert summary["nan_cells"] == 6


def test_bwt_consecutive_telescopes_and_differs_from_bwt():
    R = random_R(2, 6)
    n, j = len(R), np.arange(len(R))
    assert bwt_consecutive(R) == pytest.approx((R[-1, j] - R[j, j]).sum() / (n * (n - 1) / 2))
    assert abs(bwt(R) - bwt_consecutive(R)) > 1e-3
    # A drop d right after each task that then persists: Eq. 2 = d, the consecutive variant = 2/N · d.
    drop = np.tril(np.full((n, n), 0.9)) - 0.2 * np.tril(np.ones((n, n)), k=-1)
    assert bwt(drop) == pytest.approx(-0.2)
    assert bwt_consecutive(drop) == pytest.approx(2 / n * -0.2)


@pytest.mark.parametrize("shape", [(3,), (2, 3), (2, 2, 2), (0, 0)])
def test_invalid_R_shapes_raise(shape):
    for fn in (continual_roc_auc, bwt, bwt_consecutive, forgetting, summarize):
        with pytest.raises(ValueError, match="square"):
            fn(np.zeros(shape))


def test_no_stray_warnings_on_valid_input():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        summarize(random_R(3, 5, nan_cells=3))
        roc_auc(*random_binary(3, ties=True))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_row_wise_roc_auc_and_npr_auc_equal_the_one_cell_functions(dtype):
    """The aggregate checks a campaign's cells in rows (bench.report.collect): each row must give what
    roc_auc and normalized_pr_auc give for it alone, ties (across and within classes, a row all tied) included."""
    from bench.metrics import normalized_pr_auc_rows, roc_auc_rows

    rng = np.random.default_rng(3)
    checked = 0
    for trial in range(200):
        n = int(rng.integers(2, 50))
        y = rng.random(n) < rng.uniform(0.1, 0.9)
        if y.all() or not y.any():
            continue
        rows = rng.normal(size=(4, n)).astype(dtype)
        if trial % 3 == 0:
            rows = np.round(rows, 1)  # many ties
        rows[3] = rows[3] * 0 + 1  # one row entirely tied: AUC ½, AP = prevalence
        auc, npr = roc_auc_rows(y, rows), normalized_pr_auc_rows(y, rows)
        for r in range(len(rows)):
            assert auc[r] == pytest.approx(roc_auc(y, rows[r]), abs=1e-12)
            assert npr[r] == pytest.approx(normalized_pr_auc(y, rows[r])[0], abs=1e-12)
            checked += 1
        assert auc[3] == 0.5 and npr[3] == pytest.approx(0.0, abs=1e-12)
    assert checked > 500

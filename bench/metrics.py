"""Detection metrics (ROC-AUC, pixel ROC-AUC, normalized PR-AUC) and continual summaries of R (InCLAD App. B).

Scores are used raw, never squashed or normalised: a sigmoid turns large scores into ties and changes the AUC.
A test set holding one class has no ROC-AUC: it gives NaN plus a `OneClassWarning`; the continual summaries skip
NaN cells and `summarize` counts them.

R is the N×N results matrix of one run: R[i, j] is the metric on task j's test set after training up to task i
(0-based). Only the lower triangle, diagonal included, is read; cells above it are ignored (but by
`forgetting_released`, which reads them where a cross-evaluated matrix holds them, as the released code does).
"""

from __future__ import annotations

import math
import warnings

import numpy as np

# Positives searched per np.searchsorted call: bounds compute()'s temporaries at a few MB whatever the pixel count.
_CHUNK = 1 << 20


class OneClassWarning(UserWarning):
    """A test set holds only normal or only anomalous samples, so its ROC-AUC / PR-AUC is undefined (NaN)."""


def _warn_one_class(metric: str, n_pos: int, n_neg: int) -> None:
    warnings.warn(
        f"{metric} undefined on {n_pos} anomalous and {n_neg} normal samples (needs both classes): returning NaN",
        OneClassWarning,
        stacklevel=3,
    )


def _check_finite(values: np.ndarray, what: str) -> None:
    if values.dtype.kind == "f":
        bad = values.size - int(np.count_nonzero(np.isfinite(values)))
        if bad:
            raise ValueError(f"{what} contain {bad} non-finite values (NaN or ±inf) out of {values.size}")


def _binary_inputs(labels, scores) -> tuple[np.ndarray, np.ndarray]:
    """Flat boolean labels and flat numeric scores, validated."""
    labels, scores = np.asarray(labels), np.asarray(scores)
    if labels.shape != scores.shape:
        raise ValueError(f"labels {labels.shape} and scores {scores.shape} differ in shape")
    if scores.dtype.kind not in "biuf":
        raise ValueError(f"scores must be numeric, got dtype {scores.dtype}")
    _check_finite(scores, "scores")
    if labels.dtype != bool:
        if not np.isin(labels, (0, 1)).all():
            raise ValueError("labels must be 0 (normal) or 1 (anomalous)")
        labels = labels.astype(bool)
    return labels.ravel(), scores.ravel()


def _mann_whitney_auc(neg: np.ndarray, pos: np.ndarray) -> float:
    """P(pos > neg) + ½ P(pos = neg) over all pairs, exactly. Sorts both arrays in place."""
    neg.sort()
    # Sorted needles let searchsorted start each search from the previous answer (cache friendly).
    pos.sort()
    # left = negatives strictly below, right = negatives below or equal: left + right = 2·wins + ties.
    # A Python int accumulates, so the pair count cannot overflow.
    twice_wins = 0
    for start in range(0, pos.size, _CHUNK):
        chunk = pos[start : start + _CHUNK]
        twice_wins += int(np.searchsorted(neg, chunk, "left").sum()) + int(np.searchsorted(neg, chunk, "right").sum())
    return twice_wins / (2 * pos.size * neg.size)


def roc_auc(labels, scores) -> float:
    """Exact ROC-AUC of raw `scores` (higher = more anomalous), ties counting ½; NaN + warning on one class."""
    labels, scores = _binary_inputs(labels, scores)
    pos, neg = scores[labels], scores[~labels]  # copies: sorting them leaves the caller's array alone
    if not pos.size or not neg.size:
        _warn_one_class("ROC-AUC", pos.size, neg.size)
        return math.nan
    return _mann_whitney_auc(neg, pos)


class _Float32Buffer:
    """A float32 array grown by doubling, so filling it costs O(n) copies in total."""

    def __init__(self) -> None:
        self._data = np.empty(0, np.float32)
        self.size = 0

    def append(self, values: np.ndarray) -> None:
        end = self.size + values.size
        if end > self._data.size:
            # The unfilled tail of a fresh np.empty block is never touched, so it costs no resident memory: the
            # transient peak is the copied prefix twice, not the doubled capacity.
            grown = np.empty(max(end, 2 * self._data.size), np.float32)
            grown[: self.size] = self._data[: self.size]
            self._data = grown
        self._data[self.size : end] = values
        self.size = end

    def view(self) -> np.ndarray:
        return self._data[: self.size]


class PixelRocAuc:
    """Streaming exact pixel-level ROC-AUC with memory of about 4 bytes per pixel.

    Scores are stored as float32, the precision the models' maps have, in one growing buffer per class (while a
    buffer grows its filled part exists twice). `compute()` sorts the normal pixels in place and counts, for chunks
    of anomalous pixels, the normal ones below and equal to each, so it adds only O(chunk) memory.
    """

    def __init__(self) -> None:
        self._pos = _Float32Buffer()
        self._neg = _Float32Buffer()

    def update(self, maps, masks) -> None:
        """Add a batch: `maps` float [B,H,W] of raw scores; `masks` bool/integer [B,H,W], nonzero = anomalous.

        Nonzero rather than 1 so that 0/255 mask PNGs work as read.
        """
        maps, masks = np.asarray(maps), np.asarray(masks)
        if maps.shape != masks.shape:
            raise ValueError(f"anomaly maps {maps.shape} and masks {masks.shape} differ in shape")
        if maps.dtype.kind != "f":
            raise ValueError(f"anomaly maps must be floating point, got dtype {maps.dtype}")
        if masks.dtype.kind not in "biu":
            raise ValueError(f"masks must be bool or integer, got dtype {masks.dtype}")
        with np.errstate(over="ignore"):  # values beyond float32 become inf, which the check below reports
            scores = maps.astype(np.float32, copy=False).ravel()
        _check_finite(scores, "anomaly maps (as float32)")
        anomalous = masks.astype(bool, copy=False).ravel()
        self._pos.append(scores[anomalous])
        self._neg.append(scores[~anomalous])

    def compute(self) -> float:
        """ROC-AUC over every pixel seen so far; NaN + `OneClassWarning` when one class has no pixels."""
        if not self._pos.size or not self._neg.size:
            _warn_one_class("pixel ROC-AUC", self._pos.size, self._neg.size)
            return math.nan
        # Sorting reorders the buffers in place; order never matters to the AUC, so update() may continue after.
        return _mann_whitney_auc(self._neg.view(), self._pos.view())

    @property
    def n_pixels(self) -> int:
        return self._pos.size + self._neg.size

    @property
    def n_positive(self) -> int:
        return self._pos.size


def pixel_roc_auc(masks, maps) -> float:
    """One-shot `PixelRocAuc` over `maps` [B,H,W] and `masks` [B,H,W]."""
    metric = PixelRocAuc()
    metric.update(maps, masks)
    return metric.compute()


def normalized_pr_auc(labels, scores) -> tuple[float, float]:
    """((AP − p) / (1 − p), p): average precision rescaled so chance is 0, and the anomaly prevalence p.

    AP is scikit-learn's step-wise average precision: Σ_k (recall_k − recall_{k−1}) · precision_k over the
    distinct score thresholds, tied scores forming one threshold. One class → (NaN, p) + `OneClassWarning`.
    """
    labels, scores = _binary_inputs(labels, scores)
    n, n_pos = labels.size, int(np.count_nonzero(labels))
    prevalence = n_pos / n if n else math.nan
    if n_pos in (0, n):
        _warn_one_class("PR-AUC", n_pos, n - n_pos)
        return math.nan, prevalence
    order = np.argsort(scores)[::-1]  # not argsort(-scores): that breaks on unsigned and bool scores
    ranked, true_pos = scores[order], np.cumsum(labels[order])
    # One operating point per distinct score: the last position of each run of tied scores.
    ends = np.flatnonzero(np.append(ranked[1:] != ranked[:-1], True))
    true_pos = true_pos[ends]
    precision = true_pos / (ends + 1)
    recall_step = np.diff(true_pos, prepend=0) / n_pos
    ap = float(np.sum(recall_step * precision))
    return (ap - prevalence) / (1 - prevalence), prevalence


def roc_auc_rows(labels: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """`roc_auc` of each row of finite `scores` [m, n] against the same two-class `labels` [n] (bool): the
    Mann-Whitney statistic from average ranks (ties ½), one sort for all rows. Equal to `roc_auc` row by row up to
    float summation order."""
    from scipy.stats import rankdata

    n_pos = int(labels.sum())
    n_neg = labels.size - n_pos
    ranks = rankdata(scores, axis=1)  # average ranks: a tie between the classes counts ½
    return (ranks[:, labels].sum(axis=1) - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


def normalized_pr_auc_rows(labels: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """The first value of `normalized_pr_auc` for each row of finite `scores` [m, n] against the same two-class
    `labels` [n] (bool), vectorised over rows: one operating point per distinct score, as there."""
    n, n_pos = labels.size, int(labels.sum())
    order = np.argsort(scores, axis=1)[:, ::-1]
    ranked = np.take_along_axis(scores, order, axis=1)
    true_pos = np.cumsum(labels[order], axis=1)
    ends = np.ones_like(ranked, dtype=bool)  # the last position of each run of tied scores
    ends[:, :-1] = ranked[:, 1:] != ranked[:, :-1]
    at_ends = np.where(ends, true_pos, 0)
    # true positives at the previous operating point: the running maximum (true_pos only grows) one place back
    before = np.zeros_like(at_ends)
    before[:, 1:] = np.maximum.accumulate(at_ends, axis=1)[:, :-1]
    terms = np.where(ends, (true_pos - before) * true_pos / np.arange(1, n + 1), 0.0)
    prevalence = n_pos / n
    return (terms.sum(axis=1) / n_pos - prevalence) / (1 - prevalence)


def _check_matrix(R) -> np.ndarray:
    R = np.asarray(R, dtype=np.float64)
    if R.ndim != 2 or R.shape[0] != R.shape[1] or R.shape[0] == 0:
        raise ValueError(f"R must be a non-empty square 2-D matrix, got shape {R.shape}")
    return R


def _nanmean(values: np.ndarray) -> float:
    """Mean of the non-NaN values; NaN when there are none (np.nanmean would warn)."""
    values = values[~np.isnan(values)]
    return float(values.mean()) if values.size else math.nan


def continual_roc_auc(R) -> float:
    """InCLAD Eq. 1: mean of the lower triangle of R including the diagonal (NaN cells skipped)."""
    R = _check_matrix(R)
    return _nanmean(R[np.tril_indices(len(R))])


def bwt(R) -> float:
    """InCLAD Eq. 2, the suite's BWT: mean over i > j of R[i,j] − R[j,j]; NaN when N = 1.

    A term with a NaN cell is skipped. Negative = forgetting.
    """
    R = _check_matrix(R)
    i, j = np.tril_indices(len(R), k=-1)
    return _nanmean(R[i, j] - R[j, j])


def bwt_consecutive(R) -> float:
    """Mean over i > j of R[i,j] − R[i−1,j]: the step-to-step variant averaged by InCLAD's released code.

    Per column the differences telescope to R[N−1,j] − R[j,j], so without NaN cells this equals
    Σ_j (R[N−1,j] − R[j,j]) / (N(N−1)/2), about 2/N × Eq. 2 when each drop persists. Not the suite's BWT (that
    is `bwt`, the paper's Eq. 2); offered only to compare with the released numbers. A term with a NaN cell is skipped.
    """
    R = _check_matrix(R)
    i, j = np.tril_indices(len(R), k=-1)
    return _nanmean(R[i, j] - R[i - 1, j])


def forgetting(R) -> float:
    """Forgetting measure (Chaudhry et al. 2018): mean over j < N−1 of max_{j ≤ l ≤ N−2} R[l,j] − R[N−1,j].

    Positive = forgetting; NaN when N = 1. A term with a NaN cell is skipped (np.max propagates the NaN).
    """
    R = _check_matrix(R)
    last = len(R) - 1
    return _nanmean(np.array([R[j:last, j].max() - R[last, j] for j in range(last)]))


def forgetting_released(R) -> float:
    """The forgetting measure the CAD framework's released code defines (CAD-Benchmarks-Framework 675a9c9
    `src/cadbench/pyclad/forgetting_measure.py:18-40`; no released script reports it): f_0 = 0 and, for k ≥ 1,
    f_k = mean over j < k of max(0, max_{0 ≤ t ≤ k} R[t,j] − R[k,j]); the value is the mean of f_0 … f_{N−1}
    (it divides by N, so f_0 counts). 0.0 when N = 1, as released.

    The max runs over every evaluated row t ≤ k, rows before task j was learned included (pyCLAD's scenario
    evaluates every concept after every step): those cells, above the diagonal, are read where R holds them (a
    cross-evaluated matrix). A continual run leaves them NaN, and the max then covers j ≤ t ≤ k only (the
    lower-triangle variant; equal to the released value when no pre-learning cell is higher). A term whose
    R[k,j] is NaN (a one-class test set) is skipped, and a step whose terms all are.
    """
    R = _check_matrix(R)
    steps = [0.0]
    for k in range(1, len(R)):
        # R[k, j] itself is in the slice, so np.nanmax sees a value whenever the term is kept
        drops = np.array([np.nan if np.isnan(R[k, j]) else np.nanmax(R[:k + 1, j]) - R[k, j] for j in range(k)])
        steps.append(_nanmean(np.maximum(drops, 0.0)))  # a NaN term stays NaN through np.maximum
    return _nanmean(np.array(steps))


def summarize(R) -> dict:
    """The continual summaries of one R matrix, with how many lower-triangle cells were NaN (one-class test sets)."""
    R = _check_matrix(R)
    cells = R[np.tril_indices(len(R))]
    return {
        "roc_auc_cl": continual_roc_auc(R),
        "bwt": bwt(R),
        "bwt_released": bwt_consecutive(R),  # beside Eq. 2, for comparison with the published Table 2 only
        "forgetting": forgetting(R),
        "forgetting_released": forgetting_released(R),  # the formula of the CAD framework's released code
        "final_mean": _nanmean(R[-1]),
        "n_cells": int(cells.size),
        "nan_cells": int(np.count_nonzero(np.isnan(cells))),
    }


# A cell most of whose test scores are one value ranks almost nothing: its ROC-AUC is set by the ties (each tied
# normal/anomalous pair counts one half), not by the detector's ordering. The runner warns of such a cell and the
# summaries count them, as they count NaN cells.
MOSTLY_TIED = 0.5


def largest_tie(scores) -> tuple[int, float]:
    """(how many scores share the most common value, that value); (0, nan) for no scores."""
    values, counts = np.unique(np.asarray(scores, dtype=np.float64), return_counts=True)
    if not len(counts):
        return 0, float("nan")
    i = int(np.argmax(counts))
    return int(counts[i]), float(values[i])


def mostly_tied(scores) -> bool:
    """More than MOSTLY_TIED of `scores` share one value."""
    return largest_tie(scores)[0] > MOSTLY_TIED * len(scores)


def expected_random_ap(n, k):
    """E[AP] of a uniformly random ranking of `n` records with `k` positives (vectorised over arrays).

    The positive at rank r has precision (1 + (positives above it)) / r, and a random rank-r record has
    (r − 1)(k − 1)/(n − 1) positives above it in expectation given that it is positive, so
    E[AP] = (1/n) Σ_r [1/r + (k − 1)/(n − 1) · (r − 1)/r] = (H_n + (k − 1)/(n − 1) · (n − H_n)) / n.
    """
    n, k = np.asarray(n, dtype=float), np.asarray(k, dtype=float)
    if np.any(n < 1) or np.any(k < 1) or np.any(k > n):
        raise ValueError("expected_random_ap needs 1 ≤ k ≤ n")
    from scipy.special import digamma

    harmonic = digamma(n + 1) + np.euler_gamma
    slope = np.divide(k - 1, n - 1, out=np.ones_like(n * k), where=n > 1)
    out = (harmonic + slope * (n - harmonic)) / n
    return float(out) if out.ndim == 0 else out


# Largest allowed |alone − batch| as a fraction of max |score| over both. Scale by the largest magnitude rather
# than by each score or by the spread: float32 rounding of a sum is relative to the size of its terms, so a score
# near zero (a difference of large terms) carries an absolute error of ~eps·max|score|, and a set of large scores
# with a small spread still rounds at their magnitude. 1e-5 is ~84 float32 ulps (eps 1.19e-7) of that scale: room for
# kernels that reorder sums and for what a few layers, a log-determinant or an exponential amplify (measured:
# DAGMM's energies alone vs. among 140 records, 1.2e-6), still orders of magnitude below the moves of
# batch-normalised scores (a sizeable fraction of their range).
POINTWISE_RTOL = 1e-5


def pointwise_gap(alone, batch) -> float:
    """max |alone − batch| / max(|alone|, |batch|): how far scores (or maps) computed alone differ from the same
    samples' scores computed inside a batch, relative to their scale. 0 when both are all zeros; inf on
    non-finite values (a NaN must never pass for agreement)."""
    alone, batch = np.asarray(alone, dtype=np.float64), np.asarray(batch, dtype=np.float64)
    if alone.shape != batch.shape:
        raise ValueError(f"pointwise_gap: shapes {alone.shape} and {batch.shape} differ")
    if not (np.isfinite(alone).all() and np.isfinite(batch).all()):
        return float("inf")
    scale = max(np.abs(alone).max(initial=0.0), np.abs(batch).max(initial=0.0))
    diff = np.abs(alone - batch).max(initial=0.0)
    return 0.0 if diff == 0.0 else float(diff / scale)

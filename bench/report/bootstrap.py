"""Bootstrap intervals of a run's image-level ROC-AUC_CL, BWT (Eq. 2 and as released) and FM over its test images,
from the stored per-image scores.

Task j's test set is the same at every step, so one resample of its images is drawn and reused for every cell
R[i, j] (the cells of a column stay paired, as in the run). Resampling is stratified (normal and anomalous images
separately) so every resample keeps both classes and every cell defined. The interval covers sampling of the test
images only, not seeds, training data or task order.
"""

from __future__ import annotations

import numpy as np

from bench.errors import BenchError

# How the resamples are drawn; recorded in the manifest, so that intervals published by other draws are never
# reused as if this code had made them (bench.report.aggregate). v1 drew each class's counts with
# Generator.multinomial (k sequential binomial draws per resample: 70 % of a 1,000-file aggregate's bootstrap);
# v2 draws the same multinomial as k uniform indices per resample, counted.
DRAWS = "stratified-uniform-indices-v2"


def weighted_auc(scores: np.ndarray, positive: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """ROC-AUC (ties ½) of `scores` [n] for every column of `weights` [n, B]: how many times each image is in
    that resample. As in bench.metrics: per anomalous image, the (drawn) normal images below and equal to it; one
    sort of the normal scores serves all B resamples."""
    neg = np.flatnonzero(~positive)
    neg = neg[np.argsort(scores[neg], kind="stable")]
    cum = np.zeros((neg.size + 1, weights.shape[1]))
    np.cumsum(weights[neg], axis=0, out=cum[1:])  # cum[k]: drawn normals among the k lowest
    pos = np.flatnonzero(positive)
    left = np.searchsorted(scores[neg], scores[pos], "left")
    right = np.searchsorted(scores[neg], scores[pos], "right")
    w = weights[pos]
    return (w * (cum[left] + cum[right])).sum(0) / (2 * w.sum(0) * cum[-1])


def resample_counts(rng: np.random.Generator, k: int, n_boot: int) -> np.ndarray:
    """[k, n_boot]: how often each of k items is drawn in each of n_boot resamples of k draws with replacement
    (a multinomial with equal probabilities), as k uniform indices per resample counted in one bincount."""
    draws = rng.integers(0, k, size=(n_boot, k)) + np.arange(n_boot)[:, None] * k
    return np.bincount(draws.ravel(), minlength=n_boot * k).reshape(n_boot, k).T.astype(float)


def _blocks(run: dict) -> dict[tuple[int, int], np.ndarray]:
    """{(step, task): positions of that evaluation's scores, in test-set order}."""
    step, task = run["scores/step"].astype(np.int64), run["scores/task"].astype(np.int64)
    keys = step * (int(task.max()) + 1) + task
    order = np.argsort(keys, kind="stable")
    _, first = np.unique(keys[order], return_index=True)
    return {(int(step[order[a]]), int(task[order[a]])): order[a:b]
            for a, b in zip(first, [*first[1:], len(order)])}


def r_replicates(run: dict, n_boot: int, seed: int = 0) -> np.ndarray | None:
    """[n_boot, N, N] bootstrap replicates of R/image (NaN where R has no value or the test set is one-class), or
    None when the file holds no scores. Column j's cells all use the same resample of task j's test images."""
    if "scores/value" not in run or n_boot <= 0:
        return None
    labels, values = run["scores/label"].astype(bool), run["scores/value"].astype(float)
    blocks = _blocks(run)
    done, n = int(run["attrs"]["steps_done"]), int(run["attrs"]["n_tasks"])
    rng = np.random.default_rng(seed)
    out = np.full((n_boot, n, n), np.nan)
    for j in range(done):
        y = labels[blocks[(j, j)]]
        pos, neg = np.flatnonzero(y), np.flatnonzero(~y)
        if not pos.size or not neg.size:
            continue  # one-class test set: its cells are NaN and Eq. 1 skips them
        weights = np.zeros((y.size, n_boot))
        weights[pos] = resample_counts(rng, pos.size, n_boot)
        weights[neg] = resample_counts(rng, neg.size, n_boot)
        for i in range(j, done):
            block = blocks[(i, j)]
            if not np.array_equal(labels[block], y):
                raise BenchError(f"{run['attrs']['run_name']}: scores of task {j} differ between steps {j} and {i}")
            out[:, i, j] = weighted_auc(values[block], y, weights)
    return out[:, :done, :done]


def _nanmean(x: np.ndarray) -> np.ndarray:
    """Mean over the last axis skipping NaN; NaN (no warning) where a row has none."""
    finite = np.isfinite(x)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(finite, x, 0).sum(-1) / finite.sum(-1)


def continual_metrics(R: np.ndarray) -> dict[str, np.ndarray]:
    """ROC-AUC_CL, BWT, BWT as released and FM of each matrix of a stack R [B, N, N], as bench.metrics.summarize
    computes them for one (continual_roc_auc, bwt, bwt_consecutive, forgetting: NaN terms skipped), vectorised
    over the B resamples."""
    n = R.shape[-1]
    lo, below = np.tril_indices(n), np.tril_indices(n, -1)
    out = {"roc_auc_cl": _nanmean(R[:, lo[0], lo[1]]),
           "bwt": _nanmean(R[:, below[0], below[1]] - R[:, below[1], below[1]]),
           # the released code's consecutive differences R[i, j] − R[i−1, j]: the same resample of column j
           "bwt_released": _nanmean(R[:, below[0], below[1]] - R[:, below[0] - 1, below[1]])}
    last = n - 1
    # FM: max over steps j..N-2 of R[l, j] minus the final R[N-1, j]; np.max propagates a NaN term, which is skipped
    drops = [R[:, j:last, j].max(axis=1) - R[:, last, j] for j in range(last)]
    out["forgetting"] = _nanmean(np.stack(drops, axis=1)) if drops else np.full(len(R), np.nan)
    return out


INTERVAL_METRICS = ("roc_auc_cl", "bwt", "bwt_released", "forgetting")


def run_intervals(run: dict, n_boot: int = 1000, seed: int = 0, level: float = 0.95) -> dict[str, tuple[float, float]]:
    """{metric: percentile interval (default 95 %)} of image ROC-AUC_CL, BWT (both forms) and FM from one set of
    resamples; (NaN, NaN) without stored scores or where a metric is undefined (BWT and FM of a one-task stream)."""
    reps = r_replicates(run, n_boot, seed)
    if reps is None:
        return {m: (np.nan, np.nan) for m in INTERVAL_METRICS}
    out = {}
    for metric, samples in continual_metrics(reps).items():
        samples = samples[np.isfinite(samples)]
        if not samples.size:
            out[metric] = (np.nan, np.nan)
            continue
        lo, hi = np.percentile(samples, [50 * (1 - level), 50 * (1 + level)])
        out[metric] = (float(lo), float(hi))
    return out


def roc_auc_cl_samples(run: dict, n_boot: int, seed: int = 0) -> np.ndarray | None:
    """[n_boot] bootstrap replicates of image ROC-AUC_CL (InCLAD Eq. 1), or None when the file holds no scores."""
    reps = r_replicates(run, n_boot, seed)
    if reps is None:
        return None
    samples = continual_metrics(reps)["roc_auc_cl"]
    return None if np.isnan(samples).all() else samples


def roc_auc_cl_interval(run: dict, n_boot: int = 1000, seed: int = 0, level: float = 0.95) -> tuple[float, float]:
    """Percentile interval (default 95 %) of image ROC-AUC_CL; (NaN, NaN) without stored scores."""
    return run_intervals(run, n_boot, seed, level)["roc_auc_cl"]

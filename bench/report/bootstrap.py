"""Bootstrap interval for a run's image-level ROC-AUC_CL over its test images, from the stored per-image scores.

Task j's test set is the same at every step, so one resample of its images is drawn and reused for every cell
R[i, j] (the cells of a column stay paired, as in the run). Resampling is stratified (normal and anomalous images
separately) so every resample keeps both classes and every cell defined. The interval covers sampling of the test
images only, not seeds, training data or task order.
"""

from __future__ import annotations

import numpy as np

from bench.errors import BenchError


def _midranks(x: np.ndarray) -> np.ndarray:
    """Row-wise ranks 1..n of `x` [B, n], tied values sharing their mean rank (scipy's rankdata, row by row,
    without importing scipy.stats, which alone takes seconds)."""
    order = np.argsort(x, axis=1, kind="stable")
    s = np.take_along_axis(x, order, 1)
    n = s.shape[1]
    idx = np.broadcast_to(np.arange(n), s.shape)
    starts = np.ones(s.shape, bool)
    starts[:, 1:] = s[:, 1:] != s[:, :-1]
    ends = np.ones(s.shape, bool)
    ends[:, :-1] = starts[:, 1:]
    first = np.maximum.accumulate(np.where(starts, idx, 0), axis=1)
    last = np.minimum.accumulate(np.where(ends, idx, n - 1)[:, ::-1], axis=1)[:, ::-1]
    ranks = np.empty(s.shape)
    np.put_along_axis(ranks, order, (first + last) / 2 + 1, 1)
    return ranks


def _auc_rows(scores: np.ndarray, n_pos: int) -> np.ndarray:
    """ROC-AUC of each row of `scores` [B, n] whose first n_pos columns are the anomalous images (ties ½)."""
    ranks = _midranks(scores)
    n_neg = scores.shape[1] - n_pos
    return (ranks[:, :n_pos].sum(1) - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


def roc_auc_cl_samples(run: dict, n_boot: int, seed: int = 0) -> np.ndarray | None:
    """[n_boot] bootstrap replicates of image ROC-AUC_CL (InCLAD Eq. 1), or None when the file holds no scores."""
    if "scores/value" not in run or n_boot <= 0:
        return None
    step, task = run["scores/step"].astype(int), run["scores/task"].astype(int)
    labels, values = run["scores/label"].astype(bool), run["scores/value"].astype(float)
    done = int(run["attrs"]["steps_done"])
    rng = np.random.default_rng(seed)
    total, count = np.zeros(n_boot), 0
    for j in range(done):
        first = (step == j) & (task == j)
        pos, neg = np.flatnonzero(labels[first]), np.flatnonzero(~labels[first])
        if not pos.size or not neg.size:
            continue  # one-class test set: its cells are NaN and Eq. 1 skips them
        draws = np.concatenate([rng.choice(pos, (n_boot, pos.size)), rng.choice(neg, (n_boot, neg.size))], axis=1)
        for i in range(j, done):
            cell = (step == i) & (task == j)
            if not np.array_equal(labels[cell], labels[first]):
                raise BenchError(f"{run['attrs']['run_name']}: scores of task {j} differ between steps {j} and {i}")
            total += _auc_rows(values[cell][draws], pos.size)
            count += 1
    return total / count if count else None


def roc_auc_cl_interval(run: dict, n_boot: int = 1000, seed: int = 0, level: float = 0.95) -> tuple[float, float]:
    """Percentile interval (default 95 %) of image ROC-AUC_CL; (NaN, NaN) without stored scores."""
    samples = roc_auc_cl_samples(run, n_boot, seed)
    if samples is None:
        return np.nan, np.nan
    lo, hi = np.percentile(samples, [50 * (1 - level), 50 * (1 + level)])
    return float(lo), float(hi)

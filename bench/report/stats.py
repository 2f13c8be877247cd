"""Paired tests over (dataset × ordering) blocks: is CL better than NCL, and which method is best?

A *method* is model × backbone × weights (bench.report.render.METHOD); its value in a block is the mean of its seeds
there (Table 2's rule: seeds are averaged within a method first), so seeds are not counted as independent blocks.

- CL vs NCL per method: Wilcoxon signed-rank test (two-sided, scipy.stats.wilcoxon) over the blocks where the
  method ran under both protocols, p-values Holm-corrected across the methods of one level.
- Across methods: the Friedman test over the blocks in which every compared method ran, then the Nemenyi post-hoc
  test drawn as a critical-difference diagram (Demšar 2006, JMLR 7: 1-30, §3.2.2): two methods differ when their
  average ranks differ by at least CD = q_α √(k(k+1) / (6N)), q_α the studentized range quantile / √2.

A test is run only when its blocks could reach significance at all: with N blocks the smallest two-sided exact
Wilcoxon p is 2/2^N, and the largest Friedman statistic (every block ranking the methods alike) is N(k−1). With
fewer blocks the rows say "too few blocks" instead of printing a p that cannot mean anything.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

from bench.report import specs
from bench.report.render import METHOD

ALPHA = 0.05
BLOCK = ("dataset", "ordering")
LEVEL_METRIC = "roc_auc_cl"  # the metric the tests compare (each level's ROC-AUC_CL, Table 2's headline)
WILCOXON = "Wilcoxon signed-rank (two-sided)"
HOLM = "Holm"
FRIEDMAN = "Friedman (chi-square)"
NEMENYI = "Nemenyi"
# The Friedman tests (one per level × protocol) answer separate questions and are not adjusted for one another;
# Nemenyi's critical difference already holds the family-wise error over a test's pairs of methods
# Every method equal in every block (all at 1.0 on easy data): the ranks all tie and the statistic is 0/0
NO_DIFFERENCES = "no differences to test: every method has the same value in every block"
FRIEDMAN_CORRECTION = "none (one test per level × protocol; Nemenyi's CD is family-wise over its pairs)"


def holm(pvalues) -> np.ndarray:
    """Holm's step-down adjusted p-values (same order as given; NaN stays NaN and is not counted)."""
    p = np.asarray(pvalues, dtype=float)
    out = np.full(p.shape, np.nan)
    finite = np.flatnonzero(np.isfinite(p))
    order = finite[np.argsort(p[finite], kind="stable")]
    m, running = len(order), 0.0
    for rank, idx in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[idx]))  # monotone: never below an earlier step's value
        out[idx] = running
    return out


def block_table(runs: pd.DataFrame, level: str, protocol: str, metric: str = LEVEL_METRIC) -> pd.DataFrame:
    """Blocks (dataset × ordering) × methods of one level and protocol: each method's seeds averaged; NaN values
    (e.g. pixel metrics of a detector without maps) are left out."""
    col = f"{level}_{metric}"
    if col not in runs:
        return pd.DataFrame()
    sub = runs[(runs["protocol"] == protocol) & runs[col].notna()]
    if sub.empty:
        return pd.DataFrame()
    return sub.groupby([*BLOCK, *METHOD], sort=True)[col].mean().unstack(list(METHOD))


def min_wilcoxon_p(n: int) -> float:
    return 2.0 / 2 ** n if n else 1.0


def min_friedman_p(n: int, k: int) -> float:
    return float(stats.chi2.sf(n * (k - 1), k - 1)) if n and k > 1 else 1.0


def cl_vs_ncl(runs: pd.DataFrame, levels=("image", "pixel"), metric: str = LEVEL_METRIC) -> pd.DataFrame:
    """One row per level × method: the paired CL − NCL comparison over the blocks with both protocols."""
    rows = []
    for level in levels:
        ncl, cl = block_table(runs, level, "ncl", metric), block_table(runs, level, "cl", metric)
        level_rows = []
        for method in sorted(set(ncl.columns) & set(cl.columns)):
            pair = pd.concat([ncl[method], cl[method]], axis=1, keys=["ncl", "cl"]).dropna()
            n = len(pair)
            row = {"level": level, "metric": metric, **dict(zip(METHOD, method)), "n_blocks": n,
                   "ncl_mean": float(pair["ncl"].mean()) if n else np.nan,
                   "cl_mean": float(pair["cl"].mean()) if n else np.nan,
                   "median_difference": float((pair["cl"] - pair["ncl"]).median()) if n else np.nan,
                   "statistic": np.nan, "p": np.nan, "test": WILCOXON, "correction": HOLM, "note": ""}
            if min_wilcoxon_p(n) >= ALPHA:
                row["note"] = (f"too few blocks ({n}): with {n} paired blocks the smallest attainable p is "
                               f"{min_wilcoxon_p(n):.3g} ≥ {ALPHA}")
            elif (pair["cl"] == pair["ncl"]).all():
                row["note"] = "CL and NCL equal in every block"
            else:
                res = stats.wilcoxon(pair["cl"], pair["ncl"])
                row.update(statistic=float(res.statistic), p=float(res.pvalue))
            level_rows.append(row)
        adjusted = holm([r["p"] for r in level_rows])
        for r, a in zip(level_rows, adjusted):
            r["p_holm"] = float(a)
        rows += level_rows
    return pd.DataFrame(rows, columns=[c.name for c in specs.CL_VS_NCL.columns])


def critical_difference(k: int, n: int, alpha: float = ALPHA) -> float:
    """Nemenyi's critical difference of average ranks for k methods over n blocks (Demšar 2006, §3.2.2)."""
    q = stats.studentized_range.ppf(1 - alpha, k, np.inf) / np.sqrt(2)
    return float(q * np.sqrt(k * (k + 1) / (6.0 * n)))


def average_ranks(table: np.ndarray) -> np.ndarray:
    """Mean rank of each column over the rows; rank 1 = the highest value in a block, ties share the mean rank."""
    return stats.rankdata(-np.asarray(table, dtype=float), axis=1).mean(axis=0)


def friedman(runs: pd.DataFrame, levels=("image", "pixel"), protocols=("ncl", "cl"),
             metric: str = LEVEL_METRIC) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(tests, ranks): one test row per level × protocol, one rank row per method compared in it."""
    tests, ranks = [], []
    for level in levels:
        for protocol in protocols:
            table = block_table(runs, level, protocol, metric)
            if table.empty:
                continue
            complete = table.dropna(axis=1, how="any")  # a method missing from a block cannot be ranked in it
            dropped = [m for m in table.columns if m not in complete.columns]
            n, k = complete.shape
            row = {"level": level, "protocol": protocol, "metric": metric, "n_blocks": n, "n_methods": k,
                   "statistic": np.nan, "p": np.nan, "test": FRIEDMAN, "correction": FRIEDMAN_CORRECTION,
                   "post_hoc": NEMENYI, "alpha": ALPHA,
                   "critical_difference": np.nan,
                   "left_out": "; ".join(" ".join(str(x) for x in m if x) for m in dropped), "note": ""}
            if k < 3:
                row["note"] = f"too few methods ({k}) in every block: the Friedman test compares at least 3"
            elif min_friedman_p(n, k) >= ALPHA:
                row["note"] = (f"too few blocks ({n}): even {n} identical rankings of {k} methods give "
                               f"p = {min_friedman_p(n, k):.3g} ≥ {ALPHA}")
            elif (complete.nunique(axis=1) == 1).all():
                row["note"] = NO_DIFFERENCES
            else:
                res = stats.friedmanchisquare(*complete.to_numpy().T)
                if not np.isfinite(res.statistic):  # ties scipy cannot correct for: no test, no diagram
                    row["note"] = NO_DIFFERENCES
                else:
                    row.update(statistic=float(res.statistic), p=float(res.pvalue),
                               critical_difference=critical_difference(k, n))
            tests.append(row)
            if k:
                for method, r in zip(complete.columns, average_ranks(complete.to_numpy())):
                    ranks.append({"level": level, "protocol": protocol, "metric": metric,
                                  **dict(zip(METHOD, method)), "mean_rank": float(r), "n_blocks": n})
    return (pd.DataFrame(tests, columns=[c.name for c in specs.FRIEDMAN.columns]),
            pd.DataFrame(ranks, columns=[c.name for c in specs.FRIEDMAN_RANKS.columns]))


def cliques(mean_ranks: list[float], cd: float) -> list[tuple[int, int]]:
    """Maximal runs [a, b] of the methods sorted by rank whose ranks lie within CD: the bars of a CD diagram
    (methods joined by one are not significantly different by the Nemenyi test)."""
    order = sorted(mean_ranks)
    spans = []
    for a in range(len(order)):
        b = a
        while b + 1 < len(order) and order[b + 1] - order[a] < cd:
            b += 1
        if b > a and not any(x <= a and b <= y for x, y in spans):
            spans.append((a, b))
    return spans

"""Tabular-track reports (issue 15 §3, the tabular scenario paper's Table 2 and validation criteria).

`tabular_table2`: one row per scenario (dataset × ordering) × model × metric, one column per reference strategy
(Naive = ncl, Cumulative, MSTE, Replay = cl): ROC-AUC_CL, normalised PR-AUC_CL with its prevalence p beside it, and
FM (Chaudhry et al.), each with a 95 % bootstrap interval over the evaluated records (bench.report.intervals:
stratified resampling of each task's test records, one resample per task shared by every cell of its column and by
every strategy, so intervals of one scenario are paired). With several seeds a cell is the seed mean, every seed's
value listed, and its interval the percentiles of the seed-mean of each resample.

`validation_table`: the three validation criteria as measured gaps, not pass/fail: feasibility (the best
ROC-AUC_CL of MSTE and Cumulative, minus 0.5, a random ranking's), non-triviality (best of Replay, Cumulative and
MSTE minus Naive) and forgetting (Naive's FM, beside MSTE's).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from bench.metrics import continual_roc_auc, forgetting
from bench.report.intervals import r_samples
from bench.report.render import markdown_table

STRATEGIES = (("ncl", "Naive"), ("cumulative", "Cumulative"), ("mste", "MSTE"), ("cl", "Replay"))
METRICS = ("roc_auc_cl", "npr_auc_cl", "fm")
KEYS = ["dataset", "ordering", "model", "metric", "protocol"]


def _replicates(run: dict, n_boot: int, seed: int) -> dict:
    """{metric: [n_boot] bootstrap replicates} of one tabular run (empty arrays when n_boot is 0)."""
    if n_boot <= 0:
        return {m: np.empty(0) for m in METRICS}
    step, task = run["scores/step"].astype(int), run["scores/task"].astype(int)
    n = len(run["tasks"])
    scores, labels = {}, {}
    for i, j in set(zip(step.tolist(), task.tolist())):
        if j > i:  # cross-evaluation cells are not part of the continual summaries
            continue
        sel = (step == i) & (task == j)
        order = np.argsort(run["scores/record"][sel], kind="stable")  # the same record order at every step
        scores[(i, j)], labels[j] = run["scores/value"][sel][order], run["scores/label"][sel][order]
    roc = r_samples(scores, labels, n, metric="roc_auc", n_boot=n_boot, seed=seed)
    npr = r_samples(scores, labels, n, metric="npr_auc", n_boot=n_boot, seed=seed)
    return {"roc_auc_cl": np.array([continual_roc_auc(r) for r in roc]),
            "npr_auc_cl": np.array([continual_roc_auc(r) for r in npr]),
            "fm": np.array([forgetting(r) for r in roc])}


def _values(run: dict) -> dict:
    tri = np.tril_indices(len(run["tasks"]))
    return {"roc_auc_cl": continual_roc_auc(run["R/record"]), "npr_auc_cl": continual_roc_auc(run["R/record_npr_auc"]),
            "fm": forgetting(run["R/record"]), "prevalence": float(np.nanmean(run["R/record_prevalence"][tri]))}


def tabular_table2(runs: pd.DataFrame, details: dict, n_boot: int = 1000, seed: int = 0) -> pd.DataFrame:
    """Long table: KEYS + value, ci_low, ci_high, prevalence (nPR-AUC rows), n_seeds, seed_values."""
    tab = runs[runs["track"] == "tabular"]
    rows = []
    for (dataset, ordering, model, protocol), cell in tab.groupby(["dataset", "ordering", "model", "protocol"]):
        per_seed = {int(r.seed): (_values(details[r.run_key]), _replicates(details[r.run_key], n_boot, seed))
                    for r in cell.itertuples()}
        for metric in METRICS:
            values = {s: v[metric] for s, (v, _) in per_seed.items()}
            reps = np.nanmean(np.stack([b[metric] for _, b in per_seed.values()]), 0) if n_boot > 0 else np.empty(0)
            reps = reps[np.isfinite(reps)]
            low, high = np.percentile(reps, [2.5, 97.5]) if reps.size else (np.nan, np.nan)
            rows.append({"dataset": dataset, "ordering": ordering, "model": model, "metric": metric,
                         "protocol": protocol, "value": float(np.mean(list(values.values()))),
                         "ci_low": float(low), "ci_high": float(high),
                         "prevalence": float(np.mean([v["prevalence"] for v, _ in per_seed.values()]))
                         if metric == "npr_auc_cl" else np.nan,
                         "n_seeds": len(values),
                         "seed_values": " ".join(f"{s}:{values[s]:.4f}" for s in sorted(values))})
    return pd.DataFrame(rows, columns=KEYS + ["value", "ci_low", "ci_high", "prevalence", "n_seeds", "seed_values"])


def _cell(row) -> str:
    if row is None:
        return "–"
    text = f"{100 * row.value:.1f}"
    if np.isfinite(row.ci_low):
        text += f" [{100 * row.ci_low:.1f}, {100 * row.ci_high:.1f}]"
    if row.metric == "npr_auc_cl":
        text += f" (p {100 * row.prevalence:.1f})"
    return text


def table2_markdown(long: pd.DataFrame, footer: list[str]) -> str:
    header = ["Scenario", "Ordering", "Model", "Metric", *[name for _, name in STRATEGIES]]
    names = {"roc_auc_cl": "ROC-AUC_CL", "npr_auc_cl": "nPR-AUC_CL", "fm": "FM"}
    cells = {tuple(r[:5]): r for r in long.itertuples(index=False)}
    rows = []
    for dataset, ordering, model in sorted({k[:3] for k in cells}):
        for metric in METRICS:
            rows.append([dataset, ordering, model, names[metric],
                         *[_cell(cells.get((dataset, ordering, model, metric, p))) for p, _ in STRATEGIES]])
    note = ("Values ×100, 95 % bootstrap interval over the evaluated records in brackets; nPR-AUC with its "
            "prevalence p. A cell averages the seeds (tabular_table2.csv lists each seed's value).")
    return "\n".join(["# Tabular Table 2", "", *markdown_table(header, rows), "", note, *footer]) + "\n"


def validation_table(long: pd.DataFrame) -> pd.DataFrame:
    """Per scenario × model: feasibility, non-triviality and forgetting as measured gaps (NaN where a strategy
    the criterion needs was not run)."""
    value = {tuple(r[:5]): r.value for r in long.itertuples(index=False)}
    rows = []
    for dataset, ordering, model in sorted({k[:3] for k in value}):
        get = lambda metric, p: value.get((dataset, ordering, model, metric, p), np.nan)  # noqa: E731
        strong = {p: get("roc_auc_cl", p) for p in ("mste", "cumulative")}
        best_strong = max((v for v in strong.values() if np.isfinite(v)), default=np.nan)
        refs = [get("roc_auc_cl", p) for p in ("cl", "cumulative", "mste")]
        best_ref = max((v for v in refs if np.isfinite(v)), default=np.nan)
        rows.append({"dataset": dataset, "ordering": ordering, "model": model,
                     "feasibility_best_strong_roc_auc_cl": best_strong,
                     "feasibility_gap_over_random": best_strong - 0.5,
                     "naive_roc_auc_cl": get("roc_auc_cl", "ncl"),
                     "non_triviality_gap": best_ref - get("roc_auc_cl", "ncl"),
                     "forgetting_naive_fm": get("fm", "ncl"), "forgetting_mste_fm": get("fm", "mste")})
    return pd.DataFrame(rows)


def validation_markdown(table: pd.DataFrame, footer: list[str]) -> str:
    header = ["Scenario", "Ordering", "Model", "Feasibility: best of MSTE/Cumulative (− 0.5)",
              "Non-triviality: best reference − Naive", "Forgetting: Naive FM (MSTE FM)"]
    pct = lambda v: "–" if not np.isfinite(v) else f"{100 * v:.1f}"  # noqa: E731
    rows = [[r.dataset, r.ordering, r.model,
             f"{pct(r.feasibility_best_strong_roc_auc_cl)} ({pct(r.feasibility_gap_over_random)})",
             pct(r.non_triviality_gap), f"{pct(r.forgetting_naive_fm)} ({pct(r.forgetting_mste_fm)})"]
            for r in table.itertuples(index=False)]
    note = ("Measured gaps (×100, ROC-AUC_CL and FM), not pass/fail: the required levels depend on the dataset and "
            "the intended use.")
    return "\n".join(["# Scenario validation criteria", "", *markdown_table(header, rows), "", note, *footer]) + "\n"

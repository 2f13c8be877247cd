"""Tabular-track reports (issue 15 §3, the tabular scenario paper's Table 2 and validation criteria).

`tabular_cells` evaluates every run once: its ROC-AUC_CL, normalised PR-AUC_CL (with the prevalence p) and FM, and
their bootstrap replicates over the evaluated records (bench.report.intervals). Where the run stored its records'
stream order (`scores/order`, the rank of each record's timestamp in its test set), a test set is resampled with
the moving-block bootstrap (blocks of `intervals.BLOCK` records), and again with blocks twice as long as the
sensitivity run; a test set no longer than a block, and every test set of a run without an order (older files, or an
index without timestamps), gets the stratified bootstrap. One resample per task is shared by every cell of its
column and by every strategy and seed of the scenario (`r_samples` draws it from (bootstrap seed, task) alone), so
the replicates of two strategies are paired. With several seeds a cell is the seed mean, every seed's value
listed, and its interval the percentiles of the seed-mean of each resample.

`tabular_table2`: one row per scenario (dataset × ordering) × model × metric × strategy (Naive = ncl, Cumulative,
MSTE, Replay = cl), with the interval, the method that made it and the long-block interval beside it.

`validation_table`: the three validation criteria as measured gaps, not pass/fail, each with its 95 % interval:
feasibility (the best ROC-AUC_CL of MSTE and Cumulative, minus 0.5, a random ranking's), non-triviality (best of
Replay, Cumulative and MSTE minus Naive, and each of them minus Naive: paired differences of the shared resamples)
and forgetting (Naive's FM, beside MSTE's).

`run_length_table`: the contiguous anomaly runs of every test set in stream order (the reason for the block).
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from bench.metrics import continual_roc_auc, forgetting
from bench.report.collect import ProvenanceError
from bench.report.intervals import BLOCK, placement_flips, r_samples, run_length_stats
from bench.report.render import markdown_table

LEVELS = ("record",)  # the R matrices of a tabular run (R/record), drawn by bench.report.heatmaps
STRATEGIES = (("ncl", "Naive"), ("cumulative", "Cumulative"), ("mste", "MSTE"), ("cl", "Replay"))
METRICS = ("roc_auc_cl", "npr_auc_cl", "fm")
METRIC_NAMES = {"roc_auc_cl": "ROC-AUC_CL", "npr_auc_cl": "nPR-AUC_CL", "fm": "FM"}
KEYS = ["dataset", "ordering", "model", "metric", "protocol"]
LONG_BLOCK = 2 * BLOCK  # the sensitivity run's block
COLUMNS = KEYS + ["value", "ci_low", "ci_high", "method", "ci_low_long", "ci_high_long", "stratified_tasks",
                  "prevalence", "n_seeds", "seed_values"]


def _test_sets(run: dict) -> tuple[dict, dict, dict | None]:
    """(scores {(i, j): [n]}, labels {j: [n]}, stream order {j: [n]} or None) of the continual cells, every test
    set's records sorted by record id (the same order at every step)."""
    step, task = run["scores/step"].astype(int), run["scores/task"].astype(int)
    stored = run.get("scores/order")
    name = run.get("attrs", {}).get("run_name", "a tabular run")
    if stored is not None and stored.shape != step.shape:
        raise ProvenanceError(f"{name}: scores/order holds {stored.size} positions for {step.size} scores")
    scores, labels, order = {}, {}, {}
    for i, j in set(zip(step.tolist(), task.tolist())):
        if j > i:  # cross-evaluation cells are not part of the continual summaries
            continue
        sel = np.flatnonzero((step == i) & (task == j))
        sel = sel[np.argsort(run["scores/record"][sel], kind="stable")]
        scores[(i, j)], labels[j] = run["scores/value"][sel], run["scores/label"][sel]
        if stored is not None:
            order[j] = stored[sel]
            if not np.array_equal(np.sort(order[j]), np.arange(sel.size)):
                raise ProvenanceError(f"{name}: scores/order of task {j} at step {i} is not a ranking of its "
                                      f"{sel.size} records (expected each of 0..{sel.size - 1} once)")
    return scores, labels, order if stored is not None else None


def _in_blocks(order: dict | None, block: int) -> dict:
    """The test sets resampled in blocks of `block`: those with a stream order and more records than a block."""
    return {j: o for j, o in (order or {}).items() if o.size > block}


def _replicates(run: dict, n_boot: int, seed: int) -> tuple[dict, str, list]:
    """({metric: [n_boot] replicates, metric + "_long": long-block replicates}, method, tasks on stratified
    resampling although the run has a stream order)."""
    scores, labels, order = _test_sets(run)
    n = len(run["tasks"])
    out, in_blocks = {}, _in_blocks(order, BLOCK)
    for suffix, block in (("", BLOCK), ("_long", LONG_BLOCK)):
        stamps = in_blocks if block == BLOCK else _in_blocks(order, block)
        if suffix and not stamps:
            out.update({m + suffix: np.full(max(n_boot, 0), np.nan) for m in METRICS})
            continue
        if n_boot <= 0:
            out.update({m + suffix: np.empty(0) for m in METRICS})
            continue
        roc = r_samples(scores, labels, n, stamps, "roc_auc", block, n_boot, seed)
        npr = r_samples(scores, labels, n, stamps, "npr_auc", block, n_boot, seed)
        out.update({"roc_auc_cl" + suffix: np.array([continual_roc_auc(r) for r in roc]),
                    "npr_auc_cl" + suffix: np.array([continual_roc_auc(r) for r in npr]),
                    "fm" + suffix: np.array([forgetting(r) for r in roc])})
    method = "stratified" if not in_blocks else "block" if len(in_blocks) == len(labels) else "block+stratified"
    short = [run["tasks"][j] for j in sorted(labels) if order is not None and j not in in_blocks]
    return out, method, short


def _values(run: dict) -> dict:
    tri = np.tril_indices(len(run["tasks"]))
    return {"roc_auc_cl": continual_roc_auc(run["R/record"]), "npr_auc_cl": continual_roc_auc(run["R/record_npr_auc"]),
            "fm": forgetting(run["R/record"]), "prevalence": float(np.nanmean(run["R/record_prevalence"][tri]))}


def _percentiles(reps: np.ndarray) -> tuple[float, float]:
    reps = reps[np.isfinite(reps)]
    return tuple(float(v) for v in np.percentile(reps, [2.5, 97.5])) if reps.size else (np.nan, np.nan)


def tabular_cells(runs: pd.DataFrame, details: dict, n_boot: int = 1000, seed: int = 0) -> dict:
    """{(dataset, ordering, model, protocol): {"values": {seed: {metric: value}}, "reps": {metric[_long]:
    seed-mean replicates}, "method", "stratified_tasks"}} of the tabular runs."""
    tab = runs[runs["track"] == "tabular"]
    cells = {}
    for key, cell in tab.groupby(["dataset", "ordering", "model", "protocol"]):
        per_seed = {int(r.seed): (_values(details[r.run_key]), _replicates(details[r.run_key], n_boot, seed))
                    for r in cell.itertuples()}
        first = next(iter(per_seed.values()))[1]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN replicates (no long block) stay NaN
            reps = {m: np.nanmean(np.stack([b[0][m] for _, b in per_seed.values()]), 0) for m in first[0]}
        cells[key] = {"values": {s: v for s, (v, _) in per_seed.items()}, "reps": reps, "method": first[1],
                      "stratified_tasks": first[2]}
    return cells


def tabular_table2(cells: dict) -> pd.DataFrame:
    """Long table: KEYS + value, ci_low, ci_high, method (block | stratified | block+stratified), the long-block
    interval (NaN where no test set is longer than the long block), stratified_tasks (test sets too short for a
    block), prevalence (nPR-AUC rows), n_seeds, seed_values."""
    rows = []
    for (dataset, ordering, model, protocol), c in cells.items():
        for metric in METRICS:
            values = {s: v[metric] for s, v in c["values"].items()}
            low, high = _percentiles(c["reps"][metric])
            low_long, high_long = _percentiles(c["reps"][metric + "_long"])
            rows.append({"dataset": dataset, "ordering": ordering, "model": model, "metric": metric,
                         "protocol": protocol, "value": float(np.mean(list(values.values()))),
                         "ci_low": low, "ci_high": high, "method": c["method"],
                         "ci_low_long": low_long, "ci_high_long": high_long,
                         "stratified_tasks": " ".join(c["stratified_tasks"]),
                         "prevalence": float(np.mean([v["prevalence"] for v in c["values"].values()]))
                         if metric == "npr_auc_cl" else np.nan,
                         "n_seeds": len(values),
                         "seed_values": " ".join(f"{s}:{values[s]:.4f}" for s in sorted(values))})
    return pd.DataFrame(rows, columns=COLUMNS)


def run_length_table(runs: pd.DataFrame, details: dict) -> pd.DataFrame:
    """Per scenario (dataset × ordering) and test set in stream order: records, anomalies and the contiguous
    anomaly runs (count, median, p90, max). Empty for runs without a stream order."""
    tab = runs[runs["track"] == "tabular"]
    rows = []
    for (dataset, ordering), cell in tab.groupby(["dataset", "ordering"]):
        run = next((details[k] for k in cell["run_key"] if "scores/order" in details[k]), None)
        if run is None:
            continue
        _, labels, order = _test_sets(run)
        for j in sorted(labels):
            y = np.empty_like(labels[j])
            y[order[j]] = labels[j]  # labels in stream order
            rows.append({"dataset": dataset, "ordering": ordering, "task": run["tasks"][j], "records": y.size,
                         "anomalies": int(y.sum()), **run_length_stats(y)})
    return pd.DataFrame(rows, columns=["dataset", "ordering", "task", "records", "anomalies", "runs", "median",
                                       "p90", "max", "mean"])


def placement_table(cells: dict) -> pd.DataFrame:
    """Per scenario × model × metric run with several seeds: whether the strategies' order is the same at every
    seed (`placement_flips`; a reversed or tied pair is a flip, and such a placement is not claimed)."""
    rows, names = [], dict(STRATEGIES)
    for dataset, ordering, model in sorted({k[:3] for k in cells}):
        here = {p: cells[(dataset, ordering, model, p)] for p, _ in STRATEGIES if (dataset, ordering, model, p) in cells}
        seeds = [sorted(c["values"]) for c in here.values()]
        if len(here) < 2 or len(seeds[0]) < 2 or any(s != seeds[0] for s in seeds):
            continue  # one strategy or one seed: nothing can flip; unequal seed sets are not compared
        for metric in METRICS:
            result = placement_flips({names[p]: {s: v[metric] for s, v in c["values"].items()} for p, c in here.items()})
            rows.append({"dataset": dataset, "ordering": ordering, "model": model, "metric": metric,
                         "n_seeds": len(seeds[0]), "stable": result["stable"],
                         "flips": "; ".join(f"{a} vs {b}" for a, b in result["flips"])})
    return pd.DataFrame(rows, columns=["dataset", "ordering", "model", "metric", "n_seeds", "stable", "flips"])


def _cell(row) -> str:
    if row is None:
        return "–"
    text = f"{100 * row.value:.1f}"
    if np.isfinite(row.ci_low):
        text += f" [{100 * row.ci_low:.1f}, {100 * row.ci_high:.1f}]"
    if np.isfinite(row.ci_low_long):
        text += f" {{{100 * row.ci_low_long:.1f}, {100 * row.ci_high_long:.1f}}}"
    if row.metric == "npr_auc_cl":
        text += f" (p {100 * row.prevalence:.1f})"
    return text


def _method_note(long: pd.DataFrame) -> str:
    methods = set(long["method"])
    if methods == {"stratified"}:
        return ("Intervals: stratified bootstrap of each test set's records (the runs hold no stream order: no "
                "timestamps in the record index, or files written before scores/order).")
    text = (f"Intervals: moving-block bootstrap of each test set in stream (timestamp) order, blocks of {BLOCK} "
            f"records; in braces the sensitivity interval with blocks of {LONG_BLOCK}.")
    short = sorted({(r.dataset, r.ordering, t) for r in long.itertuples() for t in str(r.stratified_tasks).split()
                    if t and t != "nan"})
    if short:
        text += (f" Test sets of at most {BLOCK} records fall back to the stratified bootstrap: "
                 + ", ".join(f"{d}/{o}/{t}" for d, o, t in short) + ".")
    if "stratified" in methods:
        text += " Scenarios marked stratified in tabular_table2.csv (column method) have no stream order."
    return text


def table2_markdown(long: pd.DataFrame, footer: list[str], run_lengths: pd.DataFrame | None = None,
                    placements: pd.DataFrame | None = None) -> str:
    header = ["Scenario", "Ordering", "Model", "Metric", *[name for _, name in STRATEGIES]]
    cells = {tuple(r[:5]): r for r in long.itertuples(index=False)}
    rows = []
    for dataset, ordering, model in sorted({k[:3] for k in cells}):
        for metric in METRICS:
            rows.append([dataset, ordering, model, METRIC_NAMES[metric],
                         *[_cell(cells.get((dataset, ordering, model, metric, p))) for p, _ in STRATEGIES]])
    note = ("Values ×100, 95 % bootstrap interval over the evaluated records in brackets; nPR-AUC with its "
            "prevalence p. A cell averages the seeds (tabular_table2.csv lists each seed's value).")
    lines = ["# Tabular Table 2", "", *markdown_table(header, rows), "", note, "", _method_note(long)]
    if run_lengths is not None and len(run_lengths):
        fmt = lambda v: "–" if not np.isfinite(v) else f"{v:g}"  # noqa: E731
        lines += ["", f"Contiguous anomaly runs of the test sets in stream order (the block of {BLOCK} records "
                  "should exceed the typical run):", "",
                  *markdown_table(["Scenario", "Ordering", "Task", "Records", "Anomalies", "Runs", "Median", "p90",
                                   "Max"],
                                  [[r.dataset, r.ordering, r.task, str(r.records), str(r.anomalies), str(r.runs),
                                    fmt(r.median), fmt(r.p90), str(r.max)] for r in run_lengths.itertuples()])]
    if placements is not None and len(placements):
        flipped = placements[~placements["stable"]]
        lines += ["", f"Placements across seeds: {len(placements) - len(flipped)} of {len(placements)} scenario × "
                  "model × metric rows rank the strategies the same at every seed."]
        if len(flipped):
            lines += ["Flagged (the order of these strategies changes or ties across seeds; no placement is "
                      "claimed):", "", *markdown_table(["Scenario", "Ordering", "Model", "Metric", "Seeds", "Flips"],
                                                       [[r.dataset, r.ordering, r.model, METRIC_NAMES[r.metric],
                                                         str(r.n_seeds), r.flips] for r in flipped.itertuples()])]
    return "\n".join([*lines, *footer]) + "\n"


GAPS = (("cumulative", "cumulative_minus_naive"), ("mste", "mste_minus_naive"), ("cl", "replay_minus_naive"))


def _value(cells: dict, key: tuple, metric: str) -> float:
    c = cells.get(key)
    return float(np.mean([v[metric] for v in c["values"].values()])) if c else np.nan


def _gap(cells: dict, a: tuple, b: tuple | None, metric: str = "roc_auc_cl", shift: float = 0.0) -> tuple:
    """(value, low, high) of metric(a) − metric(b) − shift, the interval from the paired replicates; NaNs where
    a strategy is missing."""
    if a not in cells or (b is not None and b not in cells):
        return np.nan, np.nan, np.nan
    reps = cells[a]["reps"][metric] - (cells[b]["reps"][metric] if b is not None else 0.0) - shift
    value = _value(cells, a, metric) - (_value(cells, b, metric) if b is not None else 0.0) - shift
    return (value, *_percentiles(reps))


def validation_table(cells: dict) -> pd.DataFrame:
    """Per scenario × model: feasibility, non-triviality and forgetting as measured gaps with 95 % intervals
    (`*_low`, `*_high`; paired where a gap is a difference of two strategies), NaN where a strategy the criterion
    needs was not run."""
    rows = []
    for dataset, ordering, model in sorted({k[:3] for k in cells}):
        key = lambda p: (dataset, ordering, model, p)  # noqa: E731
        roc = {p: _value(cells, key(p), "roc_auc_cl") for p in ("ncl", "cl", "cumulative", "mste")}
        strong = max((p for p in ("mste", "cumulative") if np.isfinite(roc[p])), key=roc.get, default=None)
        ref = max((p for p in ("cl", "cumulative", "mste") if np.isfinite(roc[p])), key=roc.get, default=None)
        row = {"dataset": dataset, "ordering": ordering, "model": model,
               "feasibility_best_strong_roc_auc_cl": roc[strong] if strong else np.nan,
               "feasibility_best_strong": strong or ""}
        gaps = {"feasibility_gap_over_random": _gap(cells, key(strong), None, shift=0.5) if strong else (np.nan,) * 3,
                "naive_roc_auc_cl": _gap(cells, key("ncl"), None),
                "non_triviality_gap": _gap(cells, key(ref), key("ncl")) if ref else (np.nan,) * 3,
                **{name: _gap(cells, key(p), key("ncl")) for p, name in GAPS},
                "forgetting_naive_fm": _gap(cells, key("ncl"), None, "fm"),
                "forgetting_mste_fm": _gap(cells, key("mste"), None, "fm")}
        for name, (value, low, high) in gaps.items():
            row.update({name: value, f"{name}_low": low, f"{name}_high": high})
        row["non_triviality_best_reference"] = ref or ""
        rows.append(row)
    return pd.DataFrame(rows)


def validation_markdown(table: pd.DataFrame, footer: list[str]) -> str:
    header = ["Scenario", "Ordering", "Model", "Feasibility: best of MSTE/Cumulative − 0.5",
              "Non-triviality: best reference − Naive", "Cumulative − Naive", "MSTE − Naive", "Replay − Naive",
              "Forgetting: Naive FM", "MSTE FM"]

    def gap(r, name):
        v, low, high = (getattr(r, name), getattr(r, f"{name}_low"), getattr(r, f"{name}_high"))
        if not np.isfinite(v):
            return "–"
        return f"{100 * v:.1f}" + (f" [{100 * low:.1f}, {100 * high:.1f}]" if np.isfinite(low) else "")

    rows = [[r.dataset, r.ordering, r.model,
             gap(r, "feasibility_gap_over_random") + (f" ({r.feasibility_best_strong})" if r.feasibility_best_strong
                                                      else ""),
             gap(r, "non_triviality_gap") + (f" ({r.non_triviality_best_reference})"
                                             if r.non_triviality_best_reference else ""),
             *[gap(r, name) for _, name in GAPS], gap(r, "forgetting_naive_fm"), gap(r, "forgetting_mste_fm")]
            for r in table.itertuples(index=False)]
    note = ("Measured gaps (×100, ROC-AUC_CL and FM) with 95 % bootstrap intervals, not pass/fail: the required "
            "levels depend on the dataset and the intended use. A difference of two strategies is paired: both are "
            "evaluated on the same resamples of the same test records, so its interval is that of the difference, "
            "not two single intervals combined.")
    return "\n".join(["# Scenario validation criteria", "", *markdown_table(header, rows), "", note, *footer]) + "\n"

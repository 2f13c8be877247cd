"""Tabular-track reports (the tabular scenario paper's Table 2 and validation criteria).

`tabular_cells` evaluates every run once: its ROC-AUC_CL, normalised PR-AUC_CL (with the prevalence p) and FM, and
their bootstrap replicates over the evaluated records (bench.report.intervals). Where the run stored its records'
stream order (`scores/order`, the rank of each record's timestamp in its test set), a test set is resampled with
the moving-block bootstrap, its block the stream-assembly paper's for that scenario (`intervals.stream_blocks`:
max(100, p90 attack-run length + 1) over the scenario's test sets), and again with the longest run + 1 as the
sensitivity run; a cell whose conclusion (its interval above, across or below chance) differs between the two is
flagged. A test set no longer than a block, and every test set of a run without an order (older files, or an
index without timestamps), gets the stratified bootstrap. Raw AP_CL and the AP_CL of a random ranking stand beside
nPR-AUC_CL; each test set's prevalence is in the per-task table (`task_table`), never pooled over test sets.
One resample per task is shared by every cell of its column and by every strategy and seed of the scenario
(`r_samples` draws it from (bootstrap seed, task) alone), so the replicates of two strategies are paired. With
several seeds a cell is the seed mean, every seed's value listed, and its interval the percentiles of the seed-mean
of each resample.

`tabular_table2`: one row per scenario (dataset × ordering) × model × metric × strategy (Naive = ncl, Cumulative,
MSTE, Replay = cl), with the interval, the method that made it and the long-block interval beside it.

`validation_table`: the three validation criteria as measured gaps, not pass/fail, each with its 95 % interval:
feasibility (the best ROC-AUC_CL of MSTE and Cumulative, minus 0.5, a random ranking's; and that strategy's
nPR-AUC_CL, whose chance level is 0), non-triviality (best of
Replay, Cumulative and MSTE minus Naive, and each of them minus Naive: paired differences of the shared resamples)
and forgetting (Naive's FM, beside MSTE's; both FM forms, Chaudhry's last-step one and the formula of the CAD
framework's released code, CAD 675a9c9: on the full matrix for a cross-evaluated run, the `released` preset's, on
the lower triangle for a continual one, and labelled so). Every other summary reads the lower triangle only.

`run_length_table`: the contiguous anomaly runs of every test set in stream order (the reason for the block).
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from bench.errors import ProvenanceError
from bench.metrics import continual_roc_auc, forgetting, forgetting_released
from bench.results import replaced_scores
from bench.report import specs
from bench.report.intervals import BLOCK, placement_flips, r_samples, run_length_stats, stream_blocks
from bench.report.render import markdown_table

LEVELS = ("record",)  # the R matrices of a tabular run (R/record), drawn by bench.report.heatmaps
# The column of each continual protocol of the tabular track (bench.config.TABULAR_PROTOCOLS but ste, a
# cross-evaluation), in the tables' order. Cumulative twice: warm-started (the suite's, files under "cumulative")
# and a new model per step (the CAD framework's released code, "cumulative_fresh")
STRATEGIES = (("ncl", "Naive"), ("cumulative", "Cumulative (warm)"), ("cumulative_fresh", "Cumulative (fresh)"),
              ("mste", "MSTE"), ("cl", "Replay"))
# FM twice, labelled: Chaudhry et al.'s final-step measure (the suite's) and the formula the CAD framework's released
# code defines (bench.metrics.forgetting_released, CAD 675a9c9 forgetting_measure.py). A cross-evaluated run (the
# `released` preset's) holds the cells before a task was learned, which the released max reads: its FM is on the
# full matrix; a continual run's is on the lower triangle (FM_MATRIX says which, in the label and `fm_matrix`)
METRICS = ("roc_auc_cl", "npr_auc_cl", "ap_cl", "random_ap_cl", "fm", "fm_released")
METRIC_NAMES = {"roc_auc_cl": "ROC-AUC_CL", "npr_auc_cl": "nPR-AUC_CL", "ap_cl": "AP_CL",
                "random_ap_cl": "AP_CL of a random ranking", "fm": "FM (Chaudhry, last step)",
                "fm_released": "FM (CAD 675a9c9 formula, lower triangle)"}
FM_MATRIX = {"cross": "full matrix", "continual": "lower triangle"}  # what fm_released reads, by run evaluation
# the chance level a cell's interval is compared with (its conclusion: above, across or below it); the random
# ranking's AP is a chance level itself (no interval), and two strategies on one test set share it (no placement)
CHANCE = {"roc_auc_cl": 0.5, "npr_auc_cl": 0.0, "ap_cl": None, "fm": 0.0, "fm_released": 0.0}
PLACED = tuple(m for m in METRICS if m != "random_ap_cl")
KEYS = [c.name for c in specs.TABULAR_TABLE2.keys]
COLUMNS = [c.name for c in specs.TABULAR_TABLE2.columns]  # tabular_table2.csv's, declared once
# The columns each markdown rendering places (or leaves to the CSV); any other column its spec declares is shown
# after them (specs.TableSpec.unplaced): inside each cell of the strategy pivot, as columns of a flat table
TABLE2_PLACED = ("dataset", "ordering", "model", "metric", "protocol", "value", "ci_low", "ci_high", "method",
                 "block", "ci_low_long", "ci_high_long", "block_long", "conclusion_changes", "stratified_tasks",
                 "n_seeds", "seed_values", "fm_matrix", "scores_replaced")
TASKS_PLACED = ("dataset", "ordering", "task", "records", "anomalies", "prevalence", "random_ap")
# validation.md: each gap with its interval in one cell, the strategy it picked beside it; the best strong
# strategy's own ROC-AUC_CL and Naive's are in the CSV (the gaps are made of them)
VALIDATION_PLACED = ("dataset", "ordering", "model", "feasibility_best_strong_roc_auc_cl", "feasibility_best_strong",
                     *(f"{g}{s}" for g in specs.VALIDATION_GAPS for s in ("", "_low", "_high")),
                     "non_triviality_best_reference", "forgetting_naive_fm_released_matrix",
                     "forgetting_mste_fm_released_matrix")


REPLACED_MARK = "(r)"  # a cell whose runs replaced non-finite scores (replaced_note lists how many)


def _evaluation(run: dict) -> str:
    return run.get("attrs", {}).get("evaluation", "continual")


def fm_released_name(matrices) -> str:
    """The released FM's label for cells computed on `matrices` (FM_MATRIX values)."""
    return f"FM (CAD 675a9c9 formula, {' / '.join(sorted(set(matrices)))})"


def _test_sets(run: dict) -> tuple[dict, dict, dict | None]:
    """(scores {(i, j): [n]}, labels {j: [n]}, stream order {j: [n]} or None) of the evaluated cells (those above
    the diagonal only of a cross-evaluated run, read by the released FM alone), every test set's records sorted by
    record id (the same order at every step)."""
    step, task = run["scores/step"].astype(int), run["scores/task"].astype(int)
    stored = run.get("scores/order")
    name = run.get("attrs", {}).get("run_name", "a tabular run")
    if stored is not None and stored.shape != step.shape:
        raise ProvenanceError(f"{name}: scores/order holds {stored.size} positions for {step.size} scores")
    scores, labels, order = {}, {}, {}
    cross = _evaluation(run) == "cross"
    for i, j in set(zip(step.tolist(), task.tolist())):
        if j > i and not cross:  # a continual run holds none; read only where the run was evaluated cross-wise
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


def _stream_labels(run: dict) -> dict | None:
    """{task: its test set's labels in stream order}, or None for a run without a stream order."""
    _, labels, order = _test_sets(run)
    if order is None:
        return None
    out = {}
    for j in labels:
        out[j] = np.empty_like(labels[j])
        out[j][order[j]] = labels[j]
    return out


def scenario_blocks(runs: pd.DataFrame, details: dict) -> dict:
    """{(dataset, ordering): (block, sensitivity block)} from the attack runs of the scenario's test sets in stream
    order (`intervals.stream_blocks`); (BLOCK, BLOCK) for a scenario with no run holding a stream order."""
    tab = runs[runs["track"] == "tabular"]
    out = {}
    for (dataset, ordering), cell in tab.groupby(["dataset", "ordering"]):
        run = next((details[k] for k in cell["run_key"] if "scores/order" in details[k]), None)
        out[(dataset, ordering)] = (BLOCK, BLOCK) if run is None else stream_blocks(list(_stream_labels(run).values()))
    return out


def _replicates(run: dict, n_boot: int, seed: int, blocks: tuple[int, int]) -> tuple[dict, str, list]:
    """({metric: [n_boot] replicates, metric + "_long": the sensitivity block's replicates}, method, tasks on
    stratified resampling although the run has a stream order); `blocks` = (block, sensitivity block)."""
    scores, labels, order = _test_sets(run)
    n = len(run["tasks"])
    out, in_blocks = {}, _in_blocks(order, blocks[0])
    for suffix, block in (("", blocks[0]), ("_long", blocks[1])):
        stamps = _in_blocks(order, block)
        if suffix and not stamps:
            out.update({m + suffix: np.full(max(n_boot, 0), np.nan) for m in METRICS})
            continue
        if n_boot <= 0:
            out.update({m + suffix: np.empty(0) for m in METRICS})
            continue
        roc = r_samples(scores, labels, n, stamps, "roc_auc", block, n_boot, seed)
        npr = r_samples(scores, labels, n, stamps, "npr_auc", block, n_boot, seed)
        ap = r_samples(scores, labels, n, stamps, "ap", block, n_boot, seed)
        out.update({"roc_auc_cl" + suffix: np.array([continual_roc_auc(r) for r in roc]),
                    "npr_auc_cl" + suffix: np.array([continual_roc_auc(r) for r in npr]),
                    "ap_cl" + suffix: np.array([continual_roc_auc(r) for r in ap]),
                    "random_ap_cl" + suffix: np.full(n_boot, np.nan),  # a chance level: no interval
                    "fm" + suffix: np.array([forgetting(r) for r in roc]),
                    "fm_released" + suffix: np.array([_fm_released(run, r) for r in roc])})
    method = "stratified" if not in_blocks else "block" if len(in_blocks) == len(labels) else "block+stratified"
    short = [run["tasks"][j] for j in sorted(labels) if order is not None and j not in in_blocks]
    return out, method, short


def _values(run: dict) -> dict:
    return {"roc_auc_cl": continual_roc_auc(run["R/record"]), "npr_auc_cl": continual_roc_auc(run["R/record_npr_auc"]),
            "ap_cl": continual_roc_auc(run["R/record_ap"]),
            "random_ap_cl": continual_roc_auc(run["R/record_expected_ap"]),
            "fm": forgetting(run["R/record"]), "fm_released": _fm_released(run, run["R/record"])}


def _fm_released(run: dict, R: np.ndarray) -> float:
    """The released FM of a cross-evaluated run on its full matrix; of any other on the lower triangle, whatever
    a file holds above it. The other summaries (ROC-AUC_CL, BWT, Chaudhry's FM) read the lower triangle only."""
    if _evaluation(run) != "cross":
        R = np.where(np.tri(len(R), dtype=bool), R, np.nan)
    return forgetting_released(R)


def _percentiles(reps: np.ndarray) -> tuple[float, float]:
    reps = reps[np.isfinite(reps)]
    return tuple(float(v) for v in np.percentile(reps, [2.5, 97.5])) if reps.size else (np.nan, np.nan)


def tabular_cells(runs: pd.DataFrame, details: dict, n_boot: int = 1000, seed: int = 0) -> dict:
    """{(dataset, ordering, model, protocol): {"values": {seed: {metric: value}}, "reps": {metric[_long]:
    seed-mean replicates}, "method", "stratified_tasks"}} of the tabular runs."""
    tab = runs[runs["track"] == "tabular"]
    blocks = scenario_blocks(runs, details)
    cells = {}
    for key, cell in tab.groupby(["dataset", "ordering", "model", "protocol"]):
        per_seed = {int(r.seed): (_values(details[r.run_key]),
                                  _replicates(details[r.run_key], n_boot, seed, blocks[key[:2]]))
                    for r in cell.itertuples()}
        first = next(iter(per_seed.values()))[1]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN replicates (no long block) stay NaN
            reps = {m: np.nanmean(np.stack([b[0][m] for _, b in per_seed.values()]), 0) for m in first[0]}
        matrices = {FM_MATRIX.get(_evaluation(details[k]), FM_MATRIX["continual"]) for k in cell["run_key"]}
        if len(matrices) > 1:  # seeds averaged over two forms of one number would be neither
            raise ProvenanceError(f"{' / '.join(map(str, key))}: cross-evaluated and continual runs in one cell; "
                                  f"keep one evaluation per strategy")
        replaced = {int(r.seed): replaced_scores(details[r.run_key]) for r in cell.itertuples()}
        cells[key] = {"values": {s: v for s, (v, _) in per_seed.items()}, "reps": reps, "method": first[1],
                      "replaced": replaced,
                      "stratified_tasks": first[2], "blocks": blocks[key[:2]], "fm_matrix": matrices.pop()}
    return cells


def _conclusion(low: float, high: float, chance: float | None) -> str:
    """Where an interval lies against a chance level: above, across or below ('' without an interval)."""
    if chance is None or not (np.isfinite(low) and np.isfinite(high)):
        return ""
    return "above" if low > chance else "below" if high < chance else "across"


def tabular_table2(cells: dict) -> pd.DataFrame:
    """Long table: KEYS + value, ci_low, ci_high, method (block | stratified | block+stratified), block, the
    sensitivity interval and its block (NaN where no test set is longer than it), conclusion_changes (the
    interval lies otherwise against chance under the two blocks), stratified_tasks (test sets too short for a
    block), n_seeds, seed_values."""
    rows = []
    for (dataset, ordering, model, protocol), c in cells.items():
        for metric in METRICS:
            values = {s: v[metric] for s, v in c["values"].items()}
            low, high = _percentiles(c["reps"][metric])
            low_long, high_long = _percentiles(c["reps"][metric + "_long"])
            short, long = (_conclusion(a, b, CHANCE.get(metric)) for a, b in ((low, high), (low_long, high_long)))
            rows.append({"dataset": dataset, "ordering": ordering, "model": model, "metric": metric,
                         "protocol": protocol, "value": float(np.mean(list(values.values()))),
                         "ci_low": low, "ci_high": high, "method": c["method"], "block": c["blocks"][0],
                         "ci_low_long": low_long, "ci_high_long": high_long, "block_long": c["blocks"][1],
                         "conclusion_changes": bool(short and long and short != long),
                         "stratified_tasks": " ".join(c["stratified_tasks"]),
                         "n_seeds": len(values),
                         "seed_values": " ".join(f"{s}:{values[s]:.4f}" for s in sorted(values)),
                         "fm_matrix": c["fm_matrix"] if metric == "fm_released" else "",
                         "scores_replaced": replaced_text(c.get("replaced", {}))})
    return pd.DataFrame(rows, columns=COLUMNS)


def task_table(runs: pd.DataFrame, details: dict) -> pd.DataFrame:
    """Per scenario (dataset × ordering) and test set: records, anomalies, its prevalence p and the AP of a random
    ranking of it (the chance level of its AP), read from the diagonal of one of the scenario's runs."""
    tab = runs[runs["track"] == "tabular"]
    rows = []
    for (dataset, ordering), cell in tab.groupby(["dataset", "ordering"]):
        run = details[cell["run_key"].iloc[0]]
        _, labels, _ = _test_sets(run)
        for j in sorted(labels):
            rows.append({"dataset": dataset, "ordering": ordering, "task": run["tasks"][j],
                         "records": int(labels[j].size), "anomalies": int(labels[j].sum()),
                         "prevalence": float(run["R/record_prevalence"][j, j]),
                         "random_ap": float(run["R/record_expected_ap"][j, j])})
    return pd.DataFrame(rows, columns=["dataset", "ordering", "task", "records", "anomalies", "prevalence",
                                       "random_ap"])


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
        here = {p: cells[(dataset, ordering, model, p)] for p, _ in STRATEGIES
                if (dataset, ordering, model, p) in cells}
        seeds = [sorted(c["values"]) for c in here.values()]
        if len(here) < 2 or len(seeds[0]) < 2 or any(s != seeds[0] for s in seeds):
            continue  # one strategy or one seed: nothing can flip; unequal seed sets are not compared
        for metric in PLACED:
            result = placement_flips({names[p]: {s: v[metric] for s, v in c["values"].items()}
                                      for p, c in here.items()})
            rows.append({"dataset": dataset, "ordering": ordering, "model": model, "metric": metric,
                         "n_seeds": len(seeds[0]), "stable": result["stable"],
                         "flips": "; ".join(f"{a} vs {b}" for a, b in result["flips"])})
    return pd.DataFrame(rows, columns=["dataset", "ordering", "model", "metric", "n_seeds", "stable", "flips"])


def replaced_text(replaced: dict) -> str:
    """Each run's count of replaced non-finite scores, "seed:count ..."; "" when no run replaced any."""
    return " ".join(f"{s}:{n}" for s, n in sorted(replaced.items())) if any(replaced.values()) else ""


def replaced_note(long: pd.DataFrame) -> str:
    """The sentence naming every cell whose runs replaced non-finite scores ("" when none did)."""
    marked = long[long["scores_replaced"].fillna("").astype(str) != ""].drop_duplicates(
        ["dataset", "ordering", "model", "protocol"])
    if not len(marked):
        return ""
    return (f"{REPLACED_MARK} Non-finite record scores replaced before scoring (the released preset's policy, as the "
            "released code does), per run as seed:count: "
            + "; ".join(f"{r.dataset}/{r.ordering}/{r.model}/{r.protocol} {r.scores_replaced}"
                        for r in marked.itertuples()) + ".")


def _cell(row) -> str:
    if row is None:
        return "–"
    mark = f" {REPLACED_MARK}" if str(row.scores_replaced or "") not in ("", "nan") else ""
    text = f"{100 * row.value:.1f}"
    if np.isfinite(row.ci_low):
        text += f" [{100 * row.ci_low:.1f}, {100 * row.ci_high:.1f}]"
    if np.isfinite(row.ci_low_long):
        text += f" {{{100 * row.ci_low_long:.1f}, {100 * row.ci_high_long:.1f}}}"
    if row.conclusion_changes:
        text += " (!)"
    return text + mark


def _method_note(long: pd.DataFrame) -> str:
    methods = set(long["method"])
    if methods == {"stratified"}:
        return ("Intervals: stratified bootstrap of each test set's records (the runs hold no stream order: no "
                "timestamps in the record index, or files written before scores/order).")
    blocks = sorted({(r.dataset, r.ordering, int(r.block), int(r.block_long)) for r in long.itertuples()
                     if r.method != "stratified"})
    text = ("Intervals: moving-block bootstrap of each test set in stream (timestamp) order, blocks of max(100, p90 "
            "attack-run length + 1) records; in braces the sensitivity interval with blocks of the longest run + 1 ("
            + ", ".join(f"{d}/{o}: {b} and {bl}" for d, o, b, bl in blocks) + "). (!) marks a cell whose interval "
            "lies otherwise against chance (ROC-AUC 0.5, nPR-AUC 0, FM 0) under the two blocks.")
    short = sorted({(r.dataset, r.ordering, t) for r in long.itertuples() for t in str(r.stratified_tasks).split()
                    if t and t != "nan"})
    if short:
        text += (" Test sets no longer than their block fall back to the stratified bootstrap: "
                 + ", ".join(f"{d}/{o}/{t}" for d, o, t in short) + ".")
    if "stratified" in methods:
        text += " Scenarios marked stratified in tabular_table2.csv (column method) have no stream order."
    return text


def _table2_rows(long: pd.DataFrame) -> list[list[str]]:
    """Tabular Table 2's markdown rows: scenario × model × metric, a column per strategy."""
    spec = specs.TABULAR_TABLE2
    cells = {tuple(r[:5]): r for r in long.itertuples(index=False)}
    rows = []
    for dataset, ordering, model in sorted({k[:3] for k in cells}):
        for metric in METRICS:
            here = [cells.get((dataset, ordering, model, metric, p)) for p, _ in STRATEGIES]
            name = (fm_released_name(r.fm_matrix for r in here if r is not None) if metric == "fm_released"
                    else METRIC_NAMES[metric])
            rows.append([dataset, ordering, model, name, *[_cell(r) + spec.extra_text(r._asdict(), TABLE2_PLACED)
                                                           if r is not None else _cell(r) for r in here]])
    return rows


def _tasks_lines(tasks: pd.DataFrame) -> list[str]:
    spec = specs.TABULAR_TASKS
    rest = spec.unplaced(TASKS_PLACED)
    rows = [[r["dataset"], r["ordering"], r["task"], str(r["records"]), str(r["anomalies"]), f"{r['prevalence']:.4f}",
             f"{r['random_ap']:.4f}", *(specs.cell_text(c, r[c.name]) for c in rest)] for r in tasks.to_dict("records")]
    return ["", "Test sets (per task): records, anomalies, prevalence p and the AP of a random ranking:", "",
            *markdown_table([*(spec.label(n) for n in TASKS_PLACED), *(c.label for c in rest)], rows)]


def table2_markdown(long: pd.DataFrame, footer: list[str], run_lengths: pd.DataFrame | None = None,
                    placements: pd.DataFrame | None = None, tasks: pd.DataFrame | None = None) -> str:
    header = [*(specs.TABULAR_TABLE2.label(k) for k in ("dataset", "ordering", "model", "metric")),
              *[name for _, name in STRATEGIES]]
    rows = _table2_rows(long)
    note = ("Values ×100, 95 % bootstrap interval over the evaluated records in brackets; beside nPR-AUC_CL the raw "
            "AP_CL and the AP_CL a random ranking gets on the same test sets (each test set's prevalence is in the "
            "per-task table). A cell averages the seeds (tabular_table2.csv lists each seed's value).")
    lines = ["# Tabular Table 2", "", *markdown_table(header, rows), "", note, "", _method_note(long)]
    if replaced_note(long):
        lines += ["", replaced_note(long)]
    if tasks is not None and len(tasks):
        lines += _tasks_lines(tasks)
    if run_lengths is not None and len(run_lengths):
        fmt = lambda v: "–" if not np.isfinite(v) else f"{v:g}"  # noqa: E731
        lines += ["", "Contiguous anomaly runs of the test sets in stream order (they set each scenario's block):", "",
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


GAPS = (("cumulative", "cumulative_minus_naive"), ("cumulative_fresh", "cumulative_fresh_minus_naive"),
        ("mste", "mste_minus_naive"), ("cl", "replay_minus_naive"))


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
        roc = {p: _value(cells, key(p), "roc_auc_cl") for p, _ in STRATEGIES}
        strong = max((p for p in ("mste", "cumulative", "cumulative_fresh") if np.isfinite(roc[p])), key=roc.get,
                     default=None)
        ref = max((p for p in ("cl", "cumulative", "cumulative_fresh", "mste") if np.isfinite(roc[p])), key=roc.get,
                  default=None)
        row = {"dataset": dataset, "ordering": ordering, "model": model,
               "feasibility_best_strong_roc_auc_cl": roc[strong] if strong else np.nan,
               "feasibility_best_strong": strong or ""}
        gaps = {"feasibility_gap_over_random": _gap(cells, key(strong), None, shift=0.5) if strong else (np.nan,) * 3,
                # the same strategy's nPR-AUC_CL: its chance level is 0 whatever the prevalence (CHANCE)
                "feasibility_npr_auc_cl": _gap(cells, key(strong), None, "npr_auc_cl") if strong else (np.nan,) * 3,
                "naive_roc_auc_cl": _gap(cells, key("ncl"), None),
                "non_triviality_gap": _gap(cells, key(ref), key("ncl")) if ref else (np.nan,) * 3,
                **{name: _gap(cells, key(p), key("ncl")) for p, name in GAPS},
                "forgetting_naive_fm": _gap(cells, key("ncl"), None, "fm"),
                "forgetting_mste_fm": _gap(cells, key("mste"), None, "fm"),
                "forgetting_naive_fm_released": _gap(cells, key("ncl"), None, "fm_released"),
                "forgetting_mste_fm_released": _gap(cells, key("mste"), None, "fm_released")}
        for name, (value, low, high) in gaps.items():
            row.update({name: value, f"{name}_low": low, f"{name}_high": high})
        row["non_triviality_best_reference"] = ref or ""
        for p, name in (("ncl", "naive"), ("mste", "mste")):  # the matrix each released FM was computed on
            row[f"forgetting_{name}_fm_released_matrix"] = cells[key(p)]["fm_matrix"] if key(p) in cells else ""
        rows.append(row)
    return pd.DataFrame(rows)


def validation_markdown(table: pd.DataFrame, footer: list[str]) -> str:
    spec = specs.VALIDATION
    rest = spec.unplaced(VALIDATION_PLACED)
    header = [*(spec.label(n) for n in ("dataset", "ordering", "model", "feasibility_gap_over_random",
                                        "feasibility_npr_auc_cl", "non_triviality_gap", *(g for _, g in GAPS),
                                        "forgetting_naive_fm", "forgetting_mste_fm", "forgetting_naive_fm_released",
                                        "forgetting_mste_fm_released")), *(c.label for c in rest)]

    def gap(r, name):
        v, low, high = (getattr(r, name), getattr(r, f"{name}_low"), getattr(r, f"{name}_high"))
        if not np.isfinite(v):
            return "–"
        return f"{100 * v:.1f}" + (f" [{100 * low:.1f}, {100 * high:.1f}]" if np.isfinite(low) else "")

    def released_fm(r, strategy):
        matrix = getattr(r, f"forgetting_{strategy}_fm_released_matrix")
        return gap(r, f"forgetting_{strategy}_fm_released") + (f" ({matrix})" if matrix else "")

    rows = [[r.dataset, r.ordering, r.model,
             gap(r, "feasibility_gap_over_random") + (f" ({r.feasibility_best_strong})" if r.feasibility_best_strong
                                                      else ""),
             gap(r, "feasibility_npr_auc_cl"), gap(r, "non_triviality_gap") + (f" ({r.non_triviality_best_reference})"
                                             if r.non_triviality_best_reference else ""),
             *[gap(r, name) for _, name in GAPS], gap(r, "forgetting_naive_fm"), gap(r, "forgetting_mste_fm"),
             *[released_fm(r, p) for p in ("naive", "mste")],
             *(specs.cell_text(c, getattr(r, c.name)) for c in rest)]
            for r in table.itertuples(index=False)]
    note = ("Measured gaps (×100, ROC-AUC_CL, nPR-AUC_CL and FM) with 95 % bootstrap intervals, not pass/fail: the "
            "required levels depend on the dataset and the intended use. A difference of two strategies is paired: "
            "both are evaluated on the same resamples of the same test records, so its interval is that of the "
            "difference, not two single intervals combined. The released FM is on the full matrix of a "
            "cross-evaluated run (the released preset's: every task evaluated after every step, as the released code "
            "does) and on the lower triangle of a continual one (said beside each value).")
    return "\n".join(["# Scenario validation criteria", "", *markdown_table(header, rows), "", note, *footer]) + "\n"

"""The tabular reports' intervals: block bootstrap where the run stored its records' stream order,
stratified otherwise or for a test set too short for a block, the long-block sensitivity interval, the run-length
table, and paired intervals for the validation table's gaps."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from sklearn.metrics import average_precision_score

from bench.metrics import normalized_pr_auc, roc_auc
from bench.report import tabular as tb
from bench.metrics import expected_random_ap
from bench.report.intervals import BLOCK, stream_blocks


def fake_run(scores: dict, labels: dict, order: dict | None) -> dict:
    """A tabular run dict as results.read_run gives it, its R matrices computed from `scores` {(i, j): [n]}."""
    n = len(labels)
    mats = {k: np.full((n, n), np.nan) for k in ("R/record", "R/record_npr_auc", "R/record_prevalence",
                                                  "R/record_ap", "R/record_expected_ap")}
    cols = {k: [] for k in ("step", "task", "record", "value", "label", "order")}
    for (i, j), s in sorted(scores.items()):
        mats["R/record"][i, j] = roc_auc(labels[j], s)
        mats["R/record_npr_auc"][i, j], mats["R/record_prevalence"][i, j] = normalized_pr_auc(labels[j], s)
        p = mats["R/record_prevalence"][i, j]
        mats["R/record_ap"][i, j] = mats["R/record_npr_auc"][i, j] * (1 - p) + p  # as the tabular track stores it
        mats["R/record_expected_ap"][i, j] = expected_random_ap(len(labels[j]), int(np.sum(labels[j])))
        size = len(s)
        for k, v in (("step", np.full(size, i)), ("task", np.full(size, j)), ("record", 1000 * j + np.arange(size)),
                     ("value", s), ("label", labels[j].astype(np.int8)),
                     ("order", order[j] if order is not None else np.zeros(size))):
            cols[k].append(v)
    run = {"tasks": [f"t{j}" for j in range(n)], **mats,
           **{f"scores/{k}": np.concatenate(v) for k, v in cols.items() if k != "order" or order is not None}}
    return run


def stream(n=600, run_length=60, n_tasks=3, sizes=None):
    """Labels with long contiguous anomaly runs in stream order (order = identity), and a test set per task."""
    labels, order = {}, {}
    for j in range(n_tasks):
        size = sizes[j] if sizes else n
        labels[j] = (np.arange(size) // run_length) % 4 == 1  # every fourth run of `run_length` records
        order[j] = np.arange(size)
    return labels, order


def strategy(labels, rng, strength=1.0, decay=0.0, shared=None):
    """Scores of every continual cell: within an anomaly run the scores share one offset (correlated errors,
    which is what makes the block bootstrap wider)."""
    out = {}
    for j, y in labels.items():
        run_id = np.cumsum(np.r_[True, y[1:] != y[:-1]])
        offset = rng.normal(size=run_id.max() + 1)[run_id]
        base = strength * y + offset + 0.3 * rng.normal(size=y.size) if shared is None else shared[(j, j)]
        for i in range(j, len(labels)):
            out[(i, j)] = base + decay * (i - j) * rng.normal(size=y.size)
    return out


def table(runs: dict, n_boot=300) -> tuple[dict, pd.DataFrame]:
    """tabular_cells and tabular_table2 of {protocol: run dict} (one scenario, one model, seed 0)."""
    frame = pd.DataFrame([{"track": "tabular", "dataset": "d", "ordering": "o", "model": "m", "protocol": p,
                           "seed": 0, "run_key": p} for p in runs])
    cells = tb.tabular_cells(frame, runs, n_boot=n_boot)
    return cells, tb.tabular_table2(cells).set_index(["metric", "protocol"])


def test_report_uses_the_block_bootstrap_where_the_run_has_a_stream_order():
    labels, order = stream()
    scores = strategy(labels, np.random.default_rng(2), decay=0.4)
    _, long = table({"ncl": fake_run(scores, labels, order), "cl": fake_run(scores, labels, None)})
    block, old = long.loc[("roc_auc_cl", "ncl")], long.loc[("roc_auc_cl", "cl")]
    assert (block.method, old.method) == ("block", "stratified")  # a file without scores/order: stratified
    assert block.value == old.value and block.ci_low < block.value < block.ci_high
    # runs of 60 correlated anomalies: resampling single records understates the uncertainty
    assert block.ci_high - block.ci_low > 1.3 * (old.ci_high - old.ci_low)
    assert np.isfinite([block.ci_low_long, block.ci_high_long]).all() and np.isnan(old.ci_low_long)
    assert block.stratified_tasks == "" and set(long["method"]) == {"block", "stratified"}


def test_a_test_set_shorter_than_a_block_falls_back_to_stratified():
    labels, order = stream(run_length=10, sizes=[600, 150, 90])
    scores = strategy(labels, np.random.default_rng(4))
    cells, long = table({"ncl": fake_run(scores, labels, order)})
    row = long.loc[("roc_auc_cl", "ncl")]
    assert row.method == "block+stratified" and row.stratified_tasks == "t2"  # 90 ≤ BLOCK < 150
    assert np.isfinite([row.ci_low, row.ci_high, row.ci_low_long, row.ci_high_long]).all()
    assert (row.block, row.block_long) == (BLOCK, 11)  # runs of 10: p90 + 1 < 100; the longest + 1 = 11
    md = tb.table2_markdown(long.reset_index()[tb.COLUMNS], [])
    assert "no longer than their block fall back to the stratified bootstrap: d/o/t2" in md
    assert f"d/o: {BLOCK} and 11" in md


def test_run_length_table_reads_the_stream_order():
    labels, _ = stream(n=400, run_length=40, n_tasks=2)
    pos = {j: np.random.default_rng(j).permutation(y.size) for j, y in labels.items()}
    by_id = {j: labels[j][pos[j]] for j in labels}  # the file holds records by id; record k sits at pos[j][k]
    scores = strategy(by_id, np.random.default_rng(6))
    run = fake_run(scores, by_id, pos)
    frame = pd.DataFrame([{"track": "tabular", "dataset": "d", "ordering": "o", "model": "m", "protocol": "ncl",
                           "seed": 0, "run_key": "k"}])
    lengths = tb.run_length_table(frame, {"k": run})
    assert list(lengths["records"]) == [400, 400]
    assert (lengths["median"] == 40).all() and (lengths["max"] == 40).all()  # not the shuffled runs of ~1
    assert list(lengths["runs"]) == [3, 3] and list(lengths["anomalies"]) == [120, 120]
    assert tb.run_length_table(frame, {"k": fake_run(scores, by_id, None)}).empty


def test_validation_gaps_carry_paired_intervals():
    labels, order = stream()
    rng = np.random.default_rng(8)
    naive = strategy(labels, rng, strength=1.0, decay=0.8)
    runs = {"ncl": naive,
            "cumulative": {k: v.copy() for k, v in naive.items()},  # the same scores: a gap of exactly 0
            "mste": strategy(labels, rng, strength=3.0),  # a planted large gap
            "cl": {k: v + 0.2 * rng.normal(size=v.size) for k, v in naive.items()}}  # correlated with Naive
    cells, long = table({p: fake_run(s, labels, order) for p, s in runs.items()})
    val = tb.validation_table(cells).iloc[0]
    assert (val.cumulative_minus_naive, val.cumulative_minus_naive_low, val.cumulative_minus_naive_high) == (0, 0, 0)
    assert val.mste_minus_naive_low > 0 and val.non_triviality_best_reference == "mste"
    assert val.non_triviality_gap == pytest.approx(long.loc[("roc_auc_cl", "mste"), "value"]
                                                   - long.loc[("roc_auc_cl", "ncl"), "value"])
    width = lambda p: long.loc[("roc_auc_cl", p), "ci_high"] - long.loc[("roc_auc_cl", p), "ci_low"]  # noqa: E731
    assert val.replay_minus_naive_high - val.replay_minus_naive_low < 0.5 * (width("cl") + width("ncl"))
    assert val.replay_minus_naive_low <= val.replay_minus_naive <= val.replay_minus_naive_high
    assert val.forgetting_naive_fm_low < val.forgetting_naive_fm < val.forgetting_naive_fm_high
    assert val.feasibility_gap_over_random == pytest.approx(long.loc[("roc_auc_cl", "mste"), "value"] - 0.5)
    md = tb.validation_markdown(tb.validation_table(cells), [])
    assert f"{100 * val.mste_minus_naive:.1f} [{100 * val.mste_minus_naive_low:.1f}, " \
           f"{100 * val.mste_minus_naive_high:.1f}]" in md and "0.0 [0.0, 0.0]" in md


def test_tabular_r_heatmaps_average_the_models_and_draw(tmp_path):
    from bench.report import heatmaps as hm

    labels, order = stream(n=300, run_length=30)
    runs = {k: fake_run(strategy(labels, np.random.default_rng(s), decay=0.5), labels, order)
            for s, k in enumerate(("a", "b"))}
    frame = pd.DataFrame([{"track": "tabular", "dataset": "d", "ordering": "o", "model": k, "backbone": "",
                           "weights": "", "protocol": "ncl", "seed": 0, "run_key": k} for k in runs])
    maps = hm.heatmaps(frame, runs, levels=tb.LEVELS, protocols=[p for p, _ in tb.STRATEGIES], per_method=True)
    assert [h.stem for h in maps] == ["heatmap_d_o_ncl_record", "heatmap_d_o_ncl_record_a__",
                                      "heatmap_d_o_ncl_record_b__"]
    low = np.tril(np.ones((3, 3), dtype=bool))
    np.testing.assert_allclose(maps[0].mean[low], (runs["a"]["R/record"][low] + runs["b"]["R/record"][low]) / 2)
    assert np.isnan(maps[0].mean[~low]).all() and maps[0].n_methods == 2
    assert [p.name for p in hm.save(maps[1], tmp_path, ("png",))] == ["heatmap_d_o_ncl_record_a__.png"]


def test_a_corrupt_stream_order_is_refused():
    from bench.report.collect import ProvenanceError

    labels, order = stream(n=300, run_length=30)
    run = fake_run(strategy(labels, np.random.default_rng(9)), labels, order)
    run["scores/order"][5] = run["scores/order"][6]  # one position twice, another never
    with pytest.raises(ProvenanceError, match="not a ranking of its 300 records"):
        table({"ncl": run})
    run["scores/order"] = run["scores/order"][:-1]
    with pytest.raises(ProvenanceError, match="positions for"):
        table({"ncl": run})


def test_placements_that_flip_across_seeds_are_flagged():
    """Stream-assembly paper: a placement of strategies that changes between seeds is flagged, not asserted."""
    rng = np.random.default_rng(5)
    labels, _ = stream(n=200, n_tasks=2)
    strong, medium, weak = (strategy(labels, rng, strength=k) for k in (4.0, 1.5, 0.3))
    # MSTE beats both at both seeds (stable); Naive and Replay swap places between seed 0 and seed 1
    runs = {("mste", 0): strong, ("mste", 1): strong, ("ncl", 0): weak, ("ncl", 1): medium,
            ("cl", 0): medium, ("cl", 1): weak}
    frame = pd.DataFrame([{"track": "tabular", "dataset": "d", "ordering": "o", "model": "m", "protocol": p,
                           "seed": s, "run_key": f"{p}{s}"} for p, s in runs])
    details = {f"{p}{s}": fake_run(sc, labels, None) for (p, s), sc in runs.items()}
    cells = tb.tabular_cells(frame, details, n_boot=0)
    placed = tb.placement_table(cells).set_index("metric")
    assert not placed.loc["roc_auc_cl", "stable"] and placed.loc["roc_auc_cl", "n_seeds"] == 2
    flips = placed.loc["roc_auc_cl", "flips"]
    assert flips == "Naive vs Replay", flips
    md = tb.table2_markdown(tb.tabular_table2(cells), [], placements=tb.placement_table(cells))
    assert "Flagged" in md and "Naive vs Replay" in md
    one_seed = tb.tabular_cells(frame[frame["seed"] == 0], details, n_boot=0)
    assert tb.placement_table(one_seed).empty  # one seed: nothing can flip


def planted_runs(lengths, gap=50):
    """One test set in stream order: anomaly runs of the given lengths, `gap` normals before each."""
    return np.concatenate([np.r_[np.zeros(gap, bool), np.ones(k, bool)] for k in lengths] + [np.zeros(gap, bool)])


def test_the_block_follows_the_attack_run_lengths_of_the_stream():
    """max(100, p90 + 1) and the longest run + 1 (the stream-assembly paper), from the planted runs."""
    short = planted_runs([5] * 9 + [300])  # p90 of the ten runs = 5 + 0.1·295 = 34.5: the floor of 100 holds
    assert stream_blocks([short]) == (BLOCK, 301)
    long_runs = planted_runs([130] * 6)  # every run 130: both blocks 131
    assert stream_blocks([long_runs]) == (131, 131)
    assert stream_blocks([short, long_runs]) == (131, 301)  # pooled over the scenario's test sets: p90 = 130
    assert stream_blocks([np.zeros(500, bool)]) == (BLOCK, BLOCK)
    labels = {0: long_runs, 1: planted_runs([140] * 6)}
    scores = strategy(labels, np.random.default_rng(3))
    _, long = table({"ncl": fake_run(scores, labels, {j: np.arange(y.size) for j, y in labels.items()})})
    row = long.loc[("roc_auc_cl", "ncl")]
    assert (row.block, row.block_long, row.method) == (int(np.ceil(np.percentile([130] * 6 + [140] * 6, 90))) + 1,
                                                       141, "block")


def test_raw_ap_and_the_random_ranking_ap_stand_beside_npr_auc_and_each_test_set_has_its_prevalence():
    labels = {0: planted_runs([20] * 4, gap=100), 1: planted_runs([10] * 2, gap=150)}
    scores = strategy(labels, np.random.default_rng(5))
    run = fake_run(scores, labels, None)
    frame = pd.DataFrame([{"track": "tabular", "dataset": "d", "ordering": "o", "model": "m", "protocol": "ncl",
                           "seed": 0, "run_key": "k"}])
    _, long = table({"ncl": run})
    ap = np.mean([average_precision_score(labels[j], scores[(i, j)]) for (i, j) in scores])
    assert long.loc[("ap_cl", "ncl"), "value"] == pytest.approx(ap)
    rand = long.loc[("random_ap_cl", "ncl")]
    expected = [expected_random_ap(y.size, int(y.sum())) for y in labels.values()]
    assert rand.value == pytest.approx((expected[0] * 2 + expected[1]) / 3)  # cells (0,0), (1,0), (1,1)
    assert np.isnan(rand.ci_low)
    tasks = tb.task_table(frame, {"k": run})
    assert list(tasks["prevalence"]) == pytest.approx([y.mean() for y in labels.values()])
    assert list(tasks["random_ap"]) == pytest.approx(expected)
    md = tb.table2_markdown(long.reset_index()[tb.COLUMNS], [], tasks=tasks)
    assert "AP_CL of a random ranking" in md and f"{labels[1].mean():.4f}" in md


def test_a_cell_whose_conclusion_changes_with_the_block_is_flagged():
    """Interval above chance with the p90 block, across it with the longest-run block: flagged, (!) in markdown."""
    reps = {m + sfx: np.full(200, np.nan) for m in tb.METRICS for sfx in ("", "_long")}
    reps["roc_auc_cl"] = np.linspace(0.55, 0.65, 200)  # above 0.5
    reps["roc_auc_cl_long"] = np.linspace(0.45, 0.70, 200)  # across 0.5
    reps["npr_auc_cl"], reps["npr_auc_cl_long"] = np.linspace(0.1, 0.2, 200), np.linspace(0.05, 0.3, 200)
    values = {0: {m: 0.6 for m in tb.METRICS}}
    cells = {("d", "o", "m", "ncl"): {"values": values, "reps": reps, "method": "block", "stratified_tasks": [],
                                      "blocks": (120, 400), "fm_matrix": "lower triangle"}}
    long = tb.tabular_table2(cells).set_index("metric")
    assert bool(long.loc["roc_auc_cl", "conclusion_changes"]) and not long.loc["npr_auc_cl", "conclusion_changes"]
    assert (long.loc["roc_auc_cl", "block"], long.loc["roc_auc_cl", "block_long"]) == (120, 400)
    md = tb.table2_markdown(long.reset_index()[tb.COLUMNS], [])
    assert md.count("(!)") == 2  # the flagged cell and the note that explains the mark
    assert "d/o: 120 and 400" in md


def test_every_continual_tabular_protocol_has_a_column():
    """A protocol without a column would vanish from the tables; ste is the STE matrix's cross-evaluation."""
    from bench.config import TABULAR_PROTOCOLS

    assert sorted(p for p, _ in tb.STRATEGIES) == sorted(p for p in TABULAR_PROTOCOLS if p != "ste")


def test_the_report_row_of_a_tabular_cell_holds_its_value_chance_level_and_block_interval():
    """In the HTML report one row of the tabular Table 2 holds nPR-AUC_CL, its chance level (0), its
    block-bootstrap interval and the block it used, and where the interval lies against chance; AP_CL's chance
    level is the random ranking's AP of the same cell (a number of the table, not a constant)."""
    import io

    from bench.report import html

    labels, order = stream()
    scores = strategy(labels, np.random.default_rng(2), strength=1.5)
    _, long = table({"ncl": fake_run(scores, labels, order)})
    text = long.reset_index()[tb.COLUMNS].to_csv(index=False, lineterminator="\n")
    frame = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False)  # as the report reads it
    section = html.tabular({"tables/tabular_table2.csv": frame})
    shown = next(b for b in section["blocks"] if b["csv"] == "tabular_table2.csv")
    col = {h: k for k, h in enumerate(shown["header"])}
    from bench.report import specs

    metric, protocol = (specs.TABULAR_TABLE2.label(n) for n in ("metric", "protocol"))  # the page's headers
    rows = {(r[col[metric]]["value"], r[col[protocol]]["text"]): r for r in shown["rows"]}
    npr, want = rows[("npr_auc_cl", "ncl")], long.loc[("npr_auc_cl", "ncl")]
    assert npr[col["value [95 % CI]"]]["text"] == f"{want.value:.3f} [{want.ci_low:.3f}, {want.ci_high:.3f}]"
    assert npr[col["chance level"]]["text"] == "0" and npr[col["interval"]]["text"] == f"block ({BLOCK} records)"
    assert npr[col["against chance"]]["text"] == ("above" if want.ci_low > 0 else "across")
    ap = rows[("ap_cl", "ncl")]
    rand = long.loc[("random_ap_cl", "ncl"), "value"]
    assert ap[col["chance level"]]["text"] == f"{rand:.3f}" and ap[col["chance level"]]["value"] == text.split(
        "random_ap_cl,ncl,")[1].split(",")[0]
    assert rows[("roc_auc_cl", "ncl")][col["chance level"]]["text"] == "0.5"


def test_the_validation_table_holds_npr_auc_beside_its_chance_level_and_its_block_interval():
    """Feasibility also as nPR-AUC_CL (chance level 0) of the strategy it picked, with that cell's
    block-bootstrap interval (the same replicates as Table 2's), and in the report's row the chance level stands
    right beside it."""
    import io

    from bench.report import html

    labels, order = stream()
    rng = np.random.default_rng(8)
    runs = {"ncl": strategy(labels, rng, strength=1.0, decay=0.8), "mste": strategy(labels, rng, strength=3.0)}
    cells, long = table({p: fake_run(s, labels, order) for p, s in runs.items()})
    val = tb.validation_table(cells)
    row, want = val.iloc[0], long.loc[("npr_auc_cl", "mste")]
    assert row.feasibility_best_strong == "mste" and want.method == "block"
    assert (row.feasibility_npr_auc_cl, row.feasibility_npr_auc_cl_low, row.feasibility_npr_auc_cl_high) == (
        pytest.approx(want.value), pytest.approx(want.ci_low), pytest.approx(want.ci_high))
    md = tb.validation_markdown(val, [])
    assert "nPR-AUC_CL (chance 0)" in md and f"{100 * want.value:.1f} [{100 * want.ci_low:.1f}, " in md
    frame = pd.read_csv(io.StringIO(val.to_csv(index=False)), dtype=str, keep_default_na=False)
    section = html.tabular({"tables/validation.csv": frame})
    shown = next(b for b in section["blocks"] if b["csv"] == "validation.csv")
    from bench.report import specs

    k = shown["header"].index(specs.VALIDATION.label("feasibility_npr_auc_cl"))
    assert shown["header"][k + 1] == "chance level" and shown["rows"][0][k + 1]["text"] == "0"
    assert shown["rows"][0][k]["text"] == f"{want.value:.3f} [{want.ci_low:.3f}, {want.ci_high:.3f}]"

"""T3: the released forgetting measure on the whole matrix. A `released` validation run evaluates every task after
every step (pyCLAD src/pyclad/scenarios/concept_aware.py:31), so its R holds the cells before a task was learned,
which CAD 675a9c9 src/cadbench/pyclad/forgetting_measure.py:35 reads; the report's "FM (CAD 675a9c9 formula)" is
then on the full matrix, while ROC-AUC_CL, BWT, Chaudhry's FM and their intervals keep to the lower triangle. A run
of the suite's presets stays continual: its key and its lower-triangle label are unchanged."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from test_tabular_report import fake_run, strategy, stream, table
from test_tabular_replay_preset import EARLIER_KEYS, fixed_key
from test_tabular_runner import config, index  # noqa: F401 (module fixture)

from bench import results
from bench.continual.runner import execute, prepare
from bench.metrics import bwt, continual_roc_auc, forgetting, summarize
from bench.report import tabular as tb


def released_loop(M) -> float:
    """CAD 675a9c9 forgetting_measure.py:18-40, step by step: f_0 = 0 (:30-32); for every later step the mean over
    the earlier concepts of max(0, the best of rows 0..k minus row k) (:33-38); the mean over all steps (:40)."""
    results_ = []
    for learned in range(len(M)):
        if learned == 0:
            results_.append(0.0)
            continue
        drops = []
        for evaluated in range(learned):
            previous_max = max(M[t][evaluated] for t in range(learned + 1))
            drops.append(max(0, previous_max - M[learned][evaluated]))
        results_.append(float(np.mean(drops)))
    return float(np.mean(results_))


def lower(R: np.ndarray) -> np.ndarray:
    return np.where(np.tri(len(R), dtype=bool), R, np.nan)


# its released preset (CAD 675a9c9's Autoencoder) stays the recorded one under the quick epochs; Isolation Forest's
# equals the suite's, so a run of it records the suite preset
MODEL = "autoencoder"


def released_run(index, tmp_path, protocol):
    prepared = prepare(config(index, protocol, MODEL, preset="released"), out=tmp_path / f"{protocol}.h5")
    assert prepared.config.preset == "released" and prepared.config.evaluation == "cross"
    return results.read_run(execute(prepared, progress=False, log=lambda s: None)), prepared


def report(run: dict, protocol: str):
    frame = pd.DataFrame([{"track": "tabular", "dataset": "d", "ordering": "o", "model": "m", "protocol": protocol,
                           "seed": 0, "run_key": "k"}])
    cells = tb.tabular_cells(frame, {"k": run}, n_boot=20)
    return cells, tb.tabular_table2(cells).set_index("metric")


@pytest.mark.parametrize("protocol", ["ncl", "mste"])
def test_a_released_validation_run_holds_the_full_matrix_and_reports_the_released_fm_on_it(index, tmp_path,
                                                                                         protocol):
    """pyCLAD concept_aware.py:31 (every concept after every step) and CAD 675a9c9 forgetting_measure.py:18-40 on
    that matrix; MSTE scores a concept it has no expert for with zeros (pyCLAD strategies/baselines/mste.py:23),
    ROC-AUC 0.5. ROC-AUC_CL, BWT and Chaudhry's FM read the lower triangle only."""
    run, _ = released_run(index, tmp_path, protocol)
    R = run["R/record"]
    assert run["attrs"]["evaluation"] == "cross" and np.isfinite(R).all() and R.shape == (4, 4)
    if protocol == "mste":
        np.testing.assert_array_equal(R[np.triu_indices(4, 1)], 0.5)
    cells, long = report(run, protocol)
    assert long.loc["fm_released", "value"] == pytest.approx(released_loop(R))
    assert long.loc["fm_released", "fm_matrix"] == "full matrix"
    assert long.loc["roc_auc_cl", "value"] == pytest.approx(np.mean(R[np.tril_indices(4)]))
    assert long.loc["fm", "value"] == pytest.approx(forgetting(lower(R)))
    s = summarize(R)
    assert s["roc_auc_cl"] == continual_roc_auc(lower(R)) and s["bwt"] == bwt(lower(R))
    assert s["forgetting_released"] == pytest.approx(released_loop(R))
    md = tb.table2_markdown(long.reset_index()[tb.COLUMNS].assign(protocol=protocol), [])
    assert "FM (CAD 675a9c9 formula, full matrix)" in md and "lower triangle" not in md


def test_a_suite_run_keeps_its_continual_key_and_its_lower_triangle_label(index, tmp_path):
    """Only the released preset evaluates cross-wise: a suite run's config, key and label are those of before."""
    suite = prepare(config(index, "ncl", MODEL, preset="suite"), out=tmp_path / "s.h5")
    assert suite.config.evaluation == "continual"  # the preimage of before (EARLIER_KEYS in test_tabular_replay_preset)
    assert fixed_key("ncl") == EARLIER_KEYS["ncl"]
    released = prepare(config(index, "ncl", MODEL, preset="released"), out=tmp_path / "r.h5")
    assert released.run_key != suite.run_key
    run = results.read_run(execute(suite, progress=False, log=lambda s: None))
    _, long = report(run, "ncl")
    assert long.loc["fm_released", "fm_matrix"] == "lower triangle"
    assert long.loc["fm_released", "value"] == pytest.approx(released_loop(np.nan_to_num(lower(run["R/record"]),
                                                                                         nan=-np.inf)))
    assert "FM (CAD 675a9c9 formula, lower triangle)" in tb.table2_markdown(long.reset_index()[tb.COLUMNS], [])


def test_a_cross_runs_upper_triangle_moves_only_the_released_fm_and_its_interval():
    """The same continual cells with and without cells above the diagonal (high ones, before a task was learned):
    ROC-AUC_CL, nPR-AUC_CL, AP_CL, Chaudhry's FM and their bootstrap intervals are identical; only the released FM
    changes, to the 675a9c9 loop on the full matrix. A continual file's upper cells are never read."""
    labels, order = stream(n=300)
    scores = strategy(labels, np.random.default_rng(1), strength=0.5, decay=0.5)  # diagonal 0.89, 0.76, 0.91
    full = {**scores, **{(i, j): labels[j].astype(float) for j in labels for i in range(j)}}  # ROC-AUC 1.0
    cross = {**fake_run(full, labels, order), "attrs": {"evaluation": "cross"}}
    continual = fake_run(scores, labels, order)
    _, a = table({"ncl": cross})
    _, b = table({"ncl": continual})
    for metric in ("roc_auc_cl", "npr_auc_cl", "ap_cl", "fm"):
        assert a.loc[(metric, "ncl")][["value", "ci_low", "ci_high", "ci_low_long", "ci_high_long"]].tolist() == \
            b.loc[(metric, "ncl")][["value", "ci_low", "ci_high", "ci_low_long", "ci_high_long"]].tolist(), metric
    R = cross["R/record"]
    assert a.loc[("fm_released", "ncl")].value == pytest.approx(released_loop(R))
    assert a.loc[("fm_released", "ncl")].value > b.loc[("fm_released", "ncl")].value
    assert a.loc[("fm_released", "ncl")].ci_low != b.loc[("fm_released", "ncl")].ci_low
    # the same matrix in a file that says it is continual: its upper cells do not enter the released FM
    _, c = table({"ncl": fake_run(full, labels, order)})
    assert c.loc[("fm_released", "ncl")].value == b.loc[("fm_released", "ncl")].value


def test_the_validation_table_names_each_released_fm_matrix_and_one_cell_never_mixes_them():
    """The validation markdown says beside each released FM which matrix it read; a cell whose seeds were
    evaluated in two ways would average two different numbers and is refused."""
    labels, order = stream(n=300)
    scores = strategy(labels, np.random.default_rng(1), strength=0.5, decay=0.5)
    full = {**scores, **{(i, j): labels[j].astype(float) for j in labels for i in range(j)}}
    runs = {"ncl": {**fake_run(full, labels, order), "attrs": {"evaluation": "cross"}},
            "mste": fake_run(scores, labels, order)}
    cells, _ = table(runs, n_boot=20)
    md = tb.validation_markdown(tb.validation_table(cells), [])
    row = next(line for line in md.splitlines() if line.startswith("| d "))
    assert row.count("(full matrix)") == 1 and row.count("(lower triangle)") == 1
    frame = pd.DataFrame([{"track": "tabular", "dataset": "d", "ordering": "o", "model": "m", "protocol": "ncl",
                           "seed": s, "run_key": k} for s, k in ((0, "ncl"), (1, "mste"))])
    with pytest.raises(tb.ProvenanceError, match="cross-evaluated and continual runs in one cell"):
        tb.tabular_cells(frame, runs, n_boot=20)

"""Faithful tabular validation: the grids validate with models that did not build the scenario."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from bench.errors import ConfigError
from bench.hpc import grid as grids
from bench.tabular.scenario import MODELS as CONSTRUCTION_MODELS

VALIDATION_MODELS = {"vae", "deepsvdd", "dagmm", "neutralad"}  # CAD §4's phase 2


def tabular_grids():
    """Every shipped tabular grid: (result-set name, path, parsed YAML)."""
    out = []
    for path in sorted(grids.JOBS_DIR.glob("*.yaml")):
        data = yaml.safe_load(path.read_text())
        if data.get("track") == "tabular":
            name = "tabular-synthetic" if data["dataset"] == "synthetic" else (
                "tabular-multi" if data["dataset"] == "multi" else data["dataset"])
            out.append((name, path, data))
    return out


def test_every_tabular_grid_validates_with_other_models_than_construction():
    found = tabular_grids()
    assert {p.name for _, p, _ in found} >= {"cicids2017.yaml", "cicids2018.yaml", "cicunsw.yaml",
                                            "tabular-multi.yaml", "tabular-synthetic.yaml"}
    checks = []
    for name, path, data in found:
        grid = grids.load_grid(name, path)
        if data.get("construction_check"):
            checks.append(path.name)
            continue
        assert not set(grid.models) & set(CONSTRUCTION_MODELS), path.name
        assert set(grid.models) == VALIDATION_MODELS, path.name
    assert checks == ["tabular-synthetic-construction-check.yaml"]  # the one place construction models run


def test_a_construction_model_in_a_validation_grid_is_one_line_naming_the_grid(tmp_path, monkeypatch):
    import dataclasses

    from bench import registry

    # a tabular detector registered later (a plugin) is offered as a validator: the list comes from the registry
    monkeypatch.setitem(registry._SPECS, "zz_validator",
                        dataclasses.replace(registry.get("vae", "tabular"), name="zz_validator"))
    data = yaml.safe_load(grids.grid_path("tabular-synthetic").read_text())
    data["models"]["iforest"] = {}
    path = tmp_path / "tabular-synthetic.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=r"tabular-synthetic.yaml: iforest built the scenario.*"
                                          r"tabular-synthetic-construction-check.yaml") as err:
        grids.load_grid("tabular-synthetic", path)
    assert "\n" not in str(err.value)
    offered = str(err.value).split("; use ")[1].split(", or a construction-check grid")[0].split(", ")
    assert set(offered) == VALIDATION_MODELS | {"zz_validator"}
    data["construction_check"] = "yes"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match="construction_check must be true or false"):
        grids.load_grid("tabular-synthetic", path)


def test_the_real_data_grids_run_released_and_the_synthetic_grid_the_suite():
    """T9: the CIC grids give the released code's numbers (every validation model's released preset, an index
    built by --framework-preset released); the synthetic grid stays suite (1,500 / 1,000 records per task refuse
    every synthetic task); each grid's comment says which and why."""
    for name, path, data in tabular_grids():
        if data.get("construction_check"):
            continue
        grid = grids.load_grid(name, path)
        presets = {grid.models[m].get("preset") for m in grid.models}
        text = path.read_text()
        if data["dataset"] == "synthetic":
            assert presets == {None} and "# Preset: suite" in text, path.name
        else:
            assert presets == {"released"} and "# Preset: released" in text and "--framework-preset released" in text
            assert grid.index_settings == {"discovery": {"semantics": "released"},
                                           "preprocessing": {"split": "released"}}, path.name


def _rows(X) -> set:
    return {r.tobytes() for r in np.asarray(X)}


# --- the `released` presets: each value pinned --------------------------------------------------------------------

def test_the_released_framework_preset_pins_the_released_codes_values():
    from bench.tabular.discovery import DISCOVERY
    from bench.tabular.filtering import FRAMEWORK, FilterSettings

    suite, released = FRAMEWORK.resolve(), FRAMEWORK.resolve(preset="released")
    assert (released["gamma_l"], released["fc1_inclusive"], released["delta_r"], released["redundancy"],
            released["tie"], released["orderings"]) == (0.25, True, 0.1, "partners", "priority", "released")
    assert {k for k in suite if suite[k] != released[k]} == {"gamma_l", "fc1_inclusive", "delta_r", "redundancy",
                                                             "tie", "orderings"}
    assert (suite["gamma_l"], suite["fc1_inclusive"], suite["delta_r"], suite["tie"]) == (0.1, False, 0.05, "weakest")
    assert FilterSettings() == FilterSettings.resolve()  # the dataclass defaults are the suite preset's
    assert FilterSettings.resolve(preset="released").to_dict()["preset"] == "released"
    assert DISCOVERY.resolve(preset="released") == {"min_normal": 1500, "min_anomalous": 1000,
                                                    "semantics": "released"}
    assert DISCOVERY.resolve() == {"min_normal": 100, "min_anomalous": 10, "semantics": "suite"}


# Each value of the released code (CAD 675a9c9): run_validation_strategies.py:102-107 (the validation models, on
# their classes' defaults) and cadbench/pyclad/{utils.py create_autoencoder, autoencoder.py:22-30} (construction)
RELEASED = {"autoencoder": {"hidden": "64,16", "epochs": 20, "batch_size": 128, "batch_norm": False, "dropout": 0.0,
                            "weight_decay": 0.0},
            "ae1svm": {"epochs": 20, "rff_features": 512, "batch_size": 128},
            "vae": {"epochs": 20, "batch_size": 128, "loss": "pyod"},  # continual_vae.py:60-63: PyOD's vae_loss
            "deepsvdd": {"epochs": 20, "batch_size": 128, "lr": 1e-3, "l2_regularizer": 0.1},
            "dagmm": {"epochs": 20, "batch_size": 128, "lr": 1e-3, "n_gmm": 3, "hidden": "19", "latent_dim": 8},
            "neutralad": {"epochs": 20, "batch_size": 128, "rep_dim": 128, "hidden": "100,50", "trans_hidden": "50"},
            "iforest": {}}


@pytest.mark.parametrize("model", sorted(RELEASED))
def test_each_tabular_detector_has_the_released_preset(model):
    """T7 and D10: every setting the released code gives its model (RELEASED's file:line), nothing else moved."""
    from bench.registry import get

    spec = get(model, "tabular")
    assert spec.default_preset == "suite" and set(spec.presets) == {"suite", "released"}
    suite, released = spec.resolve(), spec.resolve(preset="released")
    assert {k: v for k, v in released.items() if suite[k] != v} == {k: v for k, v in RELEASED[model].items()
                                                                     if suite[k] != v}
    assert all(released[k] == v for k, v in RELEASED[model].items())


def test_tie_by_criterion_priority_removes_the_task_flagged_by_the_earliest_criterion():
    """CAD 675a9c9 filtering_criteria.py:236-248: max over (count, −first criterion) of a dict filled in
    criterion order."""
    from bench.tabular.filtering import _pick

    counts = np.array([1, 1, 1])
    flags = {"fc1": np.array([False, False, True]), "fc2": np.array([True, False, False]),
             "fc3": np.zeros(3, bool), "fc4": np.array([False, True, False]), "fc5": np.zeros(3, bool)}
    best = np.array([0.9, 0.6, 0.8])
    positions = {name: np.arange(3) for name in flags}
    assert _pick(counts, best, "priority", flags, positions) == 2  # FC1 first, though task 1 is the weakest
    assert _pick(counts, best, "weakest", flags, positions) == 1
    flags["fc1"][:] = False
    assert _pick(counts, best, "priority", flags, positions) == 0  # then FC2


# A redundant pair (A, B): rows and columns 0.013 apart, C far from both; FC1–FC3 flag nothing (K = 3 cannot
# exceed P = 2). B is the stronger specialist, so the suite's `weakest` tie removes A.
PAIR = np.array([[0.95, 0.94, 0.60], [0.94, 0.96, 0.61], [0.55, 0.56, 0.90]])
# A hub: X is redundant with P and with Q (row and column differences 0.07), P and Q are not (0.13); Y fails FC1.
HUB = np.array([[0.95, 0.90, 0.70, 0.30], [0.91, 0.95, 0.90, 0.30], [0.70, 0.91, 0.95, 0.30],
                [0.50, 0.50, 0.50, 0.58]])


def test_released_tie_on_a_redundant_pair_removes_the_later_task():
    """T1. CAD 675a9c9 filtering_criteria.py:126/:152 append concept2 while walking concept1, so the FC4 and FC5
    lists of one pair (A, B) read [B, A]; :236-248 then keep the first maximal key: B goes. The suite's tie
    (the weaker, A) and the earlier `priority` rule (the first in candidate order, A) remove the other one."""
    from bench.tabular.filtering import FilterSettings, iterative_filter

    released = iterative_filter(PAIR, ["A", "B", "C"], FilterSettings.resolve(preset="released"))
    assert released["passes"][0]["flags"] == [2, 2, 0] and released["removed"] == ["B"]
    assert iterative_filter(PAIR, ["A", "B", "C"], FilterSettings())["removed"] == ["A"]
    # the rule follows list positions, not names or strength: the pair in the other order loses its later task again
    swapped = PAIR[[1, 0, 2]][:, [1, 0, 2]]
    assert iterative_filter(swapped, ["B", "A", "C"], FilterSettings.resolve(preset="released"))["removed"] == ["A"]


def test_released_redundancy_counts_every_partner_so_the_hub_goes_first():
    """T2. CAD 675a9c9 filtering_criteria.py:126/:152 list a task once per redundant partner and :236-238 count
    every entry: X (two partners) carries 2 FC4 + 2 FC5 flags, P and Q one each, so X is removed, then Y (FC1).
    One boolean per criterion ties P, X and Q at 2 flags, and the first in candidate order (P) goes."""
    from bench.tabular.filtering import FilterSettings, iterative_filter

    tasks = ["P", "X", "Q", "Y"]
    released = iterative_filter(HUB, tasks, FilterSettings.resolve(preset="released"))
    first = released["passes"][0]
    assert first["fc4"] == [1, 2, 1, 0] and first["fc5"] == [1, 2, 1, 0] and first["flags"] == [2, 4, 2, 1]
    assert released["removed"] == ["X", "Y"] and released["kept"] == ["P", "Q"]
    boolean = FilterSettings.resolve({"redundancy": "both", "tie": "first"}, preset="released")
    assert iterative_filter(HUB, tasks, boolean)["removed"][0] == "P"


# --- --filter through the typed, ranged table ----------------------------------------------------------------------

@pytest.mark.parametrize("item,message", [("gamma_t=2", "gamma_t='2' is not allowed (expected a finite number ≥ 0"),
                                          ("p_t=2.5", "p_t='2.5' is not allowed (expected an integer ≥ 0"),
                                          ("delta_r=-1", "delta_r='-1' is not allowed"),
                                          ("tie=random", "tie='random' is not allowed (expected one of weakest"),
                                          ("gamma=0.1", "gamma"),
                                          ("coverage_strict=maybe", "coverage_strict='maybe' is not allowed")])
def test_a_bad_filter_value_is_one_line_exit_2(item, message, capsys):
    from bench.cli import main

    assert main(["tabular", "scenarios", "--filter", item, "--out", "/nonexistent/never-written"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--filter" in err and message in err and len(err.splitlines()) == 1


def test_filter_values_are_typed_false_is_false():
    from bench.tabular.commands import _filter_values
    from bench.tabular.filtering import FilterSettings

    s = FilterSettings.resolve(_filter_values(["coverage_strict=False", "p_t=3", "tie=priority"]), "released")
    assert s.coverage_strict is False and s.p_t == 3 and s.tie == "priority" and s.gamma_l == 0.25


# --- Cumulative: a new model per step (released) vs warm-started (the suite's `cumulative`) -------------------------

def test_fresh_cumulative_trains_a_new_model_on_the_union_and_differs_from_the_warm_one():
    from bench.continual.protocol import step_seed
    from bench.registry import get
    from bench.tabular import protocols as P

    rng = np.random.default_rng(0)
    tasks = [P.RecordSplit(f"t{k}", (rng.normal(size=(70, 5)) + 4 * k).astype(np.float32)) for k in range(2)]
    spec = get("deepsvdd", "tabular")
    hp = spec.resolve(spec.quick)
    fresh, warm = (P.make_protocol(p, spec, hp, seed=0) for p in ("cumulative_fresh", "cumulative"))
    for t, split in enumerate(tasks):
        fresh.learn(split, t)
        warm.learn(split, t)
    union = np.concatenate([tasks[1].X, fresh.rows_["t0"]])  # the current task, then the buffered past (all of it)
    assert _rows(union) == _rows(np.concatenate([t.X for t in tasks]))
    alone = spec.factory(**hp).fit(union, step_seed(0, 1))  # a new model, seeded by the step, on all data so far
    a, b, c = fresh.detector.state_dict(), alone.state_dict(), warm.detector.state_dict()
    assert all(np.array_equal(a[k], b[k]) for k in a)  # fresh = a new model trained on the union
    assert not all(np.array_equal(a[k], c[k]) for k in a)  # the warm-started one carries task 0's training
    assert not np.allclose(fresh.predict(tasks[0], np.arange(20)), warm.predict(tasks[0], np.arange(20)))


# --- the released forgetting measure (T3) ---------------------------------------------------------------------------

TOY_R = [[0.90, 0.95, 0.70], [0.60, 0.90, 0.70], [0.50, 0.50, 0.90]]


def test_forgetting_released_is_the_675a9c9_formula_pre_learning_cells_included():
    """CAD 675a9c9 src/cadbench/pyclad/forgetting_measure.py:29-40: f_0 = 0 (:30-32), f_k's max over every row
    t ≤ k (:35, cells before task j was learned included), clipped at 0 (:37), the mean over all N steps (:40).
    Toy R: f_1 = 0.9 − 0.6 = 0.3; f_2 = (0.9 − 0.5 + 0.95 − 0.5) / 2 = 0.425 → 0.725 / 3 = 0.2417; without the
    pre-learning R[0,1] = 0.95, f_2 = 0.4 → 0.2333. The earlier form (mean over steps 1 … N−1, max over j ≤ l < t)
    gave (0.3 + 0.4) / 2 = 0.35."""
    from bench.metrics import forgetting_released

    R = np.array(TOY_R)
    lower = np.where(np.tri(3, dtype=bool), R, np.nan)
    assert forgetting_released(R) == pytest.approx(0.725 / 3)
    assert forgetting_released(lower) == pytest.approx(0.7 / 3)
    assert forgetting_released([[0.7]]) == 0.0  # :25-32 with one concept: the mean of [0.0]


def test_the_report_labels_its_released_fm_column_as_the_lower_triangle_variant():
    """A continual run (the suite presets': a task is evaluated once learned) gets Table 2's released FM as the
    675a9c9 formula on the lower triangle, and says so; cells above the diagonal of such a file do not enter it
    (a released, cross-evaluated run's full matrix: test_tabular_released_fm.py)."""
    from bench.report import tabular as T

    assert "675a9c9" in T.METRIC_NAMES["fm_released"] and "lower triangle" in T.METRIC_NAMES["fm_released"]
    R = np.array(TOY_R)
    run = {"R/record": R, "R/record_npr_auc": R, "R/record_ap": R, "R/record_expected_ap": R}
    assert T._values(run)["fm_released"] == pytest.approx(0.7 / 3)


# --- the released orderings, W and Borda (T4) -------------------------------------------------------------------------

# D = 1 − M (symmetric): greedy from start 3 takes 0 (0.1), 2 (0.1), 1 (0.1), then 4 (0.5): 0.8, the best greedy
# start (0: 1.3, 1: 0.9, 2: 1.3, 4: 1.1); the exact minimum path 3-0-4-2-1 costs 0.1 + 0.2 + 0.3 + 0.1 = 0.7.
GREEDY_D = np.array([[0.0, 0.4, 0.1, 0.1, 0.2], [0.4, 0.0, 0.1, 0.7, 0.5], [0.1, 0.1, 0.0, 0.6, 0.3],
                     [0.1, 0.7, 0.6, 0.0, 0.6], [0.2, 0.5, 0.3, 0.6, 0.0]])


def test_released_smooth_drift_is_the_greedy_path_from_every_start_not_the_exact_one():
    """CAD 675a9c9 ste_optimization.py:71-95 (_greedy_tsp over all starts, first minimal neighbour, the first start
    with the lowest cost) and :98-106 (smooth drift on D = 1 − (M + Mᵀ)/2)."""
    from bench.tabular.orderings import model_orderings, path_cost

    M = 1 - GREEDY_D
    released, suite = model_orderings(M, mode="released"), model_orderings(M)
    assert released["smooth_drift"] == [3, 0, 2, 1, 4] and path_cost(GREEDY_D, released["smooth_drift"]) == \
        pytest.approx(0.8)
    assert path_cost(GREEDY_D, suite["smooth_drift"]) == pytest.approx(0.7)


def test_released_curriculum_down_is_a_stable_descending_sort_not_the_reverse_of_up():
    """ste_optimization.py:30-36: sorted(..., reverse=True) keeps tied tasks in candidate order. d = 1 − M_ii =
    (0.1, 0.2, 0.1): up 0, 2, 1; released down 1, 0, 2; the suite's down is up reversed, 1, 2, 0."""
    from bench.tabular.orderings import model_orderings

    M = np.full((3, 3), 0.5)
    np.fill_diagonal(M, [0.9, 0.8, 0.9])
    released, suite = model_orderings(M, mode="released"), model_orderings(M)
    assert released["curriculum_up"] == suite["curriculum_up"] == [0, 2, 1]
    assert released["curriculum_down"] == [1, 0, 2] and suite["curriculum_down"] == [1, 2, 0]


def test_released_w_is_untied_on_list_positions_and_zero_below_two_models():
    """split_selection.py:32-56 (W = 12 SS / (k²(n³ − n)), 1-based positions, 0.0 when k < 2 or n < 2) and :60-84
    (no orientation). Orders 0 1 2 and 0 2 1: rank sums 2, 5, 5 around 4, SS = 6, W = 72 / 96 = 0.75; a path and
    its reverse disagree fully (W 0), which the suite's orientation would turn into 1."""
    from bench.tabular.orderings import released_w

    assert released_w([[0, 1, 2], [0, 2, 1]]) == pytest.approx(0.75)
    assert released_w([[0, 1, 2]]) == 0.0 and released_w([[0], [0]]) == 0.0
    assert released_w([[0, 1, 2], [2, 1, 0]]) == 0.0


def test_released_borda_ties_follow_the_first_model_in_the_released_model_order():
    """split_selection.py:87-116: ascending 1-based rank sums, a stable sort of the first model's list; the models
    in the released STE files' order AE1SVM, Autoencoder, Isolation Forest (optimize_by_ste.py:116-118). Tasks 0
    and 1 tie (3 each): ae1svm's order decides, whatever order the models were given in; the suite breaks the tie
    by best position, then index."""
    from bench.tabular.orderings import ORDERINGS, borda, concordance

    def lists(order):
        return {name: order for name in ORDERINGS}

    per_model = {"autoencoder": lists([0, 1, 2]), "ae1svm": lists([1, 0, 2])}
    released = concordance(per_model, "released")
    assert all(released["consensus"][name] == [1, 0, 2] for name in ORDERINGS)
    assert borda([[0, 1, 2], [1, 0, 2]])[0] == borda([[1, 0, 2], [0, 1, 2]])[0] == [0, 1, 2]
    assert released["mean_w"] == pytest.approx(0.75)  # W of (0 1 2, 1 0 2): SS = 1 + 1 + 4, 12·6 / (4·24)


# --- the released discovery semantics (T5) -----------------------------------------------------------------------

def test_released_nearest_assigns_among_surviving_clusters_and_tops_up_from_surplus_ones():
    """CAD 675a9c9 src/cadbench/splits/clustering/methods.py:72-96. Cluster 2 (one normal, below min_normal 2) is
    dropped before assignment (:72); anomalies go to the nearest raw-space centroid of clusters 0 and 1 (:77-80):
    four to cluster 0, one to cluster 1; cluster 1 (one, below 2) takes the anomaly of cluster 0 (above 2) nearest
    to its centroid, a2 (:83-96)."""
    from bench.tabular.discovery import released_nearest

    normals = np.array([[0.0, 0], [0.2, 0], [10, 0], [10.2, 0], [5, 40]])
    ids = np.array([0, 0, 1, 1, 2])
    anomalies = np.array([[0.1, 1], [0.3, 1], [0.5, 1], [9.9, 1], [5, 39]])
    assert released_nearest(normals, ids, anomalies, 2, 2).tolist() == [0, 0, 1, 1, 0]


def test_released_semantics_keeps_a_cluster_short_of_anomalies_and_leaves_suite_indexes_unchanged():
    """methods.py:63-98 never drops a cluster for too few anomalies (the suite drops it); clustering.py:24-32
    builds KMeans with the default n_init and a 10-component diagonal mixture with reg_covar 1e-3. The suite's
    semantics stay out of the index settings (to_dict), so earlier indexes keep their SHA-256."""
    from bench.tabular.discovery import DiscoverySettings, _clusterer, enforce_minimum

    suite = DiscoverySettings(method="kmeans", n_tasks=2, min_normal=2, min_anomalous=3)
    released = DiscoverySettings(method="kmeans", n_tasks=2, min_normal=2, min_anomalous=3, semantics="released")
    tasks = np.array(["c0"] * 5 + ["c1"] * 4, dtype=object)
    labels = np.array([0, 0, 1, 1, 1, 0, 0, 1, 1])
    assert set(enforce_minimum(tasks, labels, released)[0]) == {"c0", "c1"}
    assert set(enforce_minimum(tasks, labels, suite)[0]) == {"c0", ""}
    assert "semantics" not in suite.to_dict() and released.to_dict()["semantics"] == "released"
    km = _clusterer(released)
    assert km.n_init == "auto" and _clusterer(suite).n_init == 4
    gmm = _clusterer(DiscoverySettings(method="gmm", n_tasks=3, semantics="released"))
    assert (gmm.n_components, gmm.covariance_type, gmm.reg_covar) == (10, "diag", 1e-3)
    with pytest.raises(ConfigError, match="semantics"):
        DiscoverySettings(semantics="cad")


# --- the released natural split (T5) and duplicate scope (T6) -----------------------------------------------------

def test_released_split_is_train_test_split_at_0_2_seed_42_with_test_anomalies_cut_to_the_test_normals():
    """CAD 675a9c9 src/cadbench/datasets/cicids2017.py:122-123 (train_test_split(normals, test_size=0.2,
    random_state=42)) and :148-157 (test anomalies beyond the test-normal count left out by
    sample(n, random_state=42)); the suite's split takes round(0.8 n) by its own seeded permutation, no cut."""
    import pandas as pd
    from sklearn.model_selection import train_test_split

    from bench.tabular.preprocess import PrepSettings, split

    labels = np.array([0] * 11 + [1] * 6)
    df = pd.DataFrame({"label": labels, "x": np.arange(17)})
    out, per_task = split(df, np.array(["t"] * 17), PrepSettings(split="released"))
    clustered = split(df, np.array(["t"] * 17), PrepSettings(split="released"), natural=False)[1]["t"]
    assert (clustered["test_normal"], clustered["test_anomalous"]) == (3, 6)  # utils.py:5-14: no cut
    _, test = train_test_split(np.arange(11), test_size=0.2, random_state=42)
    kept = pd.Series(np.arange(11, 17)).sample(n=3, random_state=42).to_numpy()
    assert per_task["t"] == {"train_normal": 8, "test_normal": 3, "test_anomalous": 3,
                             "anomalies_dropped_by_rebalance": 3}
    assert sorted(out.loc[(out["split"] == "test") & (out["label"] == 0), "x"]) == sorted(test)
    assert sorted(out.loc[out["label"] == 1, "x"]) == sorted(kept)
    suite = split(df, np.array(["t"] * 17), PrepSettings())[1]["t"]
    assert (suite["train_normal"], suite["test_anomalous"]) == (9, 6)
    assert "split" not in PrepSettings().to_dict() and PrepSettings(split="released").to_dict()["split"] == "released"


def test_released_natural_split_drops_duplicates_file_by_file_and_keeps_small_concepts(tmp_path):
    """cicids2017.py:112-115 clean each file alone (a record in two files stays in both; the suite keeps the
    first) and :142-147 skip only a concept without test normals or anomalies (no minimum sizes)."""
    import pandas as pd

    from bench.tabular.cic import FEATURES, RawTable
    from bench.tabular.discovery import DiscoverySettings, enforce_minimum
    from bench.tabular.preprocess import clean

    row = {f: 1.0 for f in FEATURES}
    frame = pd.DataFrame([{**row, "label": 0, "attack": "BENIGN", "source": s, "row": i, "day": "", "timestamp": ""}
                          for i, s in enumerate(["a.csv", "a.csv", "b.csv"])])
    raw = RawTable(frame, [], {}, {})
    assert clean(raw)[1]["duplicates_dropped"] == 2 and clean(raw, per_file=True)[1]["duplicates_dropped"] == 1
    released = DiscoverySettings(method="natural", column="source", semantics="released", min_normal=1500,
                                 min_anomalous=1000)
    tasks = np.array(["a.csv"] * 3 + ["b.csv"] * 2, dtype=object)
    kept, info = enforce_minimum(tasks, np.array([0, 0, 1, 0, 0]), released)
    assert set(kept) == {"a.csv", ""} and info["dropped"] == {"b.csv": {"normal": 2, "anomalous": 0}}


# --- non-finite scores (T10) --------------------------------------------------------------------------------------

def test_released_runs_score_non_finite_values_as_the_released_metrics_and_count_them():
    """CAD c9f681e src/cadbench/pyclad/metrics.py RocAucRobust / NormalizedPrAuc: NaN and +inf become the largest
    finite score, −inf the smallest, then the metric; the suite's presets stop on them (NumericalError)."""
    from types import SimpleNamespace

    from bench.errors import NumericalError
    from bench.metrics import roc_auc
    from bench.tabular.track import MATRICES, LabelledRecords, TabularTrack
    from bench.tracks import Cell

    labels = np.array([0, 0, 0, 1, 1], dtype=np.int8)
    raw = np.array([0.1, np.nan, -np.inf, 0.5, np.inf])
    test = LabelledRecords("t", np.zeros((5, 2), np.float32), np.arange(5), labels, None)
    track = TabularTrack(None, {"t": SimpleNamespace(test=test)})
    protocol = SimpleNamespace(predict=lambda split, idx: raw.copy())

    def evaluate(preset):
        state = SimpleNamespace(arrays={m: np.full((1, 1), np.nan) for m in MATRICES}, scores=[])
        nonfinite = "released" if preset == "released" else "stop"  # what prepare_tabular records per preset
        config = SimpleNamespace(preset=preset, model="m", tasks=["t"], tabular=SimpleNamespace(nonfinite=nonfinite))
        track.evaluate(Cell(config, protocol, 0, 0, state.arrays, state.scores))
        return state

    state = evaluate("released")
    assert state.arrays["nonfinite/record"].tolist() == [[3]]
    assert state.arrays["R/record"][0, 0] == roc_auc(labels, np.array([0.1, 0.5, 0.1, 0.5, 0.5]))
    assert state.scores[0].values.tolist() == [0.1, 0.5, 0.1, 0.5, 0.5]
    with pytest.raises(NumericalError, match="non-finite record scores"):
        evaluate("suite")


def test_the_released_non_finite_policy_is_recorded_and_in_the_key_only_under_released(tmp_path):
    """The policy is part of what ran: `released` records nonfinite=released (its own run key, also for a model whose
    released values equal its suite values, Isolation Forest), every other preset `stop` with its earlier key."""
    from bench.config import RunConfig, TabularInputs
    from bench.registry import get
    from bench.tabular.fidelity import behaviour
    from bench.tabular.track import record_evaluation

    def config(preset):
        cfg = RunConfig(dataset="cicids2017", root=str(tmp_path), model="iforest", tasks=["a", "b"],
                        protocol="ncl", seed=0, preset=preset, hparams={}, model_version=1, inputs=TabularInputs())
        record_evaluation(cfg, behaviour(get("iforest", "tabular"), preset))
        return cfg

    released, suite = config("released"), config("suite")
    assert released.tabular.nonfinite == "released" and suite.tabular.nonfinite == "stop"
    assert "nonfinite" in released.tabular.key_preimage(released, "f" * 64, "")
    assert "nonfinite" not in suite.tabular.key_preimage(suite, "f" * 64, "")


def test_no_anomaly_reaches_a_training_split_even_where_index_labels_repeat():
    """D6, kept as the suite's: CAD 675a9c9 methods.py:79 resets the anomalies' index to 0…n−1, :98 concatenates
    them with normals keeping theirs, and src/cadbench/splits/utils.py:13 marks .loc[train_normal_idx] as train, so
    every anomaly sharing a label with a training normal is trained on. The split here goes by position."""
    import pandas as pd

    from bench.tabular.preprocess import PrepSettings, split

    labels = np.array([0] * 10 + [1] * 6)
    df = pd.DataFrame({"label": labels}, index=[*range(10), *range(6)])  # the released frame's repeated labels
    for s in (PrepSettings(), PrepSettings(split="released")):
        for natural in (True, False):
            out, _ = split(df, np.array(["t"] * 16), s, natural)
            assert (out.loc[out["split"] == "train", "label"] == 0).all() and (out["label"] == 1).sum() >= 2

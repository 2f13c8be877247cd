"""The paper's baselines (bench.assembly.detectors: hst, ecod, lof, iforest) and the registry they share.

Reference for HST: river itself, driven the way the released wrapper drove it (MinMaxScaler → HalfSpaceTrees,
records as {"f0": ..., ...}, score_one before learn_one)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import average_precision_score

from bench.assembly import records
from bench.assembly.detectors import SPECS, batch_record, get
from bench.errors import CheckpointError, ConfigError

SMALL_HST = get("hst").quick
ONLINE = [n for n, s in SPECS.items() if s.kind is records.Kind.ONLINE]
BATCH = [n for n, s in SPECS.items() if s.kind is records.Kind.BATCH]


def _stream(n=700, d=6, seed=5):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * np.array([1.0, 100.0, 0.01, 5.0, 1.0, 1e4])[:d]
    X[n // 2:: 17] += 8.0 * X.std(axis=0)  # isolated outliers in the second half
    return X


def _river(seed, n_trees=25, height=15, window_size=250):
    from river import anomaly, compose, preprocessing

    return compose.Pipeline(preprocessing.MinMaxScaler(), anomaly.HalfSpaceTrees(
        n_trees=n_trees, height=height, window_size=window_size, seed=seed))


def _river_scores(model, X, learn_only=0):
    out = []
    for i, row in enumerate(X):
        x = {f"f{j}": float(v) for j, v in enumerate(row)}
        if i >= learn_only:
            out.append(model.score_one(x))
        model.learn_one(x)
    return np.asarray(out, dtype=float)


def test_registry_lists_every_detector_once_with_a_released_preset():
    # the paper's detectors, and every built-in tabular detector adapted as `tabular:<name>` (detectors/tabular.py)
    assert {n for n in SPECS if not n.startswith("tabular:")} == {"bocpd", "hst", "ecod", "lof", "iforest"}
    assert {s.kind for s in SPECS.values()} == {records.Kind.ONLINE, records.Kind.BATCH}
    assert [n for n, s in SPECS.items() if s.batch_dependent] == ["ecod"]
    assert all("released" in s.presets and s.source for s in SPECS.values())
    with pytest.raises(ConfigError, match="valid: bocpd, ecod, hst, iforest, lof"):
        get("kitnet")


@pytest.mark.parametrize("name", ONLINE)
def test_online_contract_chunks_and_checkpoints_change_nothing(name):
    spec = get(name)
    X = _stream(n=400)
    whole = spec.create("released", seed=3, **spec.quick).score_learn(X)
    assert whole.score.shape == (400,) and whole.score.dtype == np.float64
    assert set(whole.branches) == set(spec.branches)
    det = spec.create("released", seed=3, **spec.quick)
    head = det.score_learn(X[:150])
    state = det.state_dict()
    assert all(isinstance(v, np.ndarray) and v.dtype != object for v in state.values())
    rest = spec.create("released", seed=3, **spec.quick).load_state_dict(state).score_learn(X[150:])
    np.testing.assert_array_equal(np.concatenate([head.score, rest.score]), whole.score)


@pytest.mark.parametrize("name", BATCH)
def test_batch_contract(name):
    spec = get(name)
    train, R, _, _ = _batches()
    det = spec.create("released", seed=0, **spec.quick)
    assert det.fit(train) is det
    scores = det.score(R)
    assert scores.shape == (len(R),) and scores.dtype == np.float64 and np.isfinite(scores).all()
    assert det.batch_record(np.arange(len(R))).size == len(R)


def test_hst_equals_river():
    """At a smaller size than released (25 trees of height 15 hold 1.6 million nodes: minutes here); the wrapper
    passes its settings to river unchanged, and the released ones are pinned below. Two references: the river
    installed here, and river 0.22.0 (the released pin; fixtures/hst_river022.json, its `source`)."""
    assert get("hst").presets["released"] == {"n_trees": 25, "height": 15, "window_size": 250}
    released_river = json.loads((Path(__file__).parent / "fixtures" / "hst_river022.json").read_text())
    settings = released_river["settings"]
    X = _stream()
    ours = get("hst").create("released", seed=released_river["seed"], **settings).score_learn(X)
    np.testing.assert_array_equal(ours.score, _river_scores(_river(7, **settings), X))
    np.testing.assert_allclose(ours.score, released_river["score"], rtol=0, atol=1e-12)
    assert ours.score[:100].max() == 0.0 and ours.score[100:].max() > 0.5  # river scores 0 in its first window


def test_hst_warm_up_by_learning_only_equals_scoring_and_learning():
    """The released runs learned HST's training rows without scoring them: score_one must change nothing."""
    X = _stream()
    reference = _river_scores(_river(3, **SMALL_HST), X, learn_only=300)
    ours = get("hst").create("released", seed=3, **SMALL_HST).score_learn(X).score[300:]
    np.testing.assert_array_equal(ours, reference)


@pytest.mark.parametrize("cut", [0, 25, 333])  # before any tree exists, inside the first window, mid-window later
def test_hst_state_dict_round_trip_resumes_identically(cut):
    X = _stream()
    whole = get("hst").create("released", seed=1, **SMALL_HST).score_learn(X).score
    det = get("hst").create("released", seed=1, **SMALL_HST)
    head = det.score_learn(X[:cut]).score if cut else np.empty(0)
    state = det.state_dict()
    assert all(isinstance(v, np.ndarray) and v.dtype != object for v in state.values())
    resumed = get("hst").create("released", seed=1, **SMALL_HST).load_state_dict(state)
    np.testing.assert_array_equal(np.concatenate([head, resumed.score_learn(X[cut:]).score]), whole)


def test_hst_refuses_a_foreign_or_corrupt_state():
    det = get("hst").create("released", seed=1, **SMALL_HST)
    det.score_learn(_stream()[:100])
    state = det.state_dict()
    with pytest.raises(CheckpointError, match="seed"):
        get("hst").create("released", seed=2, **SMALL_HST).load_state_dict(state)
    state["tree/feature"] = state["tree/feature"][:, :-1]
    with pytest.raises(CheckpointError, match="tree arrays"):
        get("hst").create("released", seed=1, **SMALL_HST).load_state_dict(state)


def _batches():
    """Benign training rows; the same evaluation records R scored alone, and again beside 300 shifted records."""
    rng = np.random.default_rng(11)
    train = rng.normal(size=(300, 4))
    benign, attacks = rng.normal(size=(150, 4)), rng.normal(size=(15, 4)) + np.array([2.5, 0, 0, 0])
    R = np.vstack([benign, attacks])
    y = np.r_[np.zeros(150), np.ones(15)]
    crowd = rng.normal(size=(300, 4)) + 2.5
    return train, R, y, np.vstack([R, crowd])


@pytest.mark.parametrize("name, differs", [("ecod", True), ("iforest", False), ("lof", False)])
def test_a_batch_dependent_score_changes_with_its_batch(name, differs):
    train, R, y, bigger = _batches()
    det = get(name).create("released", seed=0, minmax=False).fit(train)
    alone, beside = det.score(R), det.score(bigger)[: len(R)]
    ap_alone, ap_beside = average_precision_score(y, alone), average_precision_score(y, beside)
    assert (ap_alone != ap_beside) is differs
    assert (not np.array_equal(alone, beside)) is differs
    assert differs is get(name).batch_dependent


def test_every_batch_score_names_its_batch():
    train, R, _, bigger = _batches()
    det = get("ecod").create("released").fit(train)
    ids_alone, ids_beside = np.arange(len(R)), np.arange(len(bigger))
    first, second = det.batch_record(ids_alone), det.batch_record(ids_beside)
    assert (first.size, second.size) == (len(R), len(bigger))
    assert first.ids_sha256 != second.ids_sha256
    assert batch_record(ids_alone[::-1]).ids_sha256 != first.ids_sha256  # the order scored is part of the batch
    assert batch_record(list(ids_alone)) == first


def test_released_min_max_rescales_each_batch_to_the_unit_interval():
    train, R, y, _ = _batches()
    for name in ("ecod", "lof"):
        raw = get(name).create("released", minmax=False).fit(train).score(R)
        scaled = get(name).create("released").fit(train).score(R)
        assert scaled.min() == 0.0 and scaled.max() == 1.0
        assert average_precision_score(y, scaled) == pytest.approx(average_precision_score(y, raw), abs=1e-12)

"""Tabular detectors: the tracks are separate; every registered one learns a shifted-records task; PyOD
equivalences; settings and edge cases of single detectors. The contract (pointwise, repeatable, state round trip,
seed, resume): tests/tabular/test_tabular_contract.py."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from bench.errors import ConfigError
from bench.registry import get, specs

TABULAR = list(specs("tabular"))


def tabular_task(seed=0, n=400, d=12):
    rng = np.random.default_rng(seed)
    train = rng.normal(size=(n, d)).astype(np.float32)
    test = np.concatenate([rng.normal(size=(100, d)), rng.normal(size=(40, d)) + 3.0]).astype(np.float32)
    return train, test, np.r_[np.zeros(100), np.ones(40)]


def build(name, **over):
    spec = get(name, "tabular")
    return spec.factory(**spec.resolve({**spec.quick, **over}))


def test_the_tracks_are_separate():
    assert {"ae1svm", "autoencoder", "iforest"} <= set(TABULAR)  # the scenario chain's three, at least
    assert not set(TABULAR) & set(specs())  # image lists (demo, grids, image contract tests) do not see them
    with pytest.raises(ConfigError, match="unknown tabular model") as err:
        get("patchcore", "tabular")
    assert set(str(err.value).split("valid: ")[1].rstrip(")").split(", ")) == set(TABULAR)


@pytest.mark.parametrize("name", TABULAR)
def test_learns_the_shifted_records_and_its_seed_matters(name):
    """Quick settings: every detector ranks the shifted records higher (ROC-AUC ≥ 0.8); another seed gives another
    model (so the contract's same-seed check is not vacuous)."""
    train, test, y = tabular_task()
    s = build(name).fit(train, seed=0).score(test)
    assert roc_auc_score(y, s) >= 0.8
    assert not np.allclose(build(name).fit(train, seed=1).score(test), s)


def test_ae1svm_scores_equal_pyods_own():
    train, test, _ = tabular_task()
    det = build("ae1svm").fit(train, seed=0)
    assert np.allclose(det.score(test), det.model_.decision_function(test), rtol=1e-5, atol=1e-6)


def test_autoencoder_scores_equal_pyods_scoring_of_the_same_network():
    """Trained by the suite's loop (PyOD's fit would restart the network on every task), scored as PyOD scores."""
    from pyod.models.auto_encoder import AutoEncoder as PyodAE

    train, test, _ = tabular_task()
    det = build("autoencoder").fit(train, seed=0)
    ref = PyodAE(device="cpu", verbose=0)
    ref.model, ref.feature_size, ref.decision_scores_ = det.net_, train.shape[1], np.zeros(1)
    ref.X_mean, ref.X_std = det.mean_, det.std_
    assert np.allclose(det.score(test), ref.decision_function(test), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", TABULAR)
def test_defaults_pass_their_own_checks(name):
    spec = get(name, "tabular")
    assert spec.resolve(spec.defaults()) == spec.defaults() and spec.source


def test_bad_hidden_sizes_are_refused():
    with pytest.raises(ConfigError, match="hidden"):
        build("autoencoder", hidden="64,x").fit(np.zeros((10, 3), np.float32), 0)


def _with_batch_norm(name):
    """The quick setting with BatchNorm switched on where the detector has the setting (the crash needs it)."""
    return {"batch_norm": True} if "batch_norm" in get(name, "tabular").params else {}


@pytest.mark.parametrize("name", TABULAR)
def test_a_last_batch_of_one_record_trains(name):
    """n = batch + 1 leaves a last batch of one record; BatchNorm in train mode refused it."""
    spec = get(name, "tabular")
    over = {**spec.quick, **_with_batch_norm(name)}
    if "batch_size" in spec.params:
        over["batch_size"] = 16
    n = over.get("batch_size", 16) + 1
    rng = np.random.default_rng(0)
    train = rng.normal(size=(n, 6)).astype(np.float32)
    det = spec.factory(**spec.resolve(over)).fit(train, seed=0)
    scores = det.score(train)
    assert scores.shape == (n,) and np.isfinite(scores).all()
    again = spec.factory(**spec.resolve(over)).fit(train, seed=0).score(train)
    assert np.allclose(again, scores, rtol=1e-5, atol=1e-6)  # the dropped batch is deterministic


def test_ae1svm_fit_trains_as_pyods_fit_when_no_batch_is_dropped():
    """The wrapper runs PyOD's fit step by step (to drop a one-record batch); for any other n the weights are
    PyOD's own."""
    import torch

    train, _, _ = tabular_task(n=130)  # 130 = 2·64 + 2: no one-record batch at batch 64
    det = build("ae1svm").fit(train, seed=3)
    with torch.random.fork_rng():
        torch.manual_seed(3)
        ref = det._pyod()
        ref.fit(train)
    ours, theirs = det.model_.model.state_dict(), ref.model.state_dict()
    assert ours.keys() == theirs.keys()
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)


def test_dagmm_energy_survives_float32_rounding_of_a_wide_covariance():
    """The covariance DAGMM estimated on the synthetic stream had eigenvalue −1.2e-6 beside λ_max 15.7 (float32
    rounding of its weighted sums): an absolute 1e-6 jitter left it indefinite and the run died in Cholesky."""
    import torch

    from bench.tabular.detectors.dagmm import _JITTER, energy

    q, _ = torch.linalg.qr(torch.randn(6, 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64))
    eig = torch.tensor([15.7, 0.034, 1.6e-3, 1.5e-5, 2.3e-6, -1.2e-6], dtype=torch.float64)
    cov = (q @ torch.diag(eig) @ q.T).float()[None]
    assert torch.linalg.cholesky_ex(cov + _JITTER * torch.eye(6))[1].item() > 0  # what the fixed jitter did
    z = torch.randn(5, 6, generator=torch.Generator().manual_seed(1))
    e = energy(z, torch.ones(1), torch.zeros(1, 6), cov)
    assert torch.isfinite(e).all()

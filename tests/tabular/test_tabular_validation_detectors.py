"""Validation-phase tabular detectors (VAE, Deep SVDD, DAGMM, NeuTraL-AD): they learn, they continue training
from their weights, PyOD's VAE scores at random where ours does not; the pointwise audit. The contract
(deterministic and pointwise scores, state, a run killed mid-epoch resuming on the suite's training loop):
tests/tabular/test_tabular_contract.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score

from bench.errors import ConfigError
from bench.registry import ModelSpec, get
from bench.tabular import audit
from bench.tabular.detectors.base import TabularDetector

VALIDATION = ["vae", "deepsvdd", "dagmm", "neutralad"]


def manifold_task(seed=0, n=600, d=16, rank=3, shift=0.0):
    """Normals on a noisy rank-3 subspace of 16 features; anomalies are off it (same per-feature scale)."""
    rng = np.random.default_rng(seed)
    basis = np.random.default_rng(100).normal(size=(rank, d)) / np.sqrt(rank)

    def normals(m):
        return rng.normal(size=(m, rank)) @ basis + 0.1 * rng.normal(size=(m, d)) + shift

    test = np.concatenate([normals(150), rng.normal(size=(50, d)) + shift]).astype(np.float32)
    return normals(n).astype(np.float32), test, np.r_[np.zeros(150), np.ones(50)]


def build(name, **over):
    spec = get(name, "tabular")
    return spec.factory(**spec.resolve({**spec.quick, **over}))


def weights(det) -> np.ndarray:
    return np.concatenate([v.ravel() for k, v in det.state_dict().items() if k.startswith("net/")])


@pytest.mark.parametrize("name", VALIDATION)
def test_learns_the_synthetic_task(name):
    train, test, y = manifold_task()
    det = build(name).fit(train, seed=0)
    assert roc_auc_score(y, det.score(test)) >= 0.8
    assert len(det.losses_) == det.hparams["epochs"] and np.isfinite(det.losses_).all()


@pytest.mark.parametrize("name", [*VALIDATION, "autoencoder"])
def test_warm_start_continues_from_the_current_weights(name):
    task1, _, _ = manifold_task(seed=1, shift=1.0)
    other1, _, _ = manifold_task(seed=2, shift=-1.0)
    task2, _, _ = manifold_task(seed=3)
    after = build(name, epochs=2).fit(task1, seed=0)
    w1 = weights(after)
    after.fit(task2, seed=1)
    fresh = build(name, epochs=2).fit(task2, seed=1)
    via_other = build(name, epochs=2).fit(other1, seed=0).fit(task2, seed=1)
    assert not np.allclose(weights(after), w1)  # task 2 trained it further
    assert not np.allclose(weights(after), weights(fresh))  # ... not a restart on task 2
    assert not np.allclose(weights(after), weights(via_other))  # ... and where it ends depends on task 1


def test_pyod_rebuilds_on_fit_which_is_why_we_do_not_call_it():
    from pyod.models.vae import VAE as PyodVAE

    X = manifold_task()[0][:200]

    def pyod_fit(model):
        with torch.random.fork_rng():
            return model.fit(X)

    m = pyod_fit(PyodVAE(epoch_num=1, batch_size=64, random_state=0, verbose=0, device="cpu"))
    first = m.model
    pyod_fit(m)
    assert m.model is not first  # a second fit starts from a new network


def test_pyods_vae_scores_are_random_which_ours_are_not():
    """PyOD's VAE samples its latent code while scoring; ours scores the mean code (eval mode, no sampling), so
    the contract's repeatable-scores check holds for it (tests/tabular/test_tabular_contract.py)."""
    from pyod.models.vae import VAE as PyodVAE

    train, test, _ = manifold_task()
    with torch.random.fork_rng():
        m = PyodVAE(epoch_num=1, batch_size=64, random_state=0, verbose=0, device="cpu").fit(train)
        assert not np.allclose(m.decision_function(test), m.decision_function(test))  # the trap


class _Ecod(TabularDetector):
    """PyOD's ECOD: its ECDFs are taken over the training data and the batch being scored."""

    name = "ecod"

    def fit(self, X, seed):
        from pyod.models.ecod import ECOD

        self.model_ = ECOD().fit(X)
        return self

    def score(self, X):
        return self.model_.decision_function(X)


def _spec(name, factory, transductive=False):
    return ModelSpec(name=name, label=name, factory=factory, params={}, track="tabular", inputs="records",
                     transductive=transductive, version=99)


def test_pointwise_audit_flags_ecod_and_passes_isolation_forest():
    change, passes = audit.pointwise_audit(_spec("ecod", lambda: _Ecod()))
    assert not passes and change > 1e-3
    with pytest.raises(ConfigError, match="fails the pointwise audit"):
        audit.require_pointwise(_spec("ecod", lambda: _Ecod()))
    audit.require_pointwise(_spec("ecod_marked", lambda: _Ecod(), transductive=True))  # explicitly allowed
    for name in ["iforest", *VALIDATION]:
        change, passes = audit.pointwise_audit(get(name, "tabular"))
        assert passes, (name, change)

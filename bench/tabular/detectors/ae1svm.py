"""AE1SVM (PyOD `AE1SVM`): an autoencoder trained jointly with a one-class SVM on random Fourier features of its
code; PyOD scores a record by its reconstruction distance.

Defaults are PyOD 3.6.7's. Two things PyOD's implementation does that this wrapper keeps (it runs the released
model) but that a reader should know: it has no random_state (seeded here through torch's generator before
construction), its scoring fails on a single record (scored here by the same formula, vectorised), and its
"best epoch" copy is a reference to the live weights, so the final weights are used.
"""

from __future__ import annotations

import numpy as np

from bench.registry import Bool, Float, Int, ModelSpec, Param, register
from bench.tabular.detectors.base import (TabularDetector, hidden_sizes, load_torch_state, quiet,
                                          reconstruction_distance, torch_state)


class AE1SVM(TabularDetector):
    name = "ae1svm"

    def _pyod(self):
        import torch
        from pyod.models.ae1svm import AE1SVM as PyodAE1SVM

        h = self.hparams
        m = PyodAE1SVM(hidden_neurons=hidden_sizes(self.name, h["hidden"]), batch_norm=h["batch_norm"],
                       learning_rate=h["lr"], epochs=h["epochs"], batch_size=h["batch_size"],
                       dropout_rate=h["dropout"], weight_decay=h["weight_decay"], alpha=h["alpha"],
                       sigma=h["sigma"], nu=h["nu"], kernel_approx_features=h["rff_features"])
        m.device = torch.device("cpu")
        return m

    def fit(self, X, seed):
        import torch

        X = np.asarray(X, dtype=np.float32)
        with torch.random.fork_rng(), quiet():
            torch.manual_seed(seed)
            self.model_ = self._pyod()
            self._pyod_fit(self.model_, X)
        return self

    def _pyod_fit(self, m, X):
        """PyOD 3.6.7's `AE1SVM.fit`, step by step, with one change: its loader keeps a last batch of ONE record
        (n ≡ 1 mod batch_size), which BatchNorm in train mode cannot take (torch raises); that batch is dropped,
        as PyOD's other deep detectors drop incomplete batches. Any other n trains exactly as PyOD's fit (same
        draws of the seeded generator). PyOD's fit then scores the training set (`decision_scores_`), which
        this suite never reads and which fails on the same one-record batch, so that step is left out."""
        import torch
        from pyod.models.ae1svm import InnerAE1SVM
        from pyod.utils.torch_utility import TorchDataset

        m.mean, m.std = np.mean(X, axis=0), np.std(X, axis=0)
        m.std[m.std == 0] = 1e-6  # PyOD's guard against a constant feature
        loader = torch.utils.data.DataLoader(TorchDataset(X=X, mean=m.mean, std=m.std, return_idx=True),
                                             batch_size=m.batch_size, shuffle=True,
                                             drop_last=len(X) % m.batch_size == 1)
        m.model = InnerAE1SVM(n_features=X.shape[1], encoding_dim=32, rff_dim=m.kernel_approx_features,
                              sigma=m.sigma, hidden_neurons=m.hidden_neurons, dropout_rate=m.dropout_rate,
                              batch_norm=m.batch_norm, hidden_activation=m.hidden_activation).to(m.device)
        m._train_autoencoder(loader)
        m.model.load_state_dict(m.best_model_dict)

    def score(self, X):
        # PyOD's decision_function, vectorised (it also fails on a single record: it indexes its output with a
        # one-element tensor)
        m = self.model_
        return reconstruction_distance(m.model, X, m.mean, m.std, recon=lambda out: out[0])

    def state_dict(self):
        m = self.model_
        return {"mean": np.asarray(m.mean), "std": np.asarray(m.std), **torch_state(m.model)}

    def load_state_dict(self, state):
        from pyod.models.ae1svm import InnerAE1SVM

        h = self.hparams
        self.model_ = m = self._pyod()
        m.model = InnerAE1SVM(n_features=int(np.asarray(state["mean"]).shape[0]), encoding_dim=32,
                              rff_dim=h["rff_features"], sigma=h["sigma"],
                              hidden_neurons=hidden_sizes(self.name, h["hidden"]), dropout_rate=h["dropout"],
                              batch_norm=h["batch_norm"], hidden_activation="relu")
        load_torch_state(m.model, state)
        m.mean, m.std = np.asarray(state["mean"]), np.asarray(state["std"])
        m.best_model_dict = m.model.state_dict()
        return self


register(ModelSpec(
    name="ae1svm", label="AE1SVM", factory=lambda **h: AE1SVM(**h), track="tabular",
    params={"epochs": Int(50, 1), "lr": Float(1e-3, 0, low_open=True), "batch_size": Int(32, 2),
            "hidden": Param("64,32", "str", doc="hidden layer sizes of the encoder"),
            "dropout": Float(0.2, 0, 0.95), "batch_norm": Bool(True), "weight_decay": Float(1e-5, 0),
            "alpha": Float(1.0, 0), "sigma": Float(1.0, 0, low_open=True), "nu": Float(0.1, 0, 1, low_open=True),
            "rff_features": Int(1000, 1)},
    quick={"epochs": 3, "batch_size": 64, "rff_features": 128},
    # released: the CAD framework's released code (docs/tabular.md); suite: the defaults above
    presets={"suite": {}, "released": {"epochs": 20, "rff_features": 512, "batch_size": 128}},
    default_preset="suite", inputs="records", version=1,
    source="PyOD 3.6.7 defaults"))

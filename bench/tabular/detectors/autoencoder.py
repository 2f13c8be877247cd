"""Autoencoder (PyOD `AutoEncoder`): reconstruction error of a fully connected autoencoder.

Defaults are PyOD 3.6.7's (the CAD framework runs PyOD's models; its paper gives no other values in the text we
have). PyOD standardises inputs with the training mean/std; the score is the Euclidean reconstruction distance.
"""

from __future__ import annotations

import numpy as np

from bench.models.registry import Bool, Float, Int, ModelSpec, Param, register
from bench.tabular.detectors.base import (TabularDetector, hidden_sizes, load_torch_state, quiet,
                                          reconstruction_distance, torch_state)


class Autoencoder(TabularDetector):
    name = "autoencoder"

    def _pyod(self, seed: int):
        from pyod.models.auto_encoder import AutoEncoder as PyodAE

        h = self.hparams
        return PyodAE(epoch_num=h["epochs"], lr=h["lr"], batch_size=h["batch_size"], dropout_rate=h["dropout"],
                      batch_norm=h["batch_norm"], hidden_neuron_list=hidden_sizes(self.name, h["hidden"]),
                      optimizer_params={"weight_decay": h["weight_decay"]}, device="cpu", random_state=seed,
                      verbose=0)

    def fit(self, X, seed):
        import torch

        with torch.random.fork_rng(), quiet():
            self.model_ = self._pyod(seed)  # PyOD seeds torch/numpy/random in its constructor
            self.model_.fit(np.asarray(X, dtype=np.float32))
        return self

    def score(self, X):
        m = self.model_
        return reconstruction_distance(m.model, X, m.X_mean, m.X_std)

    def state_dict(self):
        m = self.model_
        return {"X_mean": np.asarray(m.X_mean), "X_std": np.asarray(m.X_std), **torch_state(m.model)}

    def load_state_dict(self, state):
        self.model_ = self._pyod(0)
        self.model_.feature_size = int(np.asarray(state["X_mean"]).shape[0])
        self.model_.build_model()
        load_torch_state(self.model_.model, state)
        self.model_.X_mean, self.model_.X_std = np.asarray(state["X_mean"]), np.asarray(state["X_std"])
        self.model_.model.eval()
        return self


register(ModelSpec(
    name="autoencoder", label="Autoencoder", factory=lambda **h: Autoencoder(**h), track="tabular",
    params={"epochs": Int(10, 1), "lr": Float(1e-3, 0, low_open=True), "batch_size": Int(32, 2),
            "hidden": Param("64,32", "str", doc="hidden layer sizes of the encoder"),
            "dropout": Float(0.2, 0, 0.95), "batch_norm": Bool(True), "weight_decay": Float(1e-5, 0)},
    quick={"epochs": 3, "batch_size": 64}, inputs="records", version=1, source="PyOD 3.6.7 defaults"))

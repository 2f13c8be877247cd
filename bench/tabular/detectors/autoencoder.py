"""Autoencoder on PyOD's `AutoEncoderModel` network, trained by the suite's loop: reconstruction error of a fully
connected autoencoder.

Network, loss (mean squared error), optimiser (Adam with weight decay) and defaults are PyOD 3.6.7's (the CAD
framework runs PyOD's models; its paper gives no other values in the text we have); the score is PyOD's, the
Euclidean distance between a standardised record and its reconstruction. PyOD's own `fit` is not called: it
builds a new network on every call, so under Naive or Replay the model would restart on each task instead of
continuing from its weights (`bench.tabular.detectors._gradient`). Algorithm version 2: the suite's loop (seeded
record order, epoch checkpoints) replaces PyOD's; version 1 called PyOD's `fit`.
"""

from __future__ import annotations

import torch

from bench.registry import Bool, Float, Int, ModelSpec, Param, register
from bench.tabular.detectors._gradient import TorchTabular
from bench.tabular.detectors.base import hidden_sizes


class Autoencoder(TorchTabular):
    name = "autoencoder"

    def make_net(self, n_features):
        from pyod.models.auto_encoder import AutoEncoderModel

        h = self.hparams
        return AutoEncoderModel(n_features, hidden_neuron_list=hidden_sizes(self.name, h["hidden"]),
                                hidden_activation_name="relu", batch_norm=h["batch_norm"], dropout_rate=h["dropout"])

    def loss(self, x):
        return torch.nn.functional.mse_loss(self.net_(x), x)

    def score_batch(self, x):
        return torch.linalg.vector_norm(x - self.net_(x), dim=1)


register(ModelSpec(
    name="autoencoder", label="Autoencoder", factory=lambda **h: Autoencoder(**h), track="tabular",
    params={"epochs": Int(10, 1), "lr": Float(1e-3, 0, low_open=True), "batch_size": Int(32, 2),
            "hidden": Param("64,32", "str", doc="hidden layer sizes of the encoder"),
            "dropout": Float(0.2, 0, 0.95), "batch_norm": Bool(True), "weight_decay": Float(1e-5, 0)},
    quick={"epochs": 3, "batch_size": 64},
    # released: the CAD framework's released code (docs/tabular.md): cadbench/pyclad/utils.py create_autoencoder
    # (64-16 ReLU, 20 epochs) and autoencoder.py:22-30 (batch 128, Adam 1e-3 without weight decay, no BatchNorm,
    # no dropout). suite: the defaults above
    presets={"suite": {}, "released": {"epochs": 20, "hidden": "64,16", "batch_size": 128, "batch_norm": False,
                                       "dropout": 0.0, "weight_decay": 0.0}},
    default_preset="suite", inputs="records", version=2, source="PyOD 3.6.7 defaults"))

"""Deep SVDD (Ruff et al. 2018), one-class objective, on PyOD's `InnerDeepSVDD` network, trained by the suite's loop.

Score: squared distance of the network output to the centre c. The centre is set once, from the first training
set (mean output of the initial network, entries nudged away from 0 by 0.1 as PyOD and the paper do, since a
zero centre admits the trivial all-zero solution) and kept fixed afterwards: continued training pulls new tasks
towards the same hypersphere. Loss as PyOD 3.6.7: mean squared distance + 1e-6 · Σ‖W‖ (+ the reconstruction
error when `use_ae`), Adam with weight decay `l2_regularizer`. PyOD also restores the weights of the epoch with
the lowest training loss; this loop keeps the last epoch's (the paper's procedure). Defaults are PyOD 3.6.7's
(PyOD ≥ 3.6.3: before that its DeepSVDD never trained).
"""

from __future__ import annotations

import numpy as np
import torch

from bench.errors import ConfigError
from bench.registry import Bool, Float, Int, ModelSpec, Param, register
from bench.tabular.detectors._gradient import TorchTabular
from bench.tabular.detectors.base import hidden_sizes


class DeepSVDD(TorchTabular):
    name = "deepsvdd"

    def make_net(self, n_features):
        from pyod.models.deep_svdd import InnerDeepSVDD

        h = self.hparams
        hidden = hidden_sizes(self.name, h["hidden"])
        if len(hidden) < 2:
            raise ConfigError(f"{self.name} hyperparameter hidden={h['hidden']!r} needs at least two sizes")
        return InnerDeepSVDD(n_features, use_ae=h["use_ae"], hidden_neurons=hidden, hidden_activation="relu",
                             output_activation="sigmoid", dropout_rate=h["dropout"],
                             l2_regularizer=h["l2_regularizer"])

    def optimizers(self):
        return [torch.optim.Adam(self.net_.parameters(), lr=self.hparams["lr"],
                                 weight_decay=self.hparams["l2_regularizer"])]

    def start(self, x):
        self.c_ = self.net_._init_c(x).detach().clone()

    def loss(self, x):
        out = self.net_(x)
        loss = ((out - self.c_) ** 2).sum(-1).mean() + 1e-6 * sum(torch.linalg.norm(w) for w in self.net_.parameters())
        if self.hparams["use_ae"]:
            loss = loss + ((out - x) ** 2).mean()
        return loss

    def score_batch(self, x):
        return ((self.net_(x) - self.c_) ** 2).sum(-1)

    def extra_state(self):
        return {"c": self.c_.numpy().copy()}

    def load_extra_state(self, state):
        self.c_ = torch.from_numpy(np.asarray(state["c"], dtype=np.float32))


register(ModelSpec(
    name="deepsvdd", label="Deep SVDD", factory=lambda **h: DeepSVDD(**h), track="tabular",
    params={"epochs": Int(100, 1), "lr": Float(1e-4, 0, low_open=True), "batch_size": Int(32, 2),
            "hidden": Param("64,32", "str", doc="layer sizes; the last is the output space of the hypersphere"),
            "dropout": Float(0.2, 0, 0.95), "l2_regularizer": Float(0.5e-6, 0), "use_ae": Bool(False)},
    quick={"epochs": 5, "batch_size": 64, "lr": 1e-3},
    # released: the CAD framework's released code (docs/tabular.md): run_validation_strategies.py:102
    # ContinualDeepSVDD(epochs=20, batch_size=128) on PyOD 3.2.1's defaults (l2_regularizer 0.1), whose Adam
    # gets no learning rate (continual_deep_svdd.py: optimizer_dict[...](params, weight_decay=l2)): torch's 1e-3.
    # suite: the defaults above
    presets={"suite": {}, "released": {"epochs": 20, "batch_size": 128, "lr": 1e-3, "l2_regularizer": 0.1}},
    default_preset="suite", inputs="records", version=1, source="PyOD 3.6.7 defaults"))

"""NeuTraL-AD (Qiu et al. 2021): learnable neural transformations and a deterministic contrastive loss.

Written here from the paper (PyOD has no NeuTraL-AD). K learnable transformations T_k of a record, each either
residual, T_k(x) = x + M_k(x) ("residual", the default), or multiplicative, sigmoid(M_k(x)) ⊙ x ("mul"); an
encoder f maps the record and its K views to z, z_1..z_K. With h(a, b) = exp(cos(a, b)/τ), the deterministic
contrastive loss of a record is
    L(x) = −Σ_k log [ h(z_k, z) / (h(z_k, z) + Σ_{l≠k} h(z_k, z_l)) ],
the training objective (batch mean) and the anomaly score alike: on normal records every view stays close to the
original while the views remain distinguishable from one another.
Defaults: K = 11, τ = 0.1, Adam lr 1e-3, batch 64, 100 epochs (the tabular values of public re-implementations;
the paper's appendix is not in papers/), layer sizes chosen here (each mask network one hidden layer of 64, the
encoder 64-64 to a 32-dimensional z). Residual is the default: on the mean-shifted task of
tests/tabular/test_tabular_detectors.py the multiplicative masks rank the shifted records as the MOST normal (ROC-AUC
0.11 after 30 epochs at the quick sizes, residual 0.97; docs/tabular.md).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from bench.registry import Choice, Float, Int, ModelSpec, Param, register
from bench.tabular.detectors._gradient import TorchTabular, mlp
from bench.tabular.detectors.base import hidden_sizes


class _Net(nn.Module):
    def __init__(self, n_features: int, n_trans: int, trans_hidden: list[int], hidden: list[int], rep_dim: int,
                 trans_type: str):
        super().__init__()
        self.trans_type = trans_type
        self.masks = nn.ModuleList(mlp([n_features, *trans_hidden, n_features]) for _ in range(n_trans))
        self.encoder = mlp([n_features, *hidden, rep_dim])

    def views(self, x):
        """[K + 1, B, d]: the record, then its K transformations."""
        out = [x]
        for m in self.masks:
            out.append(torch.sigmoid(m(x)) * x if self.trans_type == "mul" else x + m(x))
        return torch.stack(out)

    def dcl(self, x, temperature: float) -> torch.Tensor:
        """The deterministic contrastive loss of each record [B]."""
        z = F.normalize(self.encoder(self.views(x)), dim=-1).transpose(0, 1)  # [B, K + 1, r]
        sim = z @ z.transpose(1, 2) / temperature  # [B, K + 1, K + 1]
        k = sim.shape[1]
        rows = sim[:, 1:]  # each view against the record (column 0) and every view
        self_pair = torch.eye(k, dtype=torch.bool)[1:]
        denom = torch.logsumexp(rows.masked_fill(self_pair, float("-inf")), dim=2)  # all but itself
        return (denom - rows[:, :, 0]).sum(1)


class NeuTraLAD(TorchTabular):
    name = "neutralad"

    def make_net(self, n_features):
        h = self.hparams
        return _Net(n_features, h["n_trans"], hidden_sizes(self.name, h["trans_hidden"]),
                    hidden_sizes(self.name, h["hidden"]), h["rep_dim"], h["trans_type"])

    def loss(self, x):
        return self.net_.dcl(x, self.hparams["temperature"]).mean()

    def score_batch(self, x):
        return self.net_.dcl(x, self.hparams["temperature"])


register(ModelSpec(
    name="neutralad", label="NeuTraL-AD", factory=lambda **h: NeuTraLAD(**h), track="tabular",
    params={"epochs": Int(100, 1), "lr": Float(1e-3, 0, low_open=True), "batch_size": Int(64, 2),
            "n_trans": Int(11, 2), "temperature": Float(0.1, 0, low_open=True),
            "trans_type": Choice("residual", ("residual", "mul")),
            "trans_hidden": Param("64", "str", doc="hidden sizes of each transformation's mask network"),
            "hidden": Param("64,64", "str", doc="hidden sizes of the encoder"), "rep_dim": Int(32, 1),
            "weight_decay": Float(0.0, 0)},
    quick={"epochs": 10, "n_trans": 4, "trans_hidden": "16", "hidden": "32", "rep_dim": 16},
    # released: the CAD framework's released code (docs/tabular.md): run_validation_strategies.py:107
    # NeuTraLAD(epochs=20, batch_size=128) with its defaults (cadbench/pyclad/neutralad.py: lr 1e-3, 11 residual
    # transformations, τ 0.1, encoder 100-50 to 128, mask networks of one hidden layer of 50). suite: the above
    presets={"suite": {}, "released": {"epochs": 20, "batch_size": 128, "rep_dim": 128, "hidden": "100,50",
                                       "trans_hidden": "50"}},
    default_preset="suite", inputs="records",
    version=1, source="Qiu et al. 2021 (K, τ); layer sizes chosen here"))

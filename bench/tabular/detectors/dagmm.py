"""DAGMM (Zong et al. 2018): a compression autoencoder and a Gaussian mixture estimated on its output, jointly.

Written here from the paper (PyOD has no DAGMM). A record x is encoded to z_c and decoded to x'; the mixture sees
z = [z_c, ‖x − x'‖/‖x‖, cos(x, x')]. The estimation network maps z to memberships γ (softmax over K components),
and within a batch the mixture is φ_k = mean γ_k, μ_k and Σ_k the γ-weighted mean and covariance of z. Energy
E(z) = −log Σ_k φ_k N(z; μ_k, Σ_k). Objective: mean ‖x − x'‖² + λ₁ · mean E(z) + λ₂ · Σ_k Σ_j 1/Σ_k,jj.
After training, the mixture is re-estimated once over all of that training's records (eval mode) and kept; the
score of a record is its energy under it, so scoring is pointwise. Σ_k gets 1e-6·max(1, tr Σ_k)·I added before
inversion: the λ₂ term alone does not stop a component collapsing onto one point within a batch, and float32
rounding of the γ-weighted sums leaves eigenvalues of order eps·λ_max below zero (measured: −1.2e-6 beside
λ_max 15.7 on the synthetic stream), which an absolute 1e-6 does not cover once the variances grow.
Defaults: the paper's KDDCUP99 setting (compression 60-30-10-1 with tanh, estimation 10 units with dropout 0.5
and K = 4, λ₁ = 0.1, λ₂ = 0.005, Adam lr 1e-4, batch 1024, 200 epochs).
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from bench.errors import NumericalError
from bench.registry import Float, Int, ModelSpec, Param, register
from bench.tabular.detectors._gradient import TorchTabular, mlp
from bench.tabular.detectors.base import hidden_sizes

_JITTER = 1e-6


class _Net(nn.Module):
    def __init__(self, n_features: int, hidden: list[int], latent: int, est_hidden: int, n_gmm: int,
                 dropout: float):
        super().__init__()
        self.encoder = mlp([n_features, *hidden, latent], nn.Tanh)
        self.decoder = mlp([latent, *hidden[::-1], n_features], nn.Tanh)
        self.estimation = nn.Sequential(nn.Linear(latent + 2, est_hidden), nn.Tanh(), nn.Dropout(dropout),
                                        nn.Linear(est_hidden, n_gmm))

    def forward(self, x):
        zc = self.encoder(x)
        recon = self.decoder(zc)
        rel = torch.linalg.vector_norm(x - recon, dim=1) / torch.linalg.vector_norm(x, dim=1).clamp_min(1e-12)
        cos = F.cosine_similarity(x, recon, dim=1, eps=1e-12)
        z = torch.cat([zc, rel[:, None], cos[:, None]], dim=1)
        return recon, z, torch.softmax(self.estimation(z), dim=1)


def mixture(z: torch.Tensor, gamma: torch.Tensor):
    """(φ [K], μ [K, m], Σ [K, m, m]) of the γ-weighted mixture of z [N, m]."""
    mass = gamma.sum(0)
    phi = mass / len(z)
    mu = gamma.T @ z / mass[:, None]
    d = z[None] - mu[:, None]  # [K, N, m]
    cov = torch.einsum("kn,kni,knj->kij", gamma.T, d, d) / mass[:, None, None]
    return phi, mu, cov


def regularised(cov: torch.Tensor) -> torch.Tensor:
    """Σ_k + 1e-6·max(1, tr Σ_k)·I: positive definite despite float32 rounding (module docstring)."""
    scale = torch.diagonal(cov, dim1=-2, dim2=-1).sum(-1).clamp_min(1.0)
    return cov + (_JITTER * scale)[:, None, None] * torch.eye(cov.shape[-1], dtype=cov.dtype)


def energy(z: torch.Tensor, phi, mu, cov) -> torch.Tensor:
    """−log Σ_k φ_k N(z; μ_k, Σ_k) for every row of z."""
    m = z.shape[1]
    chol, info = torch.linalg.cholesky_ex(regularised(cov))
    if int(info.max()) > 0:
        raise NumericalError(f"dagmm: a mixture covariance is not positive definite even after regularisation "
                             f"(component {int(info.argmax())}); the compression network has collapsed — lower lr "
                             f"or change the seed")
    d = (z[None] - mu[:, None]).transpose(1, 2)  # [K, m, N]
    maha = torch.linalg.solve_triangular(chol, d, upper=False).pow(2).sum(1)  # [K, N]
    logdet = 2 * torch.log(torch.diagonal(chol, dim1=1, dim2=2)).sum(1)
    log_n = -0.5 * (maha + logdet[:, None] + m * math.log(2 * math.pi))
    return -torch.logsumexp(torch.log(phi.clamp_min(1e-12))[:, None] + log_n, dim=0)


class DAGMM(TorchTabular):
    name = "dagmm"

    def make_net(self, n_features):
        h = self.hparams
        return _Net(n_features, hidden_sizes(self.name, h["hidden"]), h["latent_dim"], h["est_hidden"], h["n_gmm"],
                    h["dropout"])

    def loss(self, x):
        h = self.hparams
        recon, z, gamma = self.net_(x)
        phi, mu, cov = mixture(z, gamma)
        penalty = (1 / torch.diagonal(regularised(cov), dim1=1, dim2=2)).sum()
        return (((x - recon) ** 2).sum(1).mean() + h["lambda_energy"] * energy(z, phi, mu, cov).mean()
                + h["lambda_cov"] * penalty)

    def finish(self, x):
        _, z, gamma = self.net_(x)
        self.phi_, self.mu_, self.cov_ = mixture(z, gamma)

    def score_batch(self, x):
        _, z, _ = self.net_(x)
        return energy(z, self.phi_, self.mu_, self.cov_)

    def extra_state(self):
        return {"gmm/phi": self.phi_.numpy().copy(), "gmm/mu": self.mu_.numpy().copy(),
                "gmm/cov": self.cov_.numpy().copy()}

    def load_extra_state(self, state):
        self.phi_, self.mu_, self.cov_ = (torch.from_numpy(np.asarray(state[f"gmm/{k}"], dtype=np.float32))
                                          for k in ("phi", "mu", "cov"))


register(ModelSpec(
    name="dagmm", label="DAGMM", factory=lambda **h: DAGMM(**h), track="tabular",
    params={"epochs": Int(200, 1), "lr": Float(1e-4, 0, low_open=True), "batch_size": Int(1024, 2),
            "hidden": Param("60,30,10", "str", doc="hidden sizes of the compression encoder (decoder mirrors)"),
            "latent_dim": Int(1, 1), "est_hidden": Int(10, 1), "n_gmm": Int(4, 1), "dropout": Float(0.5, 0, 0.95),
            "lambda_energy": Float(0.1, 0), "lambda_cov": Float(0.005, 0), "weight_decay": Float(0.0, 0)},
    quick={"epochs": 20, "batch_size": 64, "lr": 1e-3, "hidden": "32,16", "latent_dim": 4},
    # released: the CAD framework's released code (docs/tabular.md): run_validation_strategies.py:106
    # DAGMM(batch_size=128, num_epochs=20) with its defaults (cadbench/pyclad/dagmm.py: lr 1e-3, gmm_k 3, latent
    # 5 + F // 20, one hidden layer of max(2 latent, F // 4, 8)), the sizes for the CIC records' 76-79 features.
    # suite: the defaults above
    presets={"suite": {}, "released": {"epochs": 20, "batch_size": 128, "lr": 1e-3, "n_gmm": 3, "hidden": "19",
                                       "latent_dim": 8}},
    default_preset="suite", inputs="records", version=2,  # 2: covariance jitter scaled by the trace
    source="Zong et al. 2018 (KDDCUP99 setting)"))

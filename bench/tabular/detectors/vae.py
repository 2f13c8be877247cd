"""Variational autoencoder (Kingma & Welling 2014) on PyOD's `VAEModel` network, trained by the suite's loop.

Score: Euclidean distance between a standardised record and the decoding of its POSTERIOR MEAN. PyOD's
`decision_function` decodes a sampled z, so two calls on the same record differ; the posterior mean makes the
score a deterministic, pointwise function of the record (PyOD's distance otherwise).

Loss, `loss` setting: "elbo" (default, the paper's): per record ½‖x − x̂‖² (unit-variance Gaussian decoder) plus
β·KL(q(z|x) ‖ N(0, I)), averaged over the batch. "pyod": PyOD 3.6.7's `vae_loss`, the mean squared error over
all entries plus β·clamp(KL, 0, capacity); with its default capacity 0 the KL term is always zero, so that
variant trains a denoising autoencoder rather than a VAE. Network sizes and the optimiser are PyOD 3.6.7's defaults.
"""

from __future__ import annotations

import torch

from bench.registry import Bool, Choice, Float, Int, ModelSpec, Param, register
from bench.tabular.detectors._gradient import TorchTabular
from bench.tabular.detectors.base import hidden_sizes


class VAE(TorchTabular):
    name = "vae"

    def make_net(self, n_features):
        from pyod.models.vae import VAEModel

        h = self.hparams
        return VAEModel(n_features, encoder_neuron_list=hidden_sizes(self.name, h["encoder"]),
                        decoder_neuron_list=hidden_sizes(self.name, h["decoder"]), latent_dim=h["latent_dim"],
                        hidden_activation_name="relu", output_activation_name="identity",
                        batch_norm=h["batch_norm"], dropout_rate=h["dropout"], logvar_clip=(-30.0, 20.0))

    def loss(self, x):
        from pyod.models.vae import vae_loss

        h = self.hparams
        recon, mu, logvar = self.net_(x)
        if h["loss"] == "pyod":
            return vae_loss(x, recon, mu, logvar, beta=h["beta"], capacity=h["capacity"], logvar_clip=(-30.0, 20.0))
        logvar = logvar.clamp(-30.0, 20.0)
        kl = -0.5 * torch.sum(1 + logvar - mu ** 2 - logvar.exp(), dim=1)
        return (0.5 * ((recon - x) ** 2).sum(1) + h["beta"] * kl).mean()

    def score_batch(self, x):
        mu, _ = self.net_.encode(x)
        return torch.linalg.vector_norm(x - self.net_.decode(mu), dim=1)


register(ModelSpec(
    name="vae", label="VAE", factory=lambda **h: VAE(**h), track="tabular",
    params={"epochs": Int(30, 1), "lr": Float(1e-3, 0, low_open=True), "batch_size": Int(32, 2),
            "encoder": Param("128,64,32", "str", doc="hidden layer sizes of the encoder"),
            "decoder": Param("32,64,128", "str", doc="hidden layer sizes of the decoder"),
            "latent_dim": Int(2, 1), "dropout": Float(0.2, 0, 0.95), "batch_norm": Bool(False),
            "weight_decay": Float(1e-5, 0), "beta": Float(1.0, 0),
            "loss": Choice("elbo", ("elbo", "pyod"), doc="elbo: the paper's; pyod: PyOD 3.6.7's vae_loss"),
            "capacity": Float(0.0, 0, doc="KL cap of loss=pyod (PyOD's default 0 removes the KL term)")},
    quick={"epochs": 5, "batch_size": 64, "encoder": "32,16", "decoder": "16,32"},
    # released: the CAD framework's released code (docs/tabular.md): CAD 675a9c9 run_validation_strategies.py:104
    # ContinualVAE(epoch_num=20, batch_size=128), which trains PyOD's vae_loss (continual_vae.py:60-63) with PyOD's
    # capacity 0, i.e. MSE; the other values are PyOD's defaults, as above. suite: the defaults above
    presets={"suite": {}, "released": {"epochs": 20, "batch_size": 128, "loss": "pyod"}},
    default_preset="suite", inputs="records", version=1,
    source="PyOD 3.6.7 defaults (network, optimiser); loss: Kingma & Welling 2014"))

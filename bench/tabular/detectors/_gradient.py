"""Torch-trained tabular detectors (VAE, Deep SVDD, DAGMM, NeuTraL-AD) on the suite's one training loop.

`fit(X, seed)` CONTINUES training: the network is built (seeded) on the first fit only, and every later fit trains
the same weights further with a fresh optimizer, as the image track's gradient detectors do under NCL, Replay and
Cumulative. PyOD's own `fit` rebuilds its network each time, which would turn Naive into a sequence of single-task
experts, so these detectors use PyOD's networks and losses where PyOD has the model but never its `fit`.

Inputs are standardised with the mean/std of the FIRST training set and those statistics are kept: a continued
network keeps seeing the coordinates it was trained in (PyOD refits its scaler on every fit; with a warm start that
would silently move every input under the network). The loop (bench.training.loop.train) owns epochs, the seeded
record order, train()/eval(), per-epoch losses and epoch checkpoints; a sample is a row of the training matrix.
Scoring is deterministic (eval mode, no sampling) and pointwise, in chunks of `_SCORE_CHUNK` records.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from bench.errors import ConfigError
from bench.tabular.detectors.base import TabularDetector, load_torch_state, torch_state
from bench.training.loop import TrainContext, descend, seeded, train

_SCORE_CHUNK = 8192


class TorchTabular(TabularDetector):
    inputs_features = False  # the loop caches no backbone features: samples are rows of self.X_

    def __init__(self, **hparams):
        super().__init__(**hparams)
        self.context = TrainContext()
        self.net_: nn.Module | None = None
        self.losses_: list[float] = []

    # --- what a subclass provides -----------------------------------------------------------------
    def make_net(self, n_features: int) -> nn.Module:
        raise NotImplementedError

    def loss(self, x: torch.Tensor) -> torch.Tensor:
        """Mean training loss of a batch of standardised records."""
        raise NotImplementedError

    def score_batch(self, x: torch.Tensor) -> torch.Tensor:
        """Anomaly score of each standardised record (eval mode, no grad)."""
        raise NotImplementedError

    def start(self, x: torch.Tensor) -> None:
        """Called once after the network is built, before the first training (e.g. Deep SVDD's centre)."""

    def finish(self, x: torch.Tensor) -> None:
        """Called after every training, on that training's records (e.g. DAGMM's mixture parameters)."""

    # --- the loop's interface (bench.training.loop.train) ------------------------------------------
    def modules(self) -> dict[str, nn.Module]:
        return {"net": self.net_}

    def optimizers(self) -> list[torch.optim.Optimizer]:
        h = self.hparams
        return [torch.optim.Adam(self.net_.parameters(), lr=h["lr"], weight_decay=h.get("weight_decay", 0.0))]

    def schedulers(self, optimizers) -> list:
        return []

    def train_step(self, batch, optimizers) -> float | None:
        # A last batch of ONE record (n ≡ 1 mod batch_size) cannot train a network with BatchNorm in train mode
        # (torch refuses a batch statistic over one value); it is dropped, as PyOD's loader drops incomplete
        # batches (drop_last=True). Only then: other networks keep training on it, so their results are unchanged.
        if len(batch) == 1 and self._has_batch_norm():
            return None
        return descend(self.loss(self.X_[torch.as_tensor(batch)]), optimizers)

    def _has_batch_norm(self) -> bool:
        return any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in self.net_.modules())

    # --- the tabular contract ---------------------------------------------------------------------
    def _standardised(self, X) -> torch.Tensor:
        X = np.asarray(X, dtype=np.float32)
        if X.ndim != 2 or X.shape[1] != self.mean_.size:
            raise ConfigError(f"{self.name}: expected records with {self.mean_.size} features, got shape {X.shape}")
        return torch.from_numpy((X - self.mean_) / self.std_)

    def fit(self, X, seed: int) -> "TorchTabular":
        X = np.asarray(X, dtype=np.float32)
        if X.ndim != 2 or len(X) < 2:
            raise ConfigError(f"{self.name}: needs at least 2 training records with features, got shape {X.shape}")
        first = self.net_ is None
        if first:
            self.mean_ = X.mean(0)
            std = X.std(0)
            self.std_ = np.where(std > 0, std, 1.0).astype(np.float32)  # constant columns stay constant
        self.X_ = self._standardised(X)
        try:
            if first:
                with seeded(seed):
                    self.net_ = self.make_net(X.shape[1])
                self.start(self.X_)
            self.losses_ = train(self, list(range(len(X))), seed, epochs=self.hparams["epochs"],
                                 batch_size=self.hparams["batch_size"])
            self.net_.eval()
            with torch.no_grad():
                self.finish(self.X_)
        finally:
            del self.X_
        return self

    def score(self, X) -> np.ndarray:
        x = self._standardised(X)
        self.net_.eval()
        with torch.no_grad():
            parts = [self.score_batch(x[s:s + _SCORE_CHUNK]) for s in range(0, len(x), _SCORE_CHUNK)]
        return torch.cat(parts).double().numpy() if parts else np.zeros(0)

    def extra_state(self) -> dict[str, np.ndarray]:
        return {}

    def load_extra_state(self, state: dict[str, np.ndarray]) -> None:
        pass

    def state_dict(self) -> dict[str, np.ndarray]:
        return {"mean": self.mean_.copy(), "std": self.std_.copy(), **torch_state(self.net_), **self.extra_state()}

    def load_state_dict(self, state) -> "TorchTabular":
        self.mean_ = np.asarray(state["mean"], dtype=np.float32)
        self.std_ = np.asarray(state["std"], dtype=np.float32)
        with seeded(0):  # the architecture; every weight is then overwritten
            self.net_ = self.make_net(self.mean_.size)
        load_torch_state(self.net_, state)
        self.load_extra_state(state)
        self.net_.eval()
        return self


def mlp(sizes: list[int], activation=nn.ReLU, dropout: float = 0.0, last_activation: bool = False) -> nn.Sequential:
    """Linear layers through `sizes`, `activation` (and dropout) between them, optionally after the last too."""
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2 or last_activation:
            layers.append(activation())
            if dropout:
                layers.append(nn.Dropout(dropout))
    return nn.Sequential(*layers)

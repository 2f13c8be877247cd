"""The base class of detectors trained by gradient descent, beside the other detector bases (bench.models.base);
the loop that trains them is bench.training.loop.

How a detector plugs in (subclass `GradientDetector`; see bench/models/stfpm.py for a complete one):

- hyperparameters it must accept: `epochs`, `batch_size` (training batch, InCLAD Table 7), `replay_size`
  (images kept for the Replay protocol; 0 = the rule round(0.2 × mean training-task size)) and `replay_share`
  (how the buffer is split between past tasks, bench.training.replay);
- `build(seed)`: create the trainable modules on `self.device` if they do not exist yet (a warm start keeps
  them: NCL, Replay and Cumulative continue from the current weights). Seed every random init from `seed`
  (use `seeded(seed)`); shapes come from `self.feature_shapes()` (a dry forward, no data needed);
- `modules() -> dict[str, nn.Module]`: the trainable modules. The loop switches them to `train()` while
  training and the base class to `eval()` while scoring; their state dicts are the detector's checkpoint;
- `optimizers() -> list[Optimizer]`: built fresh for every task (InCLAD's behaviour); optionally
  `schedulers(optimizers) -> list` (stepped once per epoch);
- `loss(batch) -> scalar tensor`: the loss of a batch, a list of (split, row) samples (several splits under
  Replay). Frozen inputs come from `self.features(batch)` (the run's cached backbone features: each training
  image goes through the frozen network once per task, not once per epoch) and raw images, when the trained
  part reads them, from `self.images(batch)`. A detector with several optimizers or alternating updates
  overrides `train_step(batch, optimizers) -> float` instead (zero_grad/backward/step are then its own);
- `score(split, idx) -> Prediction`: scores and maps [B, S, S] at the input size, pointwise; called in eval
  mode under `torch.no_grad()`.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from bench.models.base import Detector, Prediction
from bench.registry import Choice, Int
from bench.training.loop import TrainContext, descend, sample_features, sample_images, train
from bench.training.replay import SHARE_RULES


def training_params(epochs: int, batch_size: int) -> dict:
    """The hyperparameters every gradient-trained detector has (defaults: InCLAD Table 7)."""
    return {
        "epochs": Int(epochs, 1),
        "batch_size": Int(batch_size, 1, doc="training batch (Table 7; InCLAD's run script passes 32 to all)"),
        "replay_size": Int(0, 0, doc="images replayed under CL; 0 = round(0.2 × mean training-task size)"),
        # InCLAD's runs used pyCLAD's AdaptiveBalancedReplayBuffer (v0.3.0 adaptive_balanced.py:20): floor; an
        # `original` preset keeps the suite's water filling
        "replay_share": Choice("floor", SHARE_RULES, doc="CL replay shares: ⌊capacity / tasks⌋ each (floor) or "
                                                        "water filling (water)"),
    }


class GradientDetector(Detector):
    """Base of the detectors trained by gradient descent; see the module docstring for what a subclass adds."""

    inputs_features = True  # False: the detector reads raw images only (no backbone features to cache)
    # The trained networks and the features fed to them use the channels-last memory format: on the CPU (oneDNN)
    # it made an epoch of the trained part 1.3-1.5x faster (STFPM, PaSTe, RD4AD, FastFlow at 256 px; make perf,
    # `training_epoch`), and CUDA has NHWC kernels for it. Only the layout changes, not the arithmetic: results
    # agree with the contiguous layout to float rounding. False: contiguous tensors.
    channels_last = True

    def __init__(self, extractor, *, image_size: int, epochs: int, batch_size: int, replay_size: int,
                 replay_share: str):
        self.extractor, self.image_size = extractor, image_size
        self.epochs, self.batch_size = epochs, batch_size
        self.replay_size, self.replay_share = replay_size, replay_share
        self.context = TrainContext()
        self.losses_: list[float] = []

    @property
    def device(self) -> torch.device:
        return self.extractor.device

    # --- what a subclass provides -----------------------------------------------------------------
    def build(self, seed: int) -> None:
        raise NotImplementedError

    def modules(self) -> dict[str, nn.Module]:
        raise NotImplementedError

    def optimizers(self) -> list[torch.optim.Optimizer]:
        raise NotImplementedError

    def schedulers(self, optimizers) -> list:
        return []

    def loss(self, batch) -> torch.Tensor:
        raise NotImplementedError

    def score(self, split, idx) -> Prediction:
        raise NotImplementedError

    def train_step(self, batch, optimizers) -> float:
        """One update on `batch`; returns its loss. The default: one loss, every optimizer stepped."""
        return descend(self.loss(batch), optimizers)

    # --- inputs -----------------------------------------------------------------------------------
    def features(self, batch) -> list[torch.Tensor]:
        """Frozen backbone features of training samples (cached for the task unless the perf baseline asks)."""
        return [self.layout(f) for f in sample_features(self.extractor, batch, keep=self.context.cache_features)]

    def images(self, batch) -> torch.Tensor:
        return self.layout(sample_images(batch, self.device, self.extractor.workers))

    def layout_samples(self, batch) -> torch.Tensor:
        """Raw images of training samples from an ImageSource (the detectors that read images), laid out."""
        return self.layout(self.extractor.samples(batch))

    def layout(self, x: torch.Tensor) -> torch.Tensor:
        """A 4-D input in the memory format the trained networks use (`channels_last`)."""
        return x.contiguous(memory_format=torch.channels_last) if self.channels_last and x.dim() == 4 else x

    def _lay_out_modules(self) -> None:
        if self.channels_last:
            for module in self.modules().values():
                module.to(memory_format=torch.channels_last)  # 4-D weights only; idempotent

    @torch.no_grad()
    def feature_shapes(self) -> list[torch.Size]:
        """[C, h, w] of each backbone layer at this image size (a dry forward of one blank image)."""
        blank = torch.zeros(1, 3, self.image_size, self.image_size, device=self.device)
        return [f.shape[1:] for f in self.extractor.model(blank)]

    # --- Detector API -----------------------------------------------------------------------------
    def fit(self, split, seed: int) -> "GradientDetector":
        return self.fit_samples([(split, i) for i in range(len(split))], seed)

    def fit_samples(self, samples: list, seed: int) -> "GradientDetector":
        """Learn (continuing from the current weights) on (split, row) samples, possibly of several tasks."""
        self.build(seed)
        self._lay_out_modules()
        self.losses_ = train(self, samples, seed, epochs=self.epochs, batch_size=self.batch_size)
        if self.inputs_features:  # training features are not needed after training (bounded cache)
            self.extractor.drop([split.keys[r] for split, r in samples])
        return self

    def predict(self, split, idx) -> Prediction:
        for module in self.modules().values():
            module.eval()  # scoring never touches BatchNorm statistics or draws dropout
        with torch.no_grad():
            return self.score(split, np.asarray(idx))

    def state_dict(self) -> dict:
        return {name: {k: v.cpu() for k, v in m.state_dict().items()} for name, m in self.modules().items()}

    def load_state_dict(self, state: dict) -> None:
        self.build(0)  # the architecture; every weight is then overwritten
        self._lay_out_modules()
        for name, module in self.modules().items():
            module.load_state_dict(state[name])

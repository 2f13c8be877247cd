"""CFA (Lee et al., 2022): coupled-hypersphere-based feature adaptation, and its continual adaptation (InCLAD
App. C.3).

Descriptor: backbone layers 1–3, each averaged over a 3×3 neighbourhood, layers 2 and 3 upsampled (bilinear) to
the layer-1 grid and concatenated, then a CoordConv 1×1 convolution (the only trained part; the backbone is
frozen, so training reads cached features). Memory bank: the mean descriptor feature at each grid location over
a set of normal images. Loss (soft boundary, radius r learned with the descriptor, margin α = 0.1, weight 1/ν):
attraction of every feature to its K = 3 nearest bank features, max(0, d² − r²), and repulsion of the next
J = 3 (hard negatives), max(0, r² − d² − α). Score of a patch: distance to its nearest bank feature weighted
by its softmin over the K nearest; map = upsampled + blurred with σ = 4; image score = max of the map.

The inference bank is rebuilt with the trained descriptor after every update (App. C.3's rule, also used by the
single-task model, so that NCL and CL share one definition and agree after their first task).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from bench.data.tasks import rerooted, split_from_state, split_state
from bench.models.base import (ROUTE_BY, Detector, Prediction, Protocol, local_patch_features, max_of_maps, route,
                               tensor_bytes)
from bench.models.ops.blur import MAX_SIGMA
from bench.registry import Choice, Float, Int, Layers, ModelSpec, register
from bench.training.loop import TrainContext, descend, sample_features, train
from bench.training.replay import ReplayBuffer

MARGIN = 0.1  # α: repulsion acts only on hard negatives closer than r² − α (Lee et al. 2022)
NU = 1e-3  # ν of the soft-boundary objective: both hinge terms are weighted by 1/ν
RADIUS_INIT = 1e-5
SCORE_CHUNK = 1 << 24  # distance-matrix elements scored at once: bounds memory at any image size


class CoordConv(nn.Module):
    """1×1 convolution over the input plus two coordinate channels in [−1, 1] (CoordConv, Liu et al. 2018):
    the descriptor knows where a feature sits, so the same texture at another place can still be anomalous."""

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels + 2, out_channels, kernel_size=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, _, h, w = x.shape
        ys = torch.linspace(-1, 1, h, device=x.device, dtype=x.dtype).view(1, 1, h, 1).expand(b, 1, h, w)
        xs = torch.linspace(-1, 1, w, device=x.device, dtype=x.dtype).view(1, 1, 1, w).expand(b, 1, h, w)
        return self.conv(torch.cat([x, xs, ys], dim=1))


def squared_distances(phi: torch.Tensor, bank: torch.Tensor) -> torch.Tensor:
    """‖φ − c‖² [B, P, M] for features φ [B, P, C] and bank [M, C] (norm expansion: one matmul)."""
    return ((phi * phi).sum(-1, keepdim=True) + (bank * bank).sum(-1) - 2.0 * phi @ bank.T).clamp_min(0)


def soft_boundary_loss(phi: torch.Tensor, bank: torch.Tensor, radius: torch.Tensor, k: int, j: int) -> torch.Tensor:
    """CFA's loss: attract each feature to its k nearest bank features, repel the next j (hard negatives)."""
    d2 = squared_distances(phi, bank).topk(k + j, dim=-1, largest=False).values
    r2 = radius**2
    attraction = torch.relu(d2[..., :k] - r2).mean()
    repulsion = torch.relu(r2 - d2[..., k:] - MARGIN).mean()
    return (attraction + repulsion) / NU


def patch_scores(phi: torch.Tensor, bank: torch.Tensor, k: int) -> torch.Tensor:
    """[B, P]: distance to the nearest bank feature × its softmin weight among the k nearest."""
    out = torch.empty(phi.shape[:2], device=phi.device)
    step = max(1, SCORE_CHUNK // (phi.shape[1] * bank.shape[0]))
    for s in range(0, phi.shape[0], step):
        d = squared_distances(phi[s : s + step], bank).sqrt().topk(k, dim=-1, largest=False).values
        out[s : s + step] = F.softmin(d, dim=-1)[..., 0] * d[..., 0]
    return out


class Radius(nn.Module):
    """The soft boundary's radius as a module, so the training loop checkpoints it with the descriptor."""

    def __init__(self, value: torch.Tensor):
        super().__init__()
        self.value = nn.Parameter(value.clone())


class Cfa(Detector):
    name = "cfa"
    inputs_features = True  # for the training loop: training reads cached backbone features

    def __init__(self, extractor, *, image_size: int, layers, epochs: int, lr: float, weight_decay: float,
                 k_neighbors: int, repulsion_neighbors: int, blur_sigma: float, replay_size: int, route_by: str):
        self.extractor, self.image_size, self.layers = extractor, image_size, tuple(layers)
        self.epochs, self.lr, self.weight_decay = epochs, lr, weight_decay
        self.k_neighbors, self.repulsion_neighbors = k_neighbors, repulsion_neighbors
        self.blur_sigma, self.replay_size, self.route_by = blur_sigma, replay_size, route_by
        self.descriptor_: CoordConv | None = None
        self.radius_: torch.Tensor | None = None
        self.bank_: torch.Tensor | None = None
        self.context = TrainContext()  # set by the runner: epoch checkpoints, progress
        self.losses_: list[float] = []
        self._radius: Radius | None = None
        self._train_bank: torch.Tensor | None = None

    # --- samples and features ---------------------------------------------------------------------
    def cache(self, split) -> list[tuple[object, int]]:
        """Forward a training split in its standard batches, keeping the features (training revisits them every
        epoch and CL rebuilds banks from them); returns its samples as (split, row) pairs."""
        for _ in self.extractor.batches(split, desc=f"features {split.name} (train)", keep=True):
            pass
        return [(split, i) for i in range(len(split))]

    def _features(self, samples) -> list[torch.Tensor]:
        """Cached backbone features of (split, row) samples, in order, possibly from several splits."""
        return sample_features(self.extractor, samples)

    def init_descriptor(self, samples, seed: int) -> None:
        """A fresh descriptor (seeded, independent of the global RNG) unless one is being continued."""
        if self.descriptor_ is None:
            channels = sum(f.shape[1] for f in self._features(samples[:1]))
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                self.descriptor_ = CoordConv(channels, channels).to(self.extractor.device)
            self.radius_ = torch.full((1,), RADIUS_INIT, device=self.extractor.device)

    def embed(self, feats: list[torch.Tensor]) -> torch.Tensor:
        """Descriptor features [B, P, C] (P = h·w grid locations)."""
        return self.descriptor_(local_patch_features(feats)).flatten(2).transpose(1, 2)

    def _batches(self, samples):
        bs = self.extractor.batch_size
        return (samples[s : s + bs] for s in range(0, len(samples), bs))

    @torch.no_grad()
    def bank(self, samples) -> torch.Tensor:
        """Memory bank [P, C]: the mean descriptor feature per grid location over `samples` (float64 sum)."""
        total = None
        for batch in self._batches(samples):
            s = self.embed(self._features(batch)).double().sum(0)
            total = s if total is None else total + s
        return (total / len(samples)).float()

    def train(self, samples, bank: torch.Tensor, seed: int) -> None:
        """Fit the descriptor (and radius) to `samples` against the fixed `bank`: AdamW, seeded shuffles, in
        the shared training loop (epoch checkpoints, loss log)."""
        self._radius, self._train_bank = Radius(self.radius_).to(self.extractor.device), bank
        self.losses_ = train(self, samples, seed, epochs=self.epochs, batch_size=self.extractor.batch_size)
        self.radius_ = self._radius.value.detach()
        self._radius = self._train_bank = None

    # --- what the training loop calls (bench.training.loop) ----------------------------------------
    def modules(self) -> dict[str, nn.Module]:
        return {"descriptor": self.descriptor_, "radius": self._radius}

    def optimizers(self) -> list[torch.optim.Optimizer]:
        params = [*self.descriptor_.parameters(), self._radius.value]
        return [torch.optim.AdamW(params, lr=self.lr, weight_decay=self.weight_decay, amsgrad=True)]

    def schedulers(self, optimizers) -> list:
        return []

    def train_step(self, batch, optimizers) -> float:
        with torch.no_grad():
            feats = self._features(batch)
        loss = soft_boundary_loss(self.embed(feats), self._train_bank, self._radius.value, self.k_neighbors,
                                  self.repulsion_neighbors)
        return descend(loss, optimizers)

    # --- scoring ----------------------------------------------------------------------------------
    @torch.no_grad()
    def patch_maps(self, split, idx, banks) -> torch.Tensor:
        """Patch scores [T, B, h, w] of rows `idx` against each of T banks (one descriptor pass)."""
        feats = self.extractor(split, idx)
        shape = (len(idx), *feats[0].shape[-2:])
        phi = self.embed(feats)
        return torch.stack([patch_scores(phi, bank, self.k_neighbors).view(shape) for bank in banks])

    def finish(self, patch: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
        """[B, h, w] patch scores → (image scores = max of the blurred map, maps [B, S, S])."""
        return max_of_maps(patch, self.image_size, self.blur_sigma)

    # --- Detector API -----------------------------------------------------------------------------
    def fit(self, split, seed: int) -> "Cfa":
        samples = self.cache(split)
        self.init_descriptor(samples, seed)
        self.train(samples, self.bank(samples), seed)
        self.bank_ = self.bank(samples)
        return self

    def predict(self, split, idx) -> Prediction:
        return Prediction(*self.finish(self.patch_maps(split, idx, [self.bank_])[0]))

    def model_state(self) -> dict:
        return {"descriptor": {k: v.cpu() for k, v in self.descriptor_.state_dict().items()},
                "radius": self.radius_.cpu()}

    def load_model_state(self, state: dict) -> None:
        weight = state["descriptor"]["conv.weight"]
        self.descriptor_ = CoordConv(weight.shape[1] - 2, weight.shape[0]).to(self.extractor.device)
        self.descriptor_.load_state_dict(state["descriptor"])
        self.radius_ = state["radius"].to(self.extractor.device)

    def state_dict(self) -> dict:
        return {**self.model_state(), "bank": self.bank_.cpu()}

    def load_state_dict(self, state: dict) -> None:
        self.load_model_state(state)
        self.bank_ = state["bank"].to(self.extractor.device)

    def continual(self, seed: int) -> "CfaTaskBanks":
        return CfaTaskBanks(self, seed)


class CfaTaskBanks(Protocol):
    """InCLAD App. C.3. At task t: keep X_t for later bank rebuilds; U_t = X_t ∪ R_t (replay of earlier tasks);
    training bank from the previous descriptor on U_t; train the descriptor on U_t; rebuild every per-task
    inference bank B_j = Bank(g_θt(X_j)) from cached features; then add X_t to the replay buffer. Each test image
    is routed to the bank with the lowest image-level anomaly score, the map max (`route_by="mean"`: the lowest
    mean patch score instead); score and map come from that bank."""

    routes = True

    def __init__(self, detector: Cfa, seed: int):
        super().__init__(detector, seed)
        self.kept_: list = []  # X_1..X_t (TaskSplits): the training images every rebuild needs
        self.banks_: list[torch.Tensor] = []
        self.replay_ = ReplayBuffer(detector.replay_size)
        self.image_feature_bytes_ = 0  # cached backbone features per kept image (the memory they hold)
        self._warm = True  # False after a resume: kept features must be re-extracted first

    def learn(self, split, step: int) -> None:
        det, seed = self.detector, self.step_seed(step)
        # A resumed run (or a moved dataset) gets the kept splits at today's root, and re-extracts their
        # features in their standard batches, as the uninterrupted run did, so features are bit-identical.
        self.kept_ = rerooted(self.kept_, split)
        if not self._warm:
            for kept in self.kept_:
                det.cache(kept)
            self._warm = True
        current = det.cache(split)
        det.init_descriptor(current, seed)
        self.kept_.append(split)
        by_task = {s.task: s for s in self.kept_}
        replay = [(by_task[task], row) for task, row in self.replay_.items()]
        united = current + replay
        det.train(united, det.bank(united), seed)
        self.banks_ = [det.bank([(s, i) for i in range(len(s))]) for s in self.kept_]
        self.replay_.add(split.task, list(range(len(split))), seed)
        self.image_feature_bytes_ = tensor_bytes(det.extractor(split, np.array([0])))

    def predict(self, split, idx) -> Prediction:
        det = self.detector
        chosen, routed = route(det.patch_maps(split, idx, self.banks_), det.route_by, det.image_size,
                               det.blur_sigma)  # j*(x) = argmin_j A(x; B_j, g_θt)
        return Prediction(*det.finish(chosen), routed.cpu().numpy())

    def state_dict(self) -> dict:
        return {**self.detector.model_state(), "banks": [b.cpu() for b in self.banks_],
                "kept": [split_state(s) for s in self.kept_], "replay": self.replay_.state_dict(),
                "image_feature_bytes": self.image_feature_bytes_}

    def load_state_dict(self, state: dict) -> None:
        det = self.detector
        det.load_model_state(state)
        self.banks_ = [b.to(det.extractor.device) for b in state["banks"]]
        self.kept_ = [split_from_state(s) for s in state["kept"]]
        self.replay_.load_state_dict(state["replay"])
        self.image_feature_bytes_ = state["image_feature_bytes"]
        self._warm = False

    def state_bytes(self) -> int:
        """Descriptor, radius and banks, plus the cached features of every kept training image."""
        model = tensor_bytes(self.detector.model_state()) + tensor_bytes(self.banks_)
        return model + self.image_feature_bytes_ * sum(len(s) for s in self.kept_)


register(ModelSpec(
    name="cfa", label="CFA", factory=Cfa, source="InCLAD Table 6, App. C.3", quick={"epochs": 3}, version=2,
    image_size=224,  # the paper's input size (InCLAD Tables 6-7)
    presets={"inclad": {}},  # InCLAD's values are the paper's: no `original` preset
    default_preset="inclad",
    params={
        "layers": Layers(("layer1", "layer2", "layer3")),
        "epochs": Int(50, 1),
        "lr": Float(1e-3, 0, low_open=True),
        "weight_decay": Float(5e-4, 0),
        "k_neighbors": Int(3, 1, doc="K: bank features each feature is attracted to"),
        "repulsion_neighbors": Int(3, 0, doc="J: hard negatives repelled"),
        "blur_sigma": Float(4.0, 0, MAX_SIGMA, doc="Gaussian blur of the anomaly map (0 = none)"),
        # images kept for replay (CL), split equally between past tasks; 0 = InCLAD's rule for replay,
        # round(0.2 × mean training-task size of the run's stream) (bench.training.replay.default_replay_size)
        "replay_size": Int(0, 0),
        "route_by": Choice("max", ROUTE_BY, doc="CL task routing: lowest image score (max, App. C.3) or lowest "
                                                "mean patch score (mean)"),
    },
))

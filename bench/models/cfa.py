"""CFA (Lee et al., 2022): coupled-hypersphere-based feature adaptation, and its continual adaptation (InCLAD
App. C.3).

Descriptor: the backbone layers (`layers`: 2 and 3 under `inclad`, 1–3 under `original`), each averaged over a
3×3 neighbourhood, the later ones upsampled (bilinear) to the first one's grid and concatenated, then a CoordConv
1×1 convolution (the only trained part; the backbone is frozen, so training reads cached features). Memory bank:
the mean descriptor feature at each grid location over a set of normal images, as the released code and Lee et
al.'s compute it: the mean of the per-batch means, every batch weighted equally (`bank_mean="batches"`; "images":
the exact mean over images). Loss (soft boundary, radius r learned with the descriptor, margin α = 0.1, weight 1/ν):
attraction of every feature to its K = 3 nearest bank features, max(0, d² − r²), and repulsion of the next
J = 3 (hard negatives), max(0, r² − d² − α). Score of a patch: distance to its nearest bank feature weighted
by its softmin over the K nearest; map = upsampled + blurred with σ = 4 (`blur_kernel` taps: 3 under `inclad`,
torchvision's kernel; 0 = the 4σ kernel, as Lee et al.'s scipy filter); image score = max of the map.

Inference bank of the single-task (NCL) model: `ncl_bank="before"` (`inclad`) scores against the bank the
training used, built with the descriptor before training and never rebuilt, as the released `CFA.fit` does
(routing-cad-icdm `src/pyclad/models/cfa/cfa.py:76`); "after" (`original`) rebuilds it with the trained
descriptor, App. C.3's rule for CFA-CL, which always rebuilds every task bank after training. So under `inclad` NCL
and CL differ from their first task on; under `original` they agree after it.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from bench.data.tasks import rerooted, split_from_state, split_state
from bench.continual.protocol import Protocol, tensor_bytes
from bench.models.base import ROUTE_BY, Detector, Prediction, local_patch_features, max_of_maps, route
from bench.models.ops.blur import MAX_SIGMA
from bench.registry import Choice, Float, Int, Layers, ModelSpec, register, trained_state
from bench.training.loop import TrainContext, descend, sample_features, train
from bench.training.replay import SHARE_RULES, ReplayBuffer

MARGIN = 0.1  # α: repulsion acts only on hard negatives closer than r² − α (Lee et al. 2022)
NU = 1e-3  # ν of the soft-boundary objective: both hinge terms are weighted by 1/ν
RADIUS_INIT = 1e-5
NCL_BANKS = ("before", "after")  # the NCL model's inference bank: the training bank, or rebuilt after training
BANK_MEANS = ("batches", "images")
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
                 k_neighbors: int, repulsion_neighbors: int, blur_sigma: float, blur_kernel: int, ncl_bank: str,
                 bank_mean: str, replay_size: int, replay_share: str, route_by: str):
        self.extractor, self.image_size, self.layers = extractor, image_size, tuple(layers)
        self.epochs, self.lr, self.weight_decay = epochs, lr, weight_decay
        self.k_neighbors, self.repulsion_neighbors = k_neighbors, repulsion_neighbors
        self.blur_sigma, self.blur_kernel, self.ncl_bank, self.bank_mean = blur_sigma, blur_kernel, ncl_bank, bank_mean
        self.replay_size, self.replay_share, self.route_by = replay_size, replay_share, route_by
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
        """Memory bank [P, C]: the mean descriptor feature per grid location over `samples`, in float64: the mean
        of the per-batch means (`bank_mean="batches"`: a short last batch weighs as much as a full one, as in the
        released `initialize_memory_bank`, routing-cad-icdm `src/pyclad/models/cfa/architecture.py:188-196`) or
        over images ("images")."""
        sums, sizes = [], []
        for batch in self._batches(samples):
            sums.append(self.embed(self._features(batch)).double().sum(0))
            sizes.append(len(batch))
        if self.bank_mean == "batches":
            return torch.stack([s / n for s, n in zip(sums, sizes)]).mean(0).float()
        return (torch.stack(sums).sum(0) / sum(sizes)).float()

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
        return max_of_maps(patch, self.image_size, self.blur_sigma, self.blur_kernel)

    # --- Detector API -----------------------------------------------------------------------------
    def fit(self, split, seed: int) -> "Cfa":
        samples = self.cache(split)
        self.init_descriptor(samples, seed)
        before = self.bank(samples)
        self.train(samples, before, seed)
        self.bank_ = before if self.ncl_bank == "before" else self.bank(samples)
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
        self.replay_ = ReplayBuffer(detector.replay_size, detector.replay_share)
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
        # the buffer first, as the released CFACLStrategy concatenates it: the bank is a mean of per-batch means,
        # so the order moves it once the samples span several batches
        united = replay + current
        det.train(united, det.bank(united), seed)
        self.banks_ = [det.bank([(s, i) for i in range(len(s))]) for s in self.kept_]
        self.replay_.add(split.task, list(range(len(split))), seed)
        self.image_feature_bytes_ = tensor_bytes(det.extractor(split, np.array([0])))

    def predict(self, split, idx) -> Prediction:
        det = self.detector
        chosen, routed = route(det.patch_maps(split, idx, self.banks_), det.route_by, det.image_size,
                               det.blur_sigma, det.blur_kernel)  # j*(x) = argmin_j A(x; B_j, g_θt)
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
    name="cfa", label="CFA", factory=Cfa, source="InCLAD Table 6, App. C.3; InCLAD's released code",
    quick={"epochs": 3}, demo=True,
    # 3: `inclad` = the released code (layers 2+3, 3-tap blur, NCL bank before training, floor shares); 4:
    # `original`'s σ = 4 filter is scipy's gaussian_filter at the borders too (bench/models/ops/blur.py); 5: CL's
    # training bank and training run over the replay buffer, then the task (the released order)
    version=5,
    image_size=224,  # the paper's input size (InCLAD Tables 6-7)
    # `original`: Lee et al.'s CFA (layers 1–3, scipy's σ = 4 filter), App. C.3's rebuilt bank, water filling
    presets={"inclad": {}, "original": {"layers": ["layer1", "layer2", "layer3"], "blur_kernel": 0,
                                        "ncl_bank": "after", "replay_share": "water"}},
    default_preset="inclad",
    # the released code loads torchvision's DEFAULT weights (routing-cad-icdm src/pyclad/models/vision/
    # backbones.py:72-75: V2 for wide_resnet50_2); Lee et al. used V1
    imagenet_weights={"inclad": "DEFAULT"},
    params={
        # the released default return nodes (routing-cad-icdm src/pyclad/models/cfa/architecture.py:13-17)
        "layers": Layers(("layer2", "layer3")),
        "epochs": Int(50, 1),
        "lr": Float(1e-3, 0, low_open=True),
        "weight_decay": Float(5e-4, 0),
        "k_neighbors": Int(3, 1, doc="K: bank features each feature is attracted to"),
        "repulsion_neighbors": Int(3, 0, doc="J: hard negatives repelled"),
        "blur_sigma": Float(4.0, 0, MAX_SIGMA, doc="Gaussian blur of the anomaly map (0 = none)"),
        # the released config's score_smoothing_kernel (routing-cad-icdm src/pyclad/models/cfa/config.py:36)
        "blur_kernel": Int(3, 0, 2 * math.ceil(4 * MAX_SIGMA) + 1, odd=True,
                           doc="taps of the map blur (odd; 0 = ⌈4σ⌉ each side)"),
        "ncl_bank": Choice("before", NCL_BANKS, doc="NCL inference bank: the training bank (before) or rebuilt "
                                                    "with the trained descriptor (after)"),
        "bank_mean": Choice("batches", BANK_MEANS, doc="memory bank: mean of per-batch means, or over images"),
        # images kept for replay (CL), shared between past tasks by replay_share; 0 = InCLAD's rule for replay,
        # round(0.2 × mean training-task size of the run's stream) (bench.training.replay.default_replay_size)
        "replay_size": Int(0, 0),
        "replay_share": Choice("floor", SHARE_RULES, doc="CL replay shares: ⌊capacity / tasks⌋ each (floor, the "
                                                        "released pyCLAD buffer) or water filling (water)"),
        "route_by": Choice("max", ROUTE_BY, doc="CL task routing: lowest image score (max, App. C.3) or lowest "
                                                "mean patch score (mean)"),
    },
    # host memory (bench.hpc.memory): keeps its training features for CL replay; its networks, optimiser and replay indices
    train_features="replay", host_state_bytes=trained_state,
))

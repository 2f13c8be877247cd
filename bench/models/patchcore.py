"""PatchCore (Roth et al., 2022) and its continual task-bank adaptation (InCLAD App. C.1).

Embedding (`embedding="released"`, the default: Roth et al.'s released code, which InCLAD's follows): each
backbone layer (2 and 3) unfolded into 3×3 neighbourhoods (C·9 values per location, channel-major), each
location's vector adaptively average-pooled to `embed_dim` = 1024 values, layer 3 upsampled (bilinear) to the
layer-2 grid, and the layers' vectors concatenated and pooled again to one 1024-d embedding.
`embedding="concat"` (anomalib's): each layer averaged over a 3×3 neighbourhood, layer 3 upsampled, concatenated
(384-d for resnet18, 1536-d for wide_resnet50_2). Memory bank: greedy k-center coreset (ratio 0.1) chosen on a
128-d random projection. Score: distance of each test patch to its nearest bank patch; image score = max patch
score; map = patch scores upsampled to the image and blurred with σ = 4. Defaults = InCLAD Table 6 and, where the
paper is silent, InCLAD's released code (preset `inclad`; `original`: the method's paper, docs/models.md).
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from bench.continual.protocol import Protocol, tensor_bytes
from bench.models.base import Detector, Prediction, anomaly_maps, local_patch_features, route
from bench.models.ops.blur import MAX_SIGMA
from bench.models.ops.coreset import PROJECTIONS, greedy_coreset, random_projection
from bench.models.ops.knn import nn_distance
from bench.registry import Choice, Float, HostRun, Int, Layers, ModelSpec, pixel_memory, register

EMBEDDINGS = ("released", "concat")
# How PatchCore-CL compresses a previous task's bank (InCLAD App. C.1's weighted greedy coreset):
# "released": InCLAD's code (ApproximateGreedyCoresetSampler.run_weighted, fork src/pyclad/models/patchcore/
# patchcore.py:196-222, called from patchcore_cl.py:96-105): on the bank's random projection, d started at the mean
# distance to random rows, w divided by its mean, int(n · (b_t / n)) patches kept (patchcore_cl.py:97 →
# patchcore.py:164: b_t − 1 for some n, e.g. (22, 15) → 14). "exact": the formula on the full embedding, the first
# pick argmax w, exactly b_t patches.
COMPRESSIONS = ("released", "exact")


def pool_matrix(p: int, q: int) -> torch.Tensor:
    """[q, p]: 1-D adaptive average pooling of p values to q (output j averages inputs ⌊jp/q⌋ … ⌈(j+1)p/q⌉−1)."""
    j = torch.arange(q)
    start, end = (j * p) // q, -((-(j + 1) * p) // q)
    i = torch.arange(p)
    inside = (i[None] >= start[:, None]) & (i[None] < end[:, None])
    return inside.float() / (end - start)[:, None].float()


def pooling(n: int, dim: int, then: int = 1) -> tuple[int, torch.Tensor]:
    """Adaptive average pooling of n values to `dim`, followed by means of `then` consecutive outputs, as
    (groups, matrix [q, p]): the map repeats every p inputs / q outputs, each output window inside its group,
    so it is a grouped linear map (the same small matrix for every group)."""
    g = math.gcd(n, dim)
    p, q = n // g, dim // g
    period = math.lcm(q, then)  # first-stage outputs per group, so the second stage stays inside it
    first = torch.block_diag(*[pool_matrix(p, q)] * (period // q))
    return n // (p * period // q), pool_matrix(period, period // then) @ first


def pooled_patches(f: torch.Tensor, dim: int, then: int = 1) -> torch.Tensor:
    """[B, C, h, w] → [B, dim / then, h, w]: each location's 3×3 neighbourhood (C·9 values, channel-major,
    zero-padded, as `F.unfold` orders them) adaptively average-pooled to `dim` values, then averaged in runs
    of `then`.

    When every pooling group spans whole channels (p a multiple of 9, e.g. resnet18 and wide_resnet50_2 at
    dim 1024), unfolding and pooling together are one grouped 3×3 convolution and the 9× larger unfolded
    tensor is never built."""
    b, c, h, w = f.shape
    groups, m = pooling(9 * c, dim, then)
    (q, p), m = m.shape, m.to(f)
    if p % 9:
        unfolded = F.unfold(f, kernel_size=3, padding=1).view(b, 9 * c, h, w)
        return F.conv2d(unfolded, m.view(q, p, 1, 1).repeat(groups, 1, 1, 1), groups=groups)
    return F.conv2d(f, m.view(q, p // 9, 3, 3).repeat(groups, 1, 1, 1), padding=1, groups=groups)


def released_patch_features(feats: list[torch.Tensor], dim: int) -> torch.Tensor:
    """Roth et al.'s released embedding [B, dim, h, w] on the first layer's grid (channels-last in memory, so
    the [patches, dim] view PatchCore takes is free).

    Their code unfolds each layer, upsamples the unfolded patches to the first grid, pools each patch to `dim`,
    then pools the layers' concatenation to `dim`. All of it is linear and pooling acts on other axes than
    upsampling, so pooling comes first here (upsampling `dim` channels, not 9·C). When the final windows do not
    cross layers (`dim` divisible by the number of layers L: each output averages L consecutive values of one
    layer), the final pooling is folded into each layer's pooling too."""
    size, n = feats[0].shape[-2:], len(feats)
    then = n if dim % n == 0 else 1
    layers = []
    for f in feats:
        pooled = pooled_patches(f, dim, then).contiguous(memory_format=torch.channels_last)
        if pooled.shape[-2:] != size:  # bilinear upsampling is several times faster channels-last
            pooled = F.interpolate(pooled, size=size, mode="bilinear", align_corners=False)
        layers.append(pooled.permute(0, 2, 3, 1))
    out = torch.cat(layers, dim=-1)  # [B, h, w, dim] (or [B, h, w, n·dim] when not folded)
    if then == 1 and n > 1:
        groups, m = pooling(out.shape[-1], dim)
        out = (out.unflatten(-1, (groups, m.shape[1])) @ m.to(out).T).flatten(-2)
    return out.permute(0, 3, 1, 2)


class PatchCore(Detector):
    name = "patchcore"

    def __init__(self, extractor, *, image_size: int, layers, embedding: str, embed_dim: int, coreset_ratio: float,
                 projection_dim: int, projection: str, n_starts: int, blur_sigma: float, previous_ratio: float,
                 compression: str):
        self.extractor, self.image_size, self.layers = extractor, image_size, tuple(layers)
        self.embedding, self.embed_dim = embedding, embed_dim
        self.coreset_ratio, self.projection_dim, self.n_starts = coreset_ratio, projection_dim, n_starts
        self.projection, self.compression = projection, compression
        self.blur_sigma, self.previous_ratio = blur_sigma, previous_ratio
        self.memory_bank_: torch.Tensor | None = None

    # --- embedding -------------------------------------------------------------------------------
    def embed(self, feats: list[torch.Tensor]) -> torch.Tensor:
        """[B, D, h, w] on the grid of the first requested layer."""
        if self.embedding == "released":
            return released_patch_features(feats, self.embed_dim)
        return local_patch_features(feats)

    def _patches(self, split, idx) -> tuple[torch.Tensor, tuple[int, int, int]]:
        emb = self.embed(self.extractor(split, idx))
        b, d, h, w = emb.shape
        return emb.permute(0, 2, 3, 1).reshape(b * h * w, d), (b, h, w)

    def native_coreset(self, split, seed: int) -> torch.Tensor:
        """C_t = Coreset(Z_t): all training patches of the task, reduced by greedy k-center."""
        chunks = []
        for _idx, feats in self.extractor.batches(split, desc=f"features {split.name} (train)", keep=False):
            emb = self.embed(feats)
            chunks.append(emb.permute(0, 2, 3, 1).reshape(-1, emb.shape[1]))
        patches = torch.cat(chunks)
        k = max(1, int(patches.shape[0] * self.coreset_ratio))
        gen = torch.Generator().manual_seed(seed)
        projected = random_projection(patches, self.projection_dim, gen, self.projection)
        return patches[greedy_coreset(projected, k, generator=gen, n_starts=self.n_starts)].contiguous()

    def compress(self, bank: torch.Tensor, b_t: int, current: torch.Tensor, seed: int) -> torch.Tensor:
        """A previous task's bank shrunk to about b_t patches by the distance-weighted greedy coreset
        (COMPRESSIONS); w_t(z) = distance to the current task's bank, so task-specific patches are kept."""
        w = nn_distance(bank, current)
        if self.compression == "exact":
            return bank[greedy_coreset(bank, b_t, weights=w)].contiguous()
        n = bank.shape[0]
        k = max(1, int(n * (b_t / n)))  # the released sampler's ratio round trip
        mean = float(w.mean())
        if mean > 0:  # the released weights have mean 1; only rounding depends on it
            w = w / mean
        # one seed for the step's samplers, as the released code seeds every sampler with the run's seed: the
        # projection is the current task's coreset's
        gen = torch.Generator().manual_seed(seed)
        projected = random_projection(bank, self.projection_dim, gen, self.projection)
        return bank[greedy_coreset(projected, k, generator=gen, n_starts=self.n_starts, weights=w)].contiguous()

    # --- scoring ----------------------------------------------------------------------------------
    def patch_scores(self, patches: torch.Tensor, bank: torch.Tensor, shape) -> torch.Tensor:
        b, h, w = shape
        return nn_distance(patches, bank).view(b, h, w)

    def finish(self, patch_scores: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
        scores = patch_scores.flatten(1).max(1).values
        maps = anomaly_maps(patch_scores, self.image_size, self.blur_sigma)
        return scores.double().cpu().numpy(), maps.float().cpu().numpy()

    # --- Detector API -----------------------------------------------------------------------------
    def fit(self, split, seed: int) -> "PatchCore":
        self.memory_bank_ = self.native_coreset(split, seed)
        return self

    @torch.no_grad()
    def predict(self, split, idx) -> Prediction:
        patches, shape = self._patches(split, idx)
        scores, maps = self.finish(self.patch_scores(patches, self.memory_bank_, shape))
        return Prediction(scores, maps)

    def state_dict(self) -> dict:
        return {"memory_bank": self.memory_bank_.cpu()}

    def load_state_dict(self, state: dict) -> None:
        self.memory_bank_ = state["memory_bank"].to(self.extractor.device)

    def continual(self, seed: int) -> "PatchCoreTaskBanks":
        return PatchCoreTaskBanks(self, seed)


class PatchCoreTaskBanks(Protocol):
    """InCLAD App. C.1: one bank per task; the current task at native coreset size, previous banks
    compressed to b_t = max(1, ⌊ρ|C_t| / (t−1)⌋) patches by the distance-weighted greedy coreset
    (`PatchCore.compress`); each test image is routed to the bank with the lowest mean patch NN distance."""

    routes = True

    def __init__(self, detector: PatchCore, seed: int):
        super().__init__(detector, seed)
        self.banks_: list[torch.Tensor] = []

    @torch.no_grad()
    def learn(self, split, step: int) -> None:
        det = self.detector
        seed = self.step_seed(step)
        current = det.native_coreset(split, seed)
        t = len(self.banks_) + 1
        if t > 1:
            b_t = max(1, math.floor(det.previous_ratio * current.shape[0] / (t - 1)))
            for j, bank in enumerate(self.banks_):
                if bank.shape[0] > b_t:
                    self.banks_[j] = det.compress(bank, b_t, current, seed)
        self.banks_.append(current)

    @torch.no_grad()
    def predict(self, split, idx) -> Prediction:
        det = self.detector
        patches, shape = det._patches(split, idx)
        per_bank = torch.stack([det.patch_scores(patches, bank, shape) for bank in self.banks_])  # [T, B, h, w]
        chosen, routed = route(per_bank)  # j*(x) = argmin_j mean_z d_NN(z, C_j)
        scores, maps = det.finish(chosen)
        return Prediction(scores, maps, routed.cpu().numpy())

    def state_dict(self) -> dict:
        return {"banks": [b.cpu() for b in self.banks_]}

    def load_state_dict(self, state: dict) -> None:
        self.banks_ = [b.to(self.detector.extractor.device) for b in state["banks"]]

    def state_bytes(self) -> int:
        return tensor_bytes(self.banks_)


def host_state(run: HostRun) -> int:
    """Host bytes of the fit and the banks: every training patch of the largest task with the coreset's working
    copies, and the coreset banks kept (one under NCL, one per task otherwise)."""
    hp = run.hparams
    patches = run.layers[0][1]
    dim = hp["embed_dim"] if hp["embedding"] == "released" else sum(c for c, _ in run.layers)
    fit = max(run.n_train) * patches * dim * 4 * 2
    return int(fit + sum(sorted(run.n_train)[-run.banks:]) * patches * dim * 4 * hp["coreset_ratio"])

register(ModelSpec(
    # 3: `inclad` follows InCLAD's released code: raw [0, 1] input, 8-bit resize, DEFAULT weights, the released
    # compression and the nn.Linear projection's distribution (version 2's values: the `original` preset).
    # 4: the map's blur is scipy's gaussian_filter at the borders too (bench/models/ops/blur.py)
    name="patchcore", label="PatchCore", factory=PatchCore, source="InCLAD Table 6", version=4,
    image_size=224,  # the paper's input size (InCLAD Tables 6-7)
    demo=True,
    presets={"inclad": {}, "original": {"compression": "exact", "projection": "gaussian"}},
    default_preset="inclad",
    # InCLAD's released config defaults normalize_mean/std to None (fork src/pyclad/models/patchcore/config.py:27-28)
    # and its runner sets neither (docs/models.md); torchvision DEFAULT weights (fork vision/backbones.py:72-75)
    image_loading={"inclad": {"normalize": False}},
    imagenet_weights={"inclad": "DEFAULT"},
    params={
        "layers": Layers(("layer2", "layer3")),
        "embedding": Choice("released", EMBEDDINGS, doc="released: Roth et al.'s pooled 1024-d embedding; "
                                                        "concat: 3×3 average, layers concatenated (anomalib)"),
        "embed_dim": Int(1024, 1, doc="released embedding: dimension of each layer's and the final pooling"),
        "coreset_ratio": Float(0.1, 0, 1, low_open=True, doc="share of training patches kept in the bank"),
        "projection_dim": Int(128, 1, doc="random projection used by the greedy coreset"),
        "projection": Choice("uniform", PROJECTIONS, doc="the projection's entries: uniform (torch.nn.Linear's "
                                                         "initialisation, the released samplers') or gaussian (JL)"),
        "n_starts": Int(10, 1, doc="random starting points of the greedy coreset"),
        "blur_sigma": Float(4.0, 0, MAX_SIGMA, doc="Gaussian blur of the anomaly map (0 = none)"),
        "previous_ratio": Float(0.25, 0, 1, low_open=True, doc="ρ: share of the bank kept for previous tasks (CL)"),
        "compression": Choice("released", COMPRESSIONS, doc="CL compression of previous banks: released (InCLAD's "
                                                            "sampler) or exact (App. C.1's formula, full embedding)"),
    },
    # measured on CPU (peak RSS of a two-image fit at 64 and 160 px, default settings; docs/cluster.md): 210 bytes
    # per pixel of a batch through the backbone with its patch embedding and nearest-neighbour search
    memory_bytes=pixel_memory(0, 210, features=False),
    # host memory (bench.hpc.memory): one pass per task, no cached training features; its state is host_state
    train_features="single_pass", host_state_bytes=host_state,
))

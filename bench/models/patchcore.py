"""PatchCore (Roth et al., 2022) and its continual task-bank adaptation (InCLAD App. C.1).

Embedding: backbone layers 2 and 3, each averaged over a 3×3 neighbourhood, layer 3 upsampled to the layer-2
grid, concatenated. Memory bank: greedy k-center coreset (ratio 0.1) chosen on a 128-d random projection.
Score: distance of each test patch to its nearest bank patch; image score = max patch score; map = patch
scores upsampled to the image and blurred with σ = 4. Defaults = InCLAD Table 6.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from bench.models.base import (Detector, Prediction, Protocol, anomaly_maps, local_patch_features, route,
                               tensor_bytes)
from bench.models.ops.coreset import greedy_coreset, random_projection
from bench.models.ops.knn import nn_distance
from bench.models.registry import Float, Int, Layers, ModelSpec, register


class PatchCore(Detector):
    name = "patchcore"

    def __init__(self, extractor, *, image_size: int, layers, coreset_ratio: float, projection_dim: int,
                 n_starts: int, blur_sigma: float, previous_ratio: float):
        self.extractor, self.image_size, self.layers = extractor, image_size, tuple(layers)
        self.coreset_ratio, self.projection_dim, self.n_starts = coreset_ratio, projection_dim, n_starts
        self.blur_sigma, self.previous_ratio = blur_sigma, previous_ratio
        self.memory_bank_: torch.Tensor | None = None

    # --- embedding -------------------------------------------------------------------------------
    embed = staticmethod(local_patch_features)  # [B, D, h, w] on the grid of the first requested layer

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
        projected = random_projection(patches, self.projection_dim, gen)
        return patches[greedy_coreset(projected, k, generator=gen, n_starts=self.n_starts)].contiguous()

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
    compressed to b_t = max(1, ⌊ρ|C_t| / (t−1)⌋) patches by the distance-weighted greedy coreset;
    each test image is routed to the bank with the lowest mean patch NN distance."""

    routes = True

    def __init__(self, detector: PatchCore, seed: int):
        super().__init__(detector, seed)
        self.banks_: list[torch.Tensor] = []

    @torch.no_grad()
    def learn(self, split, step: int) -> None:
        det = self.detector
        current = det.native_coreset(split, self.step_seed(step))
        t = len(self.banks_) + 1
        if t > 1:
            b_t = max(1, math.floor(det.previous_ratio * current.shape[0] / (t - 1)))
            for j, bank in enumerate(self.banks_):
                if bank.shape[0] > b_t:
                    # w_t(z): distance to the current task; task-specific patches are kept preferentially
                    w = nn_distance(bank, current)
                    self.banks_[j] = bank[greedy_coreset(bank, b_t, weights=w)].contiguous()
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


register(ModelSpec(
    name="patchcore", label="PatchCore", factory=PatchCore, source="InCLAD Table 6",
    params={
        "layers": Layers(("layer2", "layer3")),
        "coreset_ratio": Float(0.1, 0, 1, low_open=True, doc="share of training patches kept in the bank"),
        "projection_dim": Int(128, 1, doc="random projection used by the greedy coreset"),
        "n_starts": Int(10, 1, doc="random starting points of the greedy coreset"),
        "blur_sigma": Float(4.0, 0, doc="Gaussian blur of the anomaly map (0 = none)"),
        "previous_ratio": Float(0.25, 0, 1, low_open=True, doc="ρ: share of the bank kept for previous tasks (CL)"),
    },
))

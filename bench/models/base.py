"""The detector contract and the shared pieces of frozen-backbone detectors. A detector may bring its own
continual adaptation (the task banks of PatchCore, PaDiM, CFA), built on the engine's Protocol base
(bench/continual/protocol.py); the runner itself is never imported here."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from bench.models.ops.blur import gaussian_blur


@dataclass
class Prediction:
    """Per-image results of one batch. `scores` [B] raw anomaly scores (higher = more anomalous);
    `maps` [B, S, S] or None; `routed` [B] index of the task bank used (task-bank protocols only)."""

    scores: np.ndarray
    maps: np.ndarray | None
    routed: np.ndarray | None = None


class Detector:
    """One task's normality model, scikit-learn style: the constructor stores hyperparameters only.

    `fit(split, seed)` learns the normal training images of one task (continuing from the current state
    where the method has one); `predict(split, idx)` scores rows `idx` of a test split, pointwise (an
    image's score never depends on the rest of its batch). Splits are `bench.data.tasks.TaskSplit`;
    frozen-backbone detectors get their features from the run's shared `FeatureExtractor`.
    """

    name: str = ""
    layers: tuple[str, ...] = ()

    def fit(self, split, seed: int) -> "Detector":
        raise NotImplementedError

    def predict(self, split, idx) -> Prediction:
        raise NotImplementedError

    def state_dict(self) -> dict:
        raise NotImplementedError

    def load_state_dict(self, state: dict) -> None:
        raise NotImplementedError

    def continual(self, seed: int):
        """The method's own continual adaptation (a Protocol), or None to use generic replay."""
        return None


def anomaly_maps(patch_scores: torch.Tensor, image_size: int, sigma: float, taps: int = 0) -> torch.Tensor:
    """[B, h, w] patch scores → [B, S, S]: bilinear upsampling then Gaussian blur (`taps`: its kernel size, 0 =
    the 4σ kernel; bench.models.ops.blur)."""
    up = F.interpolate(patch_scores[:, None], size=(image_size, image_size), mode="bilinear", align_corners=False)
    return gaussian_blur(up[:, 0], sigma, taps)


def local_patch_features(feats: list[torch.Tensor]) -> torch.Tensor:
    """Locally aware patch features [B, D, h, w]: each layer averaged over a 3×3 neighbourhood, the later layers
    upsampled (bilinear) to the first layer's grid, concatenated (PatchCore's embedding, CFA's descriptor input)."""
    pooled = [F.avg_pool2d(f, kernel_size=3, stride=1, padding=1) for f in feats]
    size = pooled[0].shape[-2:]
    up = [F.interpolate(p, size=size, mode="bilinear", align_corners=False) for p in pooled[1:]]
    return torch.cat([pooled[0], *up], dim=1)


def max_of_maps(patch_scores: torch.Tensor, image_size: int, sigma: float,
                taps: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """[B, h, w] patch scores → (image scores = max of the blurred map, maps [B, S, S]) as numpy."""
    maps = anomaly_maps(patch_scores, image_size, sigma, taps)
    return maps.flatten(1).max(1).values.double().cpu().numpy(), maps.float().cpu().numpy()


ROUTE_BY = ("max", "mean")


def route(per_task: torch.Tensor, by: str = "mean", image_size: int | None = 0,
          sigma: float = 0.0, taps: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Task routing of the task-bank protocols (InCLAD App. C): per-task patch scores [T, B, h, w] → (each
    image's patch scores under the task with the lowest image-level aggregate [B, h, w], that task's index [B]).

    by="mean": the mean patch score (App. C.1, PatchCore-CL). by="max": the image score itself, the max of the
    upsampled, blurred map (`max_of_maps` with `image_size`, `sigma`, `taps`; image_size None: of the patch scores
    as they are, InCLAD's released PaDiM-CL), as App. C.2/C.3 state for PaDiM-CL and CFA-CL: the routed image score
    is then the lowest image score any task gives."""
    if by == "max" and image_size is None:
        aggregate = per_task.flatten(2).max(2).values
    elif by == "max":
        aggregate = torch.stack([anomaly_maps(p, image_size, sigma, taps).flatten(1).max(1).values for p in per_task])
    else:
        aggregate = per_task.flatten(2).mean(2)
    routed = aggregate.argmin(0)
    return per_task[routed, torch.arange(per_task.shape[1], device=routed.device)], routed

"""PaDiM (Defard et al., 2021) and its continual adaptation, one Gaussian model per task (InCLAD App. C.2).

Embedding: backbone layers 1–3, layers 2 and 3 upsampled to the layer-1 grid (`align`: bilinear, InCLAD's released
code; nearest, Defard et al.'s) and concatenated, then a seeded random subset of `n_features` channels (drawn
once, at the first fit, and kept: every task's Gaussians live in the same feature space). Per location p: mean
μ_p and covariance Σ_p + ε·I; all inverses in one batched call. Score: Mahalanobis distance per location; map =
that upsampled (bilinear) to the image and blurred with `blur_sigma`; image score = max of the map at feature
resolution (`image_score="raw"`, InCLAD's released code, no blur) or of the upsampled, blurred map ("map",
Defard et al.'s, σ = 4: preset `original`). Defaults = InCLAD Table 6 (100 features, ε = 0.01) and its code.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from bench.errors import ConfigError
from bench.continual.protocol import Protocol, tensor_bytes
from bench.models.base import ROUTE_BY, Detector, Prediction, anomaly_maps, max_of_maps, route
from bench.models.ops.blur import MAX_SIGMA
from bench.registry import Choice, Float, HostRun, Int, Layers, ModelSpec, backbone_memory, register


class GaussianMoments:
    """Per-location sums Σ(z − k) and Σ(z − k)(z − k)ᵀ over images, batch by batch, around a shift k (the
    first batch's mean): the shifted-data algorithm, so float32 products stay accurate (no large mean to
    cancel) at half the time and memory traffic of float64."""

    def __init__(self):
        self.n = 0
        self.shift = self.sums = self.outer = None

    def update(self, z: torch.Tensor) -> None:
        """Add the images of z [L, B, d]."""
        if self.shift is None:
            self.shift = z.mean(1)
        c = z - self.shift[:, None]
        if self.sums is None:
            self.sums, self.outer = c.sum(1), torch.bmm(c.transpose(1, 2), c)
        else:
            self.sums += c.sum(1)
            self.outer.baddbmm_(c.transpose(1, 2), c)
        self.n += z.shape[1]

    def gaussians(self, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-location (mean [L, d], inverse covariance [L, d, d]), float32.

        Unbiased covariance (n − 1, as PaDiM's np.cov) plus ε·I, then one batched inverse over all L locations,
        in float64 (hardly slower than float32 on CPU) because ε·I is the only floor under the smallest
        eigenvalue when there are fewer images than features.
        """
        n = self.n
        centred = (self.sums / n).double()
        cov = self.outer.double().baddbmm_(centred[:, :, None], centred[:, None, :], alpha=-n).div_(max(n - 1, 1))
        cov.diagonal(dim1=-2, dim2=-1).add_(eps)
        return (self.shift.double() + centred).float(), torch.linalg.inv(cov).float()


def mahalanobis(z: torch.Tensor, mean: torch.Tensor, inv_cov: torch.Tensor) -> torch.Tensor:
    """Mahalanobis distances [B, L] of embeddings z [L, B, d] to per-location Gaussians, as one batched matmul
    (the location is bmm's batch dimension)."""
    delta = z - mean[:, None]
    m2 = (torch.bmm(delta, inv_cov) * delta).sum(-1)
    return m2.clamp_min_(0).sqrt_().T


ALIGNS = ("bilinear", "nearest")  # how layers 2 and 3 reach the layer-1 grid
# the map an image score (and the CL routing, route_by="max") is the max of: "raw", the Mahalanobis map at feature
# resolution (fork src/pyclad/models/padim/padim.py:137-140, padim_cl.py:129-133); "map", the upsampled, blurred map
IMAGE_SCORES = ("raw", "map")


class Padim(Detector):
    name = "padim"

    def __init__(self, extractor, *, image_size: int, layers, n_features: int, eps: float, blur_sigma: float,
                 route_by: str, align: str, image_score: str):
        self.extractor, self.image_size, self.layers = extractor, image_size, tuple(layers)
        self.n_features, self.eps, self.blur_sigma, self.route_by = n_features, eps, blur_sigma, route_by
        self.align, self.image_score = align, image_score
        self.feature_idx_: torch.Tensor | None = None
        self.mean_: torch.Tensor | None = None
        self.inv_cov_: torch.Tensor | None = None

    # --- embedding -------------------------------------------------------------------------------
    def embed(self, feats: list[torch.Tensor]) -> torch.Tensor:
        """Selected features [L, B, d] on the grid of the first layer (L = h·w locations), location-major and
        contiguous: the per-location products run about twice as fast as on a strided view."""
        size = feats[0].shape[-2:]
        # bilinear: the released module's align_feature_maps (upstream pyCLAD 6c98b31 models/vision/utilities/
        # features.py:15, align_corners=False)
        up = ({"mode": "bilinear", "align_corners": False} if self.align == "bilinear" else {"mode": "nearest"})
        full = torch.cat([feats[0]] + [F.interpolate(f, size=size, **up) for f in feats[1:]], dim=1)
        z = full[:, self.feature_idx_.to(full.device)]
        return z.flatten(2).permute(2, 0, 1).contiguous()

    def _select_features(self, feats: list[torch.Tensor], seed: int) -> None:
        if self.feature_idx_ is not None:
            return
        total = sum(f.shape[1] for f in feats)
        if not 1 <= self.n_features <= total:
            raise ConfigError(f"padim n_features={self.n_features} must be in 1..{total} (the channels of "
                              f"{self.extractor.backbone_name} {', '.join(self.layers)})")
        gen = torch.Generator().manual_seed(seed)
        self.feature_idx_ = torch.randperm(total, generator=gen)[: self.n_features].sort().values

    @torch.no_grad()
    def gaussian(self, split, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(mean, inverse covariance) of one task's training images."""
        acc = GaussianMoments()
        for _idx, feats in self.extractor.batches(split, desc=f"features {split.name} (train)", keep=False):
            self._select_features(feats, seed)
            acc.update(self.embed(feats))
        return acc.gaussians(self.eps)

    # --- scoring ----------------------------------------------------------------------------------
    def _embedding(self, split, idx) -> tuple[torch.Tensor, tuple[int, int]]:
        feats = self.extractor(split, idx)
        return self.embed(feats), tuple(feats[0].shape[-2:])

    def patch_maps(self, z: torch.Tensor, grid, gaussians) -> torch.Tensor:
        """Mahalanobis maps [T, B, h, w] of embeddings z under each of T (mean, inverse covariance) models."""
        return torch.stack([mahalanobis(z, mean, inv).view(z.shape[1], *grid) for mean, inv in gaussians])

    def finish(self, patch: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
        """[B, h, w] Mahalanobis maps → (image scores, maps [B, S, S]): IMAGE_SCORES."""
        if self.image_score == "map":
            return max_of_maps(patch, self.image_size, self.blur_sigma)
        maps = anomaly_maps(patch, self.image_size, self.blur_sigma)
        return patch.flatten(1).max(1).values.double().cpu().numpy(), maps.float().cpu().numpy()

    # --- Detector API -----------------------------------------------------------------------------
    def fit(self, split, seed: int) -> "Padim":
        self.mean_, self.inv_cov_ = self.gaussian(split, seed)
        return self

    @torch.no_grad()
    def predict(self, split, idx) -> Prediction:
        z, grid = self._embedding(split, idx)
        return Prediction(*self.finish(self.patch_maps(z, grid, [(self.mean_, self.inv_cov_)])[0]))

    def state_dict(self) -> dict:
        return {"feature_idx": self.feature_idx_, "mean": self.mean_.cpu(), "inv_cov": self.inv_cov_.cpu()}

    def load_state_dict(self, state: dict) -> None:
        device = self.extractor.device
        self.feature_idx_ = state["feature_idx"]
        self.mean_, self.inv_cov_ = state["mean"].to(device), state["inv_cov"].to(device)

    def continual(self, seed: int) -> "PadimTaskModels":
        return PadimTaskModels(self, seed)


class PadimTaskModels(Protocol):
    """InCLAD App. C.2: one Gaussian model G_t per task; each test image is scored under every G_j and routed
    to the one with the lowest image-level anomaly score (the map max; `route_by="mean"`: the mean Mahalanobis
    distance over locations instead, App. C.1's PatchCore rule). Score and map come from the chosen model."""

    routes = True

    def __init__(self, detector: Padim, seed: int):
        super().__init__(detector, seed)
        self.models_: list[tuple[torch.Tensor, torch.Tensor]] = []

    def learn(self, split, step: int) -> None:
        self.models_.append(self.detector.gaussian(split, self.step_seed(step)))

    @torch.no_grad()
    def predict(self, split, idx) -> Prediction:
        det = self.detector
        z, grid = det._embedding(split, idx)
        size = det.image_size if det.image_score == "map" else None  # None: the raw map's max
        chosen, routed = route(det.patch_maps(z, grid, self.models_), det.route_by, size,
                               det.blur_sigma)  # j*(x) = argmin_j A_j(x)
        return Prediction(*det.finish(chosen), routed.cpu().numpy())

    def state_dict(self) -> dict:
        return {"feature_idx": self.detector.feature_idx_,
                "means": [m.cpu() for m, _ in self.models_], "inv_covs": [c.cpu() for _, c in self.models_]}

    def load_state_dict(self, state: dict) -> None:
        device = self.detector.extractor.device
        self.detector.feature_idx_ = state["feature_idx"]
        self.models_ = [(m.to(device), c.to(device)) for m, c in zip(state["means"], state["inv_covs"])]

    def state_bytes(self) -> int:
        return tensor_bytes(self.models_)


# Bytes per input pixel of fitting one task's Gaussians at n_features 100 (a mean, a covariance and its inverse per
# location of the first layer's grid, with the batched inverse's working copies), measured on CPU as the slope of
# the peak RSS of a two-image fit at 64 and 160 px (docs/cluster.md); it grows with n_features squared.
FIT_BYTES_PER_PIXEL = 9100


def memory_bytes(image_size: int, batch_size: int, hparams: dict) -> int:
    """A scoring batch through the frozen backbone plus the Gaussians of one task, whatever the batch size."""
    gaussians = FIT_BYTES_PER_PIXEL * (hparams["n_features"] / 100) ** 2 * image_size * image_size
    return backbone_memory(image_size, batch_size, hparams) + int(gaussians)


def host_state(run: HostRun) -> int:
    """Host bytes of the largest task's embeddings and the Gaussians kept (mean, Σ, Σ⁻¹; one under NCL, one per
    task otherwise)."""
    patches, d = run.layers[0][1], run.hparams["n_features"]
    return int(max(run.n_train) * patches * d * 4 + run.banks * patches * (d * d * 2 + d) * 4)

register(ModelSpec(
    # 3: `inclad` follows InCLAD's released code: raw [0, 1] input, 8-bit resize, DEFAULT weights, bilinear layer
    # alignment, image score and routing from the raw map, no blur (version 2's values: the `original` preset).
    # 4: `original`'s blur is scipy's gaussian_filter at the borders too (bench/models/ops/blur.py)
    name="padim", label="PaDiM", factory=Padim, source="InCLAD Table 6, App. C.2", version=4,
    image_size=224,  # the paper's input size (InCLAD Tables 6-7)
    demo=True,
    presets={"inclad": {}, "original": {"blur_sigma": 4.0, "align": "nearest", "image_score": "map"}},
    default_preset="inclad",
    # InCLAD's released config defaults normalize_mean/std to None (fork src/pyclad/models/padim/config.py:22-23)
    # and its runner sets neither (docs/models.md); torchvision DEFAULT weights (fork vision/backbones.py:72-75)
    image_loading={"inclad": {"normalize": False}},
    imagenet_weights={"inclad": "DEFAULT"},
    params={
        "layers": Layers(("layer1", "layer2", "layer3")),
        "n_features": Int(100, 1, doc="randomly selected embedding dimensions"),
        "eps": Float(0.01, 0, low_open=True, doc="ε added to each covariance diagonal"),
        "blur_sigma": Float(0.0, 0, MAX_SIGMA, doc="Gaussian blur of the anomaly map (0 = none: the released "
                                                   "code's pixel maps are only upsampled)"),
        "align": Choice("bilinear", ALIGNS, doc="upsampling of layers 2 and 3 to the layer-1 grid"),
        "image_score": Choice("raw", IMAGE_SCORES, doc="image score and routing from the max of the raw "
                                                       "feature-resolution map (raw) or of the upsampled, blurred "
                                                       "map (map)"),
        "route_by": Choice("max", ROUTE_BY, doc="CL task routing: lowest image score (max, App. C.2) or lowest "
                                                "mean patch score (mean)"),
    },
    memory_bytes=memory_bytes,
    # host memory (bench.hpc.memory): one pass per task, no cached training features; its state is host_state
    train_features="single_pass", host_state_bytes=host_state,
))

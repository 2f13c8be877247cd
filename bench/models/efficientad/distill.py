"""EfficientAD's teacher pretraining (Batzner et al., WACV 2024): distil a wide_resnet50_2 into a PDN-S.

Target of an image: PatchCore's locally aware features of the backbone's layers 2 and 3 (3×3 average, layer 3
upsampled to layer 2's grid) on the image at twice the PDN's input size (so that layer 2's grid is the padded
PDN's output grid), each layer's channels averaged down to 1024, then both to `out_channels`, normalised per
channel by the mean and std over the first images. The PDN learns the target by mean squared error on the image
at the PDN's size (random grayscale with p = 0.1, as the paper's pretraining); Adam lr 1e-4, wd 1e-5. The paper
distils a WideResNet-101 on ImageNet for 60,000 steps of 16 images; this command takes any folder of images and
the staged wide_resnet50_2 (offline), and writes a teacher file that `teacher=PATH` loads.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from bench.data.images import IMAGENET_MEAN, IMAGENET_STD, load_image
from bench.devices import resolve_device
from bench.features import create_backbone
from bench.models.base import local_patch_features
from bench.models.efficientad.detector import image_files
from bench.models.efficientad.pdn import pdn_output_size, pdn_small, save_teacher
from bench.errors import NonFiniteLossError
from bench.training.loop import seeded

BACKBONE = "wide_resnet50_2"
STATS_IMAGES = 64  # images whose targets fix the per-channel normalisation
GRAYSCALE_P = 0.1


def _targets(backbone, images: torch.Tensor, out_channels: int, side: int) -> torch.Tensor:
    """[B, out_channels, side, side] un-normalised targets of ImageNet-normalised images at 2× the PDN size."""
    feats = backbone(images)
    layers = [F.adaptive_avg_pool1d(f.permute(0, 2, 3, 1).flatten(0, 2)[:, None], 1024)
              .view(f.shape[0], f.shape[2], f.shape[3], 1024).permute(0, 3, 1, 2) for f in feats]
    patch = local_patch_features(layers)  # [B, 2048, h, w] on layer 2's grid
    b, c, h, w = patch.shape
    reduced = F.adaptive_avg_pool1d(patch.permute(0, 2, 3, 1).reshape(-1, 1, c), out_channels)
    reduced = reduced.view(b, h, w, out_channels).permute(0, 3, 1, 2)
    if (h, w) != (side, side):
        reduced = F.interpolate(reduced, size=(side, side), mode="bilinear", align_corners=False)
    return reduced


def _load(paths, size: int, grey: torch.Tensor | None = None) -> torch.Tensor:
    x = torch.stack([load_image(p, size, normalize=False) for p in paths])
    if grey is not None and grey.any():
        g = (0.299 * x[:, 0] + 0.587 * x[:, 1] + 0.114 * x[:, 2])[:, None].expand_as(x)
        x = torch.where(grey.view(-1, 1, 1, 1), g, x)
    return (x - IMAGENET_MEAN) / IMAGENET_STD


def distill_teacher(images: Path, out: Path, *, weights: str = "imagenet", image_size: int = 256,
                    steps: int = 60_000, batch_size: int = 16, lr: float = 1e-4, weight_decay: float = 1e-5,
                    out_channels: int = 384, padding: bool = True, seed: int = 0, device: str = "auto",
                    log=print) -> list[float]:
    """Distil and write the teacher to `out` (atomically); returns the loss of every step."""
    files = image_files(Path(images), "distillation")
    dev = resolve_device(device)
    backbone = create_backbone(BACKBONE, weights, ("layer2", "layer3"), seed).to(dev)
    side = pdn_output_size(image_size, padding)
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        first = files[:STATS_IMAGES]
        t = torch.cat([_targets(backbone, _load(first[s : s + batch_size], 2 * image_size).to(dev),
                                out_channels, side) for s in range(0, len(first), batch_size)]).double()
        mean = t.mean((0, 2, 3), keepdim=True).float()
        std = t.std((0, 2, 3), keepdim=True).float().clamp_min(1e-6)
    with seeded(seed):
        pdn = pdn_small(out_channels, padding).to(dev)
    opt = torch.optim.Adam(pdn.parameters(), lr=lr, weight_decay=weight_decay)
    losses = []
    pdn.train()
    for step in range(steps):
        pick = [files[i] for i in rng.integers(len(files), size=batch_size)]
        grey = torch.from_numpy(rng.random(batch_size) < GRAYSCALE_P)
        with torch.no_grad():
            target = (_targets(backbone, _load(pick, 2 * image_size, grey).to(dev), out_channels, side) - mean) / std
        loss = ((pdn(_load(pick, image_size, grey).to(dev)) - target) ** 2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
        if not np.isfinite(losses[-1]):
            raise NonFiniteLossError(f"teacher distillation: loss became {losses[-1]} at step {step + 1}")
        if (step + 1) % max(1, steps // 20) == 0:
            log(f"distill step {step + 1}/{steps} loss {losses[-1]:.4f}")
    save_teacher(Path(out), pdn.eval(), padding)
    return losses

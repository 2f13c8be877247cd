"""Gaussian blur of anomaly maps (σ = 4 in PatchCore, PaDiM and CFA).

The kernel spans 4σ each side unless a detector names its size: InCLAD's CFA calls torchvision's
`gaussian_blur(kernel_size=3, sigma=4)` (routing-cad-icdm `src/pyclad/models/cfa/architecture.py:241-244`), whose
taps sit at the integer offsets −(k−1)/2 … (k−1)/2 (torchvision `_get_gaussian_kernel1d`), as `gaussian_kernel1d`'s
do, so a `taps` kernel is that kernel exactly."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

# the largest σ a detector's blur_sigma allows: its 4σ kernel (513 taps) already spans any map the suite makes,
# and a larger one only costs memory (σ = 1e9 asked for a 8e9-tap kernel)
MAX_SIGMA = 64.0


def gaussian_kernel1d(sigma: float, device=None, taps: int = 0) -> torch.Tensor:
    """Normalised Gaussian taps at the integer offsets −r … r: r = ⌈4σ⌉, or (taps − 1) / 2 for an odd `taps`."""
    if taps and taps % 2 == 0:
        raise ValueError(f"a blur kernel has an odd number of taps, got {taps}")
    radius = taps // 2 if taps else math.ceil(4 * sigma)
    x = torch.arange(-radius, radius + 1, dtype=torch.float32, device=device)
    k = torch.exp(-0.5 * (x / sigma) ** 2)
    return k / k.sum()


def _truncated(k: torch.Tensor, radius: int) -> torch.Tensor:
    """The central 2·radius+1 taps of k, renormalised (tiny maps cannot hold the full 4σ kernel)."""
    r = k.numel() // 2
    kt = k[r - radius : r + radius + 1]
    return kt / kt.sum()


def gaussian_blur(maps: torch.Tensor, sigma: float, taps: int = 0) -> torch.Tensor:
    """Separable blur of [B, H, W] maps with reflect padding (clamped to what the map size allows); `taps`: the
    kernel size (odd; 0 = the 4σ kernel)."""
    if sigma <= 0:
        return maps
    k = gaussian_kernel1d(sigma, maps.device, taps)
    r = k.numel() // 2
    x = maps[:, None]
    pad_w, pad_h = min(r, maps.shape[2] - 1), min(r, maps.shape[1] - 1)
    x = F.pad(x, (pad_w, pad_w, 0, 0), mode="reflect")
    x = F.conv2d(x, _truncated(k, pad_w).view(1, 1, 1, -1))
    x = F.pad(x, (0, 0, pad_h, pad_h), mode="reflect")
    x = F.conv2d(x, _truncated(k, pad_h).view(1, 1, -1, 1))
    return x[:, 0]

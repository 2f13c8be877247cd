"""Gaussian blur of anomaly maps (σ = 4 in PatchCore, PaDiM, CFA and RD4AD), as the two filters the reference
implementations call:

- the 4σ kernel (`taps=0`) is `scipy.ndimage.gaussian_filter(map, sigma)`, which InCLAD's released PatchCore
  (routing-cad-icdm `src/pyclad/models/patchcore/patchcore.py:103`), RD4AD and the original PatchCore, PaDiM and
  CFA code call: radius ⌊4σ + ½⌋ (scipy's `truncate=4`), and borders extended by scipy's default mode "reflect",
  which repeats the edge pixel (… b a | a b …) and keeps reflecting over maps narrower than the kernel;
- a named kernel size (`taps`) is torchvision's `gaussian_blur(kernel_size=3, sigma=4)`, which InCLAD's CFA calls
  (routing-cad-icdm `src/pyclad/models/cfa/architecture.py:241-244`): taps at the integer offsets −(k−1)/2 …
  (k−1)/2 (torchvision `_get_gaussian_kernel1d`) and torch's "reflect" padding, which does not repeat the edge
  pixel (… c b | a b c …)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

# the largest σ a detector's blur_sigma allows: its 4σ kernel (513 taps) already spans any map the suite makes,
# and a larger one only costs memory (σ = 1e9 asked for a 8e9-tap kernel)
MAX_SIGMA = 64.0


def gaussian_kernel1d(sigma: float, device=None, taps: int = 0) -> torch.Tensor:
    """Normalised Gaussian taps at the integer offsets −r … r: r = ⌊4σ + ½⌋ (scipy's), or (taps − 1) / 2 for an
    odd `taps`."""
    if taps and taps % 2 == 0:
        raise ValueError(f"a blur kernel has an odd number of taps, got {taps}")
    radius = taps // 2 if taps else int(4 * sigma + 0.5)
    x = torch.arange(-radius, radius + 1, dtype=torch.float32, device=device)
    k = torch.exp(-0.5 * (x / sigma) ** 2)
    return k / k.sum()


def _truncated(k: torch.Tensor, radius: int) -> torch.Tensor:
    """The central 2·radius+1 taps of k, renormalised (tiny maps cannot hold the full 4σ kernel)."""
    r = k.numel() // 2
    kt = k[r - radius : r + radius + 1]
    return kt / kt.sum()


def gaussian_blur(maps: torch.Tensor, sigma: float, taps: int = 0) -> torch.Tensor:
    """Separable blur of [B, H, W] maps: scipy's `gaussian_filter` (`taps=0`) or torchvision's `gaussian_blur` with
    a `taps`-wide kernel (odd); see the module's docstring."""
    if sigma <= 0:
        return maps
    k = gaussian_kernel1d(sigma, maps.device, taps)
    x = maps[:, None]
    if not taps:
        r = k.numel() // 2
        x = F.conv2d(x.index_select(3, _scipy_reflect(maps.shape[2], r, maps.device)), k.view(1, 1, 1, -1))
        x = F.conv2d(x.index_select(2, _scipy_reflect(maps.shape[1], r, maps.device)), k.view(1, 1, -1, 1))
        return x[:, 0]
    r = k.numel() // 2
    pad_w, pad_h = min(r, maps.shape[2] - 1), min(r, maps.shape[1] - 1)  # torch's reflect needs a pad < the side
    x = F.pad(x, (pad_w, pad_w, 0, 0), mode="reflect")
    x = F.conv2d(x, _truncated(k, pad_w).view(1, 1, 1, -1))
    x = F.pad(x, (0, 0, pad_h, pad_h), mode="reflect")
    x = F.conv2d(x, _truncated(k, pad_h).view(1, 1, -1, 1))
    return x[:, 0]


def _scipy_reflect(n: int, radius: int, device) -> torch.Tensor:
    """Indices of a side of `n` pixels extended by `radius` each way as scipy.ndimage's mode "reflect" extends it
    (… b a | a b … y z | z y …), periodic with period 2n for a radius beyond the side."""
    i = torch.remainder(torch.arange(-radius, n + radius, device=device), 2 * n)
    return torch.where(i >= n, 2 * n - 1 - i, i)

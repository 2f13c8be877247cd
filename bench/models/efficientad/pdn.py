"""EfficientAD's networks (Batzner et al., WACV 2024): the small patch description network (PDN-S) and the
convolutional autoencoder, plus the teacher file format shared by `distill.py` and the detector.

PDN-S, the paper's layer list: Conv 4×4/128 pad 3 + ReLU, AvgPool 2×2 stride 2 pad 1, Conv 4×4/256 pad 3 + ReLU,
AvgPool 2×2 stride 2 pad 1, Conv 3×3/256 pad 1 + ReLU, Conv 4×4/C pad 0 (C = 384 for the teacher, 768 for the
student). The released reproduction trains without those paddings (`padding=False`: a 56×56 output at 256 px
instead of 64×64); it is offered as an option. A teacher file is a safetensors file (no pickle) holding the
PDN's weights and the padding it was trained with.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from bench.errors import WeightsError
from bench.io import atomic_path

# Decoder upsampling sizes of the paper's autoencoder at 256 px; other sizes scale them.
_DECODER_SIZES_256 = (3, 8, 15, 32, 63, 127)
DISTILL_COMMAND = "python -m bench distill-teacher --images DIR --out PATH"


def pdn_output_size(image_size: int, padding: bool) -> int:
    """Side of a PDN-S feature map for a square input (64 at 256 px with padding, 56 without)."""
    p = 1 if padding else 0
    n = image_size + 6 * p - 3
    n = (n + 2 * p - 2) // 2 + 1
    n = n + 6 * p - 3
    n = (n + 2 * p - 2) // 2 + 1
    return n + 2 * p - 2 - 3


def pdn_small(out_channels: int, padding: bool = True) -> nn.Sequential:
    p = 1 if padding else 0
    return nn.Sequential(
        nn.Conv2d(3, 128, kernel_size=4, padding=3 * p), nn.ReLU(inplace=True),
        nn.AvgPool2d(kernel_size=2, stride=2, padding=p),
        nn.Conv2d(128, 256, kernel_size=4, padding=3 * p), nn.ReLU(inplace=True),
        nn.AvgPool2d(kernel_size=2, stride=2, padding=p),
        nn.Conv2d(256, 256, kernel_size=3, padding=p), nn.ReLU(inplace=True),
        nn.Conv2d(256, out_channels, kernel_size=4),
    )


class Autoencoder(nn.Module):
    """The paper's autoencoder: six strided encoder convolutions down to a 64-d code, then bilinear upsampling
    + 4×4 convolutions (dropout 0.2) back up to the PDN's output grid. At 256 px the sizes are the paper's;
    for other sizes (tests) the last encoder kernel is S/32 and the decoder sizes scale with S."""

    def __init__(self, out_channels: int, image_size: int, output_size: int):
        super().__init__()
        if image_size < 32:
            raise ValueError(f"EfficientAD's autoencoder needs images of at least 32 px, got {image_size}")
        relu = lambda: nn.ReLU(inplace=True)  # noqa: E731
        self.encoder = nn.Sequential(
            nn.Conv2d(3, 32, 4, stride=2, padding=1), relu(),
            nn.Conv2d(32, 32, 4, stride=2, padding=1), relu(),
            nn.Conv2d(32, 64, 4, stride=2, padding=1), relu(),
            nn.Conv2d(64, 64, 4, stride=2, padding=1), relu(),
            nn.Conv2d(64, 64, 4, stride=2, padding=1), relu(),
            nn.Conv2d(64, 64, image_size // 32),
        )
        self.sizes = [max(1, round(v * image_size / 256)) for v in _DECODER_SIZES_256] + [output_size]
        self.up = nn.ModuleList(nn.Conv2d(64, 64, 4, padding=2) for _ in _DECODER_SIZES_256)
        self.dropout = nn.Dropout(0.2)
        self.head = nn.Sequential(nn.Conv2d(64, 64, 3, padding=1), relu(), nn.Conv2d(64, out_channels, 3, padding=1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.encoder(x)
        for size, conv in zip(self.sizes, self.up):
            z = self.dropout(F.relu(conv(F.interpolate(z, size=size, mode="bilinear", align_corners=False))))
        z = F.interpolate(z, size=self.sizes[-1], mode="bilinear", align_corners=False)
        return self.head(z)


def save_teacher(path: Path, pdn: nn.Sequential, padding: bool) -> None:
    """Atomically write a teacher file (safetensors: tensors + string metadata, nothing executable)."""
    from safetensors.torch import save_file

    tensors = {k: v.detach().cpu().contiguous() for k, v in pdn.state_dict().items()}
    with atomic_path(path) as tmp:
        save_file(tensors, str(tmp), metadata={"format": "bench-pdn-small", "padding": str(bool(padding)).lower()})


def load_teacher(path: Path, out_channels: int, padding: bool) -> nn.Sequential:
    """A PDN-S teacher from a file written by `save_teacher`; any mismatch is one line naming the file."""
    from safetensors import safe_open

    path = Path(path)
    if not path.is_file():
        raise WeightsError(f"{path}: EfficientAD teacher file not found; make one with `{DISTILL_COMMAND}`, "
                           f"or use teacher=random")
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            tensors = {k: f.get_tensor(k) for k in f.keys()}
    except Exception as e:  # not a safetensors file: say which and why, no traceback
        raise WeightsError(f"{path}: cannot read EfficientAD teacher ({type(e).__name__}: {e})") from None
    if meta.get("format") != "bench-pdn-small":
        raise WeightsError(f"{path}: not a PDN-S teacher file (made by `{DISTILL_COMMAND}`)")
    if meta.get("padding") != str(bool(padding)).lower():
        raise WeightsError(f"{path}: teacher trained with padding={meta.get('padding')}, the run asks for "
                           f"pdn_padding={str(bool(padding)).lower()}")
    pdn = pdn_small(out_channels, padding)
    try:
        pdn.load_state_dict(tensors)
    except RuntimeError as e:
        raise WeightsError(f"{path}: teacher does not match PDN-S with {out_channels} output channels "
                           f"({str(e).splitlines()[0]})") from None
    return pdn

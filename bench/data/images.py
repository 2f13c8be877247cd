"""Image and mask loading: every failure becomes a one-line DatasetError naming the file."""

from __future__ import annotations

import struct

import numpy as np
import torch
from PIL import Image

from bench.errors import DatasetError

IMAGENET_MEAN = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
IMAGENET_STD = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)

# What PIL raises for missing, truncated or corrupt files (broken PNG chunks raise SyntaxError).
_PIL_ERRORS = (OSError, ValueError, SyntaxError, EOFError, struct.error, Image.DecompressionBombError)
# Modes whose pixel values are intensities; any other mode (palette, RGB, alpha) is judged by its colour.
_INTENSITY_MODES = frozenset({"1", "L", "I", "I;16", "I;16L", "I;16B", "I;16N", "F"})
# 16-bit grey: full scale is 65535. PIL's convert("RGB") would clip these to 255 (a half-grey 16-bit image
# would read as white), so they are scaled here instead.
_GREY16_MODES = frozenset({"I;16", "I;16L", "I;16B", "I;16N"})
# 32-bit integer and float images have no fixed full scale: refused rather than guessed.
_UNSCALED_MODES = {"I": "32-bit integer", "F": "32-bit float"}


def load_image(path, size: int, normalize: bool = True) -> torch.Tensor:
    """A float tensor [3, size, size]: RGB (grey images repeated; 16-bit grey scaled by 1/65535), bilinear
    resize, ImageNet-normalised (`normalize=False`: raw [0, 1], for detectors with a normalisation of their own)."""
    try:
        with Image.open(path) as im:
            if im.mode in _UNSCALED_MODES:
                raise DatasetError(f"{path}: {_UNSCALED_MODES[im.mode]} image (PIL mode {im.mode}) has no fixed "
                                   "intensity range; convert it to 8- or 16-bit")
            if im.mode in _GREY16_MODES:
                grey = Image.fromarray(np.asarray(im, dtype=np.float32) / 65535.0)  # mode F: no clipping
                grey = np.asarray(grey.resize((size, size), Image.BILINEAR), dtype=np.float32)
                rgb = np.repeat(grey[:, :, None], 3, axis=2)
            else:
                rgb = np.asarray(im.convert("RGB").resize((size, size), Image.BILINEAR), dtype=np.float32) / 255.0
    except _PIL_ERRORS as exc:
        raise DatasetError(f"{path}: cannot read image ({_reason(exc)})") from None
    x = torch.from_numpy(np.ascontiguousarray(rgb)).permute(2, 0, 1)
    return (x - IMAGENET_MEAN) / IMAGENET_STD if normalize else x


def load_mask(path, size: int | None, image_path) -> np.ndarray:
    """A uint8 [size, size] array of 0/1 (any nonzero pixel is defect), nearest-neighbour resized; size=None keeps
    the mask's own [H, W].

    The mask must have its image's original size: a mismatch means the wrong mask was paired with the image.
    """
    image_size = header_size(image_path, "image")
    try:
        with Image.open(path) as im:
            if im.size != image_size:
                raise DatasetError(f"{path}: mask size {im.size[0]}x{im.size[1]} differs from image {image_path} "
                                   f"size {image_size[0]}x{image_size[1]}")
            if im.mode not in _INTENSITY_MODES:
                im = im.convert("RGB")
            arr = np.asarray(im)
    except _PIL_ERRORS as exc:
        raise DatasetError(f"{path}: cannot read mask ({_reason(exc)})") from None
    binary = (arr != 0) if arr.ndim == 2 else (arr != 0).any(axis=2)
    if size is None:
        return binary.astype(np.uint8)
    resized = Image.fromarray(binary.astype(np.uint8)).resize((size, size), Image.NEAREST)
    return np.asarray(resized, dtype=np.uint8).copy()


def header_size(path, what: str) -> tuple[int, int]:
    """(W, H) from the file header only (PIL decodes pixels lazily)."""
    try:
        with Image.open(path) as im:
            return im.size
    except _PIL_ERRORS as exc:
        raise DatasetError(f"{path}: cannot read {what} ({_reason(exc)})") from None


def _reason(exc: Exception) -> str:
    # PIL messages can span lines; the CLI prints errors on one.
    return " ".join(str(exc).split()) or type(exc).__name__

"""Image and mask loading: every failure becomes a one-line DatasetError naming the file."""

from __future__ import annotations

import struct
import threading
import warnings
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
from PIL import ExifTags, Image, TiffImagePlugin

from bench.config import MASK_THRESHOLD
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


# Full scale of a mask's pixel values by PIL mode; 32-bit modes ("I", "F") have none (only 0/1, 0/255 or 0/65535
# masks are read in them: those values say their scale).
_MASK_FULL_SCALE = {"1": 1, "L": 255, **{m: 65535 for m in _GREY16_MODES}}
# EXIF orientation → the transpose that makes the stored pixels upright (the table of PIL.ImageOps.exif_transpose);
# 5-8 turn by 90°, so the upright size is the stored one with width and height swapped.
_UPRIGHT = {2: Image.Transpose.FLIP_LEFT_RIGHT, 3: Image.Transpose.ROTATE_180, 4: Image.Transpose.FLIP_TOP_BOTTOM,
            5: Image.Transpose.TRANSPOSE, 6: Image.Transpose.ROTATE_270, 7: Image.Transpose.TRANSVERSE,
            8: Image.Transpose.ROTATE_90}
_SWAPPING_ORIENTATIONS = frozenset({5, 6, 7, 8})
_LIBTIFF = threading.Lock()  # TiffImagePlugin.READ_LIBTIFF is module state; images are decoded in threads


class MaskWarning(UserWarning):
    """A task's masks are not clean 0/max images, or an anomalous image has no defect pixel in its mask."""


def load_image(path, size: int, normalize: bool = True, resize: str = "float") -> torch.Tensor:
    """A float tensor [3, size, size]: upright (EXIF orientation applied), RGB (grey repeated), values in [0, 1]
    whatever the bit depth, resized bilinearly, ImageNet-normalised (`normalize=False`: raw [0, 1], for detectors
    with a normalisation of their own, or InCLAD's released PatchCore and PaDiM).

    `resize="float"`: the resize works on the [0, 1] values (PIL mode F), so the result is independent of how the
    pixels were stored (an 8-bit image and its 16-bit copy, values × 257, load to the same tensor). `"8bit"`: InCLAD's
    released loader (`_load_image` in src/pyclad/data/readers/visual_benchmark_reader.py): the 8-bit RGB image
    resized by PIL's BILINEAR filter, which rounds to uint8, then scaled to [0, 1]. A 16-bit grey image is first
    rounded to 8 bits here (PIL's convert("RGB"), which the released code calls, would clip it to white)."""
    try:
        with _open(path) as im:
            if im.mode in _UNSCALED_MODES:
                raise DatasetError(f"{path}: {_UNSCALED_MODES[im.mode]} image (PIL mode {im.mode}) has no fixed "
                                   "intensity range; convert it to 8- or 16-bit")
            # a camera stores the sensor's pixel rows and an orientation tag; its mask was drawn on the upright view
            im = _upright(im)
            if resize == "8bit":
                rgb = _resize_8bit(im, size)
            elif im.mode in _GREY16_MODES:
                rgb = _resize_float((np.asarray(im, dtype=np.float32) / 65535.0)[:, :, None], size)
            else:
                rgb = _resize_float(np.asarray(im.convert("RGB"), dtype=np.float32) / 255.0, size)
    except _PIL_ERRORS as exc:
        raise DatasetError(f"{path}: cannot read image ({_reason(exc)})") from None
    x = torch.from_numpy(np.repeat(rgb, 3, axis=2) if rgb.shape[2] == 1 else rgb).permute(2, 0, 1)
    return (x - IMAGENET_MEAN) / IMAGENET_STD if normalize else x


def _resize_float(unit: np.ndarray, size: int) -> np.ndarray:
    """[H, W, C] float32 → [size, size, C], each channel resized bilinearly as a float image (PIL mode F)."""
    return np.stack([np.asarray(Image.fromarray(unit[:, :, c]).resize((size, size), Image.BILINEAR))
                     for c in range(unit.shape[2])], axis=2)


def _resize_8bit(im: Image.Image, size: int) -> np.ndarray:
    """PIL image → [size, size, 3] float32 in [0, 1]: 8-bit RGB resized by PIL BILINEAR (uint8 result)."""
    if im.mode in _GREY16_MODES:
        im = Image.fromarray(np.round(np.asarray(im, dtype=np.float64) / 257.0).astype(np.uint8), "L")
    return np.asarray(im.convert("RGB").resize((size, size), Image.BILINEAR), dtype=np.float32) / 255.0


@dataclass
class MaskCounts:
    """What the masks of one split looked like, told once per task by `warn`."""

    masks: int = 0
    soft: int = 0  # masks with values other than 0 and their full scale (soft borders, anti-aliasing)
    empty: int = 0  # masks without a defect pixel once thresholded (and resized)

    def warn(self, where: str, threshold: int | None) -> None:
        rule = "any nonzero value" if threshold is None else f"values above {threshold} of 255"
        if self.soft:
            warnings.warn(f"{where}: {self.soft} of {self.masks} masks have values other than 0 and full scale "
                          f"(soft borders); defect pixels are {rule}", MaskWarning, stacklevel=2)
        if self.empty:
            warnings.warn(f"{where}: {self.empty} of {self.masks} anomalous images have no defect pixel in their "
                          f"mask ({rule}); they add only normal pixels to pixel ROC-AUC", MaskWarning, stacklevel=2)


def load_mask(path, size: int | None, image_path, threshold: int | None = MASK_THRESHOLD,
              counts: MaskCounts | None = None) -> np.ndarray:
    """A uint8 [size, size] array of 0/1, nearest-neighbour resized; size=None keeps the mask's own [H, W].
    Upstream masks are 0/255; soft borders (1, 2, 3... at the edges, Magnetic Tile) are not defect.
    Defect pixels: above `threshold` on the 8-bit scale (scaled to the mask's bit depth; a mask holding only 0
    and 1 marks defects with 1); `threshold=None`: any nonzero pixel. `counts` tallies soft and empty masks.

    The mask is read upright (its EXIF orientation applied, as `load_image` does) and must have its upright
    image's size: a mismatch means the wrong mask was paired with the image.
    """
    image_size = header_size(image_path, "image")
    try:
        with _open(path) as im:
            im = _upright(im)  # a mask stored with an orientation tag is read upright, as its image
            if im.size != image_size:
                raise DatasetError(f"{path}: mask size {im.size[0]}x{im.size[1]} differs from image {image_path} "
                                   f"size {image_size[0]}x{image_size[1]}")
            mode = im.mode if im.mode in _INTENSITY_MODES else "L"
            arr = np.asarray(im if im.mode in _INTENSITY_MODES else im.convert("RGB"))
    except _PIL_ERRORS as exc:
        raise DatasetError(f"{path}: cannot read mask ({_reason(exc)})") from None
    defect, soft = _defect(arr, mode, threshold, path)
    binary = defect if defect.ndim == 2 else defect.any(axis=2)
    if size is not None:
        binary = np.asarray(Image.fromarray(binary.astype(np.uint8)).resize((size, size), Image.NEAREST)) != 0
    if counts is not None:
        counts.masks += 1
        counts.soft += soft
        counts.empty += not binary.any()
    return binary.astype(np.uint8)


def _defect(arr: np.ndarray, mode: str, threshold: int | None, path) -> tuple[np.ndarray, bool]:
    """(defect pixels, whether the mask holds values other than 0 and one full-scale value)."""
    values = set(np.unique(arr).tolist())
    # 32-bit modes: the scale must be evident from the values
    full = _MASK_FULL_SCALE.get(mode) or next((f for f in (1, 255, 65535) if values <= {0, f}), None)
    soft = not (values <= {0, 1} or full is not None and values <= {0, full})
    if threshold is None:
        return arr != 0, soft
    if full is None:
        raise DatasetError(f"{path}: 32-bit mask (PIL mode {mode}) with values other than 0/1, 0/255 or 0/65535 has "
                           "no fixed intensity range; save it as an 8-bit 0/255 mask")
    if values <= {0, 1}:  # a 0/1 mask: its 1s are the defect whatever its bit depth
        return arr == 1, soft
    return arr > threshold * full / 255, soft


def header_size(path, what: str) -> tuple[int, int]:
    """(W, H) from the file header only (PIL decodes pixels lazily), upright (EXIF orientation applied): masks
    are read upright too, so a mask's header size is compared with its image's on the same footing."""
    try:
        with _open(path) as im:
            stored = _stored_size(im)
            if _orientation(im) in _SWAPPING_ORIENTATIONS:
                return stored[::-1]
            return stored
    except _PIL_ERRORS as exc:
        raise DatasetError(f"{path}: cannot read {what} ({_reason(exc)})") from None


@contextmanager
def _open(path):
    """Image.open, except that an uncompressed TIFF turned by 90° (orientation 5-8) is opened for libtiff's
    decoder: Pillow 13 turns a TIFF upright while loading it, and its own decoder scrambles the pixels of exactly
    those (measured with Pillow 13.0.0: a 48x32 mask came back 32 rows of interleaved stripes). libtiff, which
    Pillow already uses for every compressed TIFF, reads them right."""
    im = Image.open(path)
    try:
        if (im.format == "TIFF" and not getattr(im, "use_load_libtiff", True)
                and _orientation(im) in _SWAPPING_ORIENTATIONS):
            im.close()
            with _LIBTIFF:
                before, TiffImagePlugin.READ_LIBTIFF = TiffImagePlugin.READ_LIBTIFF, True
                try:
                    im = Image.open(path)
                finally:
                    TiffImagePlugin.READ_LIBTIFF = before
        yield im
    finally:
        im.close()


def _upright(im):
    """`im` with its orientation applied exactly once. Pillow (13 and later) turns a TIFF itself while loading it
    and drops the tag; every other format (and an older Pillow's TIFF) keeps the tag and is turned here."""
    orientation = _orientation(im)
    if orientation not in _UPRIGHT:
        return im
    im.load()
    if _orientation(im) != orientation:  # turned while loading
        return im
    return im.transpose(_UPRIGHT[orientation])


def _stored_size(im) -> tuple[int, int]:
    """(W, H) of the pixels as the file stores them, before any orientation: Pillow 13 reports a TIFF's size
    already turned, so a TIFF's is read from its own width and length tags."""
    if im.format == "TIFF":
        tags = im.tag_v2
        return int(tags.get(256, im.size[0])), int(tags.get(257, im.size[1]))
    return im.size


def _orientation(im) -> int | None:
    """The EXIF orientation tag as far as the file's header holds it (JPEG APP1, TIFF tags, a PNG eXIf chunk
    before the pixel data), so the header size and the loaded pixels agree. Never decodes pixels: PIL's getexif()
    on a PNG without EXIF in its header would decode the whole image, and the file check reads every header."""
    if im.format == "PNG" and "exif" not in im.info:
        return None
    return im.getexif().get(ExifTags.Base.Orientation)


def _reason(exc: Exception) -> str:
    # PIL messages can span lines; the CLI prints errors on one.
    return " ".join(str(exc).split()) or type(exc).__name__

"""Orientation tags are applied exactly once, in every format and every orientation, for images and masks.

Pillow 13 turns a TIFF upright itself while loading it (and reports its size already turned), while PNG and JPEG
keep the tag for the reader to apply; and Pillow's own decoder scrambles an uncompressed TIFF turned by 90°.
Before bench/data/images.py knew this, a tagged TIFF was turned twice (orientations 2-4: flipped back to the
stored view) or came back as stripes (5-8), without a word."""
from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from bench.data.images import header_size, load_image, load_mask

# orientation tag -> how the stored pixels relate to the upright view (the inverse of exif_transpose's table)
_STORE = {1: None, 2: Image.Transpose.FLIP_LEFT_RIGHT, 3: Image.Transpose.ROTATE_180,
          4: Image.Transpose.FLIP_TOP_BOTTOM, 5: Image.Transpose.TRANSPOSE, 6: Image.Transpose.ROTATE_90,
          7: Image.Transpose.TRANSVERSE, 8: Image.Transpose.ROTATE_270}


def _upright_mask() -> np.ndarray:
    """48 high, 32 wide, no symmetry: a band along the top and a block at the left of the band's row."""
    m = np.zeros((48, 32), np.uint8)
    m[:8, :] = 255
    m[8:20, :6] = 255
    return m


def _store(path, upright: np.ndarray, orientation: int, **save) -> None:
    im = Image.fromarray(upright)
    if _STORE[orientation] is not None:
        im = im.transpose(_STORE[orientation])
    exif = Image.Exif()
    exif[0x0112] = orientation
    im.save(path, exif=exif, **save)


FORMATS = {"tif": {}, "tif-lzw": {"compression": "tiff_lzw"}, "png": {}}


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("orientation", range(1, 9))
def test_a_tagged_mask_is_read_upright_once(tmp_path, fmt, orientation):
    upright = _upright_mask()
    path = tmp_path / f"mask.{fmt.split('-')[0]}"
    _store(path, upright, orientation, **FORMATS[fmt])
    Image.fromarray(np.zeros((48, 32), np.uint8)).save(tmp_path / "image.png")  # 32 wide, 48 high
    assert header_size(path, "mask") == (32, 48)
    got = load_mask(path, None, tmp_path / "image.png")  # native size: every pixel compared
    np.testing.assert_array_equal(got, (upright > 0).astype(np.uint8))


@pytest.mark.parametrize("bits", (8, 16))
@pytest.mark.parametrize("orientation", (3, 6, 8))
def test_a_tagged_tiff_image_loads_like_its_upright_copy(tmp_path, bits, orientation):
    upright = _upright_mask().astype(np.uint16) * 257 if bits == 16 else _upright_mask()
    _store(tmp_path / "tagged.tif", upright, orientation)
    Image.fromarray(upright).save(tmp_path / "upright.tif")
    assert header_size(tmp_path / "tagged.tif", "image") == (32, 48)
    got = load_image(tmp_path / "tagged.tif", 16, normalize=False)
    want = load_image(tmp_path / "upright.tif", 16, normalize=False)
    assert float((got - want).abs().max()) == 0.0

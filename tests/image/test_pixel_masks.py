"""Real image and mask files: masks thresholded at half scale with soft and empty masks counted and
told once per task, the pixel metric skipping nothing silently, identical pixels giving identical tensors and
scores whatever their bit depth, EXIF orientation applied (image and mask stay aligned), non-square images
said, and the mask threshold recorded in the run key while old files keep theirs."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import torch
from PIL import Image

from bench.config import MASK_THRESHOLD, RunConfig
from bench.continual.runner import prepare
from bench.image.track import split_masks
from bench.data import read_index
from bench.data.images import MaskWarning, header_size, load_image, load_mask
from bench.data.tasks import task_splits
from bench.errors import ConfigError, DatasetError
from helpers import create, model_extractor

def _save(path, arr, **kw):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(arr).save(path, **kw)
    return path


def _part(root, masks: dict, size=(16, 16), grey16=False):
    """A one-concept MVTec-layout root 'part': 3 train, 1 good test image, one anomalous image per mask; the
    pixels are seeded (the same in every root), 8-bit or 16-bit (× 257) grey."""
    w, h = size
    rng = np.random.default_rng(0)

    def image(path):
        pixels = rng.integers(0, 256, (h, w)).astype(np.uint8)
        return _save(path, pixels.astype(np.uint16) * 257 if grey16 else pixels)

    for i in range(3):
        image(root / "part" / "train" / "good" / f"{i:03d}.png")
    image(root / "part" / "test" / "good" / "000.png")
    for name, mask in masks.items():
        image(root / "part" / "test" / "crack" / f"{name}.png")
        _save(root / "part" / "ground_truth" / "crack" / f"{name}_mask.png", mask)
    return root


def _test_split(root, threshold=MASK_THRESHOLD, size=8):
    return task_splits(read_index("synthetic", root), root, "part", size, threshold)[1]


def _mask(value=255, border=0):
    m = np.zeros((16, 16), np.uint8)
    m[4:12, 4:12] = value
    if border:
        m[3, 3:13] = m[12, 3:13] = border  # a soft edge around the defect
    return m


def test_soft_borders_are_not_defect_and_soft_and_empty_masks_are_told_once_per_task(tmp_path):
    root = _part(tmp_path, {"clean": _mask(), "soft": _mask(border=2), "empty": _mask(value=0)})
    with pytest.warns(MaskWarning) as told:
        masks = split_masks(_test_split(root, size=16), "resized")
    messages = sorted(str(w.message) for w in told)
    assert len(messages) == 2
    assert "1 of 3 anomalous images have no defect pixel" in messages[0]
    assert "1 of 3 masks have values other than 0 and full scale" in messages[1]
    clean, empty, soft = masks[:3]  # rows sorted by path: crack/clean, crack/empty, crack/soft, good/000
    np.testing.assert_array_equal(soft, clean)  # the border is not defect area
    assert clean.sum() == 64 and not empty.any()
    with pytest.warns(MaskWarning):
        old = split_masks(_test_split(root, threshold=None, size=16), "native")  # the rule of earlier runs
    assert old[2].sum() == 64 + 20  # any nonzero pixel: the soft edge grew the defect


def test_clean_masks_warn_nothing_and_a_missing_mask_is_said_not_skipped(tmp_path):
    root = _part(tmp_path, {"a": _mask(), "b": _mask(value=1)})  # 0/255 and 0/1 masks are both binary
    split = _test_split(root)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        masks = split_masks(split, "resized")
    assert masks[0].any() and masks[1].any()
    split.rows.loc[split.rows["label"] == 1, "mask_path"] = ["", split.rows["mask_path"][1]]
    with pytest.warns(UserWarning, match="pixel ROC-AUC not computed .*1 of 2 anomalous test images have no mask"):
        assert split_masks(split, "resized") is None


def test_8_and_16_bit_copies_load_and_score_alike(tmp_path):
    grey = np.random.default_rng(0).integers(0, 256, (21, 13)).astype(np.uint8)
    _save(tmp_path / "g8.png", grey)
    _save(tmp_path / "g16.png", grey.astype(np.uint16) * 257)
    assert Image.open(tmp_path / "g16.png").mode == "I;16"
    for size in (8, 32):  # down- and upscaling
        torch.testing.assert_close(load_image(tmp_path / "g16.png", size), load_image(tmp_path / "g8.png", size),
                                   rtol=1e-6, atol=1e-6)
    scores = {}
    for bits in (8, 16):
        root = _part(tmp_path / f"b{bits}", {"a": np.kron(_mask(), np.ones((3, 3), np.uint8))}, size=(48, 48),
                     grey16=bits == 16)
        train, test = task_splits(read_index("synthetic", root), root, "part", 32)
        det = create("padim", model_extractor(), 32).fit(train, seed=0)
        scores[bits] = det.predict(test, np.arange(len(test))).scores
    np.testing.assert_allclose(scores[16], scores[8], rtol=1e-6)


def test_exif_orientation_is_applied_and_the_mask_stays_aligned(tmp_path):
    upright = np.zeros((32, 48, 3), np.uint8)  # 48 wide, 32 high; the defect is a bright block, top left
    upright[:16, :16] = 255
    mask = np.zeros((32, 48), np.uint8)
    mask[:16, :16] = 255
    _save(tmp_path / "mask.png", mask)
    _save(tmp_path / "upright.jpg", upright, quality=95)
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90° clockwise to display": the file holds the sensor's rows, 32 wide, 48 high
    _save(tmp_path / "rotated.jpg", np.ascontiguousarray(np.rot90(upright)), quality=95, exif=exif)
    assert Image.open(tmp_path / "rotated.jpg").size == (32, 48)
    assert header_size(tmp_path / "rotated.jpg", "image") == (48, 32)
    x = load_image(tmp_path / "rotated.jpg", 32, normalize=False)
    torch.testing.assert_close(x, load_image(tmp_path / "upright.jpg", 32, normalize=False), atol=0.03, rtol=0)
    m = torch.from_numpy(load_mask(tmp_path / "mask.png", 32, tmp_path / "rotated.jpg")).bool()
    assert x[:, m].mean() > 0.9 and x[:, ~m].mean() < 0.1  # the mask covers the bright block


def test_an_exif_orientation_on_a_mask_is_applied_as_on_its_image(tmp_path):
    """Issue 31 §5: a mask stored as the sensor's rows with an orientation tag was read as stored (a square image:
    silently rotated, pixel ROC-AUC 0.967 → 0.734); now it is turned upright like its image
    (bench/data/images.py load_mask)."""
    upright = np.zeros((16, 16), np.uint8)
    upright[:4, :10] = 255  # a defect along the top edge: any rotation moves it
    _save(tmp_path / "image.png", np.zeros((16, 16), np.uint8))
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90° clockwise to display"
    _save(tmp_path / "mask.png", np.ascontiguousarray(np.rot90(upright)), exif=exif)
    for size in (16, None):  # resized, and at the mask's native size
        np.testing.assert_array_equal(load_mask(tmp_path / "mask.png", size, tmp_path / "image.png"),
                                      (upright > 0).astype(np.uint8))


def test_non_square_images_are_said_once_with_their_aspect_ratios(tmp_path, make_config):
    m = np.zeros((10, 25), np.uint8)
    m[2:5, 2:9] = 255
    root = _part(tmp_path, {"a": m}, size=(25, 10))  # KolektorSDD-like 1:2.5
    with pytest.warns(UserWarning, match=r"width/height 2\.5 are resized to 64x64 without keeping") as told:
        prepare(make_config(root, ["part"], model="padim"), out_dir=tmp_path / "runs")
    assert sum("width/height" in str(w.message) for w in told) == 1


def test_the_mask_threshold_is_in_new_run_keys_and_absent_from_old_files(tiny_root, make_config):
    cfg = make_config(tiny_root, ["chip"], model="padim")
    assert cfg.image.mask_threshold == MASK_THRESHOLD
    data = json.loads(cfg.to_json())
    del data["inputs"]["mask_threshold"]  # a file written before the setting was recorded
    old = RunConfig.from_json(json.dumps(data))
    assert old.image.mask_threshold is None
    assert old.run_key("ab" * 32, "w") != cfg.run_key("ab" * 32, "w")
    assert RunConfig.from_json(cfg.to_json()).run_key("ab" * 32, "w") == cfg.run_key("ab" * 32, "w")
    with pytest.raises(ConfigError, match="--mask-threshold 255 is not allowed"):
        make_config(tiny_root, ["chip"], model="padim", mask_threshold=255).validate()


def test_a_32_bit_mask_needs_evident_values_under_the_threshold_rule(tmp_path):
    image = _save(tmp_path / "i.png", np.zeros((8, 8), np.uint8))
    for values, ok in (((0, 255), True), ((0, 1), True), ((0, 300), False)):
        m = np.zeros((8, 8), np.int32)
        m[:4] = values[1]
        _save(tmp_path / "m.tif", m)
        assert Image.open(tmp_path / "m.tif").mode == "I"
        assert load_mask(tmp_path / "m.tif", 8, image, threshold=None)[:4].all()  # the old rule reads them all
        if ok:
            assert load_mask(tmp_path / "m.tif", 8, image).sum() == 32
        else:
            with pytest.raises(DatasetError, match=r"m\.tif: 32-bit mask .* no fixed intensity range"):
                load_mask(tmp_path / "m.tif", 8, image)

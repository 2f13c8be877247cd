"""How images are loaded for a detector (ImageInputs.normalize/.resize): the released 8-bit resize, raw [0, 1]
input for InCLAD's PatchCore and PaDiM, both resolved from the model preset, recorded, carried by the task splits
into every loader, and kept apart in the feature cache."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from bench.continual.runner import prepare
from bench.data.images import IMAGENET_MEAN, IMAGENET_STD, load_image
from bench.data.tasks import split_from_state, split_state, task_splits
from bench.data import read_index
from bench.registry import get, specs
from helpers import model_extractor


def _photo(path, size=(37, 29), seed=0):
    """A noisy RGB image whose bilinear resize rounds differently in 8 bits and in float."""
    rng = np.random.default_rng(seed)
    Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)).save(path)
    return path


def test_8bit_resize_is_the_released_loader(tmp_path):
    """InCLAD src/pyclad/data/readers/visual_benchmark_reader.py, `_load_image`: image.convert("RGB"), then
    image.resize((w, h), BILINEAR) in 8 bits, np.asarray (uint8); the model's preprocessor scales it to [0, 1]."""
    path = _photo(tmp_path / "a.png")
    with Image.open(path) as im:
        released = np.asarray(im.convert("RGB").resize((16, 16), Image.BILINEAR)).astype(np.float32) / 255.0
    ours = load_image(path, 16, normalize=False, resize="8bit")
    np.testing.assert_array_equal(ours.permute(1, 2, 0).numpy(), released)
    floated = load_image(path, 16, normalize=False)
    assert not torch.equal(floated, ours) and float((floated - ours).abs().max()) <= 1 / 255  # only rounding
    normalised = load_image(path, 16, resize="8bit")
    torch.testing.assert_close(normalised, (ours - IMAGENET_MEAN) / IMAGENET_STD)


def test_8bit_resize_rounds_a_16_bit_image_instead_of_clipping_it(tmp_path):
    """A 16-bit grey image at half scale loads as half grey (PIL's convert("RGB") would clip it to white)."""
    path = tmp_path / "g16.png"
    Image.fromarray(np.full((10, 12), 32896, dtype=np.uint16)).save(path)  # 128 × 257
    x = load_image(path, 8, normalize=False, resize="8bit")
    torch.testing.assert_close(x, torch.full((3, 8, 8), 128 / 255))


@pytest.mark.parametrize("model,preset,expected", [
    ("patchcore", "inclad", (False, "8bit")),  # fork patchcore/config.py:27-28: normalize_mean/std None
    ("padim", "inclad", (False, "8bit")),  # fork padim/config.py:22-23
    ("patchcore", "original", (True, "float")),
    ("padim", "original", (True, "float")),
    ("rd4ad", "inclad", (True, "8bit")),  # every model's images go through _load_image under inclad
    ("rd4ad", "original", (True, "float")),
    ("ganomaly", "inclad", (None, "8bit")),  # reads raw images and normalises itself: no setting of the track's
])
def test_loading_resolves_from_the_model_preset_and_reaches_the_splits(tiny_root, make_config, model, preset,
                                                                       expected):
    cfg = make_config(tiny_root, ["disc"], model=model, preset=preset)
    run = prepare(cfg)
    assert (run.config.image.normalize, run.config.image.resize) == expected
    # InCLAD computes in float32; a float16 cache moves scores (reference-code-diffs I13)
    assert run.config.image.feature_dtype == ("float32" if preset == "inclad" else "float16")
    split = run.track.splits["disc"].train
    assert (split.normalize, split.resize) == (expected[0] is not False, expected[1])


def test_a_run_may_set_its_loading_itself(tiny_root, make_config):
    run = prepare(make_config(tiny_root, ["disc"], model="patchcore", normalize=True, resize="float"))
    assert (run.config.image.normalize, run.config.image.resize) == (True, "float")
    default = prepare(make_config(tiny_root, ["disc"], model="patchcore"))
    assert default.run_key != run.run_key


def test_every_image_detector_resizes_in_8_bits_under_inclad():
    """The loader is the runner's, not a model's: a preset named inclad resizes in 8 bits for every detector
    (registry.PRESET_IMAGE_LOADING) unless its spec's image_loading says otherwise."""
    for name, spec in specs().items():
        assert spec.loading("inclad")["resize"] == "8bit", name


def test_splits_carry_their_loading_through_a_checkpoint_and_into_the_cache_key(tiny_root):
    index = read_index("synthetic", tiny_root)
    plain, _ = task_splits(index, tiny_root, "disc", 64)
    raw, _ = task_splits(index, tiny_root, "disc", 64, normalize=False, resize="8bit")
    assert plain.keys[0] == f"synthetic/{plain.rows['image_path'][0]}" and raw.keys[0] == plain.keys[0] + "#raw#8bit"
    back = split_from_state(split_state(raw))
    assert (back.normalize, back.resize, back.keys) == (False, "8bit", raw.keys)
    old = {k: v for k, v in split_state(raw).items() if k not in ("normalize", "resize")}  # saved before
    assert (split_from_state(old).normalize, split_from_state(old).resize) == (True, "float")
    ex = model_extractor(("layer2",))
    a, b = ex(plain, [0]), ex(raw, [0])
    assert ex.forward_images == 2  # the raw image's features are its own, not the normalised one's
    torch.testing.assert_close(ex(raw, [0])[0], b[0])
    assert ex.forward_images == 2 and not torch.allclose(a[0], b[0])
    images = raw.load_images([0])
    torch.testing.assert_close(images[0], load_image(raw.root / raw.rows["image_path"][0], 64, False, "8bit"))


def test_image_loading_values_are_checked_at_registration():
    from dataclasses import replace

    spec = get("patchcore")
    for bad in ({"inclad": {"normalize": 1}}, {"inclad": {"resize": "nearest"}}, {"paper": {"normalize": False}},
                {"inclad": {"blur": 0}}, {"inclad": {"feature_dtype": "bfloat16"}}):
        with pytest.raises(RuntimeError, match="image_loading"):
            replace(spec, image_loading=bad)

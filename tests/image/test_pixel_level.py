"""Pixel-level correctness: a detector's maps are aligned with the ground-truth masks. Pixel ROC-AUC is high on a
synthetic task with localised defects, and scoring the same maps against transposed or flipped masks (same
defect areas, wrong places) drops it: the test sees alignment, not just defect size."""

from __future__ import annotations

import numpy as np
import pytest

from bench.metrics import PixelRocAuc
from helpers import create, model_extractor, task_split_pair

LAYERS = {"patchcore": ("layer2", "layer3"), "padim": ("layer1", "layer2", "layer3")}


def pixel_auc(maps, masks) -> float:
    acc = PixelRocAuc()
    acc.update(maps, np.ascontiguousarray(masks))
    return acc.compute()


@pytest.mark.parametrize("model", ["patchcore", "padim"])
def test_maps_are_aligned_with_the_masks(demo_root, model):
    train, test = task_split_pair(demo_root, "checker", 96)
    detector = create(model, model_extractor(LAYERS[model], batch_size=None), 96).fit(train, seed=0)
    idx = np.arange(len(test))
    maps, masks = detector.predict(test, idx).maps, test.load_masks(idx)
    assert maps.shape == masks.shape == (len(test), 96, 96)
    aligned = pixel_auc(maps, masks)
    assert aligned >= 0.95
    for moved in (masks.transpose(0, 2, 1), masks[:, ::-1]):  # transposed, flipped upside down
        assert moved.sum() == masks.sum()
        assert pixel_auc(maps, moved) <= aligned - 0.1

"""Pixel evaluation at the masks' native resolution (`pixel_eval="native"`): maps upsampled bilinearly to each
mask's own size and scored there, against today's default (masks resized to image_size²)."""

from __future__ import annotations

import h5py
import numpy as np
import torch
import torch.nn.functional as F
from sklearn.metrics import roc_auc_score

from bench.continual.runner import execute, prepare
from bench.image.track import update_pixel_metric
from bench.metrics import PixelRocAuc
from helpers import create, model_extractor, task_split_pair

LAYERS = ("layer1", "layer2", "layer3")


def test_native_scores_each_map_at_its_masks_own_size(demo_root):
    # the demo images are 96 px; evaluate a 48 px model at 96 px
    train, test = task_split_pair(demo_root, "checker", 48)
    detector = create("padim", model_extractor(LAYERS), 48).fit(train, seed=0)
    idx = np.arange(len(test))
    maps = detector.predict(test, idx).maps
    native = test.load_native_masks(idx)
    assert all(m.shape == (96, 96) for m in native) and any(m.any() for m in native)
    metric = PixelRocAuc()
    update_pixel_metric(metric, maps, native)
    assert metric.n_pixels == sum(m.size for m in native)  # the mask's own pixel count, not 48²
    assert metric.n_positive == sum(int(m.sum()) for m in native)
    # independent computation: torch's bilinear upsampling, scikit-learn's AUC
    up = F.interpolate(torch.from_numpy(maps)[:, None], size=(96, 96), mode="bilinear", align_corners=False)[:, 0]
    expected = roc_auc_score(np.stack(native).ravel(), up.numpy().ravel())
    assert abs(metric.compute() - expected) < 1e-6
    resized = PixelRocAuc()
    update_pixel_metric(resized, maps, test.load_masks(idx))
    assert resized.n_pixels == len(test) * 48 * 48
    assert metric.compute() >= 0.9 and abs(metric.compute() - resized.compute()) < 0.02


def test_native_and_resized_agree_when_masks_are_at_image_size(tiny_root, tmp_path, make_config):
    r, keys = {}, set()
    for mode in ("resized", "native"):
        run = prepare(make_config(tiny_root, ["chip", "checker"], model="padim", pixel_eval=mode), out_dir=tmp_path)
        keys.add(run.run_key)
        with h5py.File(execute(run, progress=False, log=lambda *_: None), "r", locking=False) as f:
            r[mode] = f["R/pixel"][()]
    assert len(keys) == 2  # part of the run key
    assert np.isfinite(np.diag(r["native"])).all()
    np.testing.assert_allclose(r["native"], r["resized"], atol=1e-6)

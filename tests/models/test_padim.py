"""PaDiM: the batched Gaussian fit and Mahalanobis distance equal a per-location loop; the detector learns each
synthetic task; the feature subset is seeded and shared by every task model; the CL variant keeps one Gaussian per
task and routes by the image score (InCLAD App. C.2) or the mean. The detector contract (pointwise scores, state,
a killed run resuming to the same R with the CL task banks): tests/models/test_contract.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bench.data import read_index
from bench.errors import ConfigError
from bench.metrics import roc_auc
from bench.models.base import route
from bench.models.padim import mahalanobis
from bench.tools.perf.models import padim_batched, padim_reference
from helpers import create, model_extractor, task_split_pair

@pytest.mark.parametrize("batch_size", [4, 64])
def test_batched_mahalanobis_equals_per_location_loop(batch_size):
    """Correlated features with unequal scales, so the covariance, not just the mean, decides the distances."""
    g = torch.Generator().manual_seed(0)
    mix = torch.randn(12, 7, 7, generator=g) * torch.linspace(0.1, 3, 7)  # per-location linear mixing
    train = torch.bmm(torch.randn(12, 40, 7, generator=g), mix) + 5  # [locations, images, features]
    test = torch.bmm(torch.randn(12, 9, 7, generator=g), mix) * 1.5 + 5
    expected = padim_reference(train.double().numpy(), test.double().numpy(), eps=0.01)
    ours = padim_batched(train, test, eps=0.01, batch_size=batch_size).numpy()
    np.testing.assert_allclose(ours, expected, rtol=1e-4)
    # a reference that ignored the covariance would not match: the test can fail
    assert not np.allclose(expected, np.linalg.norm(test.numpy() - train.numpy().mean(1, keepdims=True), axis=2).T,
                           rtol=0.1)


def test_detector_gaussians_equal_the_loop_on_real_embeddings(tiny_root):
    train, test = task_split_pair(tiny_root, "disc")
    model = create("padim", model_extractor(), 64).fit(train, seed=0)
    z_train = model.embed(model.extractor(train, np.arange(len(train)), keep=False))
    z_test = model.embed(model.extractor(test, np.arange(4)))
    some = slice(0, 256, 17)  # every 17th of the 16×16 locations keeps the loop short
    expected = padim_reference(z_train[some].double().numpy(), z_test[some].double().numpy(), eps=0.01)
    ours = mahalanobis(z_test, model.mean_, model.inv_cov_)[:, some].numpy()
    np.testing.assert_allclose(ours, expected, rtol=1e-3)


def test_learns_every_synthetic_task(tiny_root):
    aucs = {}
    extractor = model_extractor()
    for task in sorted(read_index("synthetic", tiny_root)["task"].unique()):
        train, test = task_split_pair(tiny_root, task)
        model = create("padim", extractor, 64).fit(train, seed=0)
        aucs[task] = roc_auc(test.labels, model.predict(test, np.arange(len(test))).scores)
    assert min(aucs.values()) >= 0.85, aucs


def test_feature_subset_is_seeded_and_kept_across_tasks(tiny_root):
    disc, chip = task_split_pair(tiny_root, "disc")[0], task_split_pair(tiny_root, "chip")[0]
    extractor = model_extractor()
    a = create("padim", extractor, 64).fit(disc, seed=3)
    feats = [torch.zeros(1, c, 2, 2) for c in (64, 128, 256)]
    same, other = create("padim", extractor, 64), create("padim", extractor, 64)
    same._select_features(feats, seed=3)
    other._select_features(feats, seed=4)
    assert torch.equal(a.feature_idx_, same.feature_idx_) and not torch.equal(a.feature_idx_, other.feature_idx_)
    assert len(a.feature_idx_) == 100 and len(set(a.feature_idx_.tolist())) == 100
    first = a.feature_idx_.clone()
    a.fit(chip, seed=99)  # NCL: refits the Gaussian on the new task, in the same feature space
    assert torch.equal(a.feature_idx_, first)
    assert a.mean_.shape == (16 * 16, 100) and a.inv_cov_.shape == (16 * 16, 100, 100)


def test_too_many_features_is_a_config_error(tiny_root):
    with pytest.raises(ConfigError, match="n_features=500 must be in 1..448"):
        create("padim", model_extractor(), 64, n_features=500).fit(task_split_pair(tiny_root, "disc")[0], seed=0)


@pytest.mark.parametrize("route_by", ["max", "mean"])
def test_cl_keeps_one_gaussian_per_task_and_routes_by_its_rule(tiny_root, route_by):
    """max (App. C.2, the default): the routed image score is the lowest any task model gives, and normal images
    go to their own task; mean: nearly every image, anomalous ones too, goes to its own task."""
    tasks = ["chip", "disc", "checker"]
    protocol = create("padim", model_extractor(), 64, route_by=route_by).continual(seed=0)
    splits = {t: task_split_pair(tiny_root, t) for t in tasks}
    for step, task in enumerate(tasks):
        protocol.learn(splits[task][0], step)
    assert len(protocol.models_) == 3
    per_model = 16 * 16 * (100 + 100 * 100) * 4  # mean + inverse covariance per location, float32
    assert protocol.state_bytes() == 3 * per_model
    for j, task in enumerate(tasks):
        test = splits[task][1]
        pred = protocol.predict(test, np.arange(len(test)))
        solo = []
        for mean, inv_cov in protocol.models_:  # each task's model alone, in the shared feature space
            alone = create("padim", protocol.detector.extractor, 64)
            alone.feature_idx_ = protocol.detector.feature_idx_
            alone.mean_, alone.inv_cov_ = mean, inv_cov
            solo.append(alone.predict(test, np.arange(len(test))).scores)
        solo = np.stack(solo)
        # score and map come from the chosen model
        np.testing.assert_allclose(pred.scores, solo[pred.routed, np.arange(len(test))], rtol=1e-5)
        normal = test.labels == 0
        if route_by == "max":
            np.testing.assert_allclose(pred.scores, solo.min(0), rtol=1e-5)
            assert (pred.routed[normal] == j).mean() >= 0.9, (task, pred.routed)
        else:
            assert (pred.routed == j).mean() >= 0.9, (task, pred.routed)
    both = protocol.predict(splits["disc"][1], np.arange(6))
    one = protocol.predict(splits["disc"][1], np.array([4]))
    np.testing.assert_allclose(one.scores[0], both.scores[4], rtol=1e-5)
    assert one.routed[0] == both.routed[4]


def _all_channels(padim, feats):
    padim.feature_idx_ = torch.arange(sum(f.shape[1] for f in feats))
    return padim


def test_layers_are_aligned_bilinearly_as_released_and_nearest_under_original():
    """`inclad`: layers 2 and 3 reach the layer-1 grid by F.interpolate(bilinear, align_corners=False), the
    released module's align_feature_maps (fork src/pyclad/models/padim/padim.py:56 → upstream pyCLAD 6c98b31
    models/vision/utilities/features.py:15); `original`: nearest, Defard et al.'s code."""
    g = torch.Generator().manual_seed(0)
    feats = [torch.randn(2, c, s, s, generator=g) for c, s in ((4, 8), (6, 4), (5, 2))]
    for kwargs, up in (({}, {"mode": "bilinear", "align_corners": False}), ({"align": "nearest"}, {"mode": "nearest"})):
        padim = _all_channels(create("padim", model_extractor(), 64, **kwargs), feats)
        expected = torch.cat([feats[0], *(torch.nn.functional.interpolate(f, size=(8, 8), **up) for f in feats[1:])], 1)
        torch.testing.assert_close(padim.embed(feats), expected.flatten(2).permute(2, 0, 1))


def test_image_score_is_the_raw_map_max_and_the_map_is_not_blurred():
    """`inclad`: image score = max of the Mahalanobis map at feature resolution (fork padim.py:137-140); the pixel
    map is that map upsampled bilinearly, never blurred (_resize_maps). `original`: both from the upsampled map
    blurred with σ = 4 (Defard et al.), whose max is lower than the raw one at an isolated peak."""
    patch = torch.rand(3, 8, 8, generator=torch.Generator().manual_seed(1))
    patch[0, 3, 4] = 9.0
    scores, maps = create("padim", model_extractor(), 32).finish(patch)
    np.testing.assert_array_equal(scores, patch.flatten(1).max(1).values.double().numpy())
    up = torch.nn.functional.interpolate(patch[:, None], size=(32, 32), mode="bilinear", align_corners=False)[:, 0]
    np.testing.assert_array_equal(maps, up.numpy())
    blurred, _ = create("padim", model_extractor(), 32, blur_sigma=4.0, image_score="map").finish(patch)
    assert blurred[0] < scores[0] - 1.0


def test_cl_routes_by_the_raw_map_max_as_released():
    """padim_cl.py:129-133: each image goes to the task whose raw map has the lowest max. A task with one high
    isolated patch loses to a flat task under the raw max, and wins once the map is upsampled and blurred."""
    spiky = torch.zeros(1, 8, 8)
    spiky[0, 4, 4] = 10.0
    flat = torch.full((1, 8, 8), 6.0)
    per_task = torch.stack([spiky, flat])
    assert route(per_task, "max", None)[1].tolist() == [1]
    assert route(per_task, "max", 32, 4.0)[1].tolist() == [0]

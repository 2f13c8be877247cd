"""STFPM: loss and map equal plain references; only the student trains, the teacher's features come from the
run's cache (each training image through the teacher once, however many epochs)."""

from __future__ import annotations

import numpy as np
import torch

from bench.models.stfpm import feature_distances, layer_grid_prediction, product_map, pyramid_loss
from helpers import create, model_extractor, task_split_pair


def test_loss_and_map_equal_references():
    g = torch.Generator().manual_seed(0)
    t = [torch.randn(2, 3, 4, 4, generator=g), torch.randn(2, 5, 2, 2, generator=g)]
    s = [torch.randn(2, 3, 4, 4, generator=g), torch.randn(2, 5, 2, 2, generator=g)]
    ref = []
    for a, b in zip(t, s):
        d = torch.zeros(a.shape[0], *a.shape[2:])
        for i in range(a.shape[2]):
            for j in range(a.shape[3]):
                va, vb = a[:, :, i, j], b[:, :, i, j]
                d[:, i, j] = ((va / va.norm(dim=1, keepdim=True) - vb / vb.norm(dim=1, keepdim=True)) ** 2).sum(1)
        ref.append(d)
    dist = feature_distances(t, s)
    torch.testing.assert_close(pyramid_loss(dist), sum(d.mean((1, 2)) for d in ref).mean(), rtol=1e-5, atol=1e-6)
    up = [torch.nn.functional.interpolate(0.5 * d[:, None], size=(8, 8), mode="bilinear")[:, 0] for d in ref]
    torch.testing.assert_close(product_map(dist, 8), up[0] * up[1], rtol=1e-5, atol=1e-6)


def test_only_the_student_trains_on_cached_teacher_features(tiny_root):
    train, _ = task_split_pair(tiny_root, "disc")
    det = create("stfpm", model_extractor(), 64, epochs=2, batch_size=8)
    teacher = {k: v.clone() for k, v in det.extractor.model.state_dict().items()}
    det.fit(train, seed=0)
    assert det.extractor.forward_images == len(train)
    for k, v in det.extractor.model.state_dict().items():
        torch.testing.assert_close(v, teacher[k], rtol=0, atol=0)
    start = create("stfpm", model_extractor(), 64, epochs=2, batch_size=8)
    start.build(0)
    moved = [not torch.equal(a, b) for a, b in zip(start.student_.parameters(), det.student_.parameters())]
    assert np.mean(moved) > 0.9


def test_inclad_multiplies_on_the_first_layers_grid_and_scores_there():
    """InCLAD's released STFPM (routing-cad-icdm `src/pyclad/models/stfpm/stfpm.py`, `_batch_score_maps`):
    each layer's distance upsampled (bilinear) to `teacher_features[0]`'s grid, multiplied there; `score_data`
    takes the image score from that unresized map; `score_maps` resizes it (bilinear) to the input. `original`
    (Wang et al.'s code) multiplies at the input size."""
    from bench.registry import get

    assert get("stfpm").resolve()["product_at"] == "layer"
    assert get("stfpm").resolve(preset="original")["product_at"] == "input"
    g = torch.Generator().manual_seed(0)
    dist = [torch.rand(2, 4, 4, generator=g), torch.rand(2, 2, 2, generator=g)]
    second = torch.nn.functional.interpolate(dist[1][:, None], size=(4, 4), mode="bilinear")[:, 0]
    grid = 0.5 * dist[0] * 0.5 * second
    pred = layer_grid_prediction(dist, 8)
    np.testing.assert_allclose(pred.scores, grid.flatten(1).max(1).values.numpy(), rtol=1e-6)
    up = torch.nn.functional.interpolate(grid[:, None], size=(8, 8), mode="bilinear")[:, 0]
    torch.testing.assert_close(torch.from_numpy(pred.maps), up)
    assert not np.allclose(pred.scores, product_map(dist, 8).flatten(1).max(1).values.numpy())

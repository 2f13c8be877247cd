"""PatchCore and its ops: vectorised pieces equal plain references; the detector learns each synthetic task; the CL
adaptation follows InCLAD App. C.1 (budgets, weighted compression, routing). The detector contract (pointwise
scores, state, resume): tests/models/test_contract.py."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.ndimage import gaussian_filter

from bench.data import read_index
from bench.metrics import roc_auc
from bench.models.ops.blur import gaussian_blur
from bench.models.ops.coreset import greedy_coreset
from bench.models.ops.knn import nn_distance

from bench.models.base import local_patch_features
from bench.models.patchcore import released_patch_features
from helpers import create, model_extractor, task_split_pair


def reference_greedy(x, k, starts=None, weights=None):
    """Textbook greedy k-center with explicit pairwise distances (the slow way)."""
    d = torch.cdist(x.double(), x.double())
    if weights is None:
        min_d = d[:, starts].mean(1)
    else:
        min_d = torch.full((x.shape[0],), math.inf, dtype=torch.float64)
    chosen = []
    for _ in range(k):
        if weights is None:
            score = min_d
        else:  # S empty: min over S is +inf for every z, so the first pick is argmax w(z)
            score = weights.double() * min_d if chosen else weights.double()
        j = int(torch.argmax(score))
        chosen.append(j)
        min_d = torch.minimum(min_d, d[:, j])
    return chosen


# (block, candidates): the defaults (all points are candidates at this size), and small ones that make the
# blocked selection refresh early (a non-candidate overtakes) and late (block full)
BLOCKING = [(128, 2048), (8, 16), (3, 5), (1, 1)]


@pytest.mark.parametrize("block,candidates", BLOCKING)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_greedy_coreset_equals_reference(seed, block, candidates):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(300, 16, generator=g)
    gen = torch.Generator().manual_seed(seed)
    starts = torch.randperm(300, generator=torch.Generator().manual_seed(seed))[:10]
    ours = greedy_coreset(x, 40, generator=gen, n_starts=10, block=block, candidates=candidates)
    assert ours.tolist() == reference_greedy(x, 40, starts=starts)


@pytest.mark.parametrize("block,candidates", BLOCKING)
def test_weighted_coreset_equals_reference(block, candidates):
    g = torch.Generator().manual_seed(3)
    x, w = torch.randn(200, 8, generator=g), torch.rand(200, generator=g) + 0.1
    ours = greedy_coreset(x, 25, weights=w, block=block, candidates=candidates)
    assert ours.tolist() == reference_greedy(x, 25, weights=w)


def test_blocked_coreset_equals_reference_on_clustered_points():
    """Clusters: each pick collapses the scores of its cluster's candidates, so refreshes come early. (Much
    tighter clusters than these reach float32 ties, where the reference, in float64, may break them otherwise.)"""
    g = torch.Generator().manual_seed(5)
    centres = torch.randn(30, 12, generator=g) * 3
    x = centres[torch.randint(30, (600,), generator=g)] + torch.randn(600, 12, generator=g) * 0.3
    starts = torch.randperm(600, generator=torch.Generator().manual_seed(0))[:10]
    ours = greedy_coreset(x, 60, generator=torch.Generator().manual_seed(0), block=16, candidates=32)
    assert ours.tolist() == reference_greedy(x, 60, starts=starts)


def test_coreset_returns_all_rows_when_k_exceeds_n():
    x = torch.randn(5, 3)
    assert greedy_coreset(x, 9, generator=torch.Generator().manual_seed(0)).tolist() == [0, 1, 2, 3, 4]


def test_nn_distance_equals_cdist():
    g = torch.Generator().manual_seed(0)
    q, bank = torch.randn(1000, 32, generator=g), torch.randn(300, 32, generator=g)
    expected = torch.cdist(q.double(), bank.double()).min(1).values.float()
    torch.testing.assert_close(nn_distance(q, bank, chunk=128), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape,sigma", [((2, 64, 64), 4.0), ((2, 7, 5), 4.0), ((1, 20, 33), 1.3), ((1, 1, 9), 2.6)])
def test_blur_equals_scipy_gaussian_filter_with_its_defaults(shape, sigma):
    """The map blur of PatchCore (InCLAD's released copy: routing-cad-icdm `src/pyclad/models/patchcore/
    patchcore.py:103`, `ndimage.gaussian_filter(score, sigma=self.smoothing)`), PaDiM, RD4AD and CFA's `original`
    is scipy's filter with its defaults: mode "reflect" repeats the edge pixel, keeps reflecting over maps narrower
    than the kernel (7 × 5 against a 33-tap kernel), and the radius is ⌊4σ + ½⌋ (σ = 1.3: 5, not ⌈5.2⌉)."""
    maps = torch.rand(*shape, generator=torch.Generator().manual_seed(0))
    ours = gaussian_blur(maps, sigma).numpy()
    for m, o in zip(maps.numpy(), ours):
        np.testing.assert_allclose(o, gaussian_filter(m, sigma=sigma), atol=1e-6)
    assert np.abs(ours[0] - gaussian_filter(maps[0].numpy(), sigma=sigma, mode="mirror")).max() > 1e-4


def _fit(root, task, size, seed=0):
    train, test = task_split_pair(root, task, size)
    extractor = model_extractor(("layer2", "layer3"), batch_size=None)
    return create("patchcore", extractor, size).fit(train, seed), train, test


def test_learns_every_synthetic_task(demo_root):
    aucs = {}
    for task in sorted(read_index("synthetic", demo_root)["task"].unique()):
        model, _, test = _fit(demo_root, task, 96)
        aucs[task] = roc_auc(test.labels, model.predict(test, np.arange(len(test))).scores)
    assert min(aucs.values()) >= 0.9, aucs


def test_cl_banks_follow_the_budget_and_route_to_their_task(tiny_root):
    tasks = ["disc", "stripes", "checker"]
    extractor = model_extractor(("layer2", "layer3"), batch_size=None)
    protocol = create("patchcore", extractor, 64).continual(seed=0)
    splits = {t: task_split_pair(tiny_root, t, 64) for t in tasks}
    for step, task in enumerate(tasks):
        protocol.learn(splits[task][0], step)
    native = protocol.banks_[-1].shape[0]
    assert native == int(16 * 8 * 8 * 0.1)  # 16 train images × 8×8 patches × ratio 0.1
    b_t = max(1, math.floor(0.25 * native / 2))  # ρ|C_t| / (t−1) with t = 3
    assert [b.shape[0] for b in protocol.banks_[:-1]] == [b_t, b_t]
    for j, task in enumerate(tasks):
        test = splits[task][1]
        pred = protocol.predict(test, np.arange(len(test)))
        assert (pred.routed == j).mean() >= 0.9, (task, pred.routed)
    # pointwise with routing too
    test = splits["stripes"][1]
    both = protocol.predict(test, np.arange(4))
    alone = protocol.predict(test, np.array([2]))
    np.testing.assert_allclose(alone.scores[0], both.scores[2], rtol=1e-5)
    assert alone.routed[0] == both.routed[2]


def test_weighted_compression_keeps_patches_far_from_the_current_task():
    """App. C.1: with equal spread, the compressed bank favours patches far from the current task."""
    g = torch.Generator().manual_seed(0)
    near = torch.randn(100, 4, generator=g) * 0.1
    far = torch.randn(100, 4, generator=g) * 0.1 + 5.0
    bank, current = torch.cat([near, far]), torch.randn(50, 4, generator=g) * 0.1
    chosen = greedy_coreset(bank, 20, weights=nn_distance(bank, current))
    assert (chosen >= 100).float().mean() > 0.5


def released_reference(feats, dim):
    """Roth et al.'s embedding step by step, the slow way: unfold each layer into 3×3 patches, resize the later
    layers' patch grids to the first layer's, flatten each patch, pool it to `dim` values with a 1-D adaptive
    average pool, stack the layers and pool their concatenation to `dim` again."""
    size = feats[0].shape[-2:]
    per_layer = []
    for f in feats:
        b, c, h, w = f.shape
        patches = torch.nn.functional.unfold(f, 3, padding=1).view(b, c, 3, 3, h, w)
        if (h, w) != tuple(size):
            patches = torch.nn.functional.interpolate(patches.reshape(b, c * 9, h, w), size=size, mode="bilinear",
                                                      align_corners=False).view(b, c, 3, 3, *size)
        flat = patches.permute(0, 4, 5, 1, 2, 3).reshape(-1, 1, c * 9)  # one row per location, channel-major
        per_layer.append(torch.nn.functional.adaptive_avg_pool1d(flat, dim)[:, 0])
    stacked = torch.stack(per_layer, 1).reshape(-1, 1, len(feats) * dim)
    out = torch.nn.functional.adaptive_avg_pool1d(stacked, dim)[:, 0]
    return out.view(feats[0].shape[0], *size, dim).permute(0, 3, 1, 2)


# resnet18's and wide_resnet50_2's layers 2+3 at 1024; windows that shrink (C·9 > dim), grow (C·9 < dim) and do
# not divide evenly; pooling groups that span several channels (7·9 → 40) and that cut channels apart (100·9 → 30:
# the unfolding path); final windows that cross layers (dim not divisible by the number of layers: 41, and three
# layers at 1024)
@pytest.mark.parametrize("channels,dim", [((128, 256), 1024), ((512, 1024), 1024), ((16, 24), 32), ((5, 7), 40),
                                          ((100, 10), 30), ((5, 7), 41), ((8, 16, 32), 1024)])
def test_released_embedding_equals_the_step_by_step_reference(channels, dim):
    g = torch.Generator().manual_seed(0)
    feats = [torch.randn(3, c, 8 >> i, 8 >> i, generator=g) for i, c in enumerate(channels)]
    ours = released_patch_features(feats, dim)
    assert ours.shape == (3, dim, 8, 8)
    torch.testing.assert_close(ours, released_reference(feats, dim), rtol=1e-5, atol=1e-5)
    # the concat option (anomalib's embedding) keeps one value per channel
    assert local_patch_features(feats).shape[1] == sum(channels)


@pytest.mark.parametrize("embedding,dim", [("released", 1024), ("concat", 128 + 256)])
def test_both_embeddings_learn_a_task(demo_root, embedding, dim):
    train, test = task_split_pair(demo_root, "stripes", 96)
    extractor = model_extractor(("layer2", "layer3"), batch_size=None)
    model = create("patchcore", extractor, 96, embedding=embedding).fit(train, seed=0)
    assert model.memory_bank_.shape[1] == dim
    assert roc_auc(test.labels, model.predict(test, np.arange(len(test))).scores) >= 0.9

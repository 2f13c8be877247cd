"""PatchCore-CL's compression under `inclad` is InCLAD's released sampler (fork LukaszMarcjan/routing-cad-icdm
src/pyclad/models/patchcore/patchcore.py, ApproximateGreedyCoresetSampler.run_weighted :196-222 and its loop
:152-185, called from patchcore_cl.py:96-105); `original` keeps App. C.1's formula as written. The expected picks
are a plain transcription of the released loop, fed the same random draws (which may be the suite's own)."""

from __future__ import annotations

import numpy as np
import torch

from bench.models.ops.coreset import greedy_coreset, random_projection
from helpers import create, model_extractor


def released_loop(features: np.ndarray, weights: np.ndarray, starts, k: int) -> list[int]:
    """_compute_greedy_coreset_indices, line by line: the running distance starts as the mean distance to the
    starting points (:160-161); each step scores distance × weight, takes the argmax (:168-171) and folds the pick's
    distances in with a min."""
    f = features.astype(np.float64)

    def dist(b):
        return np.sqrt(np.clip(((f[:, None, :] - b[None, :, :]) ** 2).sum(-1), 0, None))

    anchor = dist(f[starts]).mean(-1)
    picks = []
    for _ in range(k):
        j = int(np.argmax(anchor * weights))
        picks.append(j)
        anchor = np.minimum(anchor, dist(f[j : j + 1])[:, 0])
    return picks


def test_weighted_greedy_from_random_starts_is_the_released_loop():
    """greedy_coreset with a generator and weights: d started at the mean distance to n_starts random rows
    (fork patchcore.py:157-161), then argmax w·d (:168-171)."""
    g = torch.Generator().manual_seed(5)
    x, w = torch.randn(60, 6, generator=g), torch.rand(60, generator=g) + 0.2
    starts = torch.randperm(60, generator=torch.Generator().manual_seed(9))[:10].numpy()
    ours = greedy_coreset(x, 12, generator=torch.Generator().manual_seed(9), n_starts=10, weights=w)
    assert ours.tolist() == released_loop(x.numpy(), w.double().numpy(), starts, 12)


def test_compression_is_the_released_sampler_and_differs_from_the_exact_rule():
    """PatchCore.compress under `inclad` on a tiny bank: weights = NN distance to the current bank
    (patchcore_cl.py compute_nn_weights), divided by their mean (patchcore.py:216-218), the bank projected to
    projection_dim (:220, :126-133), int(n · (b_t / n)) picks (patchcore_cl.py:97 → patchcore.py:164: 14 for
    (22, 15), I19). The `original` preset's exact rule (first pick argmax w, the full embedding, b_t picks) picks
    other patches here."""
    g = torch.Generator().manual_seed(1)
    bank, current = torch.randn(22, 160, generator=g), torch.randn(30, 160, generator=g) + 0.3
    inclad = create("patchcore", model_extractor(("layer2", "layer3")), 64)
    original = create("patchcore", model_extractor(("layer2", "layer3")), 64, compression="exact",
                      projection="gaussian")
    seed = 1234
    kept = inclad.compress(bank, 15, current, seed)

    w = torch.cdist(bank.double(), current.double()).min(1).values.numpy()
    w = w / w.mean()
    gen = torch.Generator().manual_seed(seed)  # the suite's draws: the projection, then the starting points
    projected = random_projection(bank, 128, gen, "uniform").numpy()
    starts = torch.randperm(22, generator=gen)[:10].numpy()
    picks = released_loop(projected, w, starts, int(22 * (15 / 22)))
    assert len(picks) == 14 and kept.shape == (14, 160)
    torch.testing.assert_close(kept, bank[picks])

    exact = original.compress(bank, 15, current, seed)
    assert exact.shape == (15, 160)
    assert {tuple(r) for r in exact[:14].tolist()} != {tuple(r) for r in kept.tolist()}


def test_uniform_projection_has_the_distribution_of_an_nn_linear():
    """The released sampler projects with a bias-free torch.nn.Linear (fork patchcore.py:126-133), whose default
    initialisation (kaiming_uniform_, a=√5) draws U(−1/√d, 1/√d) for d inputs; `projection="uniform"` draws the
    same distribution from the suite's seeded stream (`original`: Gaussian, N(0, 1/dim))."""
    d = 1024
    eye = torch.eye(d)
    ours = random_projection(eye, 128, torch.Generator().manual_seed(0), "uniform")  # the matrix itself
    linear = torch.nn.Linear(d, 128, bias=False).weight.detach().T
    for m in (ours, linear):
        assert float(m.abs().max()) <= d**-0.5 and float(m.abs().max()) > 0.99 * d**-0.5
        assert abs(float(m.std()) - d**-0.5 / 3**0.5) < 0.01 * d**-0.5  # std of U(−b, b) = b/√3
    gaussian = random_projection(eye, 128, torch.Generator().manual_seed(0), "gaussian")
    assert float(gaussian.abs().max()) > 4 / 128  # unbounded tails: not the released distribution

"""PatchCore, PaDiM, CFA and FastFlow compute what InCLAD's released classes compute: what tools/released/
{patchcore,padim,cfa,fastflow}.py established by running both side by side (docs/models.md, "Side by side with the
released classes"), pinned offline. Each test restates the released operation it pins in a few lines of torch /
numpy (the released code is never imported) and names its file and line in routing-cad-icdm (the fork that holds
these detectors; InCLAD-benchmark's indexed files do not).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from bench import registry
from bench.models.cfa import CoordConv, patch_scores, soft_boundary_loss
from bench.models.fastflow import GLOBAL_SCALE_INIT, Flow
from bench.models.padim import GaussianMoments
from bench.models.patchcore import released_patch_features


def _released_patchcore_embedding(feats: list[torch.Tensor], dim: int) -> torch.Tensor:
    """routing-cad-icdm `src/pyclad/models/patchcore/patchcore.py`: PatchMaker.patchify (56-72: 3×3 unfold,
    padding 1), PatchCore._align_feature_maps (bilinear upsampling of the unfolded patches to the first grid),
    FeaturePreprocessor / MeanMapper (18-37: each layer's patch pooled to `dim`), FeatureAggregator (40-48: the
    layers' concatenation pooled to `dim`). Returns [B·h·w, dim]."""
    h, w = feats[0].shape[-2:]
    per_layer = []
    for f in feats:
        b, c, fh, fw = f.shape
        unfolded = F.unfold(f, kernel_size=3, padding=1).reshape(b, c, 3, 3, fh, fw)
        if (fh, fw) != (h, w):
            flat = unfolded.reshape(-1, 1, fh, fw)
            unfolded = F.interpolate(flat, size=(h, w), mode="bilinear", align_corners=False).reshape(b, c, 3, 3, h, w)
        patches = unfolded.permute(0, 4, 5, 1, 2, 3).reshape(b * h * w, 1, -1)
        per_layer.append(F.adaptive_avg_pool1d(patches, dim).squeeze(1))
    stacked = torch.stack(per_layer, dim=1).reshape(b * h * w, 1, -1)
    return F.adaptive_avg_pool1d(stacked, dim).reshape(b * h * w, -1)


@pytest.mark.parametrize("channels", [(128, 256), (16, 40)])
def test_patchcore_embedding_equals_the_released_unfold_pool_align(channels):
    """The suite's `released` embedding equals the released PatchMaker → _align_feature_maps → MeanMapper →
    FeatureAggregator chain (routing-cad-icdm `src/pyclad/models/patchcore/patchcore.py:18-72` and
    PatchCore._embed): the side-by-side run measured 1.8e-7 on resnet18 features at 64 px."""
    gen = torch.Generator().manual_seed(0)
    feats = [torch.randn(2, channels[0], 8, 8, generator=gen), torch.randn(2, channels[1], 4, 4, generator=gen)]
    ours = released_patch_features(feats, 1024)
    ours = ours.permute(0, 2, 3, 1).reshape(-1, 1024)
    theirs = _released_patchcore_embedding(feats, 1024)
    assert torch.allclose(ours, theirs, atol=1e-5, rtol=1e-4), float((ours - theirs).abs().max())


def test_padim_gaussians_equal_the_released_estimate():
    """routing-cad-icdm `src/pyclad/models/padim/padim.py:84-107` (_estimate_gaussians): per location the
    covariance over n − 1, plus covariance_regularization · I, inverted (pinv); the means in float32."""
    gen = torch.Generator().manual_seed(1)
    z = torch.randn(4, 7, 5, generator=gen) * 3 + 10  # [L, B, d]: an offset the shifted sums must not lose
    eps = 0.01
    acc = GaussianMoments()
    acc.update(z[:, :3])
    acc.update(z[:, 3:])
    mean, inv = acc.gaussians(eps)
    patches = z.double().numpy()
    for loc in range(z.shape[0]):
        centred = patches[loc] - patches[loc].mean(0)
        cov = centred.T @ centred / (z.shape[1] - 1) + eps * np.eye(z.shape[2])
        assert np.allclose(mean[loc].numpy(), patches[loc].mean(0), atol=1e-5)
        assert np.allclose(inv[loc].numpy(), np.linalg.pinv(cov), rtol=1e-4, atol=1e-5)


def test_padim_inclad_scores_the_raw_map():
    """routing-cad-icdm `src/pyclad/models/padim/padim.py:129-140`: the map is the Mahalanobis grid resized
    bilinearly with no blur, the image score its max (score_mode "max"): `inclad` blurs nothing and scores raw."""
    hp = registry.get("padim").resolve({}, preset="inclad")
    assert hp["blur_sigma"] == 0.0
    assert hp["image_score"] == "raw"
    assert hp["align"] == "bilinear"


def test_cfa_coordconv_equals_the_released_one_with_its_coordinate_columns_swapped():
    """routing-cad-icdm `src/pyclad/models/cfa/standard/coordconv.py:17-22`: AddCoords appends (y, x) — y varying
    along the height — where the suite's CoordConv appends (x, y); with the last two weight columns swapped the
    two layers are the same function (tools/released/cfa.py copies weights so)."""
    torch.manual_seed(2)
    ours = CoordConv(6, 4)
    x = torch.randn(2, 6, 3, 5)
    b, _, h, w = x.shape
    yy = torch.linspace(-1.0, 1.0, steps=h).view(1, 1, h, 1).expand(b, -1, -1, w)
    xx = torch.linspace(-1.0, 1.0, steps=w).view(1, 1, 1, w).expand(b, -1, h, -1)
    weight = ours.conv.weight.detach().clone()
    weight[:, -2:] = weight[:, [-1, -2]]
    theirs = F.conv2d(torch.cat((x, yy, xx), dim=1), weight, ours.conv.bias.detach())
    assert torch.allclose(ours(x), theirs, atol=1e-6)


def _released_cfa_loss(phi, bank, radius, k, j, nu=1e-3, alpha=0.1):
    """routing-cad-icdm `src/pyclad/models/cfa/architecture.py:150-176` (_squared_distances, soft_boundary_loss);
    bank as the released [C, M]."""
    d = (phi**2).sum(2, keepdim=True) + (bank**2).sum(0, keepdim=True) - 2.0 * phi @ bank
    nearest = d.clamp(min=1e-12).topk(min(d.shape[-1], k + j), largest=False).values
    attraction = nearest[:, :, :k] - radius.square()
    repulsion = radius.square() - nearest[:, :, j:]
    return (1.0 / nu) * torch.relu(attraction).mean() + (1.0 / nu) * torch.relu(repulsion - alpha).mean()


def test_cfa_loss_and_scores_equal_the_released_ones():
    """The soft-boundary loss (routing-cad-icdm `src/pyclad/models/cfa/architecture.py:159-176`, K = J = 3 so
    its repulsion slice `[J:]` is the suite's `[K:]`) and the patch score (:222-226, the nearest distance times
    its softmin weight among the K nearest) on the same descriptors and bank."""
    gen = torch.Generator().manual_seed(3)
    phi, bank = torch.randn(2, 12, 8, generator=gen), torch.randn(16, 8, generator=gen)
    radius = torch.tensor([0.5])
    ours = soft_boundary_loss(phi, bank, radius, 3, 3)
    assert torch.allclose(ours, _released_cfa_loss(phi, bank.T, radius, 3, 3), rtol=1e-5)
    dist = torch.cdist(phi, bank[None].expand(2, -1, -1)).topk(3, largest=False).values
    assert torch.allclose(patch_scores(phi, bank, 3), F.softmin(dist, -1)[..., 0] * dist[..., 0], atol=1e-5)


def _released_fastflow_step(step, x, permutation):
    """routing-cad-icdm `src/pyclad/models/fastflow/standard/flow.py:59-83` (FastFlowStep): couple, scale by
    0.1·softplus_0.5(ã) and shift, then permute; its weights are the suite step's."""
    keep = step.keep
    x1, x2 = x[:, :keep], x[:, keep:]
    a = step.subnet(x1) * 0.1
    half = a.shape[1] // 2
    log_scale = step.clamp * torch.tanh(a[:, :half])
    out = torch.cat((x1, x2 * torch.exp(log_scale) + a[:, half:]), dim=1)
    g = 0.1 * F.softplus(step.global_scale, beta=0.5)
    out = (out * g + step.global_offset)[:, permutation]
    return out, log_scale.sum((1, 2, 3)) + out.shape[-2] * out.shape[-1] * torch.log(g).sum()


def test_fastflow_flow_equals_the_released_one_with_its_permutations_moved():
    """A released step couples, scales, then permutes (flow.py:70-83); a suite step permutes first. Fed the input
    permuted by the suite's first permutation, with step i permuting by the suite's step i + 1 permutation (the
    last by none), the released chain gives the suite's z and log|det J| (tools/released/fastflow.py)."""
    gen = torch.Generator().manual_seed(4)
    torch.manual_seed(4)
    flow = Flow(6, 4, 1.0, 2.0, gen, global_affine=True)
    with torch.no_grad():
        for step in flow.steps:  # move the global affine off its start so it is exercised
            step.global_scale.add_(0.3 * torch.randn_like(step.global_scale))
            step.global_offset.add_(0.2 * torch.randn_like(step.global_offset))
        x = torch.randn(2, 6, 3, 3)
        z, log_det = flow(x)
        hidden, total = x[:, flow.steps[0].perm], torch.zeros(2)
        following = [s.perm for s in flow.steps[1:]] + [torch.arange(6)]
        for step, perm in zip(flow.steps, following):
            hidden, ld = _released_fastflow_step(step, hidden, perm)
            total = total + ld
    assert torch.allclose(z, hidden, atol=1e-5)
    assert torch.allclose(log_det, total, atol=1e-4)


def test_fastflow_global_scale_starts_at_one():
    """routing-cad-icdm `src/pyclad/models/fastflow/standard/flow.py:10-11, 49-51, 59-60`: ã starts at
    2·log(e⁵ − 1), so a = 0.1·softplus_0.5(ã) = 1."""
    assert GLOBAL_SCALE_INIT == pytest.approx(2.0 * math.log(math.exp(5.0) - 1.0), rel=1e-12)
    a = 0.1 * F.softplus(torch.tensor(GLOBAL_SCALE_INIT, dtype=torch.float64), beta=0.5)
    assert float(a) == pytest.approx(1.0, abs=1e-12)


def test_fastflow_subnets_alternate_three_and_one():
    """routing-cad-icdm `src/pyclad/models/fastflow/standard/flow.py:98-99`: kernel 3 on even steps, 1 on odd
    (conv3x3_only False), hidden channels = int(in · hidden_ratio) (:17)."""
    flow = Flow(7, 4, 1.0, 2.0, torch.Generator().manual_seed(0), global_affine=True)
    kernels = [step.subnet[0].kernel_size[0] for step in flow.steps]
    assert kernels == [3, 1, 3, 1]
    first = flow.steps[0].subnet[0]
    assert isinstance(first, nn.Conv2d) and first.in_channels == 4 and first.out_channels == 4


class _BankSizes:
    """A stand-in PatchCore for PatchCoreTaskBanks: task t's native coreset has `sizes[t]` patches; compress
    keeps the first b_t rows and records b_t."""

    def __init__(self, sizes: list[int], previous_ratio: float):
        self.sizes, self.previous_ratio, self.targets = sizes, previous_ratio, []

    def native_coreset(self, split, seed: int) -> torch.Tensor:
        return torch.zeros(self.sizes[split], 2)

    def compress(self, bank: torch.Tensor, b_t: int, current: torch.Tensor, seed: int) -> torch.Tensor:
        self.targets.append(b_t)
        return bank[:b_t]


@pytest.mark.parametrize("ratio", [0.25, 0.1, 1.0])
@pytest.mark.parametrize("sizes", [[102, 102, 102, 102], [37, 5, 411, 9, 250], [1, 1, 1]])
def test_patchcore_cl_previous_banks_shrink_to_the_released_budget(sizes, ratio):
    """routing-cad-icdm `src/pyclad/strategies/vision/patchcore_cl.py` (PatchCoreCLStrategy.learn): every
    previous bank larger than max(1, max(1, int(ρ·|C_t|)) // (t − 1)) is shrunk to that size, the current task's
    bank kept whole (the side-by-side run: 102; 25, 102; 12, 12, 102 at ρ 0.25)."""
    from bench.models.patchcore import PatchCoreTaskBanks

    det = _BankSizes(sizes, ratio)
    protocol = PatchCoreTaskBanks(det, seed=0)
    released: list[int] = []
    for t, n in enumerate(sizes):
        protocol.learn(t, t)
        if t:
            budget = max(1, max(1, int(ratio * n)) // t)
            kept = [min(len(b), budget) for b in expected]
            released = [budget for b in expected if len(b) > budget]
            expected = [torch.zeros(k, 2) for k in kept] + [torch.zeros(n, 2)]
        else:
            expected = [torch.zeros(n, 2)]
        assert [len(b) for b in protocol.banks_] == [len(b) for b in expected]
        assert det.targets[len(det.targets) - len(released):] == released


def _released_adaptive_balanced(sizes: list[int], max_size: int, rng) -> list[list[list[int]]]:
    """Upstream pyCLAD v0.3.0 `src/pyclad/strategies/replay/buffers/adaptive_balanced.py:16-21`
    (AdaptiveBalancedReplayBuffer.update, the buffer InCLAD's fork builds for replay and CFA-CL) with
    `selection/random.py:10-11` (RandomSelection.select: random.sample of min(size, len) items): after each task the
    new task's items are appended and every task's buffer is re-drawn to ⌊max_size / tasks⌋. Returns each task's
    kept items after every update."""
    buffers, history = [], []
    for task, n in enumerate(sizes):
        buffers.append([(task, i) for i in range(n)])
        per_task = math.floor(max_size / len(buffers))
        buffers = [[b[i] for i in rng.sample(range(len(b)), min(per_task, len(b)))] for b in buffers]
        history.append([list(b) for b in buffers])
    return history


@pytest.mark.parametrize("capacity", [3, 48, 7])
@pytest.mark.parametrize("sizes", [[16, 16, 16], [60, 200, 391, 10], [1, 5, 2, 40]])
def test_replay_floor_shares_equal_pyclad_adaptive_balanced_buffer(sizes, capacity):
    """What every replay run of tools/released/ showed (buffers after chip, disc, grain at capacity 3:
    chip 3; chip 1, disc 1; chip 1, disc 1, grain 1 on both sides): the suite's `replay_share=floor` buffer keeps
    as many items per task as pyCLAD v0.3.0's AdaptiveBalancedReplayBuffer after every task, and, as the released
    re-draw of a task's kept items, only ever drops items of a task (each kept set within the previous one)."""
    import random

    from bench.training.replay import ReplayBuffer

    released = _released_adaptive_balanced(sizes, capacity, random.Random(0))
    buffer, before = ReplayBuffer(capacity, "floor"), {}
    for step, n in enumerate(sizes):
        buffer.add(f"t{step}", [(step, i) for i in range(n)], seed=step)
        assert [len(v) for v in buffer.items_.values()] == [len(b) for b in released[step]]
        for task, kept in buffer.items_.items():
            assert set(kept) <= set(before.get(task, kept))
        before = {task: list(kept) for task, kept in buffer.items_.items()}


class _Split:
    """The little of a TaskSplit that CfaTaskBanks.learn reads: its task, dataset, root and length."""

    def __init__(self, task: str, n: int):
        self.task, self.n, self.dataset, self.root = task, n, "d", "r"

    def __len__(self) -> int:
        return self.n


class _CfaCalls:
    """A CFA stand-in that records, as task-name counts, the samples CfaTaskBanks builds banks on and trains on."""

    replay_size, replay_share = 6, "floor"

    def __init__(self):
        self.calls: list[tuple[str, dict]] = []

    def cache(self, split) -> list:
        return [(split, i) for i in range(len(split))]

    def init_descriptor(self, samples, seed: int) -> None:
        pass

    def bank(self, samples) -> torch.Tensor:
        self.calls.append(("bank", _task_counts(samples)))
        return torch.zeros(1)

    def train(self, samples, bank, seed: int) -> None:
        self.calls.append(("train", _task_counts(samples)))

    def extractor(self, split, idx) -> list[torch.Tensor]:
        return [torch.zeros(1)]


def _task_counts(samples) -> list[tuple[str, int]]:
    """(task, count) per run of consecutive samples of one task, in order: the order the bank's batches see."""
    runs: list[list] = []
    for split, _ in samples:
        if runs and runs[-1][0] == split.task:
            runs[-1][1] += 1
        else:
            runs.append([split.task, 1])
    return [tuple(run) for run in runs]


@pytest.mark.parametrize("sizes", [[16, 16, 16], [10, 1, 25, 7]])
def test_cfa_cl_banks_and_training_set_follow_the_released_strategy(sizes):
    """routing-cad-icdm `src/pyclad/strategies/vision/cfa_cl.py:50-80` (CFACLStrategy.learn), the order the
    side-by-side run (tools/released/cfa.py) compared cell by cell: per task, the training bank and the descriptor's
    training both on buffer ∪ task (each earlier task contributing min(its size, ⌊6 / tasks so far⌋) images: the
    AdaptiveBalancedReplayBuffer of upstream pyCLAD v0.3.0, updated only after the task), then one inference bank
    per task seen, from that task's whole training split, in stream order. The buffer comes first, as the released
    `np.concatenate([replay_data, data])` (line 61) puts it: the bank is a mean of per-batch means, so the order
    moves it once the samples span several batches (7 % of the largest image score at feature batch 8)."""
    from bench.models.cfa import CfaTaskBanks

    det = _CfaCalls()
    protocol = CfaTaskBanks(det, seed=0)
    splits = [_Split(f"t{i}", n) for i, n in enumerate(sizes)]
    for t, split in enumerate(splits):
        det.calls.clear()
        protocol.learn(split, t)
        share = 6 // t if t else 0
        united = [(s.task, min(len(s), share)) for s in splits[:t]] + [(split.task, len(split))]
        united = [(task, n) for task, n in united if n]
        rebuilt = [("bank", [(s.task, len(s))]) for s in splits[:t + 1]]
        assert det.calls == [("bank", united), ("train", united), *rebuilt]

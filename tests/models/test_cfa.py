"""CFA: the soft-boundary loss and softmin scoring equal plain references; training reads cached features and
lowers the loss; the detector learns each synthetic task; the CL variant follows InCLAD App. C.3 (replay in U_t,
every bank rebuilt with the current descriptor, no backbone re-forward); the replay buffer is bounded, balanced
and seeded. The detector contract (pointwise scores, state, a run killed mid-task resuming to the same R):
tests/models/test_contract.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from bench.continual.protocol import step_seed
from bench.data.tasks import split_from_state, split_state
from bench.training.replay import ReplayBuffer, equal_shares
from bench.data import read_index
from bench.errors import ConfigError
from bench.metrics import roc_auc
from bench.models import cfa as cfa_module
from bench.models.cfa import MARGIN, NU, patch_scores, soft_boundary_loss
from bench.registry import get
from helpers import create, model_extractor, task_split_pair

def _samples(split):
    return [(split, i) for i in range(len(split))]


# --- the pieces against references --------------------------------------------------------------------


def test_soft_boundary_loss_equals_reference():
    g = torch.Generator().manual_seed(0)
    phi, bank, radius = torch.randn(2, 5, 4, generator=g), torch.randn(9, 4, generator=g), torch.tensor([2.0])
    d2 = torch.cdist(phi.double(), bank.double()).pow(2).sort(-1).values
    r2 = radius.double() ** 2
    attraction = (d2[..., :3] - r2).clamp_min(0).mean()
    repulsion = (r2 - d2[..., 3:6] - MARGIN).clamp_min(0).mean()
    expected = (attraction + repulsion) / NU
    torch.testing.assert_close(soft_boundary_loss(phi, bank, radius, 3, 3).double(), expected, rtol=1e-5, atol=1e-4)
    assert attraction > 0 and repulsion > 0  # the case exercises both terms


def test_patch_scores_equal_reference_in_any_chunking(monkeypatch):
    g = torch.Generator().manual_seed(1)
    phi, bank = torch.randn(5, 12, 6, generator=g), torch.randn(20, 6, generator=g)
    d = torch.cdist(phi.double(), bank.double()).sort(-1).values[..., :3]
    expected = torch.softmax(-d, -1)[..., 0] * d[..., 0]
    torch.testing.assert_close(patch_scores(phi, bank, 3).double(), expected, rtol=1e-5, atol=1e-5)
    monkeypatch.setattr(cfa_module, "SCORE_CHUNK", 12 * 20 * 2)  # two images per chunk
    torch.testing.assert_close(patch_scores(phi, bank, 3).double(), expected, rtol=1e-5, atol=1e-5)


# --- the detector -------------------------------------------------------------------------------------


def test_learns_every_synthetic_task(tiny_root):
    aucs = {}
    extractor = model_extractor()
    for task in sorted(read_index("synthetic", tiny_root)["task"].unique()):
        train, test = task_split_pair(tiny_root, task)
        model = create("cfa", extractor, 64, epochs=1).fit(train, seed=0)
        aucs[task] = roc_auc(test.labels, model.predict(test, np.arange(len(test))).scores)
    assert min(aucs.values()) >= 0.85, aucs


def test_training_reads_cached_features_and_lowers_the_loss(tiny_root):
    """A small learning rate: with lr 1e-3 Adam's first steps overshoot on the tiny random-init features (the
    loss rises for ~10 epochs before falling below its start), which says nothing about the gradient."""
    train, _ = task_split_pair(tiny_root, "disc")
    model = create("cfa", model_extractor(), 64, epochs=4, lr=1e-4)
    samples = model.cache(train)
    model.init_descriptor(samples, seed=0)
    bank = model.bank(samples)

    def loss():
        with torch.no_grad():
            phi = model.embed(model._features(samples))
            return float(soft_boundary_loss(phi, bank, model.radius_, 3, 3))

    before = loss()
    model.train(samples, bank, seed=0)
    assert loss() < 0.99 * before
    assert model.radius_.item() > cfa_module.RADIUS_INIT  # the soft boundary's radius is learned
    assert model.extractor.forward_images == len(train)  # 4 epochs, each image through the backbone once


# --- the continual variant (App. C.3) ------------------------------------------------------------------


def test_cl_rebuilds_every_bank_with_the_current_descriptor(tiny_root):
    (chip, chip_test), (disc, _) = task_split_pair(tiny_root, "chip"), task_split_pair(tiny_root, "disc")
    protocol = create("cfa", model_extractor(), 64, epochs=2).continual(seed=0)
    protocol.learn(chip, 0)
    after_first = protocol.banks_[0].clone()
    protocol.learn(disc, 1)
    det = protocol.detector
    assert len(protocol.banks_) == 2
    torch.testing.assert_close(protocol.banks_[0], det.bank(_samples(chip)))  # current descriptor on X_1
    torch.testing.assert_close(protocol.banks_[1], det.bank(_samples(disc)))
    assert not torch.allclose(protocol.banks_[0], after_first, atol=1e-3)  # a stale bank would be this one
    assert det.extractor.forward_images == len(chip) + len(disc)  # rebuilds reuse cached backbone features
    # pointwise with routing, too
    both, one = protocol.predict(chip_test, np.arange(5)), protocol.predict(chip_test, np.array([3]))
    np.testing.assert_allclose(one.scores[0], both.scores[3], rtol=1e-5)
    assert one.routed[0] == both.routed[3]


def test_cl_trains_on_replay_plus_current_against_the_previous_descriptor(tiny_root, monkeypatch):
    """U_t = R_t then X_t (the released CFACLStrategy's concatenation order, which the bank's mean of batch means
    depends on), the training bank built on it with the descriptor before training."""
    (chip, _), (disc, _), (grain, _) = (task_split_pair(tiny_root, t) for t in ("chip", "disc", "grain"))
    protocol = create("cfa", model_extractor(), 64, epochs=1, replay_size=6).continual(seed=0)
    det, seen = protocol.detector, []
    original = det.train

    def spy(samples, bank, seed):
        torch.testing.assert_close(bank, det.bank(samples))  # B_train = Bank(g_θ(t−1)(U_t)), before training
        seen.append([(s.task, i) for s, i in samples])
        original(samples, bank, seed)

    monkeypatch.setattr(det, "train", spy)
    for step, split in enumerate((chip, disc, grain)):
        protocol.learn(split, step)
    assert [len(u) for u in seen] == [16, 16 + 6, 16 + 6]
    tasks_replayed = [t for t, _ in seen[2][:6]]
    assert tasks_replayed == ["chip"] * 3 + ["disc"] * 3  # the buffer is split equally between past tasks
    assert all(t == "grain" for t, _ in seen[2][6:])


def test_cl_first_step_equals_ncl_with_the_rebuilt_bank(tiny_root):
    """ncl_bank="after" (`original`): the NCL bank is rebuilt after training as CL's task banks are, so CL's first
    step is the NCL model."""
    train, test = task_split_pair(tiny_root, "disc")
    extractor = model_extractor()
    ncl = create("cfa", extractor, 64, epochs=2, ncl_bank="after").fit(train, seed=step_seed(0, 0))
    cl = create("cfa", extractor, 64, epochs=2).continual(seed=0)
    cl.learn(train, 0)
    idx = np.arange(len(test))
    np.testing.assert_array_equal(cl.predict(test, idx).scores, ncl.predict(test, idx).scores)


def test_ncl_scores_against_the_bank_built_before_training(tiny_root, monkeypatch):
    """I7, `inclad`: the released `CFA.fit` builds the memory bank with the descriptor before training and never
    rebuilds it (routing-cad-icdm `src/pyclad/models/cfa/cfa.py:76`, `architecture.py:181-209`)."""
    assert create("cfa", None, 64).ncl_bank == "before"
    train, _ = task_split_pair(tiny_root, "disc")
    det, used = create("cfa", model_extractor(), 64, epochs=1), []
    original = det.train
    monkeypatch.setattr(det, "train", lambda samples, bank, seed: used.append(bank) or original(samples, bank, seed))
    det.fit(train, seed=0)
    assert det.bank_ is used[0]  # the training bank, not one rebuilt with the trained descriptor
    assert not torch.allclose(det.bank(_samples(train)), used[0], atol=1e-4)


def test_bank_is_the_mean_of_per_batch_means(tiny_root):
    """I17, `inclad`: the released `initialize_memory_bank` averages per-batch means with equal weight, so a short
    last batch weighs as much as a full one (routing-cad-icdm `src/pyclad/models/cfa/architecture.py:188-196`);
    bank_mean="images" is the exact mean over images."""
    train, _ = task_split_pair(tiny_root, "disc")
    extractor = model_extractor(batch_size=8)
    samples = _samples(train)[:12]  # batches of 8 and 4
    det = create("cfa", extractor, 64)
    det.init_descriptor(samples, seed=0)
    with torch.no_grad():
        first, last = (det.embed(det._features(b)).double() for b in (samples[:8], samples[8:]))
    torch.testing.assert_close(det.bank(samples), ((first.mean(0) + last.mean(0)) / 2).float())
    det.bank_mean = "images"
    torch.testing.assert_close(det.bank(samples), torch.cat([first, last]).mean(0).float())
    assert not torch.allclose(first.mean(0), last.mean(0))  # the two means really differ


def test_map_blur_is_torchvisions_3_tap_gaussian():
    """I6, `inclad`: the map is blurred by torchvision's `gaussian_blur(kernel_size=3, sigma=4)` after bilinear
    upsampling (routing-cad-icdm `src/pyclad/models/cfa/architecture.py:231-244`, `config.py:36-37`); `original`
    keeps the 4σ (33-tap) kernel of Lee et al.'s scipy filter. The kernel is torchvision's exactly, for any odd size."""
    from torchvision.transforms.functional import gaussian_blur as tv_blur

    from bench.models.ops.blur import gaussian_blur

    maps = torch.rand(2, 16, 16, generator=torch.Generator().manual_seed(0))
    for taps, sigma in ((3, 4.0), (5, 1.5), (7, 0.8)):
        torch.testing.assert_close(gaussian_blur(maps, sigma, taps), tv_blur(maps[:, None], [taps, taps],
                                                                              [sigma, sigma])[:, 0])
    patch = torch.rand(2, 4, 4, generator=torch.Generator().manual_seed(1))
    up = F.interpolate(patch[:, None], size=(16, 16), mode="bilinear", align_corners=False)
    scores, out = create("cfa", None, 16).finish(patch)
    expected = tv_blur(up, [3, 3], [4.0, 4.0])[:, 0]
    torch.testing.assert_close(torch.from_numpy(out), expected)
    np.testing.assert_allclose(scores, expected.flatten(1).max(1).values.numpy(), rtol=1e-6)
    original = create("cfa", None, 16, **get("cfa").presets["original"])
    torch.testing.assert_close(torch.from_numpy(original.finish(patch)[1]), gaussian_blur(up[:, 0], 4.0))
    with pytest.raises(ConfigError, match="odd integer"):
        get("cfa").resolve({"blur_kernel": 4})


def test_cl_replay_shares_follow_the_preset(tiny_root):
    """I11: CFA-CL's replay buffer keeps ⌊capacity / tasks⌋ per task under `inclad` (pyCLAD v0.3.0
    `strategies/replay/buffers/adaptive_balanced.py:20`, the buffer InCLAD's runner builds) and water fills under
    `original`."""
    inclad = create("cfa", None, 64, replay_size=5).continual(seed=0)
    water = create("cfa", None, 64, replay_size=5, replay_share="water").continual(seed=0)
    for protocol in (inclad, water):
        protocol.replay_.add("a", list(range(10)), seed=0)
        protocol.replay_.add("b", list(range(10)), seed=1)
    assert [len(v) for v in inclad.replay_.items_.values()] == [2, 2]
    assert [len(v) for v in water.replay_.items_.values()] == [3, 2]
    assert get("cfa").presets["original"]["replay_share"] == "water"


# --- the replay buffer ---------------------------------------------------------------------------------


def test_equal_shares_fill_the_capacity_fairly():
    assert equal_shares([50, 50], 10) == [5, 5]
    assert equal_shares([50, 50, 50], 10) == [4, 3, 3]
    assert equal_shares([2, 50, 50], 10) == [2, 4, 4]  # a small task leaves its share to the others
    assert equal_shares([3, 4], 10) == [3, 4]


def test_floor_shares_are_the_released_rule_without_redistribution():
    """pyCLAD v0.3.0 `strategies/replay/buffers/adaptive_balanced.py:20`: ⌊capacity / tasks⌋ each, the rest unused."""
    assert equal_shares([50, 50, 50], 10, "floor") == [3, 3, 3]
    assert equal_shares([2, 50, 50], 10, "floor") == [2, 3, 3]  # the small task's spare share is not handed on
    assert equal_shares([60, 200, 391, 10], 48, "floor") == [12, 12, 12, 10]  # 46 kept, water filling keeps 48
    assert sum(equal_shares([60, 200, 391, 10], 48)) == 48
    buffer = ReplayBuffer(capacity=3, share="floor")
    buffer.add("a", list(range(10)), seed=0)
    buffer.add("b", list(range(10)), seed=1)
    assert [len(v) for v in buffer.items_.values()] == [1, 1]  # capacity 3 after two tasks keeps 1 + 1
    restored = ReplayBuffer(capacity=0)
    restored.load_state_dict(buffer.state_dict())
    assert restored.share == "floor" and restored.items() == buffer.items()
    with pytest.raises(ConfigError, match="share rule"):
        ReplayBuffer(capacity=3, share="fair")


def test_replay_buffer_is_bounded_balanced_seeded_and_only_drops():
    buffer = ReplayBuffer(capacity=9)
    buffer.add("a", list(range(100)), seed=1)
    first_a = list(buffer.items_["a"])
    assert len(buffer) == 9 and first_a != list(range(9))  # a seeded sample, not the first rows
    buffer.add("b", [f"b{i}" for i in range(100)], seed=2)
    buffer.add("c", [f"c{i}" for i in range(2)], seed=3)
    assert [len(v) for v in buffer.items_.values()] == [4, 3, 2] and len(buffer) == 9
    assert buffer.items_["a"] == first_a[:4]  # later tasks only cut earlier ones back
    again = ReplayBuffer(capacity=9)
    for task, items, seed in (("a", list(range(100)), 1), ("b", [f"b{i}" for i in range(100)], 2),
                              ("c", ["c0", "c1"], 3)):
        again.add(task, items, seed)
    assert again.items() == buffer.items()
    restored = ReplayBuffer(capacity=0)
    restored.load_state_dict(buffer.state_dict())
    assert restored.items() == buffer.items() and restored.capacity == 9


def test_replay_buffer_rejects_a_bad_capacity():
    with pytest.raises(ConfigError, match="capacity must be a non-negative integer"):
        ReplayBuffer(capacity=-1)


def test_kept_splits_are_rerooted_within_their_own_dataset_only(tiny_root, tmp_path):
    """A resumed multi-dataset run must not look for one member dataset's images under another's root."""
    import dataclasses

    disc, chip = task_split_pair(tiny_root, "disc")[0], task_split_pair(tiny_root, "chip")[0]
    other = dataclasses.replace(chip, dataset="btad", root=tmp_path / "btad")
    moved = dataclasses.replace(disc, root=tmp_path / "moved")
    kept = cfa_module.rerooted([disc, other], moved)
    assert [s.root for s in kept] == [tmp_path / "moved", tmp_path / "btad"]


def test_split_state_round_trips_and_reroots(tiny_root, tmp_path):
    train, _ = task_split_pair(tiny_root, "disc")
    back = split_from_state(split_state(train))
    assert back.keys == train.keys and back.root == train.root and back.labels.tolist() == train.labels.tolist()
    assert split_from_state(split_state(train), root=tmp_path).root == tmp_path

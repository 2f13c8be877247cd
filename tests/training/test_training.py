"""The one training loop and the generic protocols of gradient-trained detectors: losses logged per epoch, a
non-finite loss fails naming the epoch, train()/eval() switched explicitly, a training killed mid-epoch resumes
from its epoch checkpoint to identical weights, frozen features computed once per image per task; Replay trains
on current ∪ a balanced buffer of round(0.2 × mean task size) past images (composition in HDF5), Cumulative on
everything so far; each of the four detectors learns every synthetic task, and Replay forgets less than NCL."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bench import results
from bench.continual.runner import execute, prepare
from bench.data import read_index
from bench.errors import ConfigError
from bench.image.protocols import Replay, make_protocol
from bench.metrics import roc_auc, summarize
from bench.registry import get
from bench.training.loop import NonFiniteLossError, TrainContext, record_losses
from bench.training.replay import default_replay_size
from helpers import Killed, create, model_extractor, task_split_pair

GRADIENT = ("stfpm", "fastflow", "rd4ad", "paste")
QUIET = {"progress": False, "log": lambda *_: None}


def _extractor(model):
    spec = get(model)
    return model_extractor(spec.layers(spec.resolve(spec.quick)))


def _weights(det):
    return {k: v.clone() for k, v in det.state_dict()[next(iter(det.modules()))].items()}


# --- the loop ------------------------------------------------------------------------------------------


# The loop and protocol tests below check mechanisms, not how well a detector learns: FastFlow runs with 2 flow
# steps (its default 8 made these the slowest tests of the fast lane; the network's size changes no mechanism).
# With 2 steps its loss still falls every epoch: 13,554 → 8,139 (seed 0), 13,404 → 7,278, 13,397 → 7,279 (seeds
# 1, 2), the same at one and two threads.
SMALL_FLOW = {"flow_steps": 2}


def test_losses_are_logged_per_epoch_and_features_computed_once(tiny_root):
    train, _ = task_split_pair(tiny_root, "disc")
    det = create("fastflow", _extractor("fastflow"), 64, epochs=3, batch_size=4, **SMALL_FLOW)
    det.fit(train, seed=0)
    assert len(det.losses_) == 3 and det.losses_[-1] < det.losses_[0]
    assert det.extractor.forward_images == len(train)  # 3 epochs, each image through the backbone once
    assert not any(m.training for m in det.modules().values())  # left in eval mode
    arrays = {}
    record_losses(arrays, 1, 3, det.losses_)
    record_losses(arrays, 2, 3, det.losses_[:2])
    loss = arrays["train/loss"]
    assert loss.shape == (3, 3) and np.isnan(loss[0]).all() and np.isnan(loss[2, 2])
    np.testing.assert_array_equal(loss[1], det.losses_)


def test_recomputing_the_frozen_network_gives_the_same_training(tiny_root):
    """The perf baseline (no feature cache) runs the same code: same losses up to float noise."""
    train, _ = task_split_pair(tiny_root, "disc")
    # one batch of all 16 images per epoch: two epochs still show the uncached network run once per epoch
    cached = create("rd4ad", _extractor("rd4ad"), 64, epochs=2, batch_size=16).fit(train, seed=0)
    fresh = create("rd4ad", _extractor("rd4ad"), 64, epochs=2, batch_size=16)
    fresh.context = TrainContext(cache_features=False)
    fresh.fit(train, seed=0)
    np.testing.assert_allclose(fresh.losses_, cached.losses_, rtol=1e-4)
    assert fresh.extractor.forward_images == 2 * len(train)


def test_a_non_finite_loss_fails_naming_the_epoch(tiny_root):
    train, _ = task_split_pair(tiny_root, "disc")
    det = create("stfpm", _extractor("stfpm"), 64, epochs=3, batch_size=8, lr=1e30)
    with pytest.raises(NonFiniteLossError, match=r"stfpm: training loss became (nan|inf) in epoch [1-3]/3"):
        det.fit(train, seed=0)


def test_training_mode_while_training_eval_mode_while_scoring(tiny_root, monkeypatch):
    train, test = task_split_pair(tiny_root, "disc")
    det = create("stfpm", _extractor("stfpm"), 64, epochs=1, batch_size=8)
    modes = []
    original = type(det).loss
    monkeypatch.setattr(type(det), "loss", lambda self, batch: modes.append(self.student_.training)
                        or original(self, batch))
    det.fit(train, seed=0)
    det.student_.train()  # as InCLAD's code might leave it: predict must switch it back
    det.predict(test, np.arange(2))
    assert modes == [True, True] and not det.student_.training


def test_a_training_killed_mid_epoch_resumes_to_identical_weights(tiny_root, tmp_path, monkeypatch):
    train, test = task_split_pair(tiny_root, "chip")
    ctx = lambda: TrainContext(checkpoint=tmp_path / "epoch.ckpt", tag="run:0")  # noqa: E731
    whole = create("stfpm", _extractor("stfpm"), 64, epochs=3, batch_size=8).fit(train, seed=5)

    killed = create("stfpm", _extractor("stfpm"), 64, epochs=3, batch_size=8)
    killed.context = ctx()
    calls, original = [], type(killed).train_step

    def dying(self, batch, optimizers):
        calls.append(1)
        if len(calls) == 4:  # the 2nd batch of epoch 2 (2 batches per epoch: half the steps of batches of 4)
            raise Killed
        return original(self, batch, optimizers)

    monkeypatch.setattr(type(killed), "train_step", dying)
    with pytest.raises(Killed):
        killed.fit(train, seed=5)
    monkeypatch.undo()
    logs = []
    resumed = create("stfpm", _extractor("stfpm"), 64, epochs=3, batch_size=8)  # a fresh process
    resumed.context = TrainContext(checkpoint=tmp_path / "epoch.ckpt", tag="run:0", log=logs.append)
    resumed.fit(train, seed=5)
    assert logs and "after epoch 1/3" in logs[0]
    assert resumed.losses_ == whole.losses_
    for k, v in _weights(whole).items():
        torch.testing.assert_close(_weights(resumed)[k], v, rtol=0, atol=0, msg=k)
    np.testing.assert_array_equal(resumed.predict(test, np.arange(4)).scores, whole.predict(test, np.arange(4)).scores)
    # the checkpoint of an earlier training of the run (the next step finds it) is ignored, not loaded
    other = create("stfpm", _extractor("stfpm"), 64, epochs=3, batch_size=8)
    other.context = TrainContext(checkpoint=tmp_path / "epoch.ckpt", tag="run:0", log=logs.append, step=1)
    other.fit(train, seed=5)
    assert len(logs) == 1


# --- protocols -----------------------------------------------------------------------------------------


def test_replay_size_rule():
    assert default_replay_size([16, 16, 16]) == 3  # round(0.2 × 16)
    assert default_replay_size([100, 40]) == 14
    assert default_replay_size([2]) == 1  # never an empty buffer


def test_replay_trains_on_current_plus_a_balanced_buffer(tiny_root, monkeypatch):
    splits = [task_split_pair(tiny_root, t)[0] for t in ("chip", "disc", "grain")]
    det = create("fastflow", _extractor("fastflow"), 64, epochs=1, batch_size=8, **SMALL_FLOW)
    protocol = make_protocol("cl", det, seed=0, train_sizes=[30, 30, 30])
    assert isinstance(protocol, Replay) and det.replay_size == 6
    seen, original = [], type(det).fit_samples
    monkeypatch.setattr(type(det), "fit_samples", lambda self, samples, seed: seen.append(
        [(s.task, i) for s, i in samples]) or original(self, samples, seed))
    arrays = {}
    for step, split in enumerate(splits):
        protocol.learn(split, step)
        protocol.record(arrays, step, 3)
    assert [len(u) for u in seen] == [16, 16 + 6, 16 + 6]
    assert [t for t, _ in seen[2][16:]] == ["chip"] * 3 + ["disc"] * 3
    assert set(seen[1][16:]) < {("chip", i) for i in range(16)}
    assert set(seen[2][16:19]) <= set(seen[1][16:])  # nested: a task's share only shrinks
    np.testing.assert_array_equal(arrays["replay/composition"], [[0, 0, 0], [6, 0, 0], [3, 3, 0]])
    restored = make_protocol("cl", create("fastflow", _extractor("fastflow"), 64, epochs=1, **SMALL_FLOW),
                             seed=0, train_sizes=[30, 30, 30])
    restored.load_state_dict(protocol.state_dict())
    assert restored.buffer_.items() == protocol.buffer_.items() and restored.state_bytes() == protocol.state_bytes()


def test_cumulative_trains_on_everything_so_far(tiny_root, monkeypatch):
    splits = [task_split_pair(tiny_root, t)[0] for t in ("chip", "disc")]
    det = create("fastflow", _extractor("fastflow"), 64, epochs=1, batch_size=8, **SMALL_FLOW)
    protocol = make_protocol("cumulative", det, seed=0, train_sizes=[16, 16])
    sizes, original = [], type(det).fit_samples
    monkeypatch.setattr(type(det), "fit_samples", lambda self, samples, seed: sizes.append(len(samples))
                        or original(self, samples, seed))
    for step, split in enumerate(splits):
        protocol.learn(split, step)
    assert sizes == [16, 32]
    with pytest.raises(ConfigError, match="cumulative"):
        make_protocol("cumulative", create("padim", model_extractor(), 64), seed=0)


# --- the four detectors --------------------------------------------------------------------------------


# Each learning assertion below holds across the spread measured on this suite's inputs (tiny synthetic benchmark,
# held-out textures, 64 px, random-init resnet18, quick settings) over training seeds and 1 and 2 CPU threads
# (`tools/learning_spread.py`: OMP_NUM_THREADS and torch.set_num_threads in a subprocess per case): a threshold
# tuned on one seed and one thread count failed at another (RD4AD clouds, seed 0: 0.797 with one thread, 0.625
# with two). The tests train at seed 0; the other seeds show how far a threshold sits from what training gives.
# Synthetic tasks, min-max over the spread:
# - STFPM and PaSTe (torchvision student start, PaSTe's quick 10 epochs at lr 0.01; seeds 0-2 × 1, 2 threads,
#   2026-12-07, code of commit 972dd32 for both, 2-core CI-class machine): STFPM checker/chip 1.0, disc
#   0.906-1.0, grain 0.812-0.984, stripes 0.562-0.906 (its floor: WEAK); PaSTe checker 0.953-1.0, chip 0.984-1.0,
#   disc 0.922-1.0, grain 0.953-1.0, stripes 0.672-0.844 (its floor: WEAK; seed 2 at two threads at e920b29).
# - FastFlow version 4 (permute after the coupling; seeds 0-2 × 1, 2 threads, 2026-12-07, commit 3395089): 1.0 on
#   every task. RD4AD version 6 (seed 0 at 1 and 2 threads, seed 1 at 1 thread, same date and commit; seed 1 at 2
#   threads at e920b29): chip/grain 1.0, disc 0.984-1.0, stripes 0.859-0.953, checker 0.625-0.703 (at seeds 0-4 of commit 7aa61eb's RD4AD
#   0.359-0.75, at some seeds no better than its untrained network: not asserted).
# PaSTe's student shares the teacher's stem and, with a random-init teacher, learns to reproduce it, anomalies
# included (docs/models.md has the sweep that chose its quick setting).
MIN_AUROC = {"stfpm": 0.75, "fastflow": 0.8, "rd4ad": 0.8, "paste": 0.8}
# STFPM with timm's student start: with the released torchvision start its NCL does not forget this 3-task stream
# at quick settings (BWT NCL +0.016, Replay -0.188, seed 0), so there would be nothing for replay to recover
REPLAY_TEST_SETTINGS = {"rd4ad": {"epochs": 5}, "stfpm": {"student_init": "timm"}}
# tasks held to their own floor (None: measured and reported, not asserted)
WEAK = {"rd4ad": {"checker": None}, "stfpm": {"stripes": 0.5}, "paste": {"stripes": 0.6}}


@pytest.mark.slow
@pytest.mark.parametrize("model", GRADIENT)
def test_learns_every_synthetic_task_with_quick_settings(tiny_root, model):
    aucs = {}
    extractor = _extractor(model)
    for task in sorted(read_index("synthetic", tiny_root)["task"].unique()):
        train, test = task_split_pair(tiny_root, task)
        det = create(model, extractor, 64, **get(model).quick).fit(train, seed=0)
        aucs[task] = roc_auc(test.labels, det.predict(test, np.arange(len(test))).scores)
    print(model, {t: round(a, 3) for t, a in aucs.items()})  # the figures, shown by pytest -rP
    weak = WEAK.get(model, {})
    assert min(a for t, a in aucs.items() if t not in weak) >= MIN_AUROC[model], aucs
    assert all(aucs[t] >= low for t, low in weak.items() if low is not None), aucs


# Held-out textures (tests/textures.py: none of the synthetic tasks the quick settings were chosen on). What holds
# across the spread is that training beats the same network untrained (its `build` only) by a margin, and that the
# loss falls; the AUROC itself does not. STFPM clouds 0.781-0.859 (untrained 0.422-0.516, gap at least 0.281) and
# PaSTe clouds 0.797-0.844 (untrained 0.672-0.938, gap down to -0.126 at seed 2: not asserted, reported), both as
# measured above; RD4AD clouds after 30 epochs 0.703-0.875 (untrained 0.5-0.641, gap at least 0.062; commits
# 3395089 and e920b29, the cases above) and FastFlow weave 1.0 (untrained at most 0.906, gap 0.094; commit 7aa61eb).
HELD_OUT = {"stfpm": ("clouds", 0.1), "fastflow": ("weave", 0.05), "paste": ("clouds", None),
            "rd4ad": ("clouds", 0.05)}
HELD_OUT_SETTINGS = {"rd4ad": {"epochs": 30}}


@pytest.fixture(scope="module")
def texture_root(tmp_path_factory):
    from textures import generate

    return generate(tmp_path_factory.mktemp("textures"), size=64, textures=("clouds", "weave"))


@pytest.mark.slow
@pytest.mark.parametrize("model", GRADIENT)
def test_learns_a_held_out_texture(texture_root, model):
    """Training beats the untrained network by the margin that held over seeds and thread counts, and the loss
    falls (a fixed AUROC threshold of 0.65 holds only at the thread count it is tuned at)."""
    from textures import splits

    task, margin = HELD_OUT[model]
    settings = {**get(model).quick, **HELD_OUT_SETTINGS.get(model, {})}
    train, test = splits(texture_root, task, 64)
    untrained = create(model, _extractor(model), 64, **settings)
    untrained.build(0)
    det = create(model, _extractor(model), 64, **settings).fit(train, seed=0)
    auc = {name: roc_auc(test.labels, d.predict(test, np.arange(len(test))).scores)
           for name, d in (("trained", det), ("untrained", untrained))}
    print(model, task, {k: round(v, 3) for k, v in auc.items()})  # the figures, shown by pytest -rP
    assert det.losses_[-1] < det.losses_[0], det.losses_
    if margin is not None:
        assert auc["trained"] >= auc["untrained"] + margin, (model, task, auc)


# PaSTe under `inclad` (first-layer loss un-normalised, torchvision student start, quick 10 epochs at lr 0.01):
# BWT NCL / Replay on this 3-task stream, seeds 0-2 × 1, 2 threads: −0.078/0.0, −0.068/0.0, −0.068/−0.104,
# −0.052/−0.104, −0.068/−0.115, −0.073/−0.115 (seed 2, two threads, e920b29) — replay helps at seed 0 and hurts at
# seeds 1-2, within the noise of 8 + 8 test images. The test still runs it and reports the figures (xfail when
# replay does not help); it asserts the others.
REPLAY_NOTHING_TO_RECOVER = {"paste"}


@pytest.mark.slow
@pytest.mark.parametrize("model", GRADIENT)
def test_replay_forgets_less_than_ncl(tiny_root, tmp_path, make_config, model):
    """InCLAD §4.3: replay is the continual variant of these methods. A 3-task stream, quick settings (RD4AD with
    half its quick epochs, to keep the suite short).

    Measured spread (BWT NCL / Replay). STFPM (timm student start, REPLAY_TEST_SETTINGS; 2026-12-07, code of
    commit 972dd32), seeds 0, 1, 2 at one / two threads: −0.406/−0.036 and −0.401/−0.057, −0.250/−0.010 and
    −0.255/−0.010, −0.099/−0.010 and −0.083/−0.005. FastFlow and RD4AD (commit 33279b4, two threads): FastFlow
    −0.125/−0.021, −0.333/−0.031; RD4AD −0.573/−0.089, −0.724/−0.177; one thread, FastFlow −0.125/−0.021,
    −0.333/−0.031, RD4AD (seed 0) −0.573/−0.115. PaSTe: REPLAY_NOTHING_TO_RECOVER. So the assertion is the sign,
    which held with a margin of at least 0.073 in every measured case of the three models it asserts; a threshold
    on either BWT would not."""
    tasks = ["chip", "stripes", "disc"]
    bwt = {}
    for protocol in ("ncl", "cl"):
        cfg = make_config(tiny_root, tasks, protocol=protocol, model=model,
                          hparams={**get(model).quick, **REPLAY_TEST_SETTINGS.get(model, {})})
        run = results.read_run(execute(prepare(cfg, out_dir=tmp_path), **QUIET))
        bwt[protocol] = summarize(run["R/image"])["bwt"]
        assert np.isfinite(run["train/loss"]).all()  # every step trained for the same number of epochs
    print(model, bwt)  # the figures, shown by pytest -rP
    if model in REPLAY_NOTHING_TO_RECOVER and not bwt["cl"] > bwt["ncl"]:
        pytest.xfail(f"{model}: its NCL does not forget this stream under the inclad preset, so replay has "
                     f"nothing to recover: {bwt}")
    assert bwt["cl"] > bwt["ncl"], bwt


def test_detectors_and_the_loop_never_import_the_runner():
    """The runner (bench.continual.runner) builds on bench.models and bench.training, never the other way; what
    they take from the engine is its Protocol base (bench.continual.protocol)."""
    import ast
    from pathlib import Path

    import bench

    package = Path(bench.__file__).parent
    for path in [*package.glob("models/**/*.py"), *package.glob("training/*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not any(n.startswith("bench.continual") and n != "bench.continual.protocol"
                           for n in names), (path, names)


@pytest.mark.parametrize("model", GRADIENT)
def test_replay_shares_follow_the_preset(model):
    """I11: the generic Replay keeps ⌊capacity / tasks⌋ per past task under `inclad` (pyCLAD v0.3.0
    `strategies/replay/buffers/adaptive_balanced.py:20`, the buffer InCLAD's runner builds) and water fills under
    `original`."""
    spec = get(model)
    for preset, share in (("inclad", "floor"), ("original", "water")):
        det = create(model, _extractor(model), 64, **spec.resolve(spec.quick, preset))
        protocol = make_protocol("cl", det, seed=0, train_sizes=[25, 25])
        assert protocol.buffer_.share == share
        for step, task in enumerate("ab"):
            protocol.buffer_.add(task, list(range(25)), seed=step)
        assert [len(v) for v in protocol.buffer_.items_.values()] == ([2, 2] if share == "floor" else [3, 2])


def test_the_replay_share_is_in_the_key_of_cl_runs_only():
    """The share changes only what a replay buffer keeps: an ncl (or cumulative) run keeps the key it had before
    the setting existed; a cl run's key tells the two rules apart."""
    from bench.config import RunConfig

    def key(protocol, **extra):
        hparams = {"epochs": 1, "replay_size": 0, **extra}
        return RunConfig(dataset="synthetic", root=".", model="stfpm", tasks=["a", "b"], protocol=protocol,
                         hparams=hparams).run_key("index", "weights")

    for protocol in ("ncl", "cumulative"):
        assert key(protocol) == key(protocol, replay_share="floor") == key(protocol, replay_share="water")
    assert key("cl", replay_share="floor") != key("cl", replay_share="water")

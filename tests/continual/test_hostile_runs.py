"""Runs that meet hostile or broken files: a planted or inconsistent checkpoint is moved aside and the
work redone, never trusted and never a run that fails for ever; a full disk while checkpointing is one line; no
temp file outlives a failed or killed write; the file-digest cache notices a file replaced in place. Each test
fails on the code before the issue was fixed."""

from __future__ import annotations

import hashlib
import os
import socket
from pathlib import Path

import numpy as np
import pytest
import torch

from bench import checkpoint, results
from bench.continual.runner import execute, prepare
from bench.io import write_text_atomic
from bench.registry import get
from bench.training.loop import TrainContext
from helpers import Killed, create, make_run_config, model_extractor, one_error_line, task_split_pair

TASKS = ["chip", "stripes"]
QUIET = {"progress": False, "log": lambda *_: None}
EPOCHS = 2


@pytest.fixture(scope="module")
def small_root(tmp_path_factory):
    from bench.data.synthetic import generate

    return generate(tmp_path_factory.mktemp("hostile") / "syn", "tiny", seed=0, n_train=4, n_test=6)


def _stfpm():
    spec = get("stfpm")
    return create("stfpm", model_extractor(spec.layers(spec.resolve(spec.quick))), 32, epochs=EPOCHS, batch_size=4)


def _weights(det) -> dict:
    return {k: v.clone() for name in det.modules() for k, v in det.state_dict()[name].items()}


@pytest.fixture(scope="module")
def training(tiny_root, tmp_path_factory):
    """(train split, weights of an uninterrupted training, the epoch checkpoint a training killed in epoch 2 left)."""
    train, _ = task_split_pair(tiny_root, "chip")
    whole = _weights(_stfpm().fit(train, seed=5))
    killed = _stfpm()
    killed.context = TrainContext(checkpoint=tmp_path_factory.mktemp("epoch") / "epoch.ckpt", tag="run")
    calls, original = [], type(killed).train_step

    def dying(batch, optimizers):
        calls.append(1)
        if len(calls) == 6:  # the 2nd batch of epoch 2 (4 batches per epoch)
            raise Killed
        return original(killed, batch, optimizers)

    killed.train_step = dying
    with pytest.raises(Killed):
        killed.fit(train, seed=5)
    saved = checkpoint.load(killed.context.checkpoint)
    assert saved["epoch"] == 1
    return train, whole, saved


def _zeroed(state):
    return {name: {k: torch.zeros_like(v) for k, v in sd.items()} for name, sd in state["modules"].items()}


def _first_tensor(state):
    name = next(iter(state["modules"]))
    return name, next(iter(state["modules"][name]))


def _plant(state, how: str, path: Path) -> None:
    state = {**state}
    if how == "epoch 99, zeroed weights":  # what the hostile probe planted: accepted, it gave a wrong ROC-AUC_CL
        state.update(epoch=99, losses=[0.0] * 99, modules=_zeroed(state))
    elif how == "in range, zeroed weights, binding copied":  # issue 31 §3: resumed, ROC-AUC_CL 0.685 for 0.982
        state.update(modules=_zeroed(state))
    elif how == "continues other weights":  # e.g. left by a run whose main checkpoint was since replaced
        state.update(start="0" * 64, modules=_zeroed(state))
    elif how == "another run":
        state.update(tag="another-run-key")
    elif how == "a later step":  # the main checkpoint says step 0; this one claims step 3
        state.update(step=3)
    elif how == "wrong shapes":
        name, key = _first_tensor(state)
        state["modules"] = {**state["modules"], name: {**state["modules"][name], key: torch.zeros(2, 2)}}
    elif how == "missing keys":
        del state["order_rng"]
    checkpoint.save(path, state)
    if how == "truncated":
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])


@pytest.mark.parametrize("how", ["epoch 99, zeroed weights", "in range, zeroed weights, binding copied",
                                 "continues other weights", "another run",
                                 "a later step", "wrong shapes", "missing keys", "truncated"])
def test_an_unusable_epoch_checkpoint_is_moved_aside_and_the_task_retrains(how, training, tmp_path):
    train, whole, saved = training
    path = tmp_path / "run.h5.epoch.ckpt"
    _plant(saved, how, path)
    logs = []
    det = _stfpm()
    det.context = TrainContext(checkpoint=path, tag="run", log=logs.append)
    det.fit(train, seed=5)
    bad = list(tmp_path.glob("run.h5.epoch.ckpt.bad-*"))
    assert len(bad) == 1 and len(logs) == 1 and logs[0].startswith("warning: ") and bad[0].name in logs[0], logs
    assert "\n" not in logs[0] and "training this task from its first epoch" in logs[0]
    for k, v in whole.items():  # retrained from the start: the weights of an uninterrupted training
        torch.testing.assert_close(_weights(det)[k], v, rtol=0, atol=0, msg=k)


def test_a_genuine_epoch_checkpoint_still_resumes_and_a_stale_one_is_overwritten(training, tmp_path):
    train, whole, saved = training
    path = tmp_path / "epoch.ckpt"
    checkpoint.save(path, saved)
    logs = []
    det = _stfpm()
    det.context = TrainContext(checkpoint=path, tag="run", log=logs.append)
    det.fit(train, seed=5)
    assert logs == [f"resuming training after epoch 1/{EPOCHS} from {path}"]
    for k, v in whole.items():
        torch.testing.assert_close(_weights(det)[k], v, rtol=0, atol=0, msg=k)
    # the next step of the same run finds step 0's finished checkpoint: a leftover, not an error
    nxt = _stfpm()
    nxt.context = TrainContext(checkpoint=path, tag="run", log=logs.append, step=1)
    nxt.fit(train, seed=5)
    assert len(logs) == 1 and not list(tmp_path.glob("*.bad-*"))
    assert checkpoint.load(path)["step"] == 1


# --- the main checkpoint: this run's key, other content ------------------------------------------------------------

def _partial(root, out):
    run = prepare(make_run_config(root, TASKS), out=out)
    execute(run, max_steps=1, **QUIET)
    assert run.checkpoint_path.is_file()
    return run


@pytest.mark.parametrize("how", ["steps_done beyond the tasks", "R of the wrong shape", "an array missing",
                                 "scores of a later step", "a bank of another width", "a NaN bank"])
def test_a_main_checkpoint_with_the_right_key_and_wrong_content_is_moved_aside(how, small_root, tmp_path):
    """Issue 31 §3 adds the last two: a PatchCore CL bank of another width tracebacked in the first scoring, a NaN
    bank failed as "the model diverged", each on every rerun; both are now moved aside by the resume check."""
    run = _partial(small_root, tmp_path / "run.h5")
    state = checkpoint.load(run.checkpoint_path)
    if how == "steps_done beyond the tasks":
        state["steps_done"] = len(TASKS) + 3
    elif how == "R of the wrong shape":
        state["arrays"]["R/image"] = np.zeros((1, 1))
    elif how == "an array missing":
        del state["arrays"]["timing/train_s"]
    elif how == "scores of a later step":
        state["scores"][0] = {**state["scores"][0], "step": 7}
    elif how == "a bank of another width":
        bank = state["protocol"]["banks"][0]
        state["protocol"]["banks"][0] = torch.zeros(bank.shape[0], bank.shape[1] + 3)
    else:
        state["protocol"]["banks"][0] = torch.full_like(state["protocol"]["banks"][0], float("nan"))
    checkpoint.save(run.checkpoint_path, state)
    messages = []
    execute(run, progress=False, log=messages.append)
    bad = list(tmp_path.glob("run.h5.ckpt.bad-*"))
    assert len(bad) == 1 and any(m.startswith("warning: ") and bad[0].name in m and "afresh" in m
                                 for m in messages), messages
    assert results.is_complete(run.out, run.run_key)


# --- a full disk while checkpointing -------------------------------------------------------------------------------

def _cli_run(root, out, *extra):
    from bench.cli import main

    return main(["run", "--dataset", "synthetic", "--root", str(root), "--weights", "none", "--tasks",
                 ",".join(TASKS), "--image-size", "64", "--batch-size", "8", "--device", "cpu", "--workers", "0",
                 "--out", str(out), "--no-progress", *extra])


def _temps(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*") if ".tmp" in p.name)


def test_a_full_disk_during_a_checkpoint_save_is_one_line_and_leaves_no_partial_file(small_root, tmp_path, capsys,
                                                                                     monkeypatch):
    def full(obj, f, *args, **kwargs):  # what torch's zip writer does when the disk fills: RuntimeError
        Path(f).write_bytes(b"PK\x03\x04 half a checkpoint")
        raise RuntimeError("[enforce fail at inline_container.cc:603] . PytorchStreamWriter failed writing file "
                           "data/3: file write failed")

    monkeypatch.setattr("bench.checkpoint.torch.save", full)
    out = tmp_path / "r.h5"
    assert _cli_run(small_root, out) == 2
    err = one_error_line(capsys)
    assert "r.h5.ckpt: cannot write the checkpoint (" in err and "free space" in err
    assert results.read_run(out)["attrs"]["status"] == "failed"
    assert not (tmp_path / "r.h5.ckpt").exists() and _temps(tmp_path) == []


# --- temp files: a failed write removes its own; a killed one is removed by the next run ----------------------------

def test_temp_files_of_killed_writes_are_removed_by_the_rerun(small_root, tmp_path):
    run = prepare(make_run_config(small_root, TASKS), out=tmp_path / "run.h5")
    host = socket.gethostname()
    left = [tmp_path / f"run.h5.tmp.{host}.999999", tmp_path / "run.h5.ckpt.tmp.node7.12",
            tmp_path / f"run.h5.epoch.ckpt.tmp.{host}.3", tmp_path / f"run.h5.probe.tmp.{host}.4"]
    other = tmp_path / f"other.h5.tmp.{host}.5"  # another run's file: not this run's to remove
    for p in [*left, other]:
        p.write_bytes(b"half")
    messages = []
    execute(run, progress=False, log=messages.append)
    assert _temps(tmp_path) == [other.name]
    assert sum("removed" in m and "killed" in m for m in messages) == len(left), messages


@pytest.mark.parametrize("where", ["text file", "result file", "checkpoint"])
def test_a_write_that_fails_midway_removes_its_temp_file(where, tmp_path, monkeypatch):
    def failing(*args, **kwargs):
        raise OSError(28, "No space left on device")

    target = tmp_path / "f"
    if where == "text file":
        monkeypatch.setattr(Path, "write_text", lambda self, text: (self.write_bytes(b"ha"), failing()))
        call = lambda: write_text_atomic(target, "text")  # noqa: E731
    elif where == "result file":
        monkeypatch.setattr("h5py.Group.create_dataset", failing)
        call = lambda: results.write_run(target, {"status": "running"}, {"a": np.zeros(2)}, ["t"])  # noqa: E731
    else:
        monkeypatch.setattr("bench.checkpoint.torch.save", lambda obj, f: (Path(f).write_bytes(b"ha"), failing()))
        call = lambda: checkpoint.save(target, {"a": 1})  # noqa: E731
    with pytest.raises(Exception):  # noqa: B017 - what matters is what is left on disk
        call()
    assert list(tmp_path.iterdir()) == []


# --- the digest cache --------------------------------------------------------------------------------------------

def test_a_file_replaced_keeping_size_and_mtime_is_hashed_again(tmp_path):
    from bench.data import digests

    f = tmp_path / "a.png"
    f.write_bytes(b"one")
    (first,) = digests.file_digests([f])
    st = os.stat(f)
    f.write_bytes(b"two")  # same size; then the old mtime put back, as `cp -p` or `rsync -t` would
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (os.stat(f).st_size, os.stat(f).st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    (second,) = digests.file_digests([f])
    assert second == hashlib.sha256(b"two").hexdigest() != first
    g = tmp_path / "b.png"  # a new file (new inode) moved into the old one's place, same size and mtime
    g.write_bytes(b"six")
    os.utime(g, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(g, f)
    assert digests.file_digests([f]) == [hashlib.sha256(b"six").hexdigest()]


# --- memory: each detector's own estimate, checked before any work ----------------------------------------------

def test_an_image_size_the_model_cannot_hold_is_one_line_naming_model_size_and_memory(small_root, tmp_path, capsys,
                                                                                     monkeypatch):
    monkeypatch.setattr("bench.config.memory_limit_bytes", lambda: 24 * 2**30)  # a 24 GiB machine
    out = tmp_path / "runs" / "r.h5"
    assert _cli_run(small_root, out, "--model", "ganomaly", "--image-size", "1024") == 2
    err = one_error_line(capsys)
    need = get("ganomaly").memory_bytes(1024, 8, get("ganomaly").resolve())
    assert need > 24 * 2**30 and f"{need / 2**30:.1f} GiB" in err
    assert all(word in err for word in ("ganomaly", "--image-size 1024", "24.0 GiB this machine has"))
    assert not (tmp_path / "runs").exists()
    # the same size fits a model whose batches are smaller (a frozen backbone, scored 8 images at a time)
    assert get("patchcore").memory_bytes(1024, 8, get("patchcore").resolve()) < 24 * 2**30


def test_every_detectors_memory_estimate_grows_with_size_and_batch():
    from bench.config import memory_estimate
    from bench.registry import specs

    for name, spec in specs().items():
        hp = spec.resolve()
        small, large = spec.memory_bytes(128, 8, hp), spec.memory_bytes(256, 8, hp)
        assert 0 < small < large, name
        assert spec.memory_bytes(256, 32, hp) >= large, name
        if spec.inputs == "features":  # the frozen backbone's batch is part of it
            assert large >= memory_estimate(256, 8), name

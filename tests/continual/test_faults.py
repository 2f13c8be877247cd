"""Trustworthy under faults and bad input: no stale, clipped or unchecked number, no unsafe load, no
traceback. Each test is written so that it fails on the code before the issue was fixed."""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from PIL import Image

from bench import results
from bench.continual.runner import execute, prepare
from bench.errors import BenchError, ConfigError
from bench.io import file_sha256
from helpers import Killed, make_run_config, one_error_line, kill_at

TASKS = ["chip", "stripes"]
QUIET = {"progress": False, "log": lambda *_: None}


@pytest.fixture(scope="module")
def small_root(tmp_path_factory):
    from bench.data.synthetic import generate

    return generate(tmp_path_factory.mktemp("faults") / "syn", "tiny", seed=0, n_train=4, n_test=6)


@pytest.fixture(scope="module")
def reference(small_root, tmp_path_factory):
    """The uninterrupted run every faulty one must end up equal to."""
    run = prepare(make_run_config(small_root, TASKS), out=tmp_path_factory.mktemp("ref") / "ref.h5")
    return execute(run, **QUIET)


def _assert_same_r(path, reference: Path):
    got, reference = results.read_run(path), results.read_run(reference)
    assert got["attrs"]["status"] == "complete" and got["attrs"]["steps_done"] == len(TASKS)
    for level in ("image", "pixel"):
        np.testing.assert_array_equal(got[f"R/{level}"], reference[f"R/{level}"])


def _partial(small_root, out):
    """A run stopped after its first step: result file running, checkpoint holding step 1."""
    run = prepare(make_run_config(small_root, TASKS), out=out)
    execute(run, max_steps=1, **QUIET)
    assert run.checkpoint_path.is_file()
    return run


# --- 1. the run key covers the input files' bytes ----------------------------------------------------------------

def test_same_names_other_pixels_is_another_run(small_root, reference, tmp_path):
    """Images replaced in place (same names, same synthetic.json) are other data: the run key changes, the old
    complete file is not reported done, and the new run computes its own R."""
    root = tmp_path / "copy"
    shutil.copytree(small_root, root)
    first = prepare(make_run_config(root, TASKS), out_dir=tmp_path / "runs")
    assert first.run_key == results.read_run(reference)["attrs"]["run_key"]  # a copy of the same bytes: same run
    execute(first, **QUIET)
    image = root / "chip" / "train" / "good" / sorted(os.listdir(root / "chip" / "train" / "good"))[0]
    pixels = np.asarray(Image.open(image).convert("RGB"))
    Image.fromarray(255 - pixels).save(image)  # same name, other pixels
    second = prepare(make_run_config(root, TASKS), out_dir=tmp_path / "runs")
    assert second.run_key != first.run_key and second.out != first.out
    assert not results.is_complete(second.out, second.run_key)


def test_digest_cache_is_reused_only_while_size_and_mtime_match(tmp_path):
    from bench.data import digests

    f = tmp_path / "a.png"
    f.write_bytes(b"one")
    (first,) = digests.file_digests([f])
    cached = digests.cache_path().read_text()
    assert str(f) in cached and first in cached  # written for the next process
    f.write_bytes(b"two")  # same size; a new mtime
    os.utime(f, ns=(1, 10**18))
    (second,) = digests.file_digests([f])
    assert second != first and second == __import__("hashlib").sha256(b"two").hexdigest()


# --- 2. a kill at every write boundary of the final step ---------------------------------------------------------

@pytest.mark.parametrize("boundary", ["checkpoint write", "result write", "checkpoint removal"])
def test_kill_in_the_final_step_resumes_to_the_full_r(boundary, small_root, reference, tmp_path, monkeypatch):
    run = _partial(small_root, tmp_path / "run.h5")
    with monkeypatch.context() as m:
        kill_at(m, boundary)
        with pytest.raises(Killed):
            execute(run, **QUIET)
    messages = []
    assert execute(run, progress=False, log=messages.append) == run.out
    _assert_same_r(run.out, reference)
    assert not run.checkpoint_path.exists()
    assert len(results.read_run(run.out)["scores/value"]) == len(results.read_run(reference)["scores/value"])


# --- 5. --out is this run's own file, or absent; one process at a time -------------------------------------------

def _cli_run(root, out, *extra):
    from bench.cli import main

    return main(["run", "--dataset", "synthetic", "--root", str(root), "--weights", "none", "--tasks",
                 ",".join(TASKS), "--image-size", "64", "--batch-size", "8", "--device", "cpu", "--workers", "0",
                 "--out", str(out), "--no-progress", *extra])


def test_out_that_is_not_this_runs_result_is_refused(small_root, reference, tmp_path, capsys):
    text = tmp_path / "notes.txt"
    text.write_text("my notes")
    assert _cli_run(small_root, text) == 2
    assert "notes.txt" in one_error_line(capsys) and text.read_text() == "my notes"
    other = tmp_path / "other.h5"
    shutil.copy(reference, other)
    before = file_sha256(other)
    assert _cli_run(small_root, other, "--seed", "1") == 2  # another configuration's complete result
    assert "holds another run" in one_error_line(capsys) and file_sha256(other) == before
    folder = tmp_path / "a_folder.h5"
    folder.mkdir()
    assert _cli_run(small_root, folder) == 2
    assert "not a regular file" in one_error_line(capsys)


def test_a_second_process_on_the_same_out_is_refused(small_root, tmp_path):
    run = prepare(make_run_config(small_root, TASKS), out=tmp_path / "run.h5")
    with open(tmp_path / "run.h5.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # another process holds the run
        with pytest.raises(BenchError, match="another process is running"):
            execute(run, **QUIET)
    assert not run.out.exists()
    execute(run, **QUIET)  # the lock is free again
    assert results.is_complete(run.out, run.run_key)


# --- 6. an edited R is not published -----------------------------------------------------------------------------

def test_collect_refuses_an_r_that_its_scores_contradict(reference, tmp_path):
    from bench.report.collect import ProvenanceError, collect

    runs = tmp_path / "outputs" / "synthetic" / "runs"
    runs.mkdir(parents=True)
    path = runs / reference.name
    shutil.copy(reference, path)
    collection = collect(tmp_path / "outputs", "synthetic")
    with h5py.File(path, "r+", locking=False) as f:
        r = f["R/image"][1, 0]
        f["R/image"][1, 0] = 1.0 if r < 1.0 else 0.99  # another number, typed in
    with pytest.raises(ProvenanceError, match=rf"{path.name}: R/image\[1,0\]"):
        collect(tmp_path / "outputs", "synthetic")
    assert [e.get("scores_checked") for e in collection.inputs] == [True]  # the manifest says it was checked


# --- 7, 8. checkpoints cannot run code; a bad one is kept aside and the run starts afresh ------------------------

class _Planted:
    """Unpickling this creates a marker file: what a planted checkpoint would do with weights_only=False."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (Path.touch, (Path(self.marker),))


def _truncated(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


@pytest.mark.parametrize("kind", ["planted", "truncated", "foreign"])
def test_bad_checkpoint_is_moved_aside_and_the_run_restarts(kind, small_root, reference, tmp_path):
    run = _partial(small_root, tmp_path / "run.h5")
    marker = tmp_path / "code-ran"
    if kind == "planted":
        torch.save({"run_key": run.run_key, "steps_done": 1, "protocol": _Planted(marker)}, run.checkpoint_path)
    elif kind == "truncated":
        _truncated(run.checkpoint_path)
    else:
        torch.save(torch.ones(3), run.checkpoint_path)  # another program's file
    messages = []
    execute(run, progress=False, log=messages.append)
    assert not marker.exists()
    bad = list(tmp_path.glob("run.h5.ckpt.bad-*"))
    assert len(bad) == 1 and any("starting the run afresh" in m and bad[0].name in m for m in messages), messages
    assert not any("resuming" in m for m in messages)
    _assert_same_r(run.out, reference)


def test_checkpoint_module_round_trips_plain_data_and_refuses_code(tmp_path):
    from bench import checkpoint
    from bench.errors import CheckpointError

    obj = {"a": np.arange(4, dtype=np.int16), "s": [(1, 0, np.zeros(3, np.int8), np.ones(3))], "t": torch.eye(2),
           "n": None, "f": 0.5, "z": np.array(-0.5), "e": np.zeros((0, 3), np.float32),
           "v": np.arange(12.0).reshape(3, 4)[:, ::2]}  # 0-d, empty, and a non-contiguous view
    checkpoint.save(tmp_path / "c.ckpt", obj)
    back = checkpoint.load(tmp_path / "c.ckpt")
    assert all(back[k].shape == obj[k].shape and np.array_equal(back[k], obj[k]) for k in ("z", "e", "v"))
    assert back["a"].dtype == np.int16 and np.array_equal(back["a"], obj["a"]) and torch.equal(back["t"], obj["t"])
    assert back["s"][0][2].dtype == np.int8 and back["n"] is None and back["f"] == 0.5
    assert list(tmp_path.iterdir()) == [tmp_path / "c.ckpt"]  # no temp file left
    with pytest.raises(CheckpointError, match=r"d\.ckpt: cannot store this state: checkpoint: /x is a object "
                                              r"\(only plain data is stored\)"):
        checkpoint.save(tmp_path / "d.ckpt", {"x": object()})
    assert not (tmp_path / "d.ckpt").exists()
    torch.save({"format": "bench-checkpoint", "version": 1, "payload": _Planted(tmp_path / "m")}, tmp_path / "e")
    with pytest.raises(CheckpointError, match="never unpickled"):
        checkpoint.load(tmp_path / "e")
    assert not (tmp_path / "m").exists()


# --- 12, 15, 16. SIGTERM: a message, the run resumable; logs get plain lines -----------------------------------------

@pytest.mark.slow
def test_sigterm_stops_with_a_message_and_the_run_resumes_with_plain_log_lines(small_root, tmp_path):
    """The real CLI with its output to files, as in a SLURM job. SIGTERM after the first checkpoint: a message,
    exit 143, the file failed and resumable. The rerun resumes; its stderr has no carriage-return bars (progress
    bars are requested but stderr is no terminal) and its warnings (a one-class test set) are one plain line."""
    root = tmp_path / "copy"
    shutil.copytree(small_root, root)
    for d in (root / "stripes" / "test").iterdir():  # only good test images left: a one-class test set
        if d.name != "good":
            shutil.rmtree(d)
    shutil.rmtree(root / "stripes" / "ground_truth")
    out = tmp_path / "term.h5"
    tasks = ["chip", "stripes", "disc"]
    cmd = [sys.executable, "-m", "bench", "run", "--dataset", "synthetic", "--root", str(root), "--weights",
           "none", "--tasks", ",".join(tasks), "--image-size", "64", "--batch-size", "8", "--device", "cpu",
           "--workers", "0", "--out", str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([*cmd, "--no-progress"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    ckpt = out.with_name(out.name + ".ckpt")
    deadline = time.time() + 120
    while not ckpt.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    attrs = results.read_run(out)["attrs"]
    if attrs["steps_done"] == len(tasks):
        pytest.skip("the run finished before SIGTERM arrived")
    assert proc.returncode == 143 and "interrupted (SIGTERM)" in err and "Traceback" not in err, err
    assert attrs["status"] == "failed" and "resumable" in attrs["error"] and ckpt.is_file()
    second = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0 and "resuming term.h5" in second.stdout, second.stderr
    assert "learning task 3/3: disc" in second.stdout and "[step 3/3] disc" in second.stdout
    assert results.read_run(out)["attrs"]["status"] == "complete"
    assert "\r" not in second.stderr and "it/s" not in second.stderr, second.stderr
    lines = second.stderr.splitlines()
    assert lines and all(line.startswith("warning: ") and ".py:" not in line for line in lines), second.stderr


# --- 4, 13. settings checked before any work, each message naming the setting ----------------------------------

@pytest.mark.parametrize("extra, message", [
    (["--image-size", "0"], r"--image-size 0 is not allowed \(expected an integer from 32"),
    (["--batch-size", "0"], r"--batch-size 0 is not allowed"),
    (["--seed", "-1"], r"--seed -1 is not allowed"),
    (["--seed", str(2**40)], rf"--seed {2**40} is not allowed"),
    (["--workers", "-2"], r"--workers -2 is not allowed"),
    (["--max-steps", "0"], r"--max-steps 0 is not allowed"),
    (["--set", "coreset_ratio=abc"], r"coreset_ratio='abc' is not allowed \(expected a finite number > 0"),
    (["--model", "padim", "--set", "eps=-1"], r"padim hyperparameter eps=-1 is not allowed"),
])
def test_bad_settings_are_one_line_before_any_work(extra, message, small_root, tmp_path, capsys):
    out = tmp_path / "r.h5"
    assert _cli_run(small_root, out, *extra) == 2
    assert __import__("re").search(message, one_error_line(capsys))
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_empty_task_list_and_huge_image_size_name_the_option(small_root, tmp_path, capsys, monkeypatch):
    from bench.cli import main

    assert main(["run", "--dataset", "synthetic", "--root", str(small_root), "--tasks", ",", "--out",
                 str(tmp_path / "r.h5")]) == 2
    assert "--tasks ','" in (line := one_error_line(capsys)) and "none of them empty" in line
    monkeypatch.setattr("bench.config.memory_limit_bytes", lambda: 2**30)  # a 1 GiB machine
    assert _cli_run(small_root, tmp_path / "r.h5", "--image-size", "2048") == 2
    assert "--image-size 2048 with --batch-size 8 needs about" in one_error_line(capsys)
    assert list(tmp_path.iterdir()) == []


def test_tilde_in_root_is_expanded_everywhere(small_root, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(small_root.parent))
    assert _cli_run(f"~/{small_root.name}", tmp_path / "r.h5", "--max-steps", "1") == 0
    assert results.read_run(tmp_path / "r.h5")["attrs"]["steps_done"] == 1


def test_grid_points_are_validated_like_bench_run(small_root, tmp_path):
    from bench.hpc import grid as grids
    from helpers import write_grid

    path = write_grid(tmp_path / "g.yaml", seeds=[-1])
    with pytest.raises(ConfigError, match="--seed -1 is not allowed"):
        grids.expand(grids.load_grid("synthetic", path), grids.load_profile("cpu"), grids.Selection(), small_root,
                     tmp_path)


# --- 9. output folders and disks that cannot take the result ------------------------------------------------------

def test_unwritable_output_is_one_line_before_any_work(small_root, tmp_path, capsys, monkeypatch):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    assert _cli_run(small_root, blocker / "r.h5") == 2
    assert "a_file: output folder is not a writable directory" in one_error_line(capsys)

    import errno

    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("bench.continual.guards.os.write", full)
    assert _cli_run(small_root, tmp_path / "out" / "r.h5") == 2
    assert "output folder is not writable (No space left on device)" in one_error_line(capsys)
    assert not (tmp_path / "out" / "r.h5").exists()


def test_oserror_mid_run_is_one_line(small_root, tmp_path, capsys, monkeypatch):
    import errno

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "r.h5"))

    monkeypatch.setattr("bench.results.write_run", full)
    assert _cli_run(small_root, tmp_path / "r.h5") == 2
    assert "r.h5: No space left on device" in one_error_line(capsys)


# --- 10, 11. failures during a run: one line, the file marked failed with the reason ---------------------------

def test_truncated_image_found_mid_run_fails_the_run_naming_the_file(small_root, tmp_path, capsys):
    root = tmp_path / "copy"
    shutil.copytree(small_root, root)
    image = sorted((root / "stripes" / "test" / "good").iterdir())[0]
    data = image.read_bytes()
    image.write_bytes(data[: len(data) // 2])  # the header still reads: only decoding fails
    out = tmp_path / "r.h5"
    assert _cli_run(root, out) == 2
    assert image.name in one_error_line(capsys)
    attrs = results.read_run(out)["attrs"]
    assert attrs["status"] == "failed" and attrs["steps_done"] == 1 and image.name in attrs["error"]


def test_non_finite_scores_fail_the_run(small_root, tmp_path, capsys, monkeypatch):
    from bench.models.patchcore import PatchCoreTaskBanks

    real = PatchCoreTaskBanks.predict

    def diverged(self, split, idx):
        pred = real(self, split, idx)
        pred.scores[:] = np.nan
        return pred

    monkeypatch.setattr(PatchCoreTaskBanks, "predict", diverged)
    out = tmp_path / "r.h5"
    assert _cli_run(small_root, out) == 2
    assert "non-finite image scores or anomaly maps on synthetic/chip at step 1" in one_error_line(capsys)
    attrs = results.read_run(out)["attrs"]
    assert attrs["status"] == "failed" and "non-finite" in attrs["error"]


@pytest.mark.parametrize("content, message", [
    ("tensor", "not a state dict"),
    ("nan", "holds NaN or infinite values"),
    ("shapes", "not resnet18 weights .*size mismatch"),
])
def test_bad_weights_file_is_one_line(content, message, small_root, tmp_path, capsys):
    import timm

    path = tmp_path / "w.pt"
    if content == "tensor":
        torch.save(torch.ones(3), path)
    else:
        sd = timm.create_model("resnet18", pretrained=False).state_dict()
        if content == "nan":
            sd["conv1.weight"][0, 0, 0, 0] = float("nan")
        else:
            sd["conv1.weight"] = torch.zeros(8, 3, 7, 7)
        torch.save(sd, path)
    from bench.cli import main

    argv = ["run", "--dataset", "synthetic", "--root", str(small_root), "--weights", str(path), "--tasks",
            ",".join(TASKS), "--image-size", "64", "--batch-size", "8", "--device", "cpu", "--workers", "0",
            "--out", str(tmp_path / "r.h5"), "--no-progress"]
    assert main(argv) == 2
    assert __import__("re").search(message, one_error_line(capsys))
    assert not (tmp_path / "r.h5").exists()


def test_corrupt_generation_record_is_one_line(small_root, tmp_path, capsys):
    from bench.cli import main

    root = tmp_path / "copy"
    shutil.copytree(small_root, root)
    (root / "synthetic.json").write_text("{not json")
    assert main(["run", "--dataset", "synthetic", "--root", str(root), "--ordering", "easy_to_hard"]) == 2
    assert "synthetic.json: corrupt generation record" in one_error_line(capsys)


# --- 15, 16. plain output in logs ----------------------------------------------------------------------------------

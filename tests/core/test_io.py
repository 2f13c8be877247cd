"""bench.io: atomic writes leave the old file or the new one, and never a temp file, whatever fails mid-write."""

import pytest
from torch import nn

from bench.io import atomic_path, write_text_atomic
from bench.models.efficientad import pdn


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temp(tmp_path):
    target = tmp_path / "result.json"
    write_text_atomic(target, "old\n")
    with pytest.raises(OSError, match="disk full"):
        with atomic_path(target) as tmp:
            tmp.write_text("half")
            raise OSError(28, "disk full")
    assert target.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["result.json"]


def test_a_successful_write_replaces_the_file(tmp_path):
    target = tmp_path / "sub" / "x.txt"
    with atomic_path(target) as tmp:
        tmp.write_text("new")
    assert target.read_text() == "new"
    assert [p.name for p in target.parent.iterdir()] == ["x.txt"]


def test_a_teacher_save_that_fails_leaves_nothing(tmp_path, monkeypatch):
    """save_teacher writes through atomic_path: safetensors failing mid-file (a full disk) leaves no stray temp."""
    import safetensors.torch

    def failing_save(tensors, filename, metadata=None):
        open(filename, "wb").write(b"partial")
        raise RuntimeError("No space left on device")

    monkeypatch.setattr(safetensors.torch, "save_file", failing_save)
    with pytest.raises(RuntimeError, match="No space"):
        pdn.save_teacher(tmp_path / "teacher.safetensors", nn.Sequential(nn.Conv2d(1, 1, 1)), padding=False)
    assert list(tmp_path.iterdir()) == []


# --- temp files: exclusive, unpredictable, never through a symlink (issue 46 §2) ------------------------------------

def _writers(tmp_path):
    """Every writer that goes through a temp file, as (target, write it, read it back)."""
    import numpy as np

    from bench import checkpoint, results
    from bench.data import manifest

    def scenario_manifest(path):
        manifest.write({"format": "bench-scenario"}, path)

    return {
        "text": (tmp_path / "page.html", lambda p: write_text_atomic(p, "new"), lambda p: p.read_text() == "new"),
        "result": (tmp_path / "run.h5", lambda p: results.write_run(p, {"status": "complete"},
                                                                    {"R/image": np.eye(2)}, ["a", "b"]),
                   lambda p: results.read_run(p)["attrs"]["status"] == "complete"),
        "checkpoint": (tmp_path / "run.h5.ckpt", lambda p: checkpoint.save(p, {"x": 1}),
                       lambda p: checkpoint.load(p) == {"x": 1}),
        "scenario manifest": (tmp_path / "s.json", scenario_manifest, lambda p: "bench-scenario" in p.read_text()),
    }


def _predictable_names(target):
    """Every temp name a writer of this suite used to choose: `<name>.tmp.<host>.<pid>`, `.<name>.tmp-<pid>`."""
    import os
    import socket
    return [target.with_name(f"{target.name}.tmp.{socket.gethostname()}.{os.getpid()}"),
            target.with_name(f".{target.name}.tmp-{os.getpid()}")]


@pytest.mark.parametrize("writer", ["text", "result", "checkpoint", "scenario manifest"])
def test_a_symlink_planted_at_a_guessable_temp_name_is_not_written_through(tmp_path, writer, monkeypatch):
    # the writers' temp handling is under test, not the scenario schema
    monkeypatch.setattr("bench.data.manifest.validate", lambda m, where: m)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    victim = outside / "victim"
    victim.write_text("keep")
    folder = tmp_path / "out"
    folder.mkdir()
    target, write, check = _writers(folder)[writer]
    for name in _predictable_names(target):
        name.symlink_to(victim)
    write(target)
    assert victim.read_text() == "keep" and [p.name for p in outside.iterdir()] == ["victim"]
    assert check(target) and not target.is_symlink()
    temps = [p for p in folder.iterdir() if p != target and not p.is_symlink()]
    assert temps == []  # nothing but the result and the planted links


def test_new_temp_names_are_fresh_and_created_exclusively(tmp_path, monkeypatch):
    """Even a name the attacker guessed right (here: the random generator made to propose it first) is skipped,
    not followed: the file is created with O_EXCL | O_NOFOLLOW."""
    import tempfile

    from bench.io import new_temp, temp_prefix

    victim = tmp_path / "victim"
    victim.write_text("keep")
    target = tmp_path / "out" / "x.csv"
    target.parent.mkdir()
    (target.parent / f"{temp_prefix(target)}guessed").symlink_to(victim)
    names = iter(["guessed", "fresh01"])
    monkeypatch.setattr(tempfile, "_get_candidate_names", lambda: names)
    tmp = new_temp(target)
    assert tmp.name == f"{temp_prefix(target)}fresh01" and tmp.is_file() and not tmp.is_symlink()
    tmp.write_text("mine")
    assert victim.read_text() == "keep"
    monkeypatch.undo()
    a, b = new_temp(target.with_name("y")), new_temp(target.with_name("y"))
    assert a != b  # two writers of one target never share a temp


def test_temp_files_get_the_mode_a_plain_create_gives(tmp_path):
    """mkstemp makes 0600 files; a result file a group shares must stay readable as before."""
    import os
    plain = tmp_path / "plain"
    plain.write_text("x")
    write_text_atomic(tmp_path / "atomic", "x")
    assert os.stat(tmp_path / "atomic").st_mode & 0o777 == os.stat(plain).st_mode & 0o777


def test_every_replace_in_the_package_goes_through_bench_io():
    """The class, not one writer: a module that renames a temp file into place itself (os.replace, Path.rename
    or .replace) chooses its own temp name; only bench.io may. Listed exceptions rename whole folders made by
    mkdir of a random name (exclusive) or move a damaged file aside."""
    import re
    from pathlib import Path

    package = Path(__file__).resolve().parents[2] / "bench"
    allowed = {"io.py", "data/synthetic.py", "checkpoint.py:move_aside"}
    offenders = []
    for path in sorted(package.rglob("*.py")):
        rel = str(path.relative_to(package))
        if rel in allowed:
            continue
        text = path.read_text()
        for m in re.finditer(r"os\.replace\(|os\.rename\(|\.rename\(tmp|\.replace\(tmp", text):
            line = text[:m.start()].count("\n") + 1
            func = re.findall(r"^def (\w+)", text[:m.start()], re.M)
            if f"{rel}:{func[-1] if func else ''}" not in allowed:
                offenders.append(f"{rel}:{line}")
    assert offenders == []

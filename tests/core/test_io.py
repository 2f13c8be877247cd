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

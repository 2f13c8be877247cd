"""The run's output lock (`<out>.lock`, fcntl.flock): held for the run, refused to a second process, and gone
when the run ends (zero-byte lock files once stayed beside every result), without a window in which two
processes could both believe they hold it."""

from __future__ import annotations

import fcntl
import os

import pytest

from bench.continual import guards
from bench.continual.guards import output_lock
from bench.errors import BenchError
from bench.io import lock_held_elsewhere


def test_the_lock_is_held_during_the_run_refused_to_a_second_and_removed_after(tmp_path):
    out = tmp_path / "run.h5"
    lock = tmp_path / "run.h5.lock"
    with output_lock(out):
        assert lock_held_elsewhere(lock, exclusive=True)
        with pytest.raises(BenchError, match="another process is running this run"), output_lock(out):
            pass
        assert lock.exists()  # the refused one removed nothing
    assert not lock.exists()
    with pytest.raises(RuntimeError), output_lock(out):  # a failed run removes it too
        raise RuntimeError("boom")
    assert not lock.exists()


def test_a_lock_file_removed_between_open_and_flock_is_not_trusted(tmp_path, monkeypatch):
    """The previous holder finishes (unlinks, releases) after this process opened the file but before it locked
    it: the lock it then gets is on a file no longer on disk, so it must retry on the path's new file."""
    out = tmp_path / "run.h5"
    lock = tmp_path / "run.h5.lock"
    lock.touch()  # the previous holder's file
    real, calls = fcntl.flock, []

    def flock(fd, op):
        calls.append(fd)
        if len(calls) == 1:
            os.unlink(lock)  # the holder ends its run in between
        return real(fd, op)

    monkeypatch.setattr(guards.fcntl, "flock", flock)
    with output_lock(out):
        monkeypatch.setattr(guards.fcntl, "flock", real)
        assert len(calls) == 2 and lock.exists() and lock_held_elsewhere(lock, exclusive=True)  # the file on disk is the locked one
    assert not lock.exists()

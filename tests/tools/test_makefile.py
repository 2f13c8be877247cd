"""The Makefile's venv stamp: installed once, then up to date, even when a prerequisite is dated in the future."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")
def test_a_lock_file_dated_in_the_future_does_not_reinstall_on_every_target(tmp_path):
    """Issue 31 §6: requirements.lock with a future mtime left the stamp older after every install, so every
    make target reinstalled the venv. A fake venv python records each install; the second `make venv` must
    find the stamp up to date."""
    shutil.copy(REPO / "Makefile", tmp_path / "Makefile")
    for name in ("requirements.lock", "pyproject.toml"):
        (tmp_path / name).write_text("")
    future = time.time() + 86400
    os.utime(tmp_path / "requirements.lock", (future, future))
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path / 'installs.txt'}\n")
    python.chmod(0o755)
    first = subprocess.run(["make", "-s", "venv"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert first.returncode == 0, first.stderr
    assert "requirements.lock is dated in the future" in first.stderr
    assert subprocess.run(["make", "-q", "venv"], cwd=tmp_path, timeout=60).returncode == 0  # up to date
    assert len((tmp_path / "installs.txt").read_text().splitlines()) == 2  # lock + editable, once

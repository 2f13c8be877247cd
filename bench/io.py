"""File plumbing every layer may use, without h5py, pandas or torch: atomic text writes, per-process temp names and
file digests. Result files (HDF5) are bench.results' business; this module is what it and everything below it share,
so that writing a small JSON file or hashing a weights file never imports the HDF5 stack (slow on a login node)."""

from __future__ import annotations

import hashlib
import os
import socket
from contextlib import contextmanager
from pathlib import Path


def tmp_path(path: Path) -> Path:
    """A temp name of `path` that no other process writes: `<name>.tmp.<host>.<pid>`."""
    return path.with_name(f"{path.name}.tmp.{socket.gethostname()}.{os.getpid()}")


@contextmanager
def atomic_path(path: Path):
    """Yield a temp name to write `path` through (parents created); on success it replaces `path` in one step, and
    on any failure (a full disk, a kill signal turned into an exception) the temp file is removed, so neither a
    half-written file nor a stray temp stays behind."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = tmp_path(path)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_text_atomic(path: Path, text: str) -> None:
    """Write a text file atomically: readers see the old file or the new one, never half."""
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def file_sha256(path: Path) -> str:
    """SHA-256 of a file's bytes, read in 1 MiB blocks (weights files and result files can be large)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()

"""File plumbing every layer may use, without h5py, pandas or torch: atomic text writes, per-process temp names and
file digests. Result files (HDF5) are bench.results' business; this module is what it and everything below it share,
so that writing a small JSON file or hashing a weights file never imports the HDF5 stack (slow on a login node)."""

from __future__ import annotations

import hashlib
import os
import socket
from pathlib import Path


def tmp_path(path: Path) -> Path:
    """A temp name of `path` that no other process writes: `<name>.tmp.<host>.<pid>`."""
    return path.with_name(f"{path.name}.tmp.{socket.gethostname()}.{os.getpid()}")


def write_text_atomic(path: Path, text: str) -> None:
    """Write a text file atomically (parents created): readers see the old file or the new one, never half."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = tmp_path(path)
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def file_sha256(path: Path) -> str:
    """SHA-256 of a file's bytes, read in 1 MiB blocks (weights files and result files can be large)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()

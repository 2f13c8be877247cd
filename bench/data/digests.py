"""Content digests of a dataset's files: the run key covers the bytes of every image and mask it reads.

The index alone (task, split, label, relative paths) cannot tell two datasets with the same file names apart, nor
an image replaced in place; a result keyed by it would be reported done for data it never saw. So the run key
includes the SHA-256 of every listed file. Hashing ten thousand images takes a while (VisA-sized: see
docs/cluster.md), and planning a grid prepares a hundred runs over the same files, so digests are cached by
absolute path in one JSON file: $BENCH_CACHE_DIR/file-digests.json (default $XDG_CACHE_HOME/bench or
~/.cache/bench). An entry is reused only while the file's bench.io.FileVersion (inode, ctime, size and mtime) is
unchanged; otherwise the file is rehashed. Size and mtime alone are not enough: `cp -p`, `rsync -t` or `os.utime`
put an old mtime on new content, but no program can set the ctime (the kernel sets it on every write, rename or
metadata change) and a file renamed into place has another inode. What the cache still trusts: a file system that
updates ctime on every change (local disks, NFS and Lustre do; a FUSE mount may not: delete the cache file after
replacing data there). A missing or unreadable cache file means hashing afresh.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd

from bench.errors import DatasetError
from bench.io import file_sha256, file_version, write_text_atomic

CACHE_NAME = "file-digests.json"
CACHE_VERSION = 2  # 2: entries keyed on (st_ino, st_ctime_ns, st_size, st_mtime_ns); 1: size, mtime

_memo: dict[str, list] | None = None  # the cache file's entries, loaded once per process
_memo_path: Path | None = None


def cache_path() -> Path:
    base = os.environ.get("BENCH_CACHE_DIR")
    if base:
        return Path(base).expanduser() / CACHE_NAME
    xdg = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(xdg).expanduser() / "bench" / CACHE_NAME


def _entries(path: Path) -> dict[str, list]:
    global _memo, _memo_path
    if _memo is None or _memo_path != path:
        try:
            data = json.loads(path.read_text())
            ok = isinstance(data, dict) and data.get("version") == CACHE_VERSION and isinstance(data.get("files"), dict)
            _memo = data["files"] if ok else {}
        except (OSError, ValueError):
            _memo = {}
        _memo_path = path
    return _memo


def _save(path: Path, entries: dict) -> None:
    try:
        write_text_atomic(path, json.dumps({"version": CACHE_VERSION, "files": entries}, separators=(",", ":")))
    except OSError:
        pass  # a read-only home only costs the next run a rehash


def file_digests(paths: list) -> list[str]:
    """SHA-256 of each file (absolute paths), from the cache where its inode, ctime, size and mtime still match."""
    cache = cache_path()
    entries = _entries(cache)
    keys = [os.fspath(p) for p in paths]
    stats = []
    for key in keys:
        try:
            stats.append(file_version(key))
        except OSError as e:
            raise DatasetError(f"{key}: cannot read ({e.strerror})") from None
    todo = [i for i, (k, s) in enumerate(zip(keys, stats))
            if not (isinstance(entries.get(k), list) and len(entries[k]) == 5 and tuple(entries[k][:4]) == s)]
    if todo:
        def digest(i):
            try:
                return file_sha256(keys[i])
            except OSError as e:
                raise DatasetError(f"{keys[i]}: cannot read ({e.strerror})") from None

        # hashlib releases the GIL on large buffers: threads overlap reading and hashing
        with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
            for i, sha in zip(todo, pool.map(digest, todo)):
                entries[keys[i]] = [*stats[i], sha]
        _save(cache, entries)
    return [entries[k][4] for k in keys]


def content_sha256(index: pd.DataFrame, roots) -> str:
    """One SHA-256 over (dataset, relative path, file SHA-256) of every image and mask in `index`; `roots` is the
    dataset root, or {dataset: root} for the multi-dataset stream."""
    bases = {d: os.path.abspath(roots[d] if isinstance(roots, Mapping) else roots) for d in index["dataset"].unique()}
    masks = index[index["mask_path"] != ""]
    listed = sorted({(d, rel) for d, rel in [*zip(index["dataset"], index["image_path"]),
                                              *zip(masks["dataset"], masks["mask_path"])]})
    shas = file_digests([f"{bases[d]}/{rel}" for d, rel in listed])
    h = hashlib.sha256()
    for (dataset, rel), sha in zip(listed, shas):
        h.update(f"{dataset}\0{rel}\0{sha}\n".encode())
    return h.hexdigest()

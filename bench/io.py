"""File plumbing every layer may use, without h5py, pandas or torch: atomic writes through exclusive temp files,
publication locks and file digests. Result files (HDF5) are bench.results' business; this module is what it and
everything below it share, so that writing a small JSON file or hashing a weights file never imports the HDF5 stack
(slow on a login node).

Every temp file the suite writes is made here, by `new_temp`: created with O_CREAT|O_EXCL|O_NOFOLLOW under a name
with a random part, in the target's own folder (so the final rename stays on one file system). A file or symlink
another user planted at a name they guessed can neither be written through nor make the write fail."""

from __future__ import annotations

import fcntl
import hashlib
import os
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import NamedTuple


def _read_umask() -> int:
    """The process umask, read without changing it where Linux shows it (os.umask can only read it by setting it,
    which races with threads creating files)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_UMASK = _read_umask()


def temp_prefix(path: Path) -> str:
    """What every temp name of `path` starts with (a killed write's leftover is found by it)."""
    return f"{Path(path).name}.tmp."


def new_temp(path: Path) -> Path:
    """Create an empty temp file for writing `path`, next to it, under an unpredictable name, exclusively (never
    through a symlink or into an existing file); its mode is what a plain create would give (mkstemp's 0600 would
    make a result file unreadable to the group that shares the outputs)."""
    path = Path(path)
    fd, name = tempfile.mkstemp(prefix=temp_prefix(path), dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)
    finally:
        os.close(fd)
    return Path(name)


@contextmanager
def atomic_path(path: Path):
    """Yield a fresh temp file (see `new_temp`) to write `path` through (parents created); on success it replaces
    `path` in one step, and on any failure (a full disk, a kill signal turned into an exception) the temp file is
    removed, so neither a half-written file nor a stray temp stays behind."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = new_temp(path)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_text_atomic(path: Path, text: str) -> None:
    """Write a text file atomically: readers see the old file or the new one, never half."""
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def hold_lock(lock_file: Path, mode: int | None = None) -> int:
    """An fd holding an exclusive flock on `lock_file` (its folder made and the file created if missing, with
    `mode`, default 0666 less the umask; never through a symlink), waiting for it; closing the fd releases it."""
    lock_file = Path(lock_file)
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_file, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o666 & ~_UMASK if mode is None else mode)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextmanager
def locked(lock_file: Path, mode: int | None = None):
    """Hold an exclusive flock on `lock_file` (`hold_lock`) for the block, which gets the fd: the writers of one
    publication take turns, so readers never see the parts of two. The file stays (removing it would let a
    waiter lock an unlinked file while a newcomer locks a fresh one)."""
    fd = hold_lock(lock_file, mode)
    try:
        yield fd
    finally:
        os.close(fd)  # closing releases the lock


def lock_held_elsewhere(path, exclusive: bool = False) -> bool:
    """Whether another open file description holds a lock on the file at `path` that this one could not share
    (`exclusive`: could not take alone); False when the file is missing or a symlink."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def file_sha256(path: Path) -> str:
    """SHA-256 of a file's bytes, read in 1 MiB blocks (weights files and result files can be large)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class FileVersion(NamedTuple):
    """What tells one version of a file from the next without reading it. Size and mtime alone are not enough:
    `cp -p`, `rsync -t` or `os.utime` put an old mtime on new content, but no program can set the ctime (the
    kernel sets it on every write, rename or metadata change) and a file renamed into place has another inode.
    A tuple, so a JSON cache can store it as a list and compare it back."""

    ino: int
    ctime_ns: int
    size: int
    mtime_ns: int


def file_version(path) -> FileVersion:
    """`path`'s FileVersion (OSError when it cannot be stat'ed)."""
    st = os.stat(path)
    return FileVersion(st.st_ino, st.st_ctime_ns, st.st_size, st.st_mtime_ns)


@dataclass(frozen=True)
class PinnedRead:
    """A pinned file's content with CRLF read as LF (a Windows checkout must not change the digest), its SHA-256
    and the digest it is pinned to (None: not pinned)."""

    data: bytes
    digest: str
    pinned: str | None

    @property
    def intact(self) -> bool:
        return self.pinned is None or self.digest == self.pinned


_RACY_NS = 2_000_000_000
_PINNED: dict[str, tuple[FileVersion, PinnedRead]] = {}  # resolved path -> its last version read (unpinned)


def read_pinned(path, pinned: str | None) -> PinnedRead:
    """`path`'s canonical content and SHA-256, read and hashed once per file version in this process (an
    aggregate checks, digests and cites the same published tables several times). The caller judges `intact`:
    whether an edit is refused or accepted is its rule. OSError when the file cannot be read."""
    key = os.path.realpath(path)
    version = file_version(key)
    cached = _PINNED.get(key)
    if cached is None or cached[0] != version:
        with open(key, "rb") as f:
            data = f.read().replace(b"\r\n", b"\n")
        cached = (version, PinnedRead(data, hashlib.sha256(data).hexdigest(), None))
        # not cached when changed while read, nor while its ctime is within the clock's coarse tick of now (a
        # rewrite of the same size in that tick would keep every field: git's "racily clean" files)
        if file_version(key) == version and time.time_ns() - version.ctime_ns > _RACY_NS:
            _PINNED[key] = cached
    return replace(cached[1], pinned=pinned)


def recorded_paths(directory: Path, names, under: tuple[str, ...] = ()) -> set[Path]:
    """`directory`/name for each name a record of written files lists (a manifest's outputs, the page's own files)
    that stays inside `directory` and, given `under`, inside one of those folders. Any other name ('..',
    absolute, empty, not text), as a crafted record may hold, is ignored, not followed: removing the files a
    record lists must never reach outside the folder it describes."""
    paths = set()
    for name in names:
        rel = Path(name) if isinstance(name, str) else None
        if rel is None or not rel.parts or rel.is_absolute() or ".." in rel.parts:
            continue
        if not under or rel.parts[0] in under:
            paths.add(directory / rel)
    return paths

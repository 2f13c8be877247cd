"""What a submission trusts: files only the submitter (or root) can change, and plain names.

submitit's pickled job files are code: a job loads (unpickles) its file when its array task starts, so whoever can
replace that file while the task is pending runs code as the job's user. The job folder is therefore created 0700
and refused when anyone else could write to it or to a folder above it (which would let them rename it away and
put their own in its place); a sticky folder such as /tmp is safe above it, never as the job folder itself, where
another user could create the file a job will load before the submitter writes it. A submission record lies in
`outputs/`, which may be a group folder: the names it holds (profile, dataset) are plain names, looked up in their
own folders, never paths.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from bench.errors import ConfigError

_PLAIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def plain_name(value, what: str, source: str) -> str:
    """`value` if it is a plain file name (letters, digits, `_.-`; no `/`, no `..`), else one line naming `source`."""
    if not isinstance(value, str) or not _PLAIN.fullmatch(value) or ".." in value:
        raise ConfigError(f"{source}: {what} {value!r} is not a plain name (letters, digits, '_', '.', '-'): "
                          f"{what}s are looked up by name in their folder, never as a path")
    return value


def writable_by_others(path: Path, holds_jobs: bool = True) -> Path | None:
    """The first folder from `path` (resolved) up to `/` that a user other than this one (or root) can change:
    owned by another user, or group/other-writable. Above `path` the sticky bit makes a writable folder safe (in
    /tmp nobody renames another's entries); `path` itself, where the job files go, must not be writable by others
    even when sticky: there anyone may create the file a job will load before it exists (`holds_jobs=False`: `path`
    is a folder above the job folder). None when all are safe."""
    me = os.geteuid()
    target = Path(path).resolve()
    for folder in [target, *target.parents]:
        info = folder.stat()
        if info.st_uid not in (me, 0):
            return folder
        sticky_above = (folder != target or not holds_jobs) and info.st_mode & stat.S_ISVTX
        if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not sticky_above:
            return folder
    return None


def private_folder(path: Path, what: str) -> Path:
    """Create `path` (mode 0700; parents as usual) and return it; refuse it in one line when someone else could
    replace what is put there (see the module doc)."""
    path = Path(path).resolve()
    existing = next(p for p in (path, *path.parents) if p.exists())
    # checked before creating anything, so a refusal leaves nothing; an existing parent is judged as a parent
    unsafe = writable_by_others(existing, holds_jobs=existing == path)
    if unsafe is None:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        unsafe = writable_by_others(path)
    if unsafe is not None:
        info = unsafe.stat()
        writers = [w for bit, w in ((stat.S_IWGRP, "its group"), (stat.S_IWOTH, "every user")) if info.st_mode & bit]
        who = (f"owned by uid {info.st_uid}" if info.st_uid not in (os.geteuid(), 0)
               else f"writable by {' and '.join(writers)} (mode {stat.S_IMODE(info.st_mode):04o})")
        raise ConfigError(f"{unsafe}: {who}, so someone else could replace the {what} in {path} before a job "
                          f"loads them (and run code as you): use a folder only you can write (chmod go-w "
                          f"{unsafe}, or --jobs-dir / JOBS_DIR=<private folder>; see docs/cluster.md, Shared outputs)")
    return path


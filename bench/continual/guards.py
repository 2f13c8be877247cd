"""Output guards of a run: its result path is its own, one process at a time writes it, a kill stops it cleanly.

The result path belongs to one run: it must be absent, or hold this run's own (partial) result; other files are
never replaced (`check_output`). An exclusive lock on `<out>.lock` (fcntl.flock) is held for the run's duration, so
two processes cannot run into one file; the lock file is removed when the run ends (`output_lock`). SIGTERM (what
SLURM sends before a kill) becomes `Interrupted` (`stop_on_sigterm`, `check_terminated`). Temp files of writes that
were killed are removed when the run starts again (`remove_stale_temps`).
"""

from __future__ import annotations

import errno
import fcntl
import glob
import os
import signal
import threading
from contextlib import contextmanager
from pathlib import Path

from bench import results
from bench.errors import BenchError, ConfigError
from bench.io import new_temp, temp_prefix


def check_output(out: Path, run_key: str, probe: bool = True) -> None:
    """Refuse, before any work, a result path that is not this run's: only an absent file or one holding this
    run key (complete, running or failed) may be written; this run's complete result needs no writable folder (it
is only reported). Otherwise the folder must take a file: `probe` creates it and
    writes a small file there (a full disk fails now); without it (planning, dry runs) nothing is created and
    only the nearest existing folder is checked."""
    if out.exists() or out.is_symlink():
        if not out.is_file():
            raise ConfigError(f"{out}: --out exists and is not a regular file; refusing to replace it")
        found = results.file_run_key(out)
        if found is None:
            raise ConfigError(f"{out}: --out exists and is not a result file; refusing to replace it")
        if found != run_key:
            raise ConfigError(f"{out}: --out holds another run (run key {found[:12]}, this run {run_key[:12]}); "
                              "refusing to replace it: choose another --out or remove the file")
        if results.is_complete(out, run_key):
            return  # nothing will be written: a finished result on a read-only mount is reported complete
    folder = out.parent
    if not probe:
        existing = next(p for p in (folder, *folder.parents) if p.exists())
        if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
            raise BenchError(f"{existing}: output folder is not a writable directory")
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe_file = new_temp(out.with_name(out.name + ".probe"))
        fd = os.open(probe_file, os.O_WRONLY | os.O_NOFOLLOW)
        try:
            os.write(fd, b"\0" * 4096)  # a full disk fails here, not after the first task
            os.fsync(fd)
        finally:
            os.close(fd)
            os.unlink(probe_file)
    except OSError as e:
        raise BenchError(f"{folder}: output folder is not writable ({e.strerror or e})") from None


@contextmanager
def output_lock(out: Path):
    """Hold an exclusive lock on `<out>.lock` for a run's duration, and remove the lock file when the run ends.
    flock works on local disks and on most cluster file systems (Lustre with flock mount option, NFSv4); on NFSv3
    without lockd it may not exclude.

    The file is unlinked while the lock is still held, so no process can lock it afterwards and believe it owns
    the run; one that opened it just before (and then locks a file no longer on disk) sees that the path is not
    the file it locked and starts over on the path's new file (`_lock_file`)."""
    path = out.with_name(out.name + ".lock")
    fd = _lock_file(path, out)
    try:
        yield
    finally:
        try:
            os.unlink(path)  # ours: while we hold the lock nobody else can have replaced it
        finally:
            os.close(fd)  # closing releases the lock


def _lock_file(path: Path, out: Path) -> int:
    """An fd holding the exclusive lock of the file now at `path` (created if absent); BenchError if another
    process holds it."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            raise BenchError(f"{out}: another process is running this run (lock {path} is held)") from None
        try:
            on_disk = os.stat(path)
        except FileNotFoundError:
            on_disk = None
        locked = os.fstat(fd)
        if on_disk is not None and (on_disk.st_dev, on_disk.st_ino) == (locked.st_dev, locked.st_ino):
            return fd
        os.close(fd)  # the previous holder finished and removed the file we opened: lock the current one


class Interrupted(KeyboardInterrupt):
    """SIGTERM (what SLURM sends before killing a job) or SIGINT: stop, keep the checkpoint, say so."""


_terminated = threading.Event()


@contextmanager
def stop_on_sigterm():
    """Turn SIGTERM into Interrupted while a run executes, unless someone (submitit) already handles it."""
    main = threading.current_thread() is threading.main_thread()
    if not main or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return

    def handler(signum, frame):
        _terminated.set()
        if frame is None or frame.f_code.co_name != "__del__" and not frame.f_code.co_filename.endswith(
                ("weakref.py", "_weakrefset.py")):
            raise Interrupted("SIGTERM")

    _terminated.clear()
    signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def check_terminated() -> None:
    """An exception raised by a signal handler inside a finaliser or weakref callback is swallowed by Python;
    the flag it set is seen here, at the next batch."""
    if _terminated.is_set():
        raise Interrupted("SIGTERM")


def remove_stale_temps(out: Path, companions: tuple[Path, ...], log) -> None:
    """Every write removes its temp file when it fails, but a process killed mid-write (SIGKILL, the OOM killer, a
    node failure) cannot: its `<file>.tmp.<random>` stays. Under the run's lock no other process writes this
    run's files, so the temps of its result `out`, of the files beside it (`companions`: checkpoints) and of the
    output probe are leftovers: remove them."""
    for name in (out.name, *(f.name for f in companions), out.name + ".probe"):
        for stale in out.parent.glob(glob.escape(temp_prefix(out.with_name(name))) + "*"):
            stale.unlink(missing_ok=True)
            log(f"note: removed {stale.name}, the temp file of a write that was killed")

"""Plugins from other packages: the entry points of the suite's groups, scanned once per environment, and the one
way a plugin's module is imported (every failure one line naming its distribution and entry point).

Two registries use it: detectors (bench.registry, group `bench.detectors`) and datasets (bench.datasets, group
`bench.datasets`). An entry point is named after what it registers; its value is the module that registers it when
imported. Listing the names reads metadata only (no plugin is imported, so a broken one cannot stop `--help`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import Callable

from bench.errors import BenchError

DETECTORS = "bench.detectors"
DATASETS = "bench.datasets"
GROUPS = (DETECTORS, DATASETS)  # scanned together: one pass over the installed distributions for both

_WARNED: set[str] = set()
IMPORT_TIMEOUT_ENV = "BENCH_PLUGIN_IMPORT_TIMEOUT"  # seconds a plugin's import may take (default below)
IMPORT_TIMEOUT_S = 120.0  # a ceiling, not a measurement: a plugin importing torch on a loaded node takes ~5-30 s
_RETURNED = "bench-plugin-probe: the import returned"
# Imports the entry point's module in a fresh interpreter; says so once the import returned (raised or not: the
# error itself is the in-process import's to report), then leaves at once (the plugin's threads do not hold it).
_PROBE = ("import os, sys\nfrom importlib.metadata import EntryPoint\ntry:\n"
          "    EntryPoint(sys.argv[1], sys.argv[2], sys.argv[3]).load()\nexcept BaseException:\n    pass\n"
          f"sys.stdout.write({_RETURNED!r})\nsys.stdout.flush()\nos._exit(0)\n")
_PROBED: set[tuple] = set()

# (sys.path with each entry's mtime) -> {group: what entry_points found there}. Scanning every installed
# distribution's metadata costs ~0.1-1 s, and the report code asks once per label (registry.specs() ->
# _load_plugins), i.e. per result file: 271 of 309 s of an aggregation of 250 files. The key changes when sys.path
# does or a folder on it gains or loses a .dist-info (its mtime), so a plugin installed or removed mid-process is
# still seen.
_ENTRY_POINTS_CACHE: dict[tuple, dict] = {}


def warn_once(text: str) -> None:
    import warnings

    if text not in _WARNED:
        _WARNED.add(text)
        warnings.warn(text, stacklevel=3)


def _path_key() -> tuple:
    def mtime(entry: str):
        try:
            return os.stat(entry or ".").st_mtime_ns
        except OSError:
            return None

    return tuple((entry, mtime(entry)) for entry in sys.path)


def entry_points(group: str) -> dict:
    """{name: entry point} of `group` (one of GROUPS; cached per `_path_key`; a copy, so callers may not change the
    cache)."""
    key = _path_key()
    if key not in _ENTRY_POINTS_CACHE:
        _ENTRY_POINTS_CACHE.clear()  # one environment at a time: an old key is never asked again
        _ENTRY_POINTS_CACHE[key] = _scan_entry_points()
    return dict(_ENTRY_POINTS_CACHE[key].get(group, {}))


def _scan_entry_points() -> dict:
    """{group: {name: entry point}} of GROUPS, each distribution's entry points read on its own: a malformed
    entry_points.txt is one warning naming its distribution, not the end of every command (even `--help`)."""
    from importlib.metadata import distributions

    found: dict[str, dict] = {group: {} for group in GROUPS}
    seen = set()
    for dist in distributions():
        name = dist.metadata["Name"] or "?"
        if name in seen:  # the same distribution twice on sys.path: the first one is what imports
            continue
        seen.add(name)
        try:
            entries = dist.entry_points
            mine = [(group, entries.select(group=group)) for group in GROUPS]
        except Exception as e:  # noqa: BLE001 - whatever a malformed file raises, name the distribution
            warn_once(f"distribution {name!r}: its entry_points.txt cannot be read ({type(e).__name__}: {e}); "
                      "its detectors and datasets are not available")
            continue
        for group, selected in mine:
            for entry in selected:
                found[group].setdefault(entry.name, entry)
    return found


def describe(entry, what: str) -> str:
    """`<what> plugin 'x' (distribution d, entry point <group>: x = module)`: how errors name a plugin."""
    dist = getattr(entry.dist, "name", None) or "?"
    group = getattr(entry, "group", None) or {"detector": DETECTORS, "dataset": DATASETS}.get(what, "?")
    return f"{what} plugin {entry.name!r} (distribution {dist}, entry point {group}: {entry.name} = {entry.value})"


def load(entry, what: str) -> None:
    """Import one plugin's module; every way the import can fail (SystemExit and KeyboardInterrupt included) is one
    BenchError naming the distribution and entry point (`describe`). It is imported in a child process first
    (`probe`), so one that ends the process (os._exit) or never returns costs a bounded time and an error, not the
    command."""
    probe(entry, what)
    try:
        entry.load()
    except (Exception, SystemExit, KeyboardInterrupt) as e:  # noqa: BLE001 - the user needs its name and the error
        raise BenchError(f"{describe(entry, what)} failed to load: {type(e).__name__}: {e}".replace("\n", " "))


def load_into(entry, what: str, registered: dict, errors: dict, wrong: Callable[[set], str | None]) -> None:
    """Import plugin `entry`, whose module registers into `registered` (a registry's table): a failure (`load`), or
    what `wrong(keys it added)` finds wrong with what it registered, is one BenchError, remembered in `errors` so it
    is raised again, not retried; whatever a failed plugin registered is taken out again."""
    if entry.name in errors:
        raise BenchError(errors[entry.name])
    before = set(registered)
    try:
        load(entry, what)
        problem = wrong(set(registered) - before)
    except BenchError as e:
        problem = str(e)
    if problem is not None:
        for key in set(registered) - before:  # a half-registered plugin is not available either
            del registered[key]
        errors[entry.name] = problem
        raise BenchError(problem)


def probe(entry, what: str) -> None:
    """Import `entry` in a child process (once per process): BenchError when that import ended the process
    without returning (os._exit, a signal) or did not return within the import timeout."""
    group = getattr(entry, "group", None) or {"detector": DETECTORS, "dataset": DATASETS}.get(what, "")
    key = (group, entry.name, entry.value, _path_key())  # another environment may hold another module of the name
    if key in _PROBED:
        return
    limit = _import_timeout()
    path = os.pathsep.join(p or os.getcwd() for p in sys.path)
    child = subprocess.Popen([sys.executable, "-c", _PROBE, entry.name, entry.value, group],
                             env={**os.environ, "PYTHONPATH": path}, stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        out, _ = child.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)  # the child and whatever it started
        child.communicate()
        raise BenchError(f"{describe(entry, what)} failed to load: its import did not return within {limit:g} s "
                         f"(a hanging import; {IMPORT_TIMEOUT_ENV} sets the limit)") from None
    if _RETURNED not in out:
        raise BenchError(f"{describe(entry, what)} failed to load: its import ended the process (exit status "
                         f"{child.returncode}) instead of returning")
    _PROBED.add(key)


def _import_timeout() -> float:
    text = os.environ.get(IMPORT_TIMEOUT_ENV, "")
    try:
        value = float(text) if text else IMPORT_TIMEOUT_S
    except ValueError:
        value = -1.0
    if not value > 0:
        raise BenchError(f"{IMPORT_TIMEOUT_ENV}={text!r}: expected a number of seconds > 0")
    return value


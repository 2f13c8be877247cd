"""Plugins from other packages: the entry points of the suite's groups, scanned once per environment, and the one
way a plugin's module is imported (every failure one line naming its distribution and entry point).

Two registries use it: detectors (bench.registry, group `bench.detectors`) and datasets (bench.datasets, group
`bench.datasets`). An entry point is named after what it registers; its value is the module that registers it when
imported. Listing the names reads metadata only (no plugin is imported, so a broken one cannot stop `--help`).
"""

from __future__ import annotations

import os
import sys
from typing import Callable

from bench.errors import BenchError

DETECTORS = "bench.detectors"
DATASETS = "bench.datasets"
GROUPS = (DETECTORS, DATASETS)  # scanned together: one pass over the installed distributions for both

_WARNED: set[str] = set()

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
    BenchError naming the distribution and entry point (`describe`)."""
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

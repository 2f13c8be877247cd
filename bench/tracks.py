"""Tracks by name. The generic runner (bench.continual.runner) runs any track through one loop, but it must not
import a track: a track is built on the runner, not the other way round. So each track's module registers how to
prepare its runs here, and is imported by its module name the first time a run of that track is prepared (the
same way detectors are discovered)."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

from bench.errors import choice_error


@dataclass(frozen=True)
class TrackEntry:
    module: str  # registers the track's `prepare` here when imported
    detectors: str  # the package whose modules are its built-in detectors (each registers a ModelSpec)
    spec_inputs: tuple[str, ...]  # what a detector spec's `inputs` may say on this track


# The one table of tracks: every other list of track names (config's run inputs, the registry's checks,
# bench.testing's subjects) is derived from it or checked against it.
TRACKS = {
    "image": TrackEntry("bench.image.track", "bench.models", ("features", "images")),
    "tabular": TrackEntry("bench.tabular.track", "bench.tabular.detectors", ("records",)),
}
TRACK_NAMES = tuple(TRACKS)
TRACK_MODULES = {name: t.module for name, t in TRACKS.items()}
DETECTOR_PACKAGES = {name: t.detectors for name, t in TRACKS.items()}

_PREPARE: dict[str, Callable] = {}


def register(name: str, prepare: Callable) -> None:
    """Called once by a track's module: `prepare(config) -> (track object, index_sha256)`. The track object has
    the `splits` ({task: TaskData}), `weights_id` (the run key's id of pretrained inputs) and what the runner
    calls (bench/continual/runner.py)."""
    _PREPARE[name] = prepare


def prepare(config):
    """(track object, index_sha256) of a run of `config.track`, from the track's registered `prepare`."""
    if config.track not in _PREPARE:
        if config.track not in TRACK_MODULES:
            raise choice_error("track", config.track, TRACK_MODULES)
        importlib.import_module(TRACK_MODULES[config.track])
    return _PREPARE[config.track](config)

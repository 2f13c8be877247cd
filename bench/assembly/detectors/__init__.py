"""The stream-assembly paper's detectors, one file each, each registering one `DetectorSpec` here.

Two contracts (`records.Kind`):
- ONLINE: `score_learn(X [m, d]) -> records.StreamScores` scores each record before learning it, in order; calls
  on consecutive chunks give exactly what one call on the whole stream gives. `state_dict()` returns numpy
  arrays only (an HDF5 checkpoint holds them; no pickle) and `load_state_dict(state)` resumes identically.
- BATCH: `fit(X_train) -> self`, `score(X_batch) -> float64 [m]`, and `batch_record(ids) -> records.BatchRecord`
  naming the batch the scores came from (it matters for a batch-dependent detector, whose scores change with
  the other records of the batch: ECOD).

`SPECS` lists every registered detector; `get(name)` returns one (an unknown name is a ConfigError listing the
valid ones) and `spec.create(preset, seed)` builds one with a named preset's parameters.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np

from bench.assembly import records
from bench.assembly.named import Registry
from bench.errors import DatasetError, choice_error


@dataclass(frozen=True)
class DetectorSpec:
    name: str
    label: str
    kind: records.Kind
    factory: Callable[..., object]  # factory(**params) -> detector; params = a preset's dict (+ seed if seeded)
    presets: dict[str, dict] = field(default_factory=lambda: {"released": {}})
    batch_dependent: bool = False  # a record's raw score depends on the other records of its batch (ECOD)
    seeded: bool = False  # factory takes `seed`
    branches: tuple[str, ...] = ()  # StreamScores.branches every call returns
    source: str = ""  # where the released settings come from (or why there are none)
    quick: dict = field(default_factory=dict)  # overrides that make it small enough for a smoke test

    def params(self, preset: str = "released", **overrides) -> dict:
        if preset not in self.presets:
            raise choice_error(f"{self.name} preset", preset, self.presets)
        accepted = inspect.signature(self.factory).parameters
        if not any(p.kind is p.VAR_KEYWORD for p in accepted.values()):  # **params: the detector checks them
            for key in overrides:
                if key not in set(accepted) - {"seed"}:
                    raise choice_error(f"{self.name} parameter", key, set(accepted) - {"seed"})
        return {**self.presets[preset], **overrides}

    def create(self, preset: str = "released", seed: int | None = None, **overrides):
        """A fresh detector with `preset`'s parameters (and `overrides`); `seed` goes to seeded detectors only."""
        params = self.params(preset, **overrides)
        if self.seeded:
            params["seed"] = 0 if seed is None else int(seed)
        return self.factory(**params)


_REGISTERED: Registry[DetectorSpec] = Registry("assembly detector")


def register(spec: DetectorSpec) -> DetectorSpec:
    if "released" not in spec.presets:
        raise ValueError(f"assembly detector {spec.name!r} has no 'released' preset")
    return _REGISTERED.add(spec.name, spec)


def get(name: str) -> DetectorSpec:
    return _REGISTERED.lookup(name)


def check_records(X, owner: str, n_features: int | None = None) -> np.ndarray:
    """X as a C-contiguous float64 [m, d] array of finite values, or a DatasetError naming `owner`."""
    X = np.ascontiguousarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise DatasetError(f"{owner}: records must be a 2-D array [records, features], got shape {X.shape}")
    if n_features is not None and X.shape[1] != n_features:
        raise DatasetError(f"{owner}: records have {X.shape[1]} features, the detector has seen {n_features}")
    bad = ~np.isfinite(X)
    if bad.any():
        row = int(np.argwhere(bad)[0, 0])
        raise DatasetError(f"{owner}: record {row} of this chunk holds a non-finite value (the corpus's "
                           "non-finite policy replaces them before any detector sees a record)")
    return X


def batch_record(ids) -> records.BatchRecord:
    """The batch a score came from: its size and the SHA-256 of its record ids (int64, little-endian, in the
    order scored)."""
    ids = np.ascontiguousarray(ids, dtype="<i8")
    return records.BatchRecord(size=int(ids.shape[0]), ids_sha256=hashlib.sha256(ids.tobytes()).hexdigest())


class BatchDetector:
    """Base of the batch detectors: fitted on benign training rows, scoring a batch. `minmax` rescales each
    batch's scores to [0, 1] by its own min and max, as the released code did (a rank-preserving map, so AP
    and AUC are unchanged, but a score's value then depends on its batch)."""

    kind = records.Kind.BATCH
    name = ""

    def __init__(self, minmax: bool = False):
        self.minmax = minmax

    def fit(self, X_train) -> BatchDetector:
        X_train = check_records(X_train, self.name)
        if X_train.shape[0] < 2:
            raise DatasetError(f"{self.name}: needs at least 2 training records, got {X_train.shape[0]}")
        self.n_features_ = X_train.shape[1]
        self._fit(X_train)
        return self

    def score(self, X_batch) -> np.ndarray:
        raw = np.asarray(self._score(check_records(X_batch, self.name, self.n_features_)), np.float64)
        if not self.minmax:
            return raw
        lo, hi = float(raw.min()), float(raw.max())
        return np.zeros_like(raw) if hi <= lo else (raw - lo) / (hi - lo)

    @staticmethod
    def batch_record(ids) -> records.BatchRecord:
        return batch_record(ids)

    def _fit(self, X: np.ndarray) -> None:
        raise NotImplementedError

    def _score(self, X: np.ndarray) -> np.ndarray:
        raise NotImplementedError


def _discover() -> None:
    for module in pkgutil.iter_modules(__path__):
        if not module.name.startswith("_"):
            importlib.import_module(f"{__name__}.{module.name}")


_discover()
SPECS: MappingProxyType[str, DetectorSpec] = MappingProxyType(dict(sorted(_REGISTERED.items())))

"""The pointwise audit of tabular detectors: a record's score must not depend on the other records scored with it.

ECOD and COPOD compute their empirical CDFs over the training data AND the batch being scored, and DIF
standardises the batch it scores, so their scores change with the batch (the stream-assembly paper measures
0.003–0.007 AP on identical records). A number from such a detector is only meaningful together with its scoring
batch. The audit fits the detector (its quick setting) on seeded synthetic records, scores a batch, then scores
records of it alone and inside other batches; any difference beyond float noise fails it. A spec that fails is
refused unless it is registered with `transductive=True`; protocols then record the scoring batch of every
number (bench.tabular.protocols). Results are cached per (detector, version) for the process.
"""

from __future__ import annotations

import numpy as np

from bench.errors import ConfigError
from bench.metrics import POINTWISE_RTOL, pointwise_gap

_CACHE: dict[tuple[str, int], tuple[float, bool]] = {}


def _records(seed: int = 0, n_train: int = 300, d: int = 8):
    rng = np.random.default_rng(seed)
    train = rng.normal(size=(n_train, d)).astype(np.float32)
    batch = np.concatenate([rng.normal(size=(48, d)), rng.normal(3.0, 1.0, size=(16, d))]).astype(np.float32)
    other = rng.normal(1.5, 2.0, size=(200, d)).astype(np.float32)  # different company for the same records
    return train, batch, other


def pointwise_audit(spec) -> tuple[float, bool]:
    """(largest change of a probed record's score between its batch, alone, and other batches; whether every
    change is within float noise: bench.metrics' pointwise tolerance, the one the contract tests use)."""
    key = (spec.name, spec.version)
    if key not in _CACHE:
        train, batch, other = _records()
        det = spec.factory(**spec.resolve(spec.quick)).fit(train, seed=0)
        ref = np.asarray(det.score(batch), dtype=np.float64)
        probe = [0, 17, 50, 63]
        variants = [np.array([det.score(batch[i:i + 1])[0] for i in probe]),
                    np.asarray(det.score(np.concatenate([other, batch[probe]])))[-len(probe):],
                    np.asarray(det.score(batch[::-1]))[::-1][probe]]
        change = np.max([_change(v, ref[probe]) for v in variants], axis=0)
        _CACHE[key] = float(change.max()), all(_gap(v, ref[probe]) <= POINTWISE_RTOL for v in variants)
    return _CACHE[key]


def _same(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Where two scores are the same non-finite value (NaN and NaN, +inf and +inf, -inf and -inf): a detector that
    gives a record NaN wherever it is scored does not depend on the batch (what the `released` preset later makes
    of a non-finite score is its business, not the audit's). NaN against a number, or inf against NaN, differs."""
    return (np.isnan(a) & np.isnan(b)) | (np.isinf(a) & (a == b))


def _change(alone, batch) -> np.ndarray:
    """|alone − batch| per record, 0 where both are the same non-finite value, inf where only one is non-finite."""
    alone, batch = np.asarray(alone, dtype=np.float64), np.asarray(batch, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        diff = np.abs(alone - batch)
    return np.where(_same(alone, batch), 0.0, np.where(np.isnan(diff), np.inf, diff))


def _gap(alone, batch) -> float:
    """bench.metrics.pointwise_gap over the records whose scores are not the same non-finite value (any other
    non-finite score still fails it)."""
    alone, batch = np.asarray(alone, dtype=np.float64), np.asarray(batch, dtype=np.float64)
    keep = ~_same(alone, batch)
    return pointwise_gap(alone[keep], batch[keep])


def require_pointwise(spec) -> None:
    """Refuse a detector whose scores depend on the scoring batch, unless its spec says it is transductive."""
    if spec.transductive:
        return
    change, passes = pointwise_audit(spec)
    if not passes:
        raise ConfigError(f"tabular model {spec.name!r} fails the pointwise audit: a record's score changes with "
                          f"the records scored alongside it (by up to {change:.3g}); register it with "
                          f"transductive=True so every number carries its scoring batch")

"""The pointwise audit asks whether a record's score depends on the records scored with it. A detector that gives
some records NaN or ±inf wherever they are scored is pointwise (the `released` preset replaces such scores later,
bench.tabular.fidelity); the audit must not refuse it before that, and must still catch a score that is non-finite
in one batch only."""

from __future__ import annotations

import numpy as np

from bench.registry import ModelSpec
from bench.tabular import audit
from bench.tabular.detectors.base import TabularDetector


class _Pointwise(TabularDetector):
    """Each record's score from that record alone; records beyond 2.5 on the first feature score NaN, +inf or -inf."""

    name = "pointwise_nonfinite"

    def fit(self, X, seed):
        return self

    def score(self, X):
        X = np.asarray(X, dtype=np.float64)
        out = X.sum(axis=1)
        out[X[:, 0] > 2.5] = np.nan
        out[X[:, 0] > 3.5] = np.inf
        out[X[:, 0] < -2.5] = -np.inf
        return out


class _NanInBigBatches(_Pointwise):
    """NaN for every record of a batch of more than 100 (an overflow that depends on the company): not pointwise."""

    name = "nan_in_big_batches"

    def score(self, X):
        out = X.sum(axis=1).astype(np.float64)
        return np.full_like(out, np.nan) if len(X) > 100 else out


def _spec(name, factory):
    return ModelSpec(name=name, label=name, factory=factory, params={}, track="tabular", inputs="records",
                     version=99)


def test_the_same_non_finite_score_in_every_batch_passes():
    det = _Pointwise()
    train, batch, _ = audit._records()
    scores = det.score(batch[[0, 17, 50, 63]])
    assert not np.isfinite(scores).all() and np.isnan(det.score(batch)).any()  # the probe meets a non-finite score
    change, passes = audit.pointwise_audit(_spec("pointwise_nonfinite", _Pointwise))
    assert passes and change == 0.0
    audit.require_pointwise(_spec("pointwise_nonfinite", _Pointwise))


def test_a_score_non_finite_in_one_batch_only_fails():
    change, passes = audit.pointwise_audit(_spec("nan_in_big_batches", _NanInBigBatches))
    assert not passes and change == np.inf


def test_nan_equals_nan_and_infinities_equal_themselves_only():
    nan, inf = np.nan, np.inf
    assert audit._gap([nan, inf, -inf, 1.0], [nan, inf, -inf, 1.0]) == 0.0
    for a, b in ([nan], [1.0]), ([inf], [-inf]), ([inf], [nan]), ([1.0], [inf]):
        assert audit._gap(a, b) == np.inf and audit._change(a, b)[0] == np.inf
    assert audit._gap([nan, 2.0], [nan, 1.0]) == 0.5

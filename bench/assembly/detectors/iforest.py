"""Isolation Forest (scikit-learn), fitted on the benign training rows like the paper's batch references.

The released evaluation has no batch Isolation Forest (its `iforest_asd` is a streaming variant with no archived
runs), so the `released` preset is scikit-learn's defaults (100 trees, max_samples="auto") and raw scores
(−score_samples, no min-max): pointwise, the contrast to ECOD — a record's score never depends on its batch.
"""

from __future__ import annotations

import numpy as np

from bench.assembly import records
from bench.assembly.detectors import BatchDetector, DetectorSpec, register


class IsolationForest(BatchDetector):
    name = "iforest"

    def __init__(self, n_estimators: int = 100, seed: int = 0, minmax: bool = False):
        super().__init__(minmax)
        self.n_estimators, self.seed = n_estimators, seed

    def _fit(self, X: np.ndarray) -> None:
        from sklearn.ensemble import IsolationForest as Forest

        self.model_ = Forest(n_estimators=self.n_estimators, random_state=self.seed, n_jobs=1).fit(X)

    def _score(self, X: np.ndarray) -> np.ndarray:
        return -self.model_.score_samples(X)


register(DetectorSpec(
    name="iforest", label="Isolation Forest", kind=records.Kind.BATCH, factory=IsolationForest,
    presets={"released": {"n_estimators": 100}}, batch_dependent=False, seeded=True, branches=(),
    source="not in the released evaluation: scikit-learn IsolationForest defaults, fit on benign training rows"))

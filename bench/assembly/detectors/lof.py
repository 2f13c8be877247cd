"""LOF as the stream-assembly paper ran it (`src/baselines/batch.py`): scikit-learn's `LocalOutlierFactor(
n_neighbors=35, novelty=True, contamination="auto")` fitted on the benign training rows; score = −score_samples,
min-max rescaled over the scored batch. Pointwise before the rescaling: a record's raw score depends only on the
training rows.
"""

from __future__ import annotations

import numpy as np

from bench.assembly import records
from bench.assembly.detectors import BatchDetector, DetectorSpec, register


class Lof(BatchDetector):
    name = "lof"

    def __init__(self, n_neighbors: int = 35, minmax: bool = False):
        super().__init__(minmax)
        self.n_neighbors = n_neighbors

    def _fit(self, X: np.ndarray) -> None:
        from sklearn.neighbors import LocalOutlierFactor

        self.model_ = LocalOutlierFactor(n_neighbors=self.n_neighbors, novelty=True, contamination="auto").fit(X)

    def _score(self, X: np.ndarray) -> np.ndarray:
        return -self.model_.score_samples(X)


register(DetectorSpec(
    name="lof", label="LOF", kind=records.Kind.BATCH, factory=Lof,
    presets={"released": {"n_neighbors": 35, "minmax": True}}, batch_dependent=False, seeded=False, branches=(),
    source="released src/baselines/batch.py: sklearn LocalOutlierFactor(n_neighbors=35, novelty=True), fit on "
           "benign training rows, min-max over the scored batch"))

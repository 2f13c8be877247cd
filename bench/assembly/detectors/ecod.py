"""ECOD (PyOD) as the stream-assembly paper ran it (`src/baselines/batch.py`): `ECOD()` with PyOD's defaults,
fitted on the benign training rows, scoring vstack(validation, test) in one batch, scores min-max rescaled over
that batch.

Batch-dependent: PyOD's `decision_function` recomputes its empirical CDFs over the training rows *and the scored
batch*, so a record's score changes with the other records scored beside it. Every score therefore names its
batch (`batch_record`: size and SHA-256 of the record ids in scored order).
"""

from __future__ import annotations

import numpy as np

from bench.assembly import records
from bench.assembly.detectors import BatchDetector, DetectorSpec, register


class Ecod(BatchDetector):
    name = "ecod"

    def _fit(self, X: np.ndarray) -> None:
        from pyod.models.ecod import ECOD

        self.model_ = ECOD(n_jobs=1).fit(X)

    def _score(self, X: np.ndarray) -> np.ndarray:
        return self.model_.decision_function(X)


register(DetectorSpec(
    name="ecod", label="ECOD", kind=records.Kind.BATCH, factory=Ecod, presets={"released": {"minmax": True}},
    batch_dependent=True, seeded=False, branches=(),
    source="released src/baselines/batch.py: pyod ECOD() defaults, fit on benign training rows, min-max over the "
           "scored batch"))

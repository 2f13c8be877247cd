"""Any built-in tabular detector (bench.registry, tabular track: bench/tabular/detectors/) as an assembly batch
detector, by the name `tabular:<name>` (e.g. `tabular:iforest`, `tabular:autoencoder`): fitted on the benign
training rows, scoring a batch, like the paper's batch references, so every analysis (the shared records, the cut
sweep's refits, the batch ladder, the prevalence sweep's fresh runs) takes it.

The names are found from the tabular detector package's modules without importing any of them (the registry's
tabular detectors import torch); the detector's spec is read from bench.registry only when one is built. Its
`released` preset is the tabular spec's `released` preset where it has one, else its default preset; overrides
are checked by the tabular spec (one line naming the key). A transductive tabular detector (its scores depend on
the scoring batch: ECOD, COPOD, DIF) is refused when built, since this adapter declares its scores
batch-independent.
"""

from __future__ import annotations

import functools
import pkgutil
from pathlib import Path

import numpy as np

from bench.assembly import records
from bench.assembly.detectors import BatchDetector, DetectorSpec, register
from bench.errors import ConfigError

PREFIX = "tabular:"
# bench/tabular/detectors/, listed by file: importing the package would import nothing heavy, but its modules do
PACKAGE_DIR = Path(__file__).resolve().parents[2] / "tabular" / "detectors"
NOT_DETECTORS = {"base"}


def tabular_names() -> tuple[str, ...]:
    return tuple(sorted(m.name for m in pkgutil.iter_modules([str(PACKAGE_DIR)])
                        if not m.name.startswith("_") and m.name not in NOT_DETECTORS))


class TabularBatch(BatchDetector):
    """A tabular-track detector behind the batch contract: fit(X_train) on the benign rows, score(X_batch)."""

    def __init__(self, model: str, seed: int = 0, minmax: bool = False, **overrides):
        from bench.registry import get

        super().__init__(minmax)
        self.name = f"{PREFIX}{model}"
        self.spec = get(model, "tabular")
        if self.spec.transductive:
            raise ConfigError(f"assembly detector {self.name!r}: a transductive tabular detector (its scores depend "
                              "on the scoring batch) is not adapted; use the assembly's own batch-dependent detectors")
        preset = "released" if "released" in self.spec.presets else self.spec.default_preset
        self.hparams = self.spec.resolve(overrides, preset)
        self.seed = int(seed)
        self.model_ = self.spec.factory(**self.hparams)

    def _fit(self, X: np.ndarray) -> None:
        self.model_.fit(X, self.seed)

    def _score(self, X: np.ndarray) -> np.ndarray:
        return np.asarray(self.model_.score(X), np.float64)


for _name in tabular_names():
    register(DetectorSpec(
        name=f"{PREFIX}{_name}", label=f"{_name} (tabular track)", kind=records.Kind.BATCH,
        factory=functools.partial(TabularBatch, _name), presets={"released": {}}, batch_dependent=False,
        seeded=True, branches=(),
        source=f"bench.registry tabular detector {_name!r}: its released preset (else its default), fitted on the "
               "benign training rows, scoring validation + test as one batch"))

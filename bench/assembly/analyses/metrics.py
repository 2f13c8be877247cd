"""Flow-wise metrics as the released analyses compute them (sklearn `average_precision_score` and `roc_auc_score`,
positive class 1; NaN when the slice holds one class), and AP's chance level beside it: the prevalence p, the
additive lift AP − p and the normalised lift (AP − p) / (1 − p), whose ceiling does not move with p."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


def _two_classes(y: np.ndarray) -> bool:
    return bool(y.size) and 0 < int(y.sum()) < y.size


def ap(y, s) -> float:
    from sklearn.metrics import average_precision_score

    y = np.asarray(y, np.int8)
    return float(average_precision_score(y, np.asarray(s, np.float64))) if _two_classes(y) else math.nan


def auc(y, s) -> float:
    from sklearn.metrics import roc_auc_score

    y = np.asarray(y, np.int8)
    return float(roc_auc_score(y, np.asarray(s, np.float64))) if _two_classes(y) else math.nan


def normalised_lift(ap_value: float, prevalence: float) -> float:
    """(AP − p) / (1 − p): 0 for an uninformative ranking, 1 for a perfect one, at any prevalence."""
    return (ap_value - prevalence) / (1.0 - prevalence) if prevalence < 1 else math.nan


@dataclass(frozen=True)
class Scored:
    """One scorer on one slice: AP beside its chance level, and AUC-ROC."""

    records: int
    attacks: int
    prevalence: float  # AP's chance level
    ap: float
    auc: float

    @property
    def lift(self) -> float:
        return self.ap - self.prevalence

    @property
    def normalised_lift(self) -> float:
        return normalised_lift(self.ap, self.prevalence)

    def row(self) -> dict:
        return {"records": self.records, "attacks": self.attacks, "prevalence": self.prevalence, "ap": self.ap,
                "lift": self.lift, "normalised_lift": self.normalised_lift, "auc": self.auc}


def scored(y, s) -> Scored:
    y = np.asarray(y, np.int8)
    attacks = int(y.sum())
    return Scored(int(y.size), attacks, attacks / y.size if y.size else math.nan, ap(y, s), auc(y, s))

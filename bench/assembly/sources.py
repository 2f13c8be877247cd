"""Corpus sources: the registry of capture-file readers (`SOURCES`), the records they yield (`CaptureTable`), and
the named choices a corpus is built with (subsampling rule, feature set, non-finite policy). A source's module
registers it once (bench/assembly/cicids2017.py, bench/assembly/litnet.py); bench.assembly.corpus builds a corpus
from any of them."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable

import numpy as np

from bench.assembly.named import Registry
from bench.errors import choice_error

if TYPE_CHECKING:
    import pandas as pd


class Subsample(enum.Enum):
    """How a capture is cut to its budget.

    RELEASED (the paper's build): per class (attack / benign), keep = round(n_class · budget / n_capture), stride =
    max(1, n_class // keep), the first `keep` of the class's rows[::stride]. Whenever a capture keeps more than half
    of its records, every class's stride is 1 and the rule keeps the HEAD of each class (its first `keep` rows in file
    order) rather than a spread over the capture: the paper's retentions (64–93 % per day) are all in that range.
    The manifest records each class's stride and whether the head was kept.
    EVEN: per class, `keep` rows evenly spaced over the whole class (row floor(i · n_class / keep), i < keep).
    HEAD: the first `budget` records of the capture in file order (the released LITNET-2020 build)."""

    RELEASED = "released"
    EVEN = "even"
    HEAD = "head"


class FeatureSet(enum.Enum):
    """RELEASED: every numeric column of the files but the label and the identity columns the released build drops
    (84 on the improved CICIDS2017 files, ports and protocol included; 80 on TrafficLabelling files, whose columns
    differ). SUITE: the suite's harmonised CICIDS2017 features (bench.tabular.cic.FEATURES, 77)."""

    RELEASED = "released"
    SUITE = "suite"


class NonFinite(enum.Enum):
    RELEASED = "released"  # ±inf → NaN → 0, as the released loader's prepare_xy does


ATTEMPTED = " - Attempted"


@dataclass(frozen=True)
class CaptureTable:
    """One capture as a reader returns it: its eligible records in file order (rows the source's build drops, such
    as CICIDS2017's " - Attempted" rows, already removed and counted in `dropped`)."""

    name: str
    frame: pd.DataFrame  # every column of the files, eligible rows, file order
    labels: np.ndarray  # object [n], the cleaned label texts
    attack: np.ndarray  # bool [n]
    timestamp: np.ndarray  # int64 [n], ns since the epoch
    files: tuple[Path, ...]
    ignore: tuple[str, ...] = ()  # columns never features (identity columns, labels)
    dropped: dict = field(default_factory=dict)

    @property
    def n(self) -> int:
        return int(self.attack.shape[0])


@dataclass(frozen=True)
class Source:
    """A registered corpus source: how its captures are read, and its released budgets and rule."""

    name: str
    read: Callable[[Path], Iterable[CaptureTable]]  # captures one at a time, in any order
    budgets: dict[str, int]  # released per-capture budgets (captures not named here are not used by default)
    rule: Subsample
    layout: str  # what the reader expects at the root (errors and docs quote it)
    feature_sets: tuple[FeatureSet, ...] = (FeatureSet.RELEASED,)


SOURCES: Registry[Source] = Registry("corpus source")


def register(source: Source) -> Source:
    return SOURCES.add(source.name, source)


def source(name: str) -> Source:
    return SOURCES.lookup(name)


def subsample(name: str) -> Subsample:
    """The rule called `name` (a CLI or grid value); ConfigError listing the valid ones."""
    try:
        return Subsample(name)
    except ValueError:
        raise choice_error("subsampling rule", name, [r.value for r in Subsample]) from None


def feature_set(name: str) -> FeatureSet:
    try:
        return FeatureSet(name)
    except ValueError:
        raise choice_error("feature set", name, [f.value for f in FeatureSet]) from None

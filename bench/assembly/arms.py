"""Assemblies (arms) of a corpus, the check that two arms hold the same records, and the positional split.

An arm is an order of corpus rows (`records.Arm`); the registry `ARMS` names the assemblies. As released
(`scripts/run_construction_contrast.py`):
- timestamp: a stable sort of the records by timestamp (the CICIDS2017 "natural" stream);
- day_round_robin: captures (days) in date order, row k of every capture that still has one, for k = 0, 1, …,
  each capture's rows in their canonical (time) order (the CICIDS2017 "interleaved" stream);
- pooled: the same round robin over the captures taken in name order (the released LITNET-2020 composite sorts the
  attack types' names: blaster_worm, spam, udp_flood);
- capture:<name>: one capture's rows in canonical order (the per-attack-type LITNET-2020 streams).
"""

from __future__ import annotations

import enum
import hashlib
from dataclasses import dataclass
from typing import Callable

import numpy as np

from bench.assembly.records import Arm, Corpus, SplitRule
from bench.errors import ConfigError, choice_error

CAPTURE_PREFIX = "capture:"


def timestamp(corpus: Corpus) -> Arm:
    return Arm("timestamp", np.argsort(corpus.timestamp, kind="stable").astype(np.int64),
               "records in timestamp order (stable)")


def round_robin(group: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Rows interleaved by group: row k of every group that still has one, groups in the order `order` (group ids),
    each group's rows in row order."""
    rank_of_group = np.empty(int(group.max()) + 1 if len(group) else 0, np.int64)
    rank_of_group[order] = np.arange(len(order))
    g = rank_of_group[group]
    by_group = np.argsort(g, kind="stable")
    starts = np.searchsorted(g[by_group], g[by_group], side="left")
    k = np.empty(len(group), np.int64)
    k[by_group] = np.arange(len(group)) - starts  # row index within its group
    return np.lexsort((g, k)).astype(np.int64)


def day_round_robin(corpus: Corpus) -> Arm:
    order = np.arange(len(corpus.captures))  # corpus captures are in date order
    return Arm("day_round_robin", round_robin(corpus.capture, order),
               "captures (days) in date order, row k of every day that still has one")


def pooled(corpus: Corpus) -> Arm:
    order = np.argsort(np.array(corpus.captures, dtype=object), kind="stable")
    return Arm("pooled", round_robin(corpus.capture, order),
               "captures in name order, row k of every capture that still has one")


def per_capture(corpus: Corpus, name: str) -> Arm:
    if name not in corpus.captures:
        raise choice_error(f"capture of corpus {corpus.name!r}", name, corpus.captures)
    rows = np.flatnonzero(corpus.capture == corpus.captures.index(name)).astype(np.int64)
    return Arm(CAPTURE_PREFIX + name, rows, f"capture {name} alone, in time order")


@dataclass(frozen=True)
class ArmSpec:
    name: str
    build: Callable[[Corpus], Arm]
    description: str


ARMS: dict[str, ArmSpec] = {s.name: s for s in (
    ArmSpec("timestamp", timestamp, "stable timestamp sort"),
    ArmSpec("day_round_robin", day_round_robin, "round robin over days in date order"),
    ArmSpec("pooled", pooled, "round robin over captures in name order (the pooled composite)"),
)}


def make_arm(corpus: Corpus, name: str) -> Arm:
    """The arm called `name`: a registered assembly, or `capture:<name>` for one capture's stream."""
    if name.startswith(CAPTURE_PREFIX):
        return per_capture(corpus, name[len(CAPTURE_PREFIX):])
    if name not in ARMS:
        raise choice_error("arm", name, [*ARMS, CAPTURE_PREFIX + "<capture>"])
    return ARMS[name].build(corpus)


@dataclass(frozen=True)
class PermutationCheck:
    """Two arms hold the same records: equal counts, equal attacks, equal digests of the sorted record ids (and
    their labels)."""

    arm_a: str
    arm_b: str
    records: int
    attacks: int
    digest: str  # SHA-256 of the sorted record ids' int64 bytes followed by their labels' int8 bytes

    def as_dict(self) -> dict:
        return {"arm_a": self.arm_a, "arm_b": self.arm_b, "records": self.records, "attacks": self.attacks,
                "sha256": self.digest, "permutation": True}


def multiset_digest(corpus: Corpus, rows: np.ndarray) -> str:
    order = np.argsort(corpus.record_id[rows], kind="stable")
    ids = corpus.record_id[rows][order].astype(np.int64)
    return hashlib.sha256(ids.tobytes() + corpus.y[rows][order].astype(np.int8).tobytes()).hexdigest()


def check_permutation(corpus: Corpus, a: Arm, b: Arm) -> PermutationCheck:
    """The record of `a` and `b` being one multiset of corpus records; ConfigError (one line) when they are not."""
    for arm in (a, b):
        if len(arm.rows) and (arm.rows.min() < 0 or arm.rows.max() >= corpus.n):
            raise ConfigError(f"arm {arm.name!r}: rows outside corpus {corpus.name!r} (0 … {corpus.n - 1})")
    att = (int(corpus.y[a.rows].sum()), int(corpus.y[b.rows].sum()))
    da, db = multiset_digest(corpus, a.rows), multiset_digest(corpus, b.rows)
    if len(a.rows) != len(b.rows) or att[0] != att[1] or da != db:
        raise ConfigError(f"arms {a.name!r} and {b.name!r} are not a permutation of one record multiset "
                          f"({len(a.rows)} vs {len(b.rows)} records, {att[0]} vs {att[1]} attacks, digests "
                          f"{da[:12]} vs {db[:12]})")
    return PermutationCheck(a.name, b.name, len(a.rows), att[0], da)


class Segment(enum.IntEnum):
    TRAIN = 0
    VALIDATION = 1
    TEST = 2  # the held-out slice


@dataclass(frozen=True)
class Split:
    """The positional split of one arm: train [0, i_tr), validation [i_tr, i_va), test [i_va, n)."""

    arm: str
    n: int
    i_tr: int
    i_va: int
    rule: SplitRule

    def bounds(self, segment: Segment) -> tuple[int, int]:
        return ((0, self.i_tr), (self.i_tr, self.i_va), (self.i_va, self.n))[segment]

    def segment_of_position(self) -> np.ndarray:
        seg = np.full(self.n, Segment.TEST, np.int8)
        seg[:self.i_va] = Segment.VALIDATION
        seg[:self.i_tr] = Segment.TRAIN
        return seg

    def as_dict(self) -> dict:
        return {"arm": self.arm, "n": self.n, "i_tr": self.i_tr, "i_va": self.i_va,
                "train": self.rule.train, "validation": self.rule.validation}


def split(arm: Arm, rule: SplitRule = SplitRule()) -> Split:
    """The arm's positional split by `rule`; ConfigError naming the setting when a segment would be empty."""
    for name, value in (("train", rule.train), ("validation", rule.validation)):
        if not 0 < value < 1:
            raise ConfigError(f"split {name} fraction {value}: expected a number strictly between 0 and 1")
    n = len(arm.rows)
    i_tr, i_va = rule.bounds(n)
    sizes = {"train": i_tr, "validation": i_va - i_tr, "test": n - i_va}
    empty = [k for k, v in sizes.items() if v <= 0]
    if empty:
        raise ConfigError(f"split train={rule.train} validation={rule.validation} of arm {arm.name!r} ({n} records) "
                          f"leaves the {', '.join(empty)} segment(s) empty")
    return Split(arm.name, n, i_tr, i_va, rule)


def segment_of_record(corpus: Corpus, arm: Arm, s: Split) -> np.ndarray:
    """int8 [corpus.n]: each corpus row's segment in this arm (-1 for rows the arm does not hold)."""
    out = np.full(corpus.n, -1, np.int8)
    out[arm.rows] = s.segment_of_position()
    return out

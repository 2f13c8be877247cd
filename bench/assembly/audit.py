"""The assembly audit: what an assembly does to the evaluated sample, without any model.

Per arm: split sizes; records, attacks and prevalence per split; each split's per-capture composition; the held-out
(test) slice's wall-clock window; attack run lengths in the stream and in the held-out slice. Between two arms of one
corpus: the permutation check, the held-out overlap (count, share), where one arm's records went in the other
(split-transition matrices for records and for attacks) and the subset relations of their held-out attacks. For a
pooled composite: the pooling identity (pooled held-out prevalence = the held-out-size-weighted mean of the
per-capture held-out prevalences), checked exactly in rational arithmetic, and only claimed when its preconditions
(equal capture budgets, a pooled held-out boundary that is the capture count times each capture's) hold.

Results are typed (dataclasses); `tables` turns them into DataFrames (the report's input) and `write_audit` writes
each as CSV plus one markdown file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import numpy as np

from bench.assembly.arms import (PermutationCheck, Segment, Split, check_permutation, per_capture,
                                 segment_of_record, split)
from bench.assembly.records import Arm, Corpus, SplitRule

SEGMENTS = tuple(Segment)


@dataclass(frozen=True)
class RunLengths:
    """Contiguous attack runs of a label sequence."""

    count: int
    mean: float
    median: float
    p90: float  # numpy's linear percentile, as the released stream builder
    max: int


def run_lengths(y: np.ndarray) -> RunLengths:
    edges = np.diff(np.concatenate([[0], np.asarray(y, np.int8), [0]]))
    runs = np.flatnonzero(edges == -1) - np.flatnonzero(edges == 1)
    if len(runs) == 0:
        return RunLengths(0, 0.0, 0.0, 0.0, 0)
    return RunLengths(len(runs), float(runs.mean()), float(np.median(runs)), float(np.percentile(runs, 90)),
                      int(runs.max()))


@dataclass(frozen=True)
class ArmAudit:
    arm: str
    split: Split
    records: tuple[int, int, int]  # per segment (train, validation, test)
    attacks: tuple[int, int, int]
    composition: np.ndarray  # int64 [3 segments, captures, 2 (records, attacks)]
    captures: tuple[str, ...]
    heldout_first_ns: int
    heldout_last_ns: int
    heldout_captures: int  # captures with a record in the held-out slice
    runs_stream: RunLengths
    runs_heldout: RunLengths

    def prevalence(self, segment: Segment) -> Fraction:
        return Fraction(self.attacks[segment], self.records[segment])


def audit_arm(corpus: Corpus, arm: Arm, rule: SplitRule = SplitRule()) -> ArmAudit:
    s = split(arm, rule)
    y = corpus.y[arm.rows]
    cap = corpus.capture[arm.rows].astype(np.int64)
    seg = s.segment_of_position().astype(np.int64)
    k = len(corpus.captures)
    key = seg * k + cap
    comp = np.stack([np.bincount(key, minlength=3 * k), np.bincount(key, weights=y, minlength=3 * k).astype(np.int64)],
                    axis=-1).reshape(3, k, 2)
    test = arm.rows[s.i_va:]
    ts = corpus.timestamp[test]
    return ArmAudit(arm=arm.name, split=s, records=tuple(int(v) for v in comp[:, :, 0].sum(1)),
                    attacks=tuple(int(v) for v in comp[:, :, 1].sum(1)), composition=comp, captures=corpus.captures,
                    heldout_first_ns=int(ts.min()), heldout_last_ns=int(ts.max()),
                    heldout_captures=int((comp[Segment.TEST, :, 0] > 0).sum()), runs_stream=run_lengths(y),
                    runs_heldout=run_lengths(y[s.i_va:]))


@dataclass(frozen=True)
class PairAudit:
    """Arm b against arm a (one corpus): where a's records went in b."""

    arm_a: str
    arm_b: str
    permutation: PermutationCheck
    heldout_a: int
    heldout_b: int
    overlap: int  # records in both held-out slices
    transitions: np.ndarray  # int64 [3, 3]: records in segment i of a and segment j of b
    attack_transitions: np.ndarray  # int64 [3, 3]: the same for attacks
    b_attacks_subset_of_a: bool  # b's held-out attacks ⊆ a's
    a_attacks_subset_of_b: bool
    attacks_moved_out: int  # attacks in a's held-out slice that b does not hold out

    @property
    def overlap_share(self) -> Fraction:
        return Fraction(self.overlap, self.heldout_a)


def audit_pair(corpus: Corpus, a: Arm, b: Arm, rule: SplitRule = SplitRule()) -> PairAudit:
    check = check_permutation(corpus, a, b)
    seg_a = segment_of_record(corpus, a, split(a, rule)).astype(np.int64)
    seg_b = segment_of_record(corpus, b, split(b, rule)).astype(np.int64)
    held = seg_a >= 0  # rows both arms hold (all of them, being a permutation)
    key = seg_a[held] * 3 + seg_b[held]
    trans = np.bincount(key, minlength=9).reshape(3, 3)
    atk = np.bincount(key, weights=corpus.y[held], minlength=9).astype(np.int64).reshape(3, 3)
    att = corpus.y.astype(bool)
    a_att, b_att = att & (seg_a == Segment.TEST), att & (seg_b == Segment.TEST)
    return PairAudit(a.name, b.name, check, heldout_a=int((seg_a == Segment.TEST).sum()),
                     heldout_b=int((seg_b == Segment.TEST).sum()), overlap=int(trans[Segment.TEST, Segment.TEST]),
                     transitions=trans, attack_transitions=atk,
                     b_attacks_subset_of_a=not bool((b_att & ~a_att).any()),
                     a_attacks_subset_of_b=not bool((a_att & ~b_att).any()),
                     attacks_moved_out=int((a_att & ~b_att).sum()))


@dataclass(frozen=True)
class Precondition:
    name: str
    holds: bool
    detail: str


@dataclass(frozen=True)
class PoolingIdentity:
    """Pooled held-out prevalence vs the weighted mean of the per-capture held-out prevalences (exact fractions).
    `holds` is True only when every precondition holds and the two fractions are equal."""

    arm: str
    captures: tuple[str, ...]
    preconditions: tuple[Precondition, ...]
    pooled: Fraction  # the pooled arm's held-out prevalence
    weighted_mean: Fraction  # Σ_c w_c · p_c, w_c = capture c's held-out size / Σ held-out sizes
    holds: bool
    statement: str


def pooling_identity(corpus: Corpus, pooled_arm: Arm, rule: SplitRule = SplitRule()) -> PoolingIdentity:
    ps = split(pooled_arm, rule)
    pooled = Fraction(int(corpus.y[pooled_arm.rows[ps.i_va:]].sum()), ps.n - ps.i_va)
    sizes, prevs, bounds = [], [], []
    for name in corpus.captures:
        arm = per_capture(corpus, name)
        s = split(arm, rule)
        sizes.append(s.n - s.i_va)
        prevs.append(Fraction(int(corpus.y[arm.rows[s.i_va:]].sum()), s.n - s.i_va))
        bounds.append((s.n, s.i_va))
    total = sum(sizes)
    mean = sum((Fraction(n, total) * p for n, p in zip(sizes, prevs)), Fraction(0))
    k = len(corpus.captures)
    counts = sorted({n for n, _ in bounds})
    pre = (Precondition("equal budgets", len(counts) == 1,
                        f"records per capture: {', '.join(f'{c}={n}' for c, (n, _) in zip(corpus.captures, bounds))}"),
           Precondition("divisible boundary", all(ps.i_va == k * i for _, i in bounds),
                        f"pooled i_va = {ps.i_va}; {k} × per-capture i_va = "
                        f"{', '.join(str(k * i) for _, i in bounds)}"))
    ok = all(p.holds for p in pre)
    if ok and pooled == mean:
        text = f"pooled held-out prevalence {pooled} = weighted mean of per-capture held-out prevalences {mean}"
    elif ok:
        text = f"preconditions hold but pooled {pooled} != weighted mean {mean}"
    else:
        failed = "; ".join(f"{p.name} fails ({p.detail})" for p in pre if not p.holds)
        text = f"identity not established: {failed}"
    return PoolingIdentity(pooled_arm.name, corpus.captures, pre, pooled, mean, ok and pooled == mean, text)


@dataclass(frozen=True)
class AssemblyAudit:
    corpus: str
    rule: SplitRule
    arms: tuple[ArmAudit, ...]
    pairs: tuple[PairAudit, ...] = ()
    pooling: PoolingIdentity | None = None
    manifest: dict = field(default_factory=dict)


def audit(corpus: Corpus, arms: list[Arm], rule: SplitRule = SplitRule()) -> AssemblyAudit:
    """Every arm's audit; every pair of arms holding the whole corpus audited (first arm against each other one,
    permutation checked); the pooling identity where an arm is the pooled composite."""
    whole = [a for a in arms if len(a.rows) == corpus.n]
    pairs = tuple(audit_pair(corpus, whole[0], b, rule) for b in whole[1:])
    pooled = next((a for a in arms if a.name == "pooled"), None)
    return AssemblyAudit(corpus.name, rule, tuple(audit_arm(corpus, a, rule) for a in arms), pairs,
                         pooling_identity(corpus, pooled, rule) if pooled is not None else None, corpus.manifest)


def _iso(ns: int) -> str:
    return np.datetime64(ns, "ns").astype("datetime64[s]").astype(str)


def tables(a: AssemblyAudit) -> dict:
    """The audit as DataFrames by table name (splits, composition, windows, run_lengths, overlap, transitions,
    pooling, pooling_preconditions); empty tables are left out."""
    import pandas as pd

    names = {s: s.name.lower() for s in SEGMENTS}
    splits, comp, windows, runs = [], [], [], []
    for arm in a.arms:
        for s in SEGMENTS:
            lo, hi = arm.split.bounds(s)
            splits.append({"arm": arm.arm, "segment": names[s], "start": lo, "end": hi, "records": arm.records[s],
                           "attacks": arm.attacks[s], "prevalence": float(arm.prevalence(s)),
                           "prevalence_exact": str(arm.prevalence(s))})
            for c, cap in enumerate(arm.captures):
                r, k = (int(v) for v in arm.composition[s, c])
                comp.append({"arm": arm.arm, "segment": names[s], "capture": cap, "records": r, "attacks": k,
                             "prevalence": k / r if r else float("nan")})
        windows.append({"arm": arm.arm, "heldout_first": _iso(arm.heldout_first_ns),
                        "heldout_last": _iso(arm.heldout_last_ns),
                        "span_minutes": (arm.heldout_last_ns - arm.heldout_first_ns) / 6e10,
                        "captures_in_heldout": arm.heldout_captures})
        for scope, r in (("stream", arm.runs_stream), ("heldout", arm.runs_heldout)):
            runs.append({"arm": arm.arm, "scope": scope, **r.__dict__})
    out = {"splits": pd.DataFrame(splits), "composition": pd.DataFrame(comp), "windows": pd.DataFrame(windows),
           "run_lengths": pd.DataFrame(runs)}
    out.update(_pair_tables(a.pairs, names))
    if a.pooling is not None:
        p = a.pooling
        out["pooling"] = pd.DataFrame([{"arm": p.arm, "captures": ", ".join(p.captures), "holds": p.holds,
                                        "pooled_prevalence": str(p.pooled), "weighted_mean": str(p.weighted_mean),
                                        "statement": p.statement}])
        out["pooling_preconditions"] = pd.DataFrame([c.__dict__ for c in p.preconditions])
    return {k: v for k, v in out.items() if len(v)}


def _pair_tables(pairs: tuple[PairAudit, ...], names: dict) -> dict:
    import pandas as pd

    overlap, trans = [], []
    for p in pairs:
        overlap.append({"arm_a": p.arm_a, "arm_b": p.arm_b, "records": p.permutation.records,
                        "attacks": p.permutation.attacks, "sha256": p.permutation.digest, "heldout_a": p.heldout_a,
                        "heldout_b": p.heldout_b, "overlap": p.overlap, "overlap_share": float(p.overlap_share),
                        "b_heldout_attacks_subset_of_a": p.b_attacks_subset_of_a,
                        "a_heldout_attacks_subset_of_b": p.a_attacks_subset_of_b,
                        "attacks_moved_out_of_a_heldout": p.attacks_moved_out})
        for kind, m in (("records", p.transitions), ("attacks", p.attack_transitions)):
            for i in SEGMENTS:
                for j in SEGMENTS:
                    trans.append({"arm_a": p.arm_a, "arm_b": p.arm_b, "kind": kind, "segment_in_a": names[i],
                                  "segment_in_b": names[j], "count": int(m[i, j])})
    return {"overlap": pd.DataFrame(overlap), "transitions": pd.DataFrame(trans)}


def markdown(a: AssemblyAudit) -> str:
    """The audit as one markdown document (every table, floats to 6 significant figures; the pooling identity's
    statement as written)."""
    from bench.report.render import frame_markdown

    lines = [f"# Assembly audit: {a.corpus}", "",
             f"Positional split: train {a.rule.train}, validation {a.rule.validation}, test the rest (held out).", ""]
    for name, df in tables(a).items():
        lines += [f"## {name.replace('_', ' ')}", "", *frame_markdown(df, 6, significant=True), ""]
    if a.pooling is not None:
        lines += ["## pooling identity", "", a.pooling.statement, ""]
    return "\n".join(lines)


def write_audit(a: AssemblyAudit, folder) -> list[Path]:
    """Write every table as `<folder>/<name>.csv` and the whole audit as `<folder>/audit.md` (atomically)."""
    from bench.io import write_text_atomic

    folder = Path(folder)
    written = []
    for name, df in tables(a).items():
        path = folder / f"{name}.csv"
        write_text_atomic(path, df.to_csv(index=False))
        written.append(path)
    write_text_atomic(folder / "audit.md", markdown(a))
    return written + [folder / "audit.md"]

"""The budgeted corpus: records read from capture files, cut to a fixed budget per capture, in canonical order.

The stream-assembly paper's released build (`scripts/build_cicids_labeled.py`) reads the five CICIDS2017 days, drops
the rows whose label carries " - Attempted", and cuts each day to a fixed budget (300k/300k/350k/300k/350k records,
Monday–Friday) with a per-class rule, then sorts each day by timestamp (stable). This module does the same from any
registered source (`SOURCES`: CICIDS2017 from its TrafficLabelling or improved CSV files, CSE-CIC-IDS2018 from its
day files, LITNET-2020 from its per-attack-type files), with the budgets scaled by `scale` so the same construction
runs on small data, and records what it did in `Corpus.manifest` (JSON-able): the inputs' SHA-256, per-capture
eligible / kept / retention / prevalence, the prevalence bias the budget step introduces, the rule, the feature set
and the non-finite counts.

Canonical order: captures in date order (their first timestamp), each capture's kept records sorted by timestamp
with a stable sort of (kept attacks in file order, then kept benign records in file order), as released: rows of
one class that share a timestamp keep their file order, and at a shared timestamp attacks come first.

The sources' registry and the named choices live in bench.assembly.sources; they are importable from here too, as
the corpus's own vocabulary.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Iterable

import numpy as np

from bench.assembly import cicids2017, cicids2018, litnet  # noqa: F401 (each registers its source)
from bench.assembly.records import Corpus
from bench.assembly.sources import (ATTEMPTED, SOURCES, CaptureTable, FeatureSet, NonFinite, Source,  # noqa: F401
                                    Subsample, feature_set, register, source, subsample)
from bench.errors import ConfigError, DatasetError


def build_corpus(name: str, root, *, scale: float = 1.0, rule: Subsample | None = None,
                 features: FeatureSet = FeatureSet.RELEASED, budgets: dict[str, int] | None = None,
                 corpus_name: str | None = None) -> Corpus:
    """The budgeted corpus of source `name` (SOURCES) read from `root`: budgets (default: the released ones, which
    also name the captures used; a source without any uses every capture whole) times `scale`, cut by `rule`
    (default: the source's released rule)."""
    src = source(name)
    if features not in src.feature_sets:
        raise ConfigError(f"feature set {features.value!r} is not offered for {name} (valid: "
                          f"{', '.join(f.value for f in src.feature_sets)})")
    budgets = dict(src.budgets if budgets is None else budgets)
    identity = {"source": name, "root": str(root), "layout": src.layout}
    return assemble(src.read(Path(root)), budgets, scale=scale, rule=rule or src.rule, features=features,
                    name=corpus_name or name, identity=identity)


def manifest_sha256(corpus: Corpus) -> str:
    """SHA-256 of the corpus manifest's canonical JSON without the root's path: the corpus's identity in run keys
    (the inputs' digests, the rule, budgets, scale and feature set change it; where the files lie does not)."""
    import hashlib
    import json

    manifest = dict(corpus.manifest)
    manifest["capture_identity"] = {k: v for k, v in manifest.get("capture_identity", {}).items() if k != "root"}
    return hashlib.sha256(json.dumps(manifest, sort_keys=True).encode()).hexdigest()


def scaled_budget(budget: int, scale: float) -> int:
    return int(round(budget * scale))


def assemble(tables: Iterable[CaptureTable], budgets: dict[str, int], *, scale: float, rule: Subsample,
             features: FeatureSet, name: str, identity: dict) -> Corpus:
    """The corpus of captures as a reader yields them (captures `budgets` does not name are skipped): each cut to
    round(budget · scale) records by `rule` as soon as it is read (one whole capture in memory at a time), sorted
    by time, captures in date order; features selected and the non-finite policy applied."""
    if not scale > 0:
        raise ConfigError(f"--scale {scale}: expected a positive number")
    cut_tables, seen, every = [], [], not budgets  # no budgets (none published): every capture, its eligible count
    for t in tables:
        seen.append(t.name)
        if every or t.name in budgets:
            budget = budgets.get(t.name, t.n)
            rows, stat = cut(t, scaled_budget(budget, scale), rule)
            cut_tables.append((_slim(t, rows), {"capture": t.name, "budget": budget, **stat, **t.dropped}))
    missing = [c for c in budgets if c not in seen]
    if missing:
        raise DatasetError(f"{identity.get('root', '')}: no records of capture(s) {', '.join(missing)} (found: "
                           f"{', '.join(seen) or 'none'}; {identity.get('layout', '')})")
    cut_tables.sort(key=lambda ts: (int(ts[0].timestamp.min()), ts[0].name))
    tables, stats = [t for t, _ in cut_tables], [s for _, s in cut_tables]  # each table: its kept rows, in order
    columns = feature_columns(tables, features)
    X = np.concatenate([_matrix(t, cols) for t, cols in zip(tables, columns)])
    non_finite = apply_non_finite(X, NonFinite.RELEASED)
    names, label = np.unique(np.concatenate([t.labels for t in tables]).astype(str), return_inverse=True)
    y = np.concatenate([t.attack for t in tables]).astype(np.int8)
    manifest = _manifest(tables, stats, identity, rule=rule, features=features, scale=scale,
                         columns=columns[0], non_finite=non_finite)
    return Corpus(name=name, X=X, y=y, label=label.astype(np.int16), label_names=tuple(str(v) for v in names),
                  capture=np.concatenate([np.full(t.n, i, np.int16) for i, t in enumerate(tables)]),
                  captures=tuple(t.name for t in tables),
                  timestamp=np.concatenate([t.timestamp for t in tables]).astype(np.int64),
                  record_id=np.arange(len(y), dtype=np.int64), feature_names=tuple(columns[0]), manifest=manifest)


def _slim(t: CaptureTable, rows: np.ndarray) -> CaptureTable:
    """`t` restricted to `rows` (in that order), so that the rest of the capture can be freed."""
    return replace(t, frame=t.frame.iloc[rows].reset_index(drop=True), labels=t.labels[rows], attack=t.attack[rows],
                   timestamp=t.timestamp[rows])


def cut(t: CaptureTable, budget: int, rule: Subsample) -> tuple[np.ndarray, dict]:
    """(kept rows of `t` in canonical order, their accounting). DatasetError when the budget is above what the capture
    holds or nothing is kept."""
    where = f"capture {t.name!r} ({', '.join(f.name for f in t.files)})"
    if budget > t.n:
        raise DatasetError(f"{where}: budget {budget} records is above the {t.n} eligible records it holds; lower "
                           f"its budget or --scale")
    strides = {}
    if rule is Subsample.HEAD:
        rows = np.arange(budget, dtype=np.int64)
    else:
        parts = []
        for cls, mask in (("attack", t.attack), ("benign", ~t.attack)):  # attacks first, as released
            idx = np.flatnonzero(mask)
            # the released factor is a float (budget / n) multiplied by the class size, then Python's round
            keep = round(len(idx) * (budget / t.n)) if t.n else 0
            picked, strides[cls] = _pick(idx, keep, rule)
            parts.append(picked)
        rows = np.concatenate(parts)
    if len(rows) == 0:
        raise DatasetError(f"{where}: empty after its budget ({budget} records by rule {rule.value}); raise its "
                           f"budget or --scale")
    rows = rows[np.argsort(t.timestamp[rows], kind="stable")]
    att = int(t.attack[rows].sum())
    stat = {"eligible": t.n, "attacks_eligible": int(t.attack.sum()), "scaled_budget": budget, "kept": len(rows),
            "attacks_kept": att, "retention_pct": 100.0 * len(rows) / t.n,
            "prevalence_eligible_pct": 100.0 * float(t.attack.mean()), "prevalence_kept_pct": 100.0 * att / len(rows),
            "first": _iso(t.timestamp[rows].min()), "last": _iso(t.timestamp[rows].max())}
    if strides:
        stat["stride"] = strides
        stat["head_of_each_class"] = rule is Subsample.RELEASED and all(s <= 1 for s in strides.values())
    return rows, stat


def _iso(ns) -> str:
    return str(np.datetime64(int(ns), "ns").astype("datetime64[s]"))


def _pick(idx: np.ndarray, keep: int, rule: Subsample) -> tuple[np.ndarray, int]:
    if keep <= 0 or len(idx) == 0:
        return idx[:0], 0
    if rule is Subsample.EVEN:
        return idx[(np.arange(keep) * len(idx)) // keep], 0
    stride = max(1, len(idx) // keep)
    return idx[::stride][:keep], stride


def feature_columns(tables: list[CaptureTable], features: FeatureSet) -> list[list[str]]:
    """Per capture, the file columns that are the features (in one order for all captures)."""
    if features is FeatureSet.SUITE:
        return [_suite_columns(t) for t in tables]
    out = []
    for t in tables:
        cols = [c for c in t.frame.select_dtypes(include=[np.number]).columns if c not in t.ignore]
        if out and cols != out[0]:
            raise DatasetError(f"{t.files[0]}: numeric columns differ from those of capture {tables[0].name!r} "
                               f"({len(cols)} vs {len(out[0])}; e.g. {sorted(set(cols) ^ set(out[0]))[:3]}); the "
                               f"released feature set needs one schema")
        out.append(cols)
    if not out[0]:
        raise DatasetError(f"{tables[0].files[0]}: no numeric feature columns")
    return out


def _suite_columns(t: CaptureTable) -> list[str]:
    from bench.tabular.cic import FEATURES, canonical

    found: dict[str, str] = {}
    for c in t.frame.columns:
        canon = canonical(c)
        if canon is not None and canon not in found:  # the first of duplicated columns, as the suite's reader
            found[canon] = c
    missing = [f for f in FEATURES if f not in found]
    if missing:
        raise DatasetError(f"{t.files[0]}: missing feature columns {', '.join(missing[:5])} (the suite feature set "
                           f"needs the CICFlowMeter columns)")
    return [found[f] for f in FEATURES]


def _matrix(t: CaptureTable, columns: list[str]) -> np.ndarray:
    import pandas as pd

    # the suite set may name a column parsed as text (a stray value): coerced, and the cell counted as non-finite
    return np.column_stack([pd.to_numeric(t.frame[c], errors="coerce").to_numpy(np.float64) for c in columns])


def apply_non_finite(X: np.ndarray, policy: NonFinite) -> dict:
    """Replace non-finite cells in place by the policy; return what was replaced (counts, for the manifest)."""
    posinf, neginf, nan = np.isposinf(X), np.isneginf(X), np.isnan(X)
    counts = {"policy": policy.value, "rule": "+inf, -inf -> NaN -> 0", "posinf": int(posinf.sum()),
              "neginf": int(neginf.sum()), "nan": int(nan.sum())}
    X[posinf | neginf | nan] = 0.0
    return counts


def _manifest(tables, stats, identity, *, rule, features, scale, columns, non_finite) -> dict:
    from bench.tabular.cic import files_sha256

    eligible = sum(s["eligible"] for s in stats)
    att_eligible = sum(s["attacks_eligible"] for s in stats)
    kept = sum(s["kept"] for s in stats)
    att_kept = sum(s["attacks_kept"] for s in stats)
    prev_e, prev_k = 100.0 * att_eligible / eligible, 100.0 * att_kept / kept
    return {
        "capture_identity": identity, "files": files_sha256([f for t in tables for f in t.files]),
        "rule": rule.value, "rule_doc": " ".join(Subsample.__doc__.split()), "scale": scale,
        "budgets": {s["capture"]: s["budget"] for s in stats},
        "scaled_budgets": {s["capture"]: s["scaled_budget"] for s in stats},
        "features": {"set": features.value, "n": len(columns), "names": list(columns)},
        "non_finite": non_finite, "captures": stats, "eligible": eligible, "attacks_eligible": att_eligible,
        "records": kept, "attacks": att_kept, "prevalence_eligible_pct": prev_e, "prevalence_pct": prev_k,
        "prevalence_bias_pp": prev_k - prev_e,
        "order": "captures in date order; within each, a stable timestamp sort of (kept attacks, kept benign)",
    }

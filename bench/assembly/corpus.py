"""The budgeted corpus: records read from capture files, cut to a fixed budget per capture, in canonical order.

The stream-assembly paper's released build (`scripts/build_cicids_labeled.py`) reads the five CICIDS2017 days, drops
the rows whose label carries " - Attempted", and cuts each day to a fixed budget (300k/300k/350k/300k/350k records,
Monday–Friday) with a per-class rule, then sorts each day by timestamp (stable). This module does the same from any
registered source (`SOURCES`: CICIDS2017 from its TrafficLabelling or improved CSV files, LITNET-2020 from its
per-attack-type files), with the budgets scaled by `scale` so the same construction runs on small data, and records
what it did in `Corpus.manifest` (JSON-able): the inputs' SHA-256, per-capture eligible / kept / retention /
prevalence, the prevalence bias the budget step introduces, the rule, the feature set and the non-finite counts.

Canonical order: captures in date order (their first timestamp), each capture's kept records sorted by timestamp
with a stable sort of (kept attacks in file order, then kept benign records in file order), as released: rows of
one class that share a timestamp keep their file order, and at a shared timestamp attacks come first.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Iterator

import numpy as np

from bench.assembly.records import Corpus
from bench.errors import ConfigError, DatasetError, choice_error

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


SOURCES: dict[str, Source] = {}


def register(source: Source) -> Source:
    if source.name in SOURCES:
        raise ConfigError(f"corpus source {source.name!r} is registered twice")
    SOURCES[source.name] = source
    return source


def source(name: str) -> Source:
    if name not in SOURCES:
        raise choice_error("corpus source", name, SOURCES)
    return SOURCES[name]


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


def build_corpus(name: str, root, *, scale: float = 1.0, rule: Subsample | None = None,
                 features: FeatureSet = FeatureSet.RELEASED, budgets: dict[str, int] | None = None,
                 corpus_name: str | None = None) -> Corpus:
    """The budgeted corpus of source `name` (SOURCES) read from `root`: budgets (default: the released ones, which
    also name the captures used) times `scale`, cut by `rule` (default: the source's released rule)."""
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
    cut_tables, seen = [], []
    for t in tables:
        seen.append(t.name)
        if t.name in budgets:
            rows, stat = cut(t, scaled_budget(budgets[t.name], scale), rule)
            cut_tables.append((_slim(t, rows), {"capture": t.name, "budget": budgets[t.name], **stat, **t.dropped}))
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


# ---- CICIDS2017 -------------------------------------------------------------------------------------------------

CIC_DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday")
CIC_BUDGETS = {"Monday": 300_000, "Tuesday": 300_000, "Wednesday": 350_000, "Thursday": 300_000, "Friday": 350_000}
# columns the released build drops before taking every numeric one (the improved files' `id`, identities), and
# columns that are never features
CIC_IGNORE = ("id", "Flow ID", "Src IP", "Dst IP", "Source IP", "Destination IP", "Attempted Category", "Label",
              "Timestamp")
CIC_LAYOUT = ("CICIDS2017 TrafficLabelling/<Day>-WorkingHours….pcap_ISCX.csv or the improved release's "
              "<day>.csv files (monday.csv …), each with Timestamp and Label columns")


def cic_day(path: Path) -> str:
    """The capture day a CICIDS2017 file holds, from its name; DatasetError for any other file."""
    word = path.stem.split("-")[0].split("_")[0].capitalize()
    if word not in CIC_DAYS:
        raise DatasetError(f"{path}: not a CICIDS2017 capture file (expected {CIC_LAYOUT})")
    return word


def cic_timestamps(text: np.ndarray, path: Path) -> tuple[np.ndarray, int]:
    """(int64 ns, how many moved to the afternoon) of one file's Timestamp texts: d/m/Y H:M[:S] through the suite's
    12-hour-clock repair (bench.tabular.cic.cicids2017_clock), else any of its TIMESTAMP_FORMATS (the improved
    files' ISO texts). DatasetError naming the file for an empty or unparseable text."""
    import pandas as pd

    from bench.tabular.cic import cicids2017_clock, parse_timestamps

    raw = pd.Series(np.asarray(text, dtype=str)).str.strip()
    empty = (raw == "") | (raw.str.lower() == "nan")
    if empty.any():
        raise DatasetError(f"{path}: {int(empty.sum())} record(s) without a Timestamp (first at data row "
                           f"{int(np.flatnonzero(empty)[0])}); the assembly orders records by time")
    moved = 0
    if raw.str.contains("/").all():
        iso, moved = cicids2017_clock(raw.to_numpy())
        lost = iso == ""
        if lost.any():
            raise DatasetError(f"{path}: {int(lost.sum())} Timestamp text(s) not d/m/Y H:M[:S], e.g. "
                               f"{raw[lost].iloc[0]!r}")
        stamp = pd.to_datetime(pd.Series(iso), format="%Y-%m-%dT%H:%M:%S")
    else:
        stamp = parse_timestamps(raw.to_numpy(), path)
    return stamp.to_numpy().astype("datetime64[ns]").astype(np.int64), moved


def read_cicids2017(root: Path) -> Iterator[CaptureTable]:
    """One CaptureTable per day found under `root` (files of one day concatenated in name order), " - Attempted"
    rows dropped and counted, labels checked against the dataset's known labels; a day is read when asked for."""
    files = sorted(p for p in Path(root).rglob("*") if p.suffix.lower() == ".csv") if Path(root).is_dir() else []
    if not files:
        raise DatasetError(f"{root}: no CSV files (expected {CIC_LAYOUT})")
    by_day: dict[str, list[Path]] = {}
    for path in files:
        by_day.setdefault(cic_day(path), []).append(path)
    return (_read_cic_day(day, paths) for day, paths in by_day.items())


@dataclass(frozen=True)
class _CicFile:
    path: Path
    frame: pd.DataFrame
    labels: np.ndarray
    timestamp: np.ndarray
    to_pm: int  # timestamps the 12-hour-clock repair moved to the afternoon


def _read_cic_day(day: str, paths: list[Path]) -> CaptureTable:
    import pandas as pd

    from bench.tabular.cic import NORMAL_LABELS, check_labels, read_labelled

    parts = []
    for path in paths:
        raw, labels = read_labelled(path)
        if "Timestamp" not in raw.columns:
            raise DatasetError(f"{path}: no Timestamp column (MachineLearningCVE files carry none; the assembly "
                               f"needs {CIC_LAYOUT})")
        check_labels(pd.Series(labels), pd.Series([path.name] * len(labels)), "cicids2017")
        ts, moved = cic_timestamps(raw["Timestamp"].to_numpy(), path)
        parts.append(_CicFile(path, raw, labels, ts, moved))
    return _cic_table(day, parts, NORMAL_LABELS)


def _cic_table(day: str, parts: list[_CicFile], normal: set) -> CaptureTable:
    import pandas as pd

    frame = pd.concat([p.frame for p in parts], ignore_index=True)
    labels = np.concatenate([p.labels for p in parts]).astype(object)
    ts = np.concatenate([p.timestamp for p in parts])
    attempted = pd.Series(labels).str.contains(ATTEMPTED, regex=False).to_numpy()
    keep = np.flatnonzero(~attempted)
    attack = ~pd.Series(labels[keep]).str.lower().isin(normal).to_numpy()
    return CaptureTable(name=day, frame=frame.iloc[keep].reset_index(drop=True), labels=labels[keep], attack=attack,
                        timestamp=ts[keep], files=tuple(p.path for p in parts), ignore=CIC_IGNORE,
                        dropped={"raw": len(labels), "attempted_dropped": int(attempted.sum()),
                                 "timestamps_to_pm": sum(p.to_pm for p in parts)})


register(Source("cicids2017", read_cicids2017, CIC_BUDGETS, Subsample.RELEASED, CIC_LAYOUT,
                (FeatureSet.RELEASED, FeatureSet.SUITE)))


from bench.assembly import litnet  # noqa: E402,F401  (registers the LITNET-2020 source)

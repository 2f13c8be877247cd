"""Preprocessing as the CAD framework does it, with every count recorded, and the record index it produces.

clean: ±inf → NaN, and so a finite value beyond float32's range (|x| > 3.4e38: features.npy is float32, where it
would become inf and reach a model as a "divergence"), counted as `float32_overflow_values` where there is one;
drop rows with a NaN feature, drop duplicate records (features + label text; the first is kept).
split (per task): train = `train_fraction` (80 %) of the task's normals, test = the other normals + all the task's
anomalies; optionally the test anomalies are subsampled to at most as many as the test normals (`rebalance`).
scale: one StandardScaler fitted on the training records of all tasks (never on test records), applied to all.
`split="released"` (set with the discovery semantics of the `released` preset) splits as the CAD framework's
released code (CAD 675a9c9 `src/cadbench/datasets/cicids2017.py:75-174`, `src/cadbench/splits/utils.py:5-14`):
test = scikit-learn's `train_test_split(normals, test_size=0.2, random_state=42)` (⌈0.2 n⌉ normals); for a natural
candidate also the test anomalies subsampled to the test-normal count by pandas' `sample(random_state=42)` and
duplicates dropped file by file (`:112-115`; a clustering candidate's input deduplicates over all files and keeps
every anomaly, as released).

The record index is a folder: `index.csv` (dataset, task, split, label, record_id = source file:row, attack, day,
timestamp; one row per record), `features.npy` (float32 [records, features], row-aligned, scaled) and
`index.json` (feature names, scaler, counts, settings, SHA-256 of every raw file, and `index_sha256` over the raw
files' bytes and all settings — the identity that goes into a run key).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from bench.errors import ConfigError, DatasetError
from bench.io import atomic_path, write_text_atomic
from bench.tabular.cic import FEATURES, RawTable, files_sha256

if TYPE_CHECKING:
    import pandas as pd

INDEX_COLUMNS = ("dataset", "task", "split", "label", "record_id", "attack", "day", "timestamp")


@dataclass(frozen=True)
class PrepSettings:
    train_fraction: float = 0.8
    rebalance: bool = False
    drop_duplicates: bool = True
    seed: int = 0
    split: str = "suite"  # "released": the released natural split (module docstring)

    def __post_init__(self):
        if not 0 < self.train_fraction < 1:
            raise ConfigError(f"train_fraction={self.train_fraction!r} is not allowed (expected 0 < x < 1)")
        if not isinstance(self.seed, int) or self.seed < 0:
            raise ConfigError(f"--seed {self.seed!r} is not allowed (expected an integer ≥ 0)")
        if self.split not in SPLITS:
            raise ConfigError(f"split={self.split!r} is not allowed (expected one of {', '.join(SPLITS)})")

    def to_dict(self) -> dict:
        """The settings the index records (index_sha256 covers them); the suite's split rule is left out, so indexes
        built before it existed keep their SHA-256."""
        return {k: v for k, v in asdict(self).items() if k != "split" or v != "suite"}


SPLITS = ("suite", "released")
RELEASED_SPLIT_SEED = 42  # cicids2017.py:79: random_state=42 for the split and the test rebalancing


def clean(raw: RawTable, drop_duplicates: bool = True, per_file: bool = False) -> tuple[pd.DataFrame, dict]:
    df = raw.frame
    X = df[list(FEATURES)].to_numpy(dtype=np.float64, copy=True)
    inf = np.isinf(X)
    with np.errstate(invalid="ignore"):
        huge = ~inf & (np.abs(X) > np.finfo(np.float32).max)  # finite in float64, inf in features.npy
    X[inf | huge] = np.nan
    bad = np.isnan(X).any(1)
    counts = {"records_read": int(len(df)), "inf_values": int(inf.sum()), "nan_rows_dropped": int(bad.sum()),
              **({"float32_overflow_values": int(huge.sum())} if huge.any() else {})}
    df = df.loc[~bad].copy()
    df[list(FEATURES)] = X[~bad]
    if drop_duplicates:  # per file: a record repeated in another file is kept there (the released natural split)
        dup = df.duplicated(subset=list(FEATURES) + ["attack"] + (["source"] if per_file else []),
                            keep="first").to_numpy()
        df = df.loc[~dup]
        counts["duplicates_dropped"] = int(dup.sum())
    counts["records_kept"] = int(len(df))
    return df.reset_index(drop=True), counts


def split(df: pd.DataFrame, tasks: np.ndarray, s: PrepSettings, natural: bool = True) -> tuple[pd.DataFrame, dict]:
    """Adds `task` and `split`; records whose task is "" (unassigned, e.g. below the minimum size) are dropped.
    `natural`: the tasks come from a natural split (the released split then cuts the test anomalies; the released
    clustering split, `src/cadbench/splits/utils.py:5-14`, does not)."""
    df = df.assign(task=np.asarray(tasks, dtype=object))
    df = df.loc[df["task"] != ""].copy()
    rng = np.random.default_rng(s.seed)
    split_col = np.full(len(df), "", dtype=object)
    keep = np.ones(len(df), dtype=bool)
    per_task = {}
    labels, names = df["label"].to_numpy(), df["task"].to_numpy()
    for task in sorted(set(names)):
        rows = np.flatnonzero(names == task)
        norm, anom = rows[labels[rows] == 0], rows[labels[rows] == 1]
        if s.split == "released":
            train, test, drop = _released_split(norm, anom, 1 - s.train_fraction, natural)
        else:
            norm = norm[rng.permutation(len(norm))]
            n_train = int(round(s.train_fraction * len(norm)))
            train, test = norm[:n_train], norm[n_train:]
            drop = (rng.choice(anom, len(anom) - len(test), replace=False) if s.rebalance and len(anom) > len(test)
                    else anom[:0])
        split_col[train] = "train"
        split_col[test] = "test"
        split_col[anom] = "test"
        keep[drop] = False
        n_train, n_test_norm, dropped = len(train), len(test), len(drop)
        per_task[task] = {"train_normal": n_train, "test_normal": n_test_norm, "test_anomalous": len(anom) - dropped,
                          "anomalies_dropped_by_rebalance": dropped}
    df["split"] = split_col
    return df.loc[keep].reset_index(drop=True), per_task


def _released_split(norm: np.ndarray, anom: np.ndarray, test_size: float, cut: bool) -> tuple:
    """(train normals, test normals, anomalies dropped) of one task as cicids2017.py:122-157 draws them, on the
    records in file order: train_test_split's permutation, then (`cut`) test anomalies beyond the test-normal
    count left out by pandas' sample."""
    import pandas as pd  # here, not at the top: the tabular parser imports this module on every `python -m bench`

    from sklearn.model_selection import train_test_split

    if len(norm) < 2:  # scikit-learn refuses an empty training part; the one normal is tested
        return norm[:0], norm, anom[len(norm):] if cut else anom[:0]
    train, test = train_test_split(norm, test_size=round(test_size, 12), random_state=RELEASED_SPLIT_SEED)
    if not cut or len(anom) <= len(test):
        return train, test, anom[:0]
    kept = pd.Series(anom).sample(n=len(test), random_state=RELEASED_SPLIT_SEED).to_numpy()
    return train, test, np.setdiff1d(anom, kept)


def index_sha256(file_sha: dict[str, str], settings: dict) -> str:
    blob = json.dumps({"files": dict(sorted(file_sha.items())), "settings": settings}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def build_index(dataset: str, raw: RawTable, tasks_of, s: PrepSettings, out: Path, discovery: dict) -> dict:
    """Clean, assign tasks (`tasks_of(clean_frame) -> (task per row, info)`), split, scale; write the index folder."""
    import pandas as pd

    from sklearn.preprocessing import StandardScaler

    natural = discovery.get("method") == "natural"
    df, counts = clean(raw, s.drop_duplicates, per_file=s.split == "released" and natural)
    tasks, task_info = tasks_of(df)
    df, per_task = split(df, tasks, s, natural)
    if df.empty or not (df["split"] == "train").any():
        raise DatasetError(f"{dataset}: no task has training records after preprocessing ({counts})")
    X = df[list(FEATURES)].to_numpy(dtype=np.float64)
    train = (df["split"] == "train").to_numpy()
    scaler = StandardScaler().fit(X[train])
    Xs = scaler.transform(X).astype(np.float32)
    file_sha = files_sha256(raw.files)
    settings = {"dataset": dataset, "preprocessing": s.to_dict(), "discovery": discovery,
                **({"reading": raw.reading} if raw.reading else {})}  # absent where no reading choice was made
    meta = {"dataset": dataset, "features": list(FEATURES), "scaler_mean": scaler.mean_.tolist(),
            "scaler_scale": scaler.scale_.tolist(), "counts": {**raw.counts, **counts}, "tasks": per_task,
            "task_discovery": task_info, "settings": settings, "files_sha256": file_sha,
            "index_sha256": index_sha256(file_sha, settings)}
    index = pd.DataFrame({"dataset": dataset, "task": df["task"], "split": df["split"], "label": df["label"],
                          "record_id": df["source"] + ":" + df["row"].astype(str), "attack": df["attack"],
                          "day": df["day"], "timestamp": df["timestamp"]})
    out = Path(out)
    _write_index(out, Xs, index, meta)
    return meta


def _write_index(out: Path, Xs: np.ndarray, index: pd.DataFrame, meta: dict) -> None:
    """The three index files, each atomically; a failed write (a full disk) is one line naming the file."""
    name = out
    try:
        out.mkdir(parents=True, exist_ok=True)
        name = out / "features.npy"
        with atomic_path(name) as tmp, open(tmp, "wb") as f:
            np.save(f, Xs)
        name = out / "index.csv"
        write_text_atomic(name, index.to_csv(index=False))
        name = out / "index.json"
        write_text_atomic(name, json.dumps(meta, indent=1) + "\n")
    except OSError as e:
        raise DatasetError(f"{name}: cannot be written ({e.strerror or e}); the record index in {out} is "
                           f"incomplete: free space and run `bench tabular index` again") from None


def load_index_meta(folder) -> dict:
    """index.json alone (the index's identity, settings and per-task counts), after checking that the index's
    three files are there: what a run needs to know its key without reading the records."""
    folder = Path(folder)
    for name in ("index.csv", "features.npy", "index.json"):
        if not (folder / name).is_file():
            raise DatasetError(f"{folder / name}: missing (build the record index with `bench tabular index`)")
    try:
        meta = json.loads((folder / "index.json").read_text())
    except (ValueError, OSError) as e:
        raise DatasetError(f"{folder}: unreadable record index ({e})") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("index_sha256"), str):
        raise DatasetError(f"{folder / 'index.json'}: not a record index's description (no index_sha256)")
    return meta


def load_index(folder) -> tuple[pd.DataFrame, np.ndarray, dict]:
    import pandas as pd

    folder = Path(folder)
    meta = load_index_meta(folder)
    try:
        index = pd.read_csv(folder / "index.csv", dtype={"task": str, "split": str, "record_id": str, "day": str,
                                                         "timestamp": str, "attack": str}, keep_default_na=False)
        X = np.load(folder / "features.npy", allow_pickle=False)
    except (ValueError, OSError) as e:
        raise DatasetError(f"{folder}: unreadable record index ({e})") from None
    missing = [c for c in INDEX_COLUMNS if c not in index.columns]
    if missing or X.ndim != 2 or len(X) != len(index) or X.shape[1] != len(meta.get("features", ())):
        raise DatasetError(f"{folder}: index.csv, features.npy and index.json do not match "
                           f"({len(index)} rows, features {X.shape}, missing columns {missing})")
    return index, X, meta

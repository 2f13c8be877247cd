"""The sample index: the one table every dataset reader returns.

One row per image: dataset, task, split (train|test), label (0 normal, 1 anomalous), image_path, mask_path
(empty string when the image has no mask). Paths are relative to the dataset root and use forward slashes.
"""

from __future__ import annotations

import hashlib

import pandas as pd

from bench.errors import DatasetError

COLUMNS = ["dataset", "task", "split", "label", "image_path", "mask_path"]


def make_index(rows: list[dict]) -> pd.DataFrame:
    """Build a sorted, typed index from row dicts (sorting makes the index and its hash deterministic)."""
    df = pd.DataFrame(rows, columns=COLUMNS)
    df["label"] = df["label"].astype("int64")
    df["mask_path"] = df["mask_path"].fillna("").astype(str)
    return sort_index(df)


def sort_index(df: pd.DataFrame) -> pd.DataFrame:
    """Rows in the canonical order (task, split, image path), renumbered 0..n-1."""
    return df.sort_values(["task", "split", "image_path"], kind="stable").reset_index(drop=True)


def escapes_root(rel: str) -> bool:
    """True for a path (relative, '/'-separated) that would leave the dataset root."""
    return rel.startswith("/") or ".." in rel.split("/")


def validate_index(df: pd.DataFrame, source: str) -> pd.DataFrame:
    """Check the contract; `source` names the dataset root in the error message."""
    if list(df.columns) != COLUMNS:
        raise DatasetError(f"{source}: index columns {list(df.columns)} != {COLUMNS}")
    if df.empty:
        raise DatasetError(f"{source}: no images found")
    bad_split = set(df["split"]) - {"train", "test"}
    if bad_split:
        raise DatasetError(f"{source}: unknown split values {sorted(bad_split)}")
    if not set(df["label"]).issubset({0, 1}):
        raise DatasetError(f"{source}: labels must be 0 (normal) or 1 (anomalous)")
    if ((df["split"] == "train") & (df["label"] == 1)).any():
        raise DatasetError(f"{source}: anomalous images in a training split (training is on normal images only)")
    for col in ("image_path", "mask_path"):
        escaping = df[col].map(escapes_root)
        if escaping.any():
            raise DatasetError(f"{source}: {col} {df.loc[escaping, col].iloc[0]!r} escapes the dataset root")
    return df


def index_sha256(df: pd.DataFrame, record: bytes | None = None, content: str | None = None) -> str:
    """SHA-256 of the index content (the rows that define a run's data), independent of row order, plus the
    dataset's generation `record` where it has one (the synthetic benchmark's synthetic.json: a new generator
    version writes other pixels under the same file names, and its results must not pass for the old ones), plus
    the `content` digest of the files' bytes (bench/data/digests.py) that makes a run key cover the pixels."""
    canon = df[COLUMNS].sort_values(["dataset", "task", "split", "image_path"], kind="stable")
    payload = canon.to_csv(index=False, lineterminator="\n").encode()
    if record is not None:
        payload += b"\0generation record\0" + record
    if content is not None:
        payload += b"\0file content\0" + content.encode()
    return hashlib.sha256(payload).hexdigest()

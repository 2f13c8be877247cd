"""CICIDS2017 as a corpus source: one capture per day, read from the TrafficLabelling CSV files or the improved
(Engelen-corrected) release's <day>.csv files, " - Attempted" rows dropped as released."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import numpy as np

from bench.assembly.sources import ATTEMPTED, CaptureTable, FeatureSet, Source, Subsample, register
from bench.errors import DatasetError

if TYPE_CHECKING:
    import pandas as pd


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

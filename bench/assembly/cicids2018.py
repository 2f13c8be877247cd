"""CSE-CIC-IDS2018 as a corpus source: one capture per capture date, read from the `*_TrafficForML_CICFlowMeter.csv`
files (the date in the file name, `Friday-02-03-2018_…` → capture `2018-03-02`; files of one date concatenated in
name order), records timed by their `Timestamp` (any of bench.tabular.cic.TIMESTAMP_FORMATS, day-first), labels
cleaned and checked as the tabular reader does (`Benign` is normal, every other known label an attack).

No stream-assembly build of this corpus is published, so it has no released budgets: by default every capture is
used whole (its eligible count is its budget), `--scale` and `--budgets` cut it, and the default rule is EVEN (with
HEAD the other sensible choice). The header row the files repeat mid-file is dropped and counted; the one file
with 84 columns (`Flow ID`, `Src IP`, `Src Port`, `Dst IP` added) has those columns ignored, so that every capture
offers the same numeric columns (the released-style feature set: `Dst Port`, `Protocol` and the 77 flow features).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import numpy as np

from bench.assembly.sources import CaptureTable, FeatureSet, Source, Subsample, register
from bench.errors import DatasetError

if TYPE_CHECKING:
    import pandas as pd

FILES = "*_TrafficForML_CICFlowMeter.csv"
IGNORE = ("Flow ID", "Src IP", "Src Port", "Dst IP", "Label", "Timestamp")  # identities (one file only), labels
LAYOUT = ("CSE-CIC-IDS2018 <Weekday>-<dd>-<mm>-<yyyy>_TrafficForML_CICFlowMeter.csv files, each with Timestamp "
          "and Label columns")
_DATE = re.compile(r"(\d{2})-(\d{2})-(\d{4})")


def capture_date(path: Path) -> str:
    """The capture date (ISO) in a CSE-CIC-IDS2018 file name; DatasetError for a name without one."""
    m = _DATE.search(path.name)
    if m is None:
        raise DatasetError(f"{path}: no capture date dd-mm-yyyy in the file name (expected {LAYOUT})")
    return f"{m[3]}-{m[2]}-{m[1]}"


def read_cicids2018(root: Path) -> Iterator[CaptureTable]:
    """One CaptureTable per capture date under `root`, each read when asked for."""
    root = Path(root)
    files = sorted(root.rglob(FILES)) if root.is_dir() else []
    if not files:
        raise DatasetError(f"{root}: no {FILES} files (expected {LAYOUT})")
    by_date: dict[str, list[Path]] = {}
    for path in files:
        by_date.setdefault(capture_date(path), []).append(path)
    return (_read_date(date, by_date[date]) for date in sorted(by_date))


def _read_date(date: str, paths: list[Path]) -> CaptureTable:
    import pandas as pd

    from bench.tabular.cic import NORMAL_LABELS

    frames, labels, stamps, repeated = [], [], [], 0
    for path in paths:
        frame, text, ts, again = read_file(path)
        frames.append(frame)
        labels.append(text)
        stamps.append(ts)
        repeated += again
    frame = pd.concat(frames, ignore_index=True)
    label = np.concatenate(labels).astype(object)
    attack = ~pd.Series(label).str.lower().isin(NORMAL_LABELS).to_numpy()
    return CaptureTable(name=date, frame=frame, labels=label, attack=attack, timestamp=np.concatenate(stamps),
                        files=tuple(paths), ignore=IGNORE,
                        dropped={"raw": len(label) + repeated, "repeated_header_lines": repeated})


def read_file(path: Path) -> tuple[pd.DataFrame, np.ndarray, np.ndarray, int]:
    """(frame, cleaned labels, int64 ns timestamps, repeated header lines dropped) of one file; DatasetError naming
    the file for a missing Timestamp column, an empty or unparseable stamp, or an unknown label."""
    import pandas as pd

    from bench.tabular.cic import check_labels, read_labelled

    raw, labels = read_labelled(path)
    if "Timestamp" not in raw.columns:
        raise DatasetError(f"{path}: no Timestamp column (the assembly orders records by time; expected {LAYOUT})")
    again = (pd.Series(labels) == "Label").to_numpy()  # the header row repeated mid-file
    if again.any():
        raw, labels = _numeric_again(raw.iloc[np.flatnonzero(~again)].reset_index(drop=True)), labels[~again]
    if raw.empty:
        raise DatasetError(f"{path}: no records")
    check_labels(pd.Series(labels), pd.Series([path.name] * len(labels)), "cicids2018")
    return raw, labels, _timestamps(raw["Timestamp"].to_numpy(), path), int(again.sum())


def _numeric_again(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` with the columns a repeated header line had turned into text parsed as numbers again (a column
    whose every cell parses; "Infinity" is inf, as the C parser reads it)."""
    import pandas as pd

    for c in frame.columns:
        if c in IGNORE or frame[c].dtype.kind != "O":
            continue
        text = frame[c].astype(str).str.strip().replace({"Infinity": "inf", "-Infinity": "-inf"})
        num = pd.to_numeric(text, errors="coerce")
        if num.notna().sum() == frame[c].notna().sum():
            frame[c] = num
    return frame


def _timestamps(text: np.ndarray, path: Path) -> np.ndarray:
    import pandas as pd

    from bench.tabular.cic import parse_timestamps

    raw = pd.Series(np.asarray(text, dtype=str)).str.strip()
    empty = (raw == "") | (raw.str.lower() == "nan")
    if empty.any():
        raise DatasetError(f"{path}: {int(empty.sum())} record(s) without a Timestamp (first at data row "
                           f"{int(np.flatnonzero(empty)[0])}); the assembly orders records by time")
    stamp = parse_timestamps(raw.to_numpy(), path)
    _refuse_swapped(stamp, raw, path)
    return stamp.to_numpy().astype("datetime64[ns]").astype(np.int64)


def _refuse_swapped(stamp: pd.Series, raw: pd.Series, path: Path) -> None:
    """DatasetError for stamps that read day-first fall off the file name's date but month-first on it (month-first
    texts in a day-first file would put records days away from their capture), as the tabular reader refuses."""
    import pandas as pd

    named = pd.Timestamp(capture_date(path))
    swapped = ((stamp.dt.normalize() != named) & (stamp.dt.month == named.day) & (stamp.dt.day == named.month)
               & (stamp.dt.year == named.year))
    if swapped.any():
        raise DatasetError(f"{path}: {int(swapped.sum())} Timestamp(s) read day-first fall on "
                           f"{stamp[swapped].iloc[0]:%Y-%m-%d}, the file name's date {named:%Y-%m-%d} with day and "
                           f"month swapped (e.g. {raw[swapped].iloc[0]!r}): write them day-first (d/m/Y)")


register(Source("cicids2018", read_cicids2018, {}, Subsample.EVEN, LAYOUT, (FeatureSet.RELEASED, FeatureSet.SUITE)))

"""Readers for the CIC flow datasets, one harmonised feature schema (CICIDS2017's feature names).

Every reader returns a `RawTable`: a DataFrame with the harmonised feature columns (`FEATURES`, float64) and the
columns `label` (0 normal, 1 anomalous), `attack` (label text, normalised), `source` (file name), `row` (0-based
data line in that file, counting repeated header lines, so `source:row` points at the line in the raw file),
`day` (capture day or "") and `timestamp` (ISO text or ""); plus the list of raw files read.

Quirks handled (each has a test writing a small file with it):
- CICIDS2017 `MachineLearningCVE/*.pcap_ISCX.csv`: column names with leading spaces; `Fwd Header Length` appears
  twice (the second copy, pandas' `.1`, is dropped: it repeats the first); `Infinity`/`NaN` in `Flow Bytes/s` and
  `Flow Packets/s` (kept as ±inf/NaN here, removed by preprocessing with counts); web-attack labels carry a cp1252
  en dash (byte 0x96) → "-", also in copies re-saved through UTF-8 (U+FFFD, bytes EF BF BD, which cp1252 reads
  as "ï¿½"; or the UTF-8 en dash, read as "â€“"); normal label `BENIGN`; capture day = the file name's first
  word. The `TrafficLabelling/` copies carry a `Timestamp` (d/m/Y H:M or H:M:S) that several files write on a
  12-hour clock without AM/PM ("7/7/2017 1:05" is 13:05): see `cicids2017_clock`.
- CSE-CIC-IDS2018 `*_TrafficForML_CICFlowMeter.csv`: the header row repeated mid-file (dropped, counted); one
  file with 84 columns (extra `Flow ID`, `Src IP`, `Src Port`, `Dst IP`, ignored); abbreviated names (`Tot Fwd
  Pkts`, `Flow Byts/s` …) mapped onto 2017's; normal label `Benign`; `Timestamp` → day, in any of TIMESTAMP_FORMATS
  (files mix dd/mm/YYYY HH:MM:SS with other forms: one day must stay one day); a stamp in none of them is an error
  naming the file.
- CIC-UNSW-NB15 in CICFlowMeter form: CICFlowMeter-4 names (`Total Fwd Packet`, `FWD Init Win Bytes` …) mapped
  onto 2017's; either CSV files with a `Label` column, or the `Data.csv` + `Label.csv` pair (row-aligned); normal
  label `Benign`/`Normal` or 0 (the pair's integer class codes). A `Timestamp` column (the improved CIC-IDS2017
  flows read through this reader carry `2017-07-06 12:39:06.818901`) gives the day; files without one have no day
  (the natural day split then says so). (Written from the CICFlowMeter-4 column names; not checked against the
  release.)

Labels: every label must be one the dataset defines (KNOWN_LABELS, compared without case); an empty, misspelt,
truncated or undecodable cell would otherwise become an attack class of its own, so it is an error listing the
unknown labels with their counts and the file.
"""

from __future__ import annotations

import hashlib
import re
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from bench.datasets import BUILT_IN, get
from bench.errors import DatasetError

if TYPE_CHECKING:
    import pandas as pd

FEATURES = (
    "Destination Port", "Flow Duration", "Total Fwd Packets", "Total Backward Packets",
    "Total Length of Fwd Packets", "Total Length of Bwd Packets", "Fwd Packet Length Max",
    "Fwd Packet Length Min", "Fwd Packet Length Mean", "Fwd Packet Length Std", "Bwd Packet Length Max",
    "Bwd Packet Length Min", "Bwd Packet Length Mean", "Bwd Packet Length Std", "Flow Bytes/s", "Flow Packets/s",
    "Flow IAT Mean", "Flow IAT Std", "Flow IAT Max", "Flow IAT Min", "Fwd IAT Total", "Fwd IAT Mean",
    "Fwd IAT Std", "Fwd IAT Max", "Fwd IAT Min", "Bwd IAT Total", "Bwd IAT Mean", "Bwd IAT Std", "Bwd IAT Max",
    "Bwd IAT Min", "Fwd PSH Flags", "Bwd PSH Flags", "Fwd URG Flags", "Bwd URG Flags", "Fwd Header Length",
    "Bwd Header Length", "Fwd Packets/s", "Bwd Packets/s", "Min Packet Length", "Max Packet Length",
    "Packet Length Mean", "Packet Length Std", "Packet Length Variance", "FIN Flag Count", "SYN Flag Count",
    "RST Flag Count", "PSH Flag Count", "ACK Flag Count", "URG Flag Count", "CWE Flag Count", "ECE Flag Count",
    "Down/Up Ratio", "Average Packet Size", "Avg Fwd Segment Size", "Avg Bwd Segment Size",
    "Fwd Avg Bytes/Bulk", "Fwd Avg Packets/Bulk", "Fwd Avg Bulk Rate", "Bwd Avg Bytes/Bulk",
    "Bwd Avg Packets/Bulk", "Bwd Avg Bulk Rate", "Subflow Fwd Packets", "Subflow Fwd Bytes",
    "Subflow Bwd Packets", "Subflow Bwd Bytes", "Init_Win_bytes_forward", "Init_Win_bytes_backward",
    "act_data_pkt_fwd", "min_seg_size_forward", "Active Mean", "Active Std", "Active Max", "Active Min",
    "Idle Mean", "Idle Std", "Idle Max", "Idle Min",
)
META = ("label", "attack", "source", "row", "day", "timestamp")

# CSE-CIC-IDS2018 (CICFlowMeter-3) names → CICIDS2017's. Names already equal are not listed.
ALIASES_2018 = {
    "Dst Port": "Destination Port", "Tot Fwd Pkts": "Total Fwd Packets", "Tot Bwd Pkts": "Total Backward Packets",
    "TotLen Fwd Pkts": "Total Length of Fwd Packets", "TotLen Bwd Pkts": "Total Length of Bwd Packets",
    "Fwd Pkt Len Max": "Fwd Packet Length Max", "Fwd Pkt Len Min": "Fwd Packet Length Min",
    "Fwd Pkt Len Mean": "Fwd Packet Length Mean", "Fwd Pkt Len Std": "Fwd Packet Length Std",
    "Bwd Pkt Len Max": "Bwd Packet Length Max", "Bwd Pkt Len Min": "Bwd Packet Length Min",
    "Bwd Pkt Len Mean": "Bwd Packet Length Mean", "Bwd Pkt Len Std": "Bwd Packet Length Std",
    "Flow Byts/s": "Flow Bytes/s", "Flow Pkts/s": "Flow Packets/s", "Fwd IAT Tot": "Fwd IAT Total",
    "Bwd IAT Tot": "Bwd IAT Total", "Fwd Header Len": "Fwd Header Length", "Bwd Header Len": "Bwd Header Length",
    "Fwd Pkts/s": "Fwd Packets/s", "Bwd Pkts/s": "Bwd Packets/s", "Pkt Len Min": "Min Packet Length",
    "Pkt Len Max": "Max Packet Length", "Pkt Len Mean": "Packet Length Mean", "Pkt Len Std": "Packet Length Std",
    "Pkt Len Var": "Packet Length Variance", "FIN Flag Cnt": "FIN Flag Count", "SYN Flag Cnt": "SYN Flag Count",
    "RST Flag Cnt": "RST Flag Count", "PSH Flag Cnt": "PSH Flag Count", "ACK Flag Cnt": "ACK Flag Count",
    "URG Flag Cnt": "URG Flag Count", "ECE Flag Cnt": "ECE Flag Count", "Pkt Size Avg": "Average Packet Size",
    "Fwd Seg Size Avg": "Avg Fwd Segment Size", "Bwd Seg Size Avg": "Avg Bwd Segment Size",
    "Fwd Byts/b Avg": "Fwd Avg Bytes/Bulk", "Fwd Pkts/b Avg": "Fwd Avg Packets/Bulk",
    "Fwd Blk Rate Avg": "Fwd Avg Bulk Rate", "Bwd Byts/b Avg": "Bwd Avg Bytes/Bulk",
    "Bwd Pkts/b Avg": "Bwd Avg Packets/Bulk", "Bwd Blk Rate Avg": "Bwd Avg Bulk Rate",
    "Subflow Fwd Pkts": "Subflow Fwd Packets", "Subflow Fwd Byts": "Subflow Fwd Bytes",
    "Subflow Bwd Pkts": "Subflow Bwd Packets", "Subflow Bwd Byts": "Subflow Bwd Bytes",
    "Init Fwd Win Byts": "Init_Win_bytes_forward", "Init Bwd Win Byts": "Init_Win_bytes_backward",
    "Fwd Act Data Pkts": "act_data_pkt_fwd", "Fwd Seg Size Min": "min_seg_size_forward",
}
# CICFlowMeter-4 names (CIC-UNSW-NB15) → CICIDS2017's; it shares the 2018 file's `Fwd Act Data Pkts` and
# `Fwd Seg Size Min`.
ALIASES_CFM4 = {
    "Total Fwd Packet": "Total Fwd Packets", "Total Bwd packets": "Total Backward Packets",
    "Total Length of Fwd Packet": "Total Length of Fwd Packets",
    "Total Length of Bwd Packet": "Total Length of Bwd Packets", "Packet Length Min": "Min Packet Length",
    "Packet Length Max": "Max Packet Length", "CWR Flag Count": "CWE Flag Count",
    "Fwd Segment Size Avg": "Avg Fwd Segment Size", "Bwd Segment Size Avg": "Avg Bwd Segment Size",
    "Fwd Bytes/Bulk Avg": "Fwd Avg Bytes/Bulk", "Fwd Packet/Bulk Avg": "Fwd Avg Packets/Bulk",
    "Fwd Bulk Rate Avg": "Fwd Avg Bulk Rate", "Bwd Bytes/Bulk Avg": "Bwd Avg Bytes/Bulk",
    "Bwd Packet/Bulk Avg": "Bwd Avg Packets/Bulk", "Bwd Bulk Rate Avg": "Bwd Avg Bulk Rate",
    "FWD Init Win Bytes": "Init_Win_bytes_forward", "Bwd Init Win Bytes": "Init_Win_bytes_backward",
}
_CANON = {re.sub(r"\s+", " ", n).strip().lower(): n for n in FEATURES}
_CANON.update({re.sub(r"\s+", " ", a).strip().lower(): n for a, n in {**ALIASES_2018, **ALIASES_CFM4}.items()})
NORMAL_LABELS = {"benign", "normal", "0"}
# The labels each reader accepts (lower case) and its files' glob, from the datasets' registrations
# (bench.datasets.BUILT_IN). The cicunsw reader is the generic CICFlowMeter-4 one: the improved CIC-IDS2017 flows
# come through it too. Integer class codes (its Label.csv) are accepted by it as well.
_OWN = [s for s in BUILT_IN if s.track == "tabular" and s.reader is not None]
KNOWN_LABELS = {s.name: {x.lower() for x in s.known} for s in _OWN}
# How the en dash of "Web Attack – XSS" (cp1252 byte 0x96) reaches us: as distributed, read as cp1252 (U+2013);
# from a copy re-saved through UTF-8 with the byte already lost (U+FFFD, bytes EF BF BD), read as cp1252 ("ï¿½")
# or as U+FFFD itself; from a UTF-8 copy that kept the dash (E2 80 93), read as cp1252 ("â€“"). Only there: an
# undecodable byte elsewhere in a label stays U+FFFD, an unknown label.
WEB_ATTACK_DASH = re.compile("^Web Attack\\s*(?:\u2013|\ufffd|\u00ef\u00bf\u00bd|\u00e2\u20ac\u201c|-)\\s*")
# Timestamp texts the readers parse (tried in this order; each file may mix them)
TIMESTAMP_FORMATS = ("%d/%m/%Y %H:%M:%S", "%d/%m/%Y %H:%M", "%d/%m/%Y %I:%M:%S %p", "%Y-%m-%d %H:%M:%S.%f",
                     "%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S")
PATTERNS = {s.name: s.files for s in _OWN}


@dataclass
class RawTable:
    frame: pd.DataFrame
    files: list[Path]
    counts: dict = field(default_factory=dict)  # what the reader dropped, e.g. repeated header lines
    # how the reader turned raw text into records where that is a choice (the record index's SHA-256 covers it)
    reading: dict = field(default_factory=dict)


def canonical(name: str) -> str | None:
    return _CANON.get(re.sub(r"\s+", " ", str(name)).strip().lower())


# A byte-order mark names the file's encoding (a copy re-saved by a spreadsheet or an editor); read as cp1252 it
# would glue "ï»¿" to the first column's name (UTF-8) or interleave NUL bytes (UTF-16).
BOMS = ((b"\xef\xbb\xbf", "utf-8-sig"), (b"\xff\xfe", "utf-16"), (b"\xfe\xff", "utf-16"))


def _encoding(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError as e:
        raise DatasetError(f"{path}: cannot be read ({e.strerror})") from None
    if head[:2] != b"\xff\xfe" and head[:2] != b"\xfe\xff" and len(head) >= 2 and (head[0] == 0 or head[1] == 0):
        raise DatasetError(f"{path}: looks like UTF-16 without a byte-order mark (NUL bytes at its start); re-save "
                           f"it as UTF-8 or cp1252")
    return next((enc for bom, enc in BOMS if head.startswith(bom)), "cp1252")


def _read_csv(path: Path) -> pd.DataFrame:
    import pandas as pd  # here, not at the top: the tabular parser imports this module on every `python -m bench`

    encoding = _encoding(path)
    try:
        # cp1252 (no byte-order mark): the 2017 web-attack labels carry byte 0x96 (an en dash); bytes cp1252 leaves
        # undefined are replaced rather than failing the whole file.
        # Numbers are parsed by the C parser ("Infinity" → inf); a column that comes back as text (a repeated
        # header line, a stray value) is coerced in _harmonise.
        return pd.read_csv(path, encoding=encoding, encoding_errors="replace", skipinitialspace=True,
                           low_memory=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeError) as e:
        raise DatasetError(f"{path}: not a readable CSV file as {encoding} ({e})") from None


def _harmonise(raw: pd.DataFrame, path: Path, label_col: str | None = "Label") -> tuple[pd.DataFrame, dict]:
    """Map a raw frame onto FEATURES + META; drop repeated header lines (counted)."""
    import pandas as pd

    raw.columns = [str(c).strip() for c in raw.columns]
    if raw.empty:
        raise DatasetError(f"{path}: no records (a header without data rows)")
    cols = {}
    for c in raw.columns:
        canon = canonical(c)
        if canon is not None and canon not in cols:  # the first of duplicated columns (`Fwd Header Length.1`)
            cols[canon] = c
    missing = [f for f in FEATURES if f not in cols]
    if missing:
        shown = ", ".join(missing[:5]) + (f" … ({len(missing)} in all)" if len(missing) > 5 else "")
        raise DatasetError(f"{path}: missing feature columns {shown} (expected the CICFlowMeter columns)")
    if label_col is not None and label_col not in raw.columns:
        raise DatasetError(f"{path}: no {label_col!r} column (columns: {', '.join(list(raw.columns)[:8])} …)")
    first = raw[cols[FEATURES[0]]]
    header_again = (first.astype(str).str.strip().map(canonical) == FEATURES[0]).to_numpy()
    rows = np.flatnonzero(~header_again)
    raw = raw.iloc[rows]
    out = pd.DataFrame({f: _numeric(raw[cols[f]]) for f in FEATURES})
    out.index = range(len(out))
    out["row"] = rows
    out["source"] = path.name
    if label_col is not None:
        out["attack"] = _clean_labels(raw[label_col].to_numpy())
    ts = (raw["Timestamp"].fillna("").astype(str).str.strip().to_numpy() if "Timestamp" in raw.columns
          else np.full(len(raw), ""))
    out["timestamp"] = ts
    return out, {"repeated_header_lines": int(header_again.sum())}


def _numeric(col: pd.Series) -> np.ndarray:
    import pandas as pd

    if col.dtype.kind in "iuf":
        return col.to_numpy(dtype=np.float64)
    text = col.astype(str).str.strip().replace({"Infinity": "inf", "-Infinity": "-inf"})
    return pd.to_numeric(text, errors="coerce").to_numpy(dtype=np.float64)


def read_labelled(path: Path) -> tuple[pd.DataFrame, np.ndarray]:
    """One CIC CSV file as the readers read it (encoding from its byte-order mark, else cp1252; column names stripped
    of spaces; every column kept) and its `Label` texts cleaned as the readers clean them. For readers that need
    columns the harmonised schema drops (ports, protocol: the stream-assembly corpus's released feature set)."""
    raw = _read_csv(Path(path))
    raw.columns = [str(c).strip() for c in raw.columns]
    if "Label" not in raw.columns:
        raise DatasetError(f"{path}: no 'Label' column (columns: {', '.join(list(raw.columns)[:8])} …)")
    return raw, _clean_labels(raw["Label"].to_numpy())


def _clean_labels(values) -> np.ndarray:
    """Label texts with the web attacks' en dash (WEB_ATTACK_DASH) as "-" and whitespace collapsed; an empty
    cell is ""."""
    import pandas as pd

    s = pd.Series(values, dtype=object).where(pd.notna(values), "").astype(str)
    s = s.str.replace(r"\s+", " ", regex=True).str.strip()
    return s.str.replace(WEB_ATTACK_DASH, "Web Attack - ", regex=True).to_numpy()


def check_labels(attack: pd.Series, source: pd.Series, dataset: str) -> None:
    """DatasetError listing the labels the dataset does not define, with counts, in the first file holding one."""
    text = attack.str.lower()
    known = KNOWN_LABELS.get(dataset) or {x.lower() for x in get(dataset, "tabular").known}  # or a plugin's
    bad = ~text.isin(known)
    if dataset == "cicunsw":
        bad &= ~text.str.fullmatch(r"\d+")  # Label.csv's integer class codes
    if not bad.any():
        return
    first = source[bad].iloc[0]
    here = bad & (source == first)
    shown = ", ".join(f"{label or '(empty)'!r} ×{n}" for label, n in attack[here].value_counts().items())
    elsewhere = int(bad.sum() - here.sum())
    more = f"; {elsewhere} more such cell(s) in other files" if elsewhere else ""
    raise DatasetError(f"{first}: unknown label(s) {shown}{more}: not {dataset} labels (empty, misspelt, truncated "
                       f"or undecodable cells); fix the file (known labels: its registration in bench/datasets.py)")


def _finish(frames: list[pd.DataFrame], files: list[Path], counts: dict, dataset: str) -> RawTable:
    import pandas as pd

    df = pd.concat(frames, ignore_index=True)
    check_labels(df["attack"], df["source"], dataset)
    df["label"] = (~df["attack"].str.lower().isin(NORMAL_LABELS)).astype(np.int8)
    for c in ("day", "timestamp"):
        if c not in df:
            df[c] = ""
    return RawTable(df[list(FEATURES) + list(META)], files, counts)


def _files(root: Path, dataset: str) -> list[Path]:
    """The raw files of `dataset` under `root`: its registration's glob (PATTERNS, or a plugin's `files`)."""
    root = Path(root)
    pattern = PATTERNS.get(dataset) or get(dataset, "tabular").files
    if not root.is_dir():
        raise DatasetError(f"{root}: dataset root not found (expected a folder with {pattern})")
    files = sorted(root.rglob(pattern))
    if dataset == "cicunsw":
        files = [f for f in files if f.name != "Label.csv"]
    if not files:
        raise DatasetError(f"{root}: no {pattern} files (is this the {dataset} root?)")
    return files


# CIC-IDS2017 was captured in working hours, from about 8:55 to 17:00 (its documentation and its timestamps)
CICIDS2017_FIRST_HOUR = 8


def cicids2017_clock(text: np.ndarray) -> tuple[np.ndarray, int]:
    """(ISO timestamps, how many were moved to the afternoon) of one CIC-IDS2017 file's `Timestamp` texts.

    Several TrafficLabelling files write a 12-hour clock without AM/PM, so "1:05" sorts before "8:59" though it
    came four hours later. In a file whose clock never passes 12 (a 12-hour file), an hour before the capture's
    first (8) is the afternoon and moves by 12 hours; a file with an hour past 12 keeps a 24-hour clock and is left
    as it is. Unparseable or empty texts give "" (such test sets get no stream order; read_cicids2017 counts and
    warns about the unparseable ones)."""
    import pandas as pd

    raw = pd.Series(np.asarray(text, dtype=str)).str.strip()
    stamp = pd.to_datetime(raw, format="%d/%m/%Y %H:%M:%S", errors="coerce")
    rest = stamp.isna()
    stamp[rest] = pd.to_datetime(raw[rest], format="%d/%m/%Y %H:%M", errors="coerce")
    moved = 0
    if stamp.notna().any() and stamp.dt.hour.max() <= 12:
        early = (stamp.dt.hour < CICIDS2017_FIRST_HOUR).to_numpy()
        stamp[early] = stamp[early] + pd.Timedelta(hours=12)
        moved = int(early.sum())
    return stamp.dt.strftime("%Y-%m-%dT%H:%M:%S").fillna("").to_numpy(), moved


def read_cicids2017(root) -> RawTable:
    import pandas as pd

    files, frames, reading = _files(root, "cicids2017"), [], {}
    counts = {"repeated_header_lines": 0, "timestamps_to_pm": 0}
    for path in files:
        df, c = _harmonise(_read_csv(path), path)
        df["day"] = path.name.split("-")[0]
        if (df["timestamp"] != "").any():  # TrafficLabelling; MachineLearningCVE has no Timestamp column
            text = df["timestamp"].to_numpy()
            df["timestamp"], moved = cicids2017_clock(text)
            counts["timestamps_to_pm"] += moved
            lost = (df["timestamp"] == "") & (pd.Series(text).str.strip() != "").to_numpy()
            if lost.any():  # their test sets lose the stream order, hence the block bootstrap: say so
                counts["unparseable_timestamps"] = counts.get("unparseable_timestamps", 0) + int(lost.sum())
                warnings.warn(f"{path}: {int(lost.sum())} Timestamp text(s) not d/m/Y H:M[:S], e.g. "
                              f"{text[np.flatnonzero(lost)[0]]!r}: their test sets get no stream order (stratified "
                              f"bootstrap)", UserWarning, stacklevel=2)
            reading["cicids2017_clock"] = f"12-hour files: hours before {CICIDS2017_FIRST_HOUR} are afternoon"
        counts["repeated_header_lines"] += c["repeated_header_lines"]
        frames.append(df)
    return replace(_finish(frames, files, counts, "cicids2017"), reading=reading)


def parse_timestamps(text: np.ndarray, path: Path) -> pd.Series:
    """Datetimes of one file's `Timestamp` texts, each in any of TIMESTAMP_FORMATS (NaT where empty); a non-empty
    text in none of them is a DatasetError naming the file and the formats (rather than a day split in two)."""
    import pandas as pd

    raw = pd.Series(np.asarray(text, dtype=str)).str.strip()
    stamp = pd.Series(pd.NaT, index=raw.index, dtype="datetime64[ns]")
    for fmt in TIMESTAMP_FORMATS:
        rest = stamp.isna() & (raw != "")
        if not rest.any():
            break
        stamp[rest] = pd.to_datetime(raw[rest], format=fmt, errors="coerce")
    bad = stamp.isna() & (raw != "")
    if bad.any():
        raise DatasetError(f"{path}: {int(bad.sum())} Timestamp text(s) in no known format, e.g. "
                           f"{raw[bad].iloc[0]!r} (known: {', '.join(TIMESTAMP_FORMATS)}); fix or remove those rows")
    return stamp


def _file_day(path: Path) -> str:
    """The capture date in a CSE-CIC-IDS2018 file name (`Friday-02-03-2018_…` → 2018-03-02), else its first word."""
    m = re.search(r"(\d{2})-(\d{2})-(\d{4})", path.name)
    return f"{m[3]}-{m[2]}-{m[1]}" if m else path.name.split("_")[0]


def _stamp_columns(df: pd.DataFrame, path: Path, fallback_day: str) -> None:
    """Set `day` (date of the timestamp, else `fallback_day`) and `timestamp` (ISO text or "") from the texts. Where
    the file name holds a date, timestamps that read day-first fall elsewhere but month-first on it are refused:
    month-first dates in a day-first file would otherwise split the day into a new task."""
    import pandas as pd

    stamp = parse_timestamps(df["timestamp"].to_numpy(), path)
    if re.search(r"\d{2}-\d{2}-\d{4}", path.name) and stamp.notna().any():
        named = pd.Timestamp(fallback_day)
        off = stamp.notna() & (stamp.dt.normalize() != named)
        swapped = off & (stamp.dt.month == named.day) & (stamp.dt.day == named.month) & (stamp.dt.year == named.year)
        if swapped.any():
            raise DatasetError(f"{path}: {int(swapped.sum())} Timestamp(s) read day-first fall on "
                               f"{stamp[swapped].iloc[0]:%Y-%m-%d}, the file name's date {fallback_day} with day and "
                               f"month swapped (e.g. {df['timestamp'].to_numpy()[np.flatnonzero(swapped)[0]]!r}): "
                               f"month-first dates? Write them day-first (d/m/Y) as the other records")
    df["day"] = stamp.dt.strftime("%Y-%m-%d").fillna(fallback_day).to_numpy()
    df["timestamp"] = stamp.dt.strftime("%Y-%m-%dT%H:%M:%S").fillna("").to_numpy()


def read_cicids2018(root) -> RawTable:
    files, frames, counts = _files(root, "cicids2018"), [], {"repeated_header_lines": 0}
    for path in files:
        df, c = _harmonise(_read_csv(path), path)
        _stamp_columns(df, path, _file_day(path))
        counts["repeated_header_lines"] += c["repeated_header_lines"]
        frames.append(df)
    return _finish(frames, files, counts, "cicids2018")


def read_cicunsw(root) -> RawTable:
    files, frames, counts, read = _files(root, "cicunsw"), [], {"repeated_header_lines": 0}, []
    for path in files:
        labels = path.with_name("Label.csv")
        paired = path.name == "Data.csv" and labels.is_file()
        df, c = _harmonise(_read_csv(path), path, label_col=None if paired else "Label")
        if paired:
            lab = _read_csv(labels)
            lab.columns = [str(c).strip() for c in lab.columns]
            if "Label" not in lab.columns or len(lab) != len(df) + c["repeated_header_lines"]:
                raise DatasetError(f"{labels}: expected a 'Label' column with one row per row of {path.name}")
            df["attack"] = _clean_labels(lab["Label"].to_numpy()[df["row"].to_numpy()])
            read.append(labels)
        _stamp_columns(df, path, "")  # no Timestamp column: no day
        counts["repeated_header_lines"] += c["repeated_header_lines"]
        frames.append(df)
        read.append(path)
    return _finish(frames, read, counts, "cicunsw")


READERS = {s.name: s.load_reader() for s in _OWN}  # the built-in readers, from their registrations


def read(dataset: str, root) -> RawTable:
    """The raw table of tabular `dataset` at `root`: a built-in reader of READERS, else a plugin's (bench.datasets;
    ConfigError listing the valid names)."""
    if dataset in READERS:
        return READERS[dataset](root)
    spec = get(dataset, "tabular")
    if spec.reader is None:
        raise DatasetError(f"tabular dataset {dataset!r} is not read from a root (it is built by the track)")
    return spec.load_reader()(root)


def files_sha256(files: list[Path]) -> dict[str, str]:
    """SHA-256 of every raw file's bytes, by file name."""
    out = {}
    for path in files:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        out[Path(path).name] = h.hexdigest()
    return out

"""LITNET-2020 (Damasevicius et al., Electronics 2020) as a corpus source: one capture per attack type.

Layout read (data/README.md): the per-attack-type flow files `<TYPE>_v2.csv` (e.g. `BLASTER_WORM_v2.csv`,
`SPAM_v2.csv`, `UDP_FLOOD_v2.csv`) in any folder under the root, each with the 85 columns of `COLUMNS` — without a
header row as distributed, or with that header. A record's time is its flow start (`ts_year` … `ts_second`); its
label is `attack_a` (1 = attack) with `attack_t` naming the attack (`none` for normal traffic). The capture's name
is the file's type in lower case (`blaster_worm`).

The released build (`scripts/build_litnet_labeled.py`) took the first 500,000 records of the blaster_worm, spam and
udp_flood files (HEAD rule) and labelled a record an attack when its fields other than the sequence number equal a
row of `<TYPE>_v2_ATTACKERS_FLOWS.csv`; this reader takes the label from the files' own `attack_a` column instead.
The column names are the dataset paper's feature list (ts_*, te_*, td, sa, da, sp, dp, pr, …, attack_t, attack_a);
they have not been checked against the distributed files here.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from bench.assembly.sources import CaptureTable, FeatureSet, Source, Subsample, register
from bench.errors import DatasetError

_START = ("ts_year", "ts_month", "ts_day", "ts_hour", "ts_min", "ts_second")
_END = ("te_year", "te_month", "te_day", "te_hour", "te_min", "te_second")
COLUMNS = (
    "ID", *_START, *_END, "td", "sa", "da", "sp", "dp", "pr", *(f"_flag{i}" for i in range(1, 7)), "fwd", "stos",
    "ipkt", "ibyt", "opkt", "obyt", "_in", "out", "sas", "das", "smk", "dmk", "dtos", "_dir", "nh", "nhb", "svln",
    "dvln", "ismc", "odmc", "idmc", "osmc", *(f"mpls{i}" for i in range(1, 11)), "cl", "sl", "al", "ra", "eng",
    "exid", "tr", "icmp_dst_ip_b", "icmp_src_ip", "udp_dst_p", "tcp_f_s", "tcp_f_n_a", "tcp_f_n_f", "tcp_f_n_r",
    "tcp_f_n_p", "tcp_f_n_u", "tcp_dst_p", "tcp_src_dst_f_s", "tcp_src_tftp", "tcp_src_kerb", "tcp_src_rpc",
    "tcp_dst_p_src", "smtp_dst", "udp_p_r_range", "p_range_dst", "udp_src_p_0", "attack_t", "attack_a",
)
# attack_t codes the dataset defines (the paper's 12 attack types and normal traffic)
KNOWN_TYPES = ("none", "icmp_smf", "icmp_f", "udp_f", "tcp_syn_f", "http_f", "tcp_land", "tcp_w32_w", "tcp_red_w",
               "smtp_b", "udp_reaper_w", "tcp_udp_win_p", "udp_0")
IGNORE = ("ID", "attack_t", "attack_a")  # never features: the sequence number and the labels
BUDGETS = {"blaster_worm": 500_000, "spam": 500_000, "udp_flood": 500_000}  # the released captures and budgets
FILES = re.compile(r"^(?P<type>[A-Za-z0-9_]+?)_v2\.csv$")
LAYOUT = ("LITNET-2020 per-attack-type files <TYPE>_v2.csv (85 columns: ID, ts_year … ts_second, te_year … "
          "te_second, td, sa, da, sp, dp, pr, … attack_t, attack_a; header row optional)")


def capture_files(root: Path) -> dict[str, Path]:
    """{capture name: file} of the per-attack-type files under `root`; DatasetError when there are none."""
    root = Path(root)
    found = {}
    for path in sorted(root.rglob("*.csv")) if root.is_dir() else []:
        m = FILES.match(path.name)
        if m and "ATTACKERS" not in path.name.upper():
            found[m["type"].lower()] = path
    if not found:
        raise DatasetError(f"{root}: no LITNET-2020 files (expected {LAYOUT})")
    return found


def read_litnet(root: Path) -> Iterator[CaptureTable]:
    """The per-attack-type captures under `root`, each read when asked for."""
    return (read_capture(name, path) for name, path in capture_files(root).items())


def read_capture(name: str, path: Path) -> CaptureTable:
    """One per-attack-type file as a CaptureTable (file order)."""
    import pandas as pd

    with open(path, encoding="utf-8", errors="replace") as f:
        first = f.readline()
    header = 0 if first.strip().strip('"').startswith("ID") else None
    try:
        frame = pd.read_csv(path, header=header, low_memory=False, skipinitialspace=True)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeError) as e:
        raise DatasetError(f"{path}: not a readable CSV file ({e})") from None
    if frame.shape[1] != len(COLUMNS):
        raise DatasetError(f"{path}: {frame.shape[1]} columns, expected the {len(COLUMNS)} of {LAYOUT}")
    frame.columns = list(COLUMNS)
    if frame.empty:
        raise DatasetError(f"{path}: no records")
    labels, attack = _labels(frame, path)
    return CaptureTable(name=name, frame=frame, labels=labels, attack=attack, timestamp=_starts(frame, path),
                        files=(Path(path),), ignore=IGNORE)


def _starts(frame, path: Path) -> np.ndarray:
    import pandas as pd

    parts = frame[list(_START)].apply(pd.to_numeric, errors="coerce")
    parts.columns = ["year", "month", "day", "hour", "minute", "second"]
    stamp = pd.to_datetime(parts, errors="coerce")
    bad = stamp.isna()
    if bad.any():
        row = int(np.flatnonzero(bad.to_numpy())[0])
        raise DatasetError(f"{path}: {int(bad.sum())} record(s) whose start time (ts_year … ts_second) is not a "
                           f"date, e.g. data row {row}: {frame.loc[row, list(_START)].tolist()}")
    return stamp.to_numpy().astype("datetime64[ns]").astype(np.int64)


def _labels(frame, path: Path) -> tuple[np.ndarray, np.ndarray]:
    import pandas as pd

    kind = frame["attack_t"].astype(str).str.strip().str.lower()
    flag = pd.to_numeric(frame["attack_a"], errors="coerce")
    bad = ~kind.isin(KNOWN_TYPES) | ~flag.isin([0, 1])
    if bad.any():
        shown = ", ".join(f"{t!r}/{a!r} ×{n}" for (t, a), n in
                          frame.loc[bad, ["attack_t", "attack_a"]].astype(str).value_counts().head(3).items())
        raise DatasetError(f"{path}: unknown label(s) (attack_t/attack_a) {shown}: expected attack_t in "
                           f"{', '.join(KNOWN_TYPES)} and attack_a 0 or 1")
    return kind.to_numpy(dtype=object), flag.to_numpy() == 1


register(Source("litnet", read_litnet, BUDGETS, Subsample.HEAD, LAYOUT, (FeatureSet.RELEASED,)))

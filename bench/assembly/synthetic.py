"""Synthetic capture files for the stream-assembly study: a CICIDS2017-format week and a LITNET-2020-format trio.

The week (`generate`) is five CICIDS2017 CSV files, Monday–Friday: TrafficLabelling files by default, with the
columns and quirks of the real ones (`Flow ID`, ` Source IP`, … ` Timestamp` as d/m/Y H:M, the 77 flow features
with `Fwd Header Length` twice, ` Label`, cp1252 en dash in the web-attack label, `inf`/`NaN` rates in a few rows),
or the same records in the improved release's format (`Release.IMPROVED`: `<day>.csv`, 91 columns, ISO
timestamps, `Attempted Category`), the one the paper read. Its day structure follows the paper's corpus: a benign
Monday, mid-week days whose attacks come early in the day, a dense Friday. Scale K sets the size exactly: every
minute of a day holds K records of one class, laid out by `DAY_LAYOUT` (minutes of benign or attack traffic from
9:00, in file order), and each day holds 6/5 of its budget, the released budgets × K/1000
(`budgets`; build with `scale=K/1000`). The released per-class rule then keeps the first 5/6 of each class (every
class size is a multiple of 6K, every stride is 1), so the corpus, its 1600·K records and every split count of its
arms follow from `DAY_LAYOUT` by hand (docs/assembly.md derives them; at K = 1000 they are the paper's:
held-out 240,000 records, 78,000 of them in both arms' held-out slices). Wednesday also holds 2·K
"DoS Hulk - Attempted" records, which the build drops.

The trio (`generate_litnet`) is three headerless LITNET-2020 per-attack-type files (85 columns) on disjoint dates,
each `LITNET_LAYOUT` × K records long plus `LITNET_TAIL` × K records past the released HEAD budget, for the pooling
identity (equal budgets by default; `litnet_budgets` gives unequal ones).

Features come from bench.tabular.synthetic's seeded latent-to-feature map (`Mixer`). Deterministic from the seed;
each file is written atomically, `synthetic.json` last.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.errors import ConfigError
from bench.io import atomic_path, write_text_atomic
from bench.tabular.cic import FEATURES
from bench.tabular.synthetic import Mixer

VERSION = 1


@dataclass(frozen=True)
class Block:
    attack: bool
    minutes: int  # K records per minute


B, A = False, True
DAY_LAYOUT: dict[str, tuple[Block, ...]] = {
    "Monday": (Block(B, 360),),
    "Tuesday": (Block(B, 60), Block(A, 60), Block(B, 240)),
    "Wednesday": (Block(B, 60), Block(A, 120), Block(B, 240)),
    "Thursday": (Block(B, 30), Block(A, 60), Block(B, 270)),
    "Friday": (Block(B, 120), Block(A, 240), Block(B, 60)),
}
DATES = {"Monday": "3/7/2017", "Tuesday": "4/7/2017", "Wednesday": "5/7/2017", "Thursday": "6/7/2017",
         "Friday": "7/7/2017"}
ATTACK_LABEL = {"Tuesday": "FTP-Patator", "Wednesday": "DoS Hulk", "Thursday": "Web Attack \u2013 Brute Force",
                "Friday": "DDoS"}
ATTEMPTED = {"Wednesday": ("DoS Hulk - Attempted", 2)}  # day: (label, records per K), at the first attack minute
RELEASED_BUDGETS = {"Monday": 300_000, "Tuesday": 300_000, "Wednesday": 350_000, "Thursday": 300_000,
                    "Friday": 350_000}


def budgets(K: int) -> dict[str, int]:
    """The corpus budgets at scale K: the released ones × K/1000 (what build_corpus(scale=K/1000) uses)."""
    return {d: b * K // 1000 for d, b in RELEASED_BUDGETS.items()}


def _day_frame(day: str, K: int, mixer: Mixer, rng: np.random.Generator, separation: float):
    layout = DAY_LAYOUT[day]
    attack = np.concatenate([np.full(b.minutes * K, b.attack) for b in layout])  # file order
    minute = np.arange(len(attack)) // K
    x, labels = mixer.day(day, int((~attack).sum()), int(attack.sum()), separation, rng)
    X = np.empty_like(x)
    X[~attack], X[attack] = x[labels == "BENIGN"], x[labels != "BENIGN"]  # each class's draws in their order
    label = np.where(attack, ATTACK_LABEL.get(day, ""), "BENIGN").astype(object)
    if day in ATTEMPTED:  # dropped by the build: inserted before the first attack record, same minute
        text, per_k = ATTEMPTED[day]
        at = int(np.flatnonzero(attack)[0])
        X = np.insert(X, at, X[at:at + per_k * K], axis=0)
        label = np.insert(label, at, [text] * (per_k * K))
        minute = np.insert(minute, at, [minute[at]] * (per_k * K))
    return _traffic_labelling(day, X, label, minute, rng)


def _traffic_labelling(day, X, label, minute, rng):
    import pandas as pd

    n = len(label)
    stamp = [f"{DATES[day]} {9 + m // 60}:{m % 60:02d}" for m in range(int(minute.max()) + 1)]
    src = [f"192.168.10.{i}" for i in range(1, 51)]
    cols: dict = {"Flow ID": None, " Source IP": np.array(src, dtype=object)[rng.integers(0, 50, n)],
                  " Source Port": rng.integers(1024, 65536, n), " Destination IP": "192.168.10.3",
                  " Destination Port": np.abs(np.round(X[:, 0])).astype(np.int64), " Protocol": 6,
                  " Timestamp": np.array(stamp, dtype=object)[minute]}
    cols["Flow ID"] = (cols[" Source IP"] + "-192.168.10.3-" + cols[" Source Port"].astype(str) + "-"
                       + cols[" Destination Port"].astype(str) + "-6")
    frame = pd.DataFrame(cols)
    features = pd.DataFrame(X[:, 1:], columns=[" " + f for f in FEATURES[1:]])
    rate = [" Flow Bytes/s", " Flow Packets/s"]
    bad = rng.choice(n, size=min(4, n), replace=False)
    features.loc[bad[::2], rate] = np.inf  # CICIDS2017 writes Infinity / NaN rates for zero-duration flows
    features.loc[bad[1::2], rate] = np.nan
    at = list(features.columns).index(" Fwd Avg Bytes/Bulk")  # where CICIDS2017 repeats Fwd Header Length
    features.insert(at, " Fwd Header Length.dup", features[" Fwd Header Length"])
    out = pd.concat([frame, features], axis=1)
    out[" Label"] = label
    out.columns = [c.replace(".dup", "") for c in out.columns]
    return out


class Release(enum.Enum):
    """Which CICIDS2017 file format the synthetic week is written in."""

    TRAFFIC_LABELLING = "traffic-labelling"  # TrafficLabelling/<Day>-WorkingHours.pcap_ISCX.csv, 85 columns
    IMPROVED = "improved"  # improved/<day>.csv as the improved (Engelen et al.) release, 91 columns


# The improved release's columns in order (its CICFlowMeter-4 names; 84 numeric once the released build drops id,
# the identities and Attempted Category).
IMPROVED_COLUMNS = (
    "id", "Flow ID", "Src IP", "Src Port", "Dst IP", "Dst Port", "Protocol", "Timestamp", "Flow Duration",
    "Total Fwd Packet", "Total Bwd packets", "Total Length of Fwd Packet", "Total Length of Bwd Packet",
    *(f"{d} Packet Length {s}" for d in ("Fwd", "Bwd") for s in ("Max", "Min", "Mean", "Std")),
    "Flow Bytes/s", "Flow Packets/s", *(f"Flow IAT {s}" for s in ("Mean", "Std", "Max", "Min")),
    *(f"{d} IAT {s}" for d in ("Fwd", "Bwd") for s in ("Total", "Mean", "Std", "Max", "Min")),
    "Fwd PSH Flags", "Bwd PSH Flags", "Fwd URG Flags", "Bwd URG Flags", "Fwd RST Flags", "Bwd RST Flags",
    "Fwd Header Length", "Bwd Header Length", "Fwd Packets/s", "Bwd Packets/s",
    *(f"Packet Length {s}" for s in ("Min", "Max", "Mean", "Std", "Variance")),
    *(f"{f} Flag Count" for f in ("FIN", "SYN", "RST", "PSH", "ACK", "URG", "CWR", "ECE")),
    "Down/Up Ratio", "Average Packet Size", "Fwd Segment Size Avg", "Bwd Segment Size Avg",
    *(f"{d} {s}" for d in ("Fwd", "Bwd") for s in ("Bytes/Bulk Avg", "Packet/Bulk Avg", "Bulk Rate Avg")),
    "Subflow Fwd Packets", "Subflow Fwd Bytes", "Subflow Bwd Packets", "Subflow Bwd Bytes", "FWD Init Win Bytes",
    "Bwd Init Win Bytes", "Fwd Act Data Pkts", "Fwd Seg Size Min",
    *(f"{k} {s}" for k in ("Active", "Idle") for s in ("Mean", "Std", "Max", "Min")), "ICMP Code", "ICMP Type",
    "Total TCP Flow Time", "Label", "Attempted Category",
)


def _improved(frame, day: str, rng):
    """The TrafficLabelling frame of one day rewritten in the improved release's format."""
    import pandas as pd

    from bench.tabular.cic import canonical

    raw = frame.rename(columns=lambda c: c.strip())
    raw = raw.loc[:, ~raw.columns.duplicated()]  # the improved release does not repeat Fwd Header Length
    n = len(raw)
    source = {canonical(c): c for c in IMPROVED_COLUMNS if canonical(c) is not None}  # 2017 name -> improved name
    out = {improved: raw[name].to_numpy() for name, improved in source.items() if name in raw.columns}
    out.update({"id": np.arange(1, n + 1), "Flow ID": raw["Flow ID"], "Src IP": raw["Source IP"],
                "Src Port": raw["Source Port"], "Dst IP": raw["Destination IP"], "Protocol": raw["Protocol"],
                "Fwd RST Flags": 0, "Bwd RST Flags": 0, "ICMP Code": -1, "ICMP Type": -1,
                "Total TCP Flow Time": np.abs(raw["Flow Duration"].to_numpy())})
    minute = pd.to_datetime(raw["Timestamp"], format="%d/%m/%Y %H:%M")
    within = raw.groupby(raw["Timestamp"]).cumcount().to_numpy()  # microseconds: one record per µs in a minute
    out["Timestamp"] = (minute + pd.to_timedelta(within, unit="us")).dt.strftime("%Y-%m-%d %H:%M:%S.%f")
    label = raw["Label"].str.replace("\u2013", "-", regex=False)
    out["Label"] = label
    out["Attempted Category"] = np.where(label.str.contains(" - Attempted"), 1, -1)
    return pd.DataFrame({c: out[c] for c in IMPROVED_COLUMNS})


def write_csv(path: Path, frame, encoding: str, header: bool = True, chunk: int = 20_000) -> None:
    """Write `frame` as CSV atomically, floats as %.6g and non-finite ones as CICIDS2017 writes them (Infinity,
    NaN). One %-format per row rather than pandas' per-cell float formatting (about 5× faster on a million rows)."""
    fmt = ",".join("%.6g" if k.kind == "f" else "%d" if k.kind in "iub" else "%s" for k in frame.dtypes)
    with atomic_path(path) as tmp, open(tmp, "w", encoding=encoding, newline="") as f:
        if header:
            f.write(",".join(map(str, frame.columns)) + "\n")
        for start in range(0, len(frame), chunk):
            rows = frame.iloc[start:start + chunk].itertuples(index=False, name=None)
            text = "".join(fmt % row + "\n" for row in rows)
            f.write(text.replace(",inf", ",Infinity").replace(",nan", ",NaN"))


def generate(root, K: int = 1, seed: int = 0, separation: float = 8.0,
             release: Release = Release.TRAFFIC_LABELLING) -> Path:
    """Write the synthetic week under root/ (one CSV per day: TrafficLabelling/<Day>-WorkingHours.pcap_ISCX.csv, or
    improved/<day>.csv) and root/synthetic.json; returns root. K ≥ 1 (an integer): 1600·K records in the corpus.
    Both releases hold the same records; the improved one's timestamps add one microsecond per record within a
    minute."""
    if int(K) != K or K < 1:
        raise ConfigError(f"K={K}: expected a positive integer (the synthetic stream's scale)")
    root = Path(root)
    rng = np.random.default_rng(seed)
    mixer = Mixer(rng)
    for day in DAY_LAYOUT:
        frame = _day_frame(day, int(K), mixer, rng, separation)
        if release is Release.IMPROVED:
            path, frame, encoding = root / "improved" / f"{day.lower()}.csv", _improved(frame, day, rng), "utf-8"
        else:
            path, encoding = root / "TrafficLabelling" / f"{day}-WorkingHours.pcap_ISCX.csv", "cp1252"
        write_csv(path, frame, encoding)
    record = {"generator": "bench.assembly.synthetic", "version": VERSION, "seed": seed, "K": K,
              "release": release.value,
              "separation": separation, "budgets": budgets(int(K)), "scale": K / 1000,
              "layout": {d: [(("attack" if b.attack else "benign"), b.minutes) for b in bl]
                         for d, bl in DAY_LAYOUT.items()}}
    write_text_atomic(root / "synthetic.json", json.dumps(record, indent=2) + "\n")
    return root


# ---- LITNET-2020 format ----------------------------------------------------------------------------------------

# capture: (file, attack_t code, first date, blocks of K records in file order within the HEAD budget)
LITNET_CAPTURES = {
    "udp_flood": ("UDP_FLOOD_v2.csv", "udp_f", "2019-03-06",
                  (Block(B, 20), Block(A, 60), Block(B, 80), Block(A, 25), Block(B, 15))),
    "spam": ("SPAM_v2.csv", "smtp_b", "2019-12-09", (Block(B, 150), Block(A, 10), Block(B, 35), Block(A, 5))),
    "blaster_worm": ("BLASTER_WORM_v2.csv", "tcp_w32_w", "2020-01-25",
                     (Block(B, 100), Block(A, 20), Block(B, 60), Block(A, 10), Block(B, 10))),
}
LITNET_TAIL = 40  # × K benign records after the layout in every file (past an equal HEAD budget, never kept)


def litnet_budgets(K: int) -> dict[str, int]:
    """Equal HEAD budgets at scale K: each capture's layout length (200·K records)."""
    return {c: K * sum(b.minutes for b in spec[3]) for c, spec in LITNET_CAPTURES.items()}


def _litnet_frame(name: str, K: int, mixer: Mixer, rng: np.random.Generator, separation: float):
    import pandas as pd

    from bench.assembly.litnet import COLUMNS

    _, code, date, layout = LITNET_CAPTURES[name]
    attack = np.concatenate([np.full(b.minutes * K, b.attack) for b in layout] + [np.zeros(LITNET_TAIL * K, bool)])
    n = len(attack)
    x, labels = mixer.day("Tuesday", int((~attack).sum()), int(attack.sum()), separation, rng)
    X = np.empty_like(x)
    X[~attack], X[attack] = x[labels == "BENIGN"], x[labels != "BENIGN"]
    start = pd.Timestamp(f"{date} 10:00:00") + pd.to_timedelta(np.arange(n) // K, unit="s")
    end = start + pd.to_timedelta(1, unit="s")
    wide = np.resize(X.T, (len(COLUMNS), n)).T  # the 77 mixed features, repeated to fill the 85 columns
    frame = pd.DataFrame(np.abs(wide).round(3), columns=list(COLUMNS))
    frame["ID"] = np.arange(1, n + 1)
    for prefix, t in (("ts", start), ("te", end)):
        for col, part in zip(("year", "month", "day", "hour", "min", "second"),
                             (t.year, t.month, t.day, t.hour, t.minute, t.second)):
            frame[f"{prefix}_{col}"] = np.asarray(part)
    frame["sa"], frame["da"] = "10.0.0.1", "158.129.0.2"
    frame["sp"], frame["dp"] = rng.integers(1024, 65536, n), 25
    frame["pr"] = "TCP"
    frame["attack_t"] = np.where(attack, code, "none")
    frame["attack_a"] = attack.astype(int)
    return frame


def generate_litnet(root, K: int = 1, seed: int = 0, separation: float = 8.0) -> Path:
    """Write the three LITNET-2020-format files (headerless, as distributed) under root/ and root/synthetic.json."""
    if int(K) != K or K < 1:
        raise ConfigError(f"K={K}: expected a positive integer (the synthetic stream's scale)")
    root = Path(root)
    rng = np.random.default_rng(seed)
    mixer = Mixer(rng)
    for name, (file, *_rest) in LITNET_CAPTURES.items():
        frame = _litnet_frame(name, int(K), mixer, rng, separation)
        write_csv(root / file, frame, "utf-8", header=False)
    record = {"generator": "bench.assembly.synthetic:generate_litnet", "version": VERSION, "seed": seed, "K": K,
              "budgets": litnet_budgets(int(K)), "tail": LITNET_TAIL * K}
    write_text_atomic(root / "synthetic.json", json.dumps(record, indent=2) + "\n")
    return root

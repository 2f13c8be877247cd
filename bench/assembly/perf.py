"""The assembly's performance figure (`make perf`): two arms, their permutation check and the full audit of an
in-memory stand-in of the paper's corpus (the synthetic week's kept structure at K = n_records / 1600, 84 float64
features), timed, with the process's peak resident memory."""

from __future__ import annotations

import os
import resource
import sys
import time

import numpy as np

from bench.assembly.records import Corpus

FEATURES = 84  # the released feature count on the improved CICIDS2017 files


def stand_in(n_records: int, seed: int = 0) -> Corpus:
    """A corpus of 1600·K records (K = n_records // 1600 ≥ 1) with the synthetic week's kept day structure (each
    class's first 5/6 of DAY_LAYOUT), one record per K per minute, random features."""
    from bench.assembly.synthetic import DAY_LAYOUT, DATES

    K = max(1, n_records // 1600)
    ys, caps, stamps = [], [], []
    for d, (day, layout) in enumerate(DAY_LAYOUT.items()):
        flags = np.concatenate([np.full(b.minutes * K, b.attack) for b in layout])
        minute = np.arange(len(flags)) // K
        rank = np.where(flags, np.cumsum(flags), np.cumsum(~flags)) - 1
        keep = rank < np.where(flags, flags.sum() * 5 // 6, (~flags).sum() * 5 // 6)
        d0 = np.datetime64("-".join(reversed([f"{int(p):02d}" for p in DATES[day].split("/")])) + "T09:00", "ns")
        ys.append(flags[keep])
        caps.append(np.full(int(keep.sum()), d, np.int16))
        stamps.append((d0 + minute[keep].astype("timedelta64[m]")).astype(np.int64))
    y = np.concatenate(ys).astype(np.int8)
    n = len(y)
    X = np.random.default_rng(seed).standard_normal((n, FEATURES))
    return Corpus(name="stand-in", X=X, y=y, label=y.astype(np.int16), label_names=("BENIGN", "attack"),
                  capture=np.concatenate(caps), captures=tuple(DAY_LAYOUT), timestamp=np.concatenate(stamps),
                  record_id=np.arange(n, dtype=np.int64), feature_names=tuple(f"f{i}" for i in range(FEATURES)))


def peak_rss_gb() -> float:
    kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # kB on Linux, bytes on macOS
    return kb / (1 << 30) if sys.platform == "darwin" else kb / (1 << 20)


def perf_build_audit(n_records: int) -> dict:
    """Seconds to build the timestamp and day-round-robin arms, check they are a permutation and audit both
    (every table), on a stand-in corpus of about `n_records` records; plus the peak RSS and the load average."""
    from bench.assembly import arms
    from bench.assembly.audit import audit, tables

    t0 = time.perf_counter()
    corpus = stand_in(n_records)
    made = time.perf_counter()
    a, b = arms.timestamp(corpus), arms.day_round_robin(corpus)
    arms.check_permutation(corpus, a, b)
    result = audit(corpus, [a, b])
    tables(result)
    done = time.perf_counter()
    return {"records": corpus.n, "features": corpus.X.shape[1], "stand_in_s": made - t0,
            "arms_check_audit_s": done - made, "peak_rss_gb": peak_rss_gb(), "loadavg": os.getloadavg(),
            "overlap": result.pairs[0].overlap}

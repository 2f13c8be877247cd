"""Timings of the analyses (run by `bench/tools/perf/assembly_analyses.py`): the paired bootstrap against the
straightforward per-resample loop on the same draws."""

from __future__ import annotations

import os
import time

import numpy as np

from bench.assembly.analyses import bootstrap


def runs_stream(m: int, seed: int = 0, mean_run: float = 20.0, prevalence: float = 0.25) -> np.ndarray:
    """int8 [m]: alternating benign and attack runs with geometric lengths (attack runs of mean `mean_run`)."""
    rng = np.random.default_rng(seed)
    mean_benign = mean_run * (1 - prevalence) / prevalence
    lengths = np.empty(0, np.int64)
    while lengths.sum() < m:
        k = 2 * (m // int(mean_run + mean_benign) + 2)
        pair = np.empty(k, np.int64)
        pair[0::2] = rng.geometric(1 / mean_benign, k // 2)
        pair[1::2] = rng.geometric(1 / mean_run, k // 2)
        lengths = np.concatenate([lengths, pair])
    labels = np.repeat(np.tile(np.array([0, 1], np.int8), len(lengths) // 2), lengths)
    return labels[:m]


def perf_bootstrap(m: int = 240_000, resamples: int = 1000, loop_resamples: int = 10, block: int = 100) -> dict:
    rng = np.random.default_rng(1)
    y = runs_stream(m)
    scores = {"a": y + rng.normal(0, 1.0, m), "b": np.round(y * 0.6 + rng.normal(0, 1.0, m), 3)}
    bootstrap.statistics(y[:1000], {"a": scores["a"][:1000]}, 10, 2)  # compiles (or loads numba's disk cache)
    t0 = time.perf_counter()
    fast = bootstrap.statistics(y, scores, block, resamples)
    fast_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    slow = bootstrap.loop_statistics(y, scores, block, loop_resamples)
    loop_per_resample = (time.perf_counter() - t0) / loop_resamples
    diff = max(float(np.nanmax(np.abs(fast[k][mt][:loop_resamples] - slow[k][mt]))) for k in scores for mt in slow[k])
    return {"records": m, "resamples": resamples, "scorers": 2, "block": block, "vectorised_s": round(fast_s, 2),
            "loop_s_per_resample": round(loop_per_resample, 4),
            "loop_1000_est_s": round(loop_per_resample * resamples, 1),
            "speedup": round(loop_per_resample * resamples / fast_s, 1), "max_abs_diff": diff,
            "loadavg_1min": round(os.getloadavg()[0], 2)}

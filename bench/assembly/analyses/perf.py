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
    t0, c0 = time.perf_counter(), time.process_time()
    fast = bootstrap.statistics(y, scores, block, resamples)
    fast_s, fast_cpu = time.perf_counter() - t0, time.process_time() - c0
    t0 = time.perf_counter()
    slow = bootstrap.loop_statistics(y, scores, block, loop_resamples)
    loop_per_resample = (time.perf_counter() - t0) / loop_resamples
    diff = max(float(np.nanmax(np.abs(fast[k][mt][:loop_resamples] - slow[k][mt]))) for k in scores for mt in slow[k])
    return {"records": m, "resamples": resamples, "scorers": 2, "block": block, "vectorised_s": round(fast_s, 2),
            "vectorised_cpu_s": round(fast_cpu, 2),
            "loop_s_per_resample": round(loop_per_resample, 4),
            "loop_est_s": round(loop_per_resample * resamples, 1),
            "speedup": round(loop_per_resample * resamples / fast_s, 1), "max_abs_diff": diff,
            "loadavg_1min": round(os.getloadavg()[0], 2)}


def _stand_in_labels(n: int):
    """The stand-in corpus's structure (bench.assembly.perf.stand_in: the synthetic week's days, classes and
    clock) with one feature column instead of 84: the analyses read labels, order and scores, so the features'
    gigabyte would only measure the drawing of random numbers."""
    import bench.assembly.perf as corpus_perf

    saved = corpus_perf.FEATURES
    corpus_perf.FEATURES = 1
    try:
        return corpus_perf.stand_in(n)
    finally:
        corpus_perf.FEATURES = saved


def _synthetic_streams(corpus, arms, rng):
    """Per arm: an online detector with branches (an informative tail, an inverted short-run term, deployed as
    their clipped max), a second online scorer, and a batch-scored one; all from the labels, no detector run."""
    from bench.assembly import records
    from bench.assembly.analyses.common import scored_stream

    out = {"bocpd": {}, "hst": {}, "ecod": {}}
    for arm in arms:
        y = corpus.y[arm.rows]
        m = len(y)
        bounds = records.SplitRule().bounds(m)
        tail = np.clip(0.3 + 0.3 * y + rng.normal(0, 0.2, m), 0, 1)
        short = np.clip(2.0 - 1.2 * y + rng.normal(0, 0.8, m), 0, 4)
        out["bocpd"][arm.name] = scored_stream(arm.name, arm.rows, y, bounds, np.clip(np.maximum(tail, .25 * short),
                                               0, 1), detector="bocpd", branches={"tail": tail, "short_run": short})
        out["hst"][arm.name] = scored_stream(arm.name, arm.rows, y, bounds, y + rng.normal(0, 1.5, m), detector="hst")
        batch = np.full(m, np.nan)
        batch[bounds[0]:] = _batch_stand_in(corpus.X[arm.rows[bounds[0]:], 0])
        out["ecod"][arm.name] = scored_stream(arm.name, arm.rows, y, bounds, batch, detector="ecod",
                                              kind=records.Kind.BATCH)
    return out


def _batch_stand_in(x: np.ndarray) -> np.ndarray:
    """A batch-dependent score (distance from the batch's median), standing in for a refitted batch detector."""
    return np.abs(x - np.median(x))


def _refit(corpus):
    def refit(arm, rows, train_end=None):
        return _batch_stand_in(corpus.X[rows, 0] + 0.5 * corpus.y[rows])
    return refit


def perf_section1(n: int = 1_600_000, resamples: int = 1000) -> dict:
    """The §1 set (shared records, cut sweep, batch ladder and composition, branches, prevalence draws, every
    interval at every block length) for two arms and three scorers, the detectors' own passes excluded (scores
    are drawn from the labels; the batch refit is a stand-in)."""
    from bench.assembly import arms as arms_mod
    from bench.assembly.analyses import batchladder, branches, cutsweep, prevalence, shared
    from bench.assembly.perf import peak_rss_gb

    rng = np.random.default_rng(0)
    corpus = _stand_in_labels(n)
    corpus.X[:, 0] += 2.0 * corpus.y
    arms = [arms_mod.make_arm(corpus, a) for a in ("timestamp", "day_round_robin")]
    streams = _synthetic_streams(corpus, arms, rng)
    refit = _refit(corpus)
    seconds, cpu = {}, {}

    def timed(name, fn):  # wall time, and CPU time over all threads (the machine may be shared)
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        seconds[name] = round(time.perf_counter() - t0, 1)
        cpu[name] = round(time.process_time() - c0, 1)

    timed("shared", lambda: shared.analyse(streams, rescore={"ecod": refit}, batch_dependent=frozenset({"ecod"}),
                                           resamples=resamples))
    timed("cut_sweep", lambda: cutsweep.sweep(streams, refit={"ecod": refit}, resamples=resamples))
    a, b = (streams["ecod"][x.name] for x in arms)
    timed("batch", lambda: (batchladder.ladder(refit, a), batchladder.composition(refit, a, b)))
    timed("branches", lambda: [branches.analyse(streams["bocpd"][x.name], resamples=resamples) for x in arms])
    y_rr = streams["bocpd"]["day_round_robin"].y
    timed("prevalence_draws", lambda: [prevalence.resample(y_rr, lv, s) for lv in prevalence.RELEASED_LEVELS
                                       for s in prevalence.RELEASED_SEEDS])
    return {"records": n, "arms": 2, "scorers": 3, "resamples": resamples, **{f"{k}_s": v for k, v in seconds.items()},
            "total_s": round(sum(seconds.values()), 1), "total_cpu_s": round(sum(cpu.values()), 1),
            "peak_rss_gb": round(peak_rss_gb(), 2), "loadavg_1min": round(os.getloadavg()[0], 2)}

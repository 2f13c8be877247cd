"""Performance benchmarks of the tabular track, registered into `bench.perf`.

  tabular_detectors  records/s of fit and score for every registered tabular detector on 2 threads (default
                     hyperparameters; gradient-trained ones for ONE epoch, so fit figures are records/s/epoch)
  bootstrap          the interval bootstrap of bench.report.intervals: 10^6 scores × 1000 resamples, moving-block
                     and stratified, ROC-AUC (10^4 × 100 with --quick); wall time and peak memory of each
"""

from __future__ import annotations

import time

import numpy as np

from bench.perf import benchmark, peak_rss_mb, run_isolated


def _tabular_data(n: int, d: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    basis = rng.normal(size=(4, d))
    train = (rng.normal(size=(n, 4)) @ basis + 0.1 * rng.normal(size=(n, d))).astype(np.float32)
    test = np.concatenate([train[: n // 2] + 0.05 * rng.normal(size=(n // 2, d)), rng.normal(size=(n // 2, d))])
    return train, test.astype(np.float32), np.r_[np.zeros(n // 2), np.ones(n // 2)]


def _detector_rates(names: list[str], n: int, d: int) -> dict:
    import torch

    from bench.models.registry import get

    torch.set_num_threads(2)
    train, test, _ = _tabular_data(n, d)
    out = {}
    for name in names:
        spec = get(name, "tabular")
        over = {"epochs": 1} if "epochs" in spec.params else {}
        spec.factory(**spec.resolve(over)).fit(train[:64], seed=0).score(test[:8])  # imports, first allocations
        det = spec.factory(**spec.resolve(over))
        t0 = time.perf_counter()
        det.fit(train, seed=0)
        t1 = time.perf_counter()
        det.score(test)
        out[name] = (n / (t1 - t0), len(test) / (time.perf_counter() - t1))
    return out


@benchmark("tabular_detectors")
def tabular_detectors(args) -> dict:
    """Fit and score throughput of every tabular detector on n records of 77 features (CICIDS2017's width)."""
    from bench.models.registry import specs

    n, d = (500, 77) if args.quick else (50_000, 77)
    out: dict = {"records": n, "features": d, "threads": 2}
    for name, (fit, score) in run_isolated(_detector_rates, list(specs("tabular")), n, d).items():
        out[f"{name}_fit_rps"], out[f"{name}_score_rps"] = round(fit), round(score)
    return out


def _bootstrap_time(n: int, n_boot: int, method: str) -> dict:
    from bench.report import intervals

    rng = np.random.default_rng(0)
    labels = np.zeros(n, bool)
    for start in rng.choice(n - 100, size=n // 400, replace=False):  # anomalies in runs, ~10 % of records
        labels[start:start + rng.integers(1, 80)] = True
    scores = rng.normal(size=n) + labels
    stamps = np.arange(n) if method == "block" else None
    t0 = time.perf_counter()
    iv = intervals.interval(labels, scores, stamps, n_boot=n_boot)
    return {"seconds": time.perf_counter() - t0, "peak_mb": peak_rss_mb(), "low": iv.low, "high": iv.high}


@benchmark("bootstrap")
def bootstrap(args) -> dict:
    """Block and stratified bootstrap of ROC-AUC over 10^6 per-record scores × 1000 resamples."""
    n, n_boot = (10_000, 100) if args.quick else (1_000_000, 1_000)
    out: dict = {"scores": n, "resamples": n_boot}
    for method in ("block", "stratified"):
        r = run_isolated(_bootstrap_time, n, n_boot, method)
        out[f"{method}_s"], out[f"{method}_peak_mb"] = round(r["seconds"], 2), round(r["peak_mb"])
        out[f"{method}_width"] = round(r["high"] - r["low"], 5)
    return out

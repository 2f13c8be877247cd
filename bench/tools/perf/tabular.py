"""Performance benchmarks of the tabular track, registered into `bench.tools.perf`.

  tabular_detectors  records/s of fit and score for every registered tabular detector on 2 threads (default
                     hyperparameters; gradient-trained ones for ONE epoch, so fit figures are records/s/epoch)
  bootstrap          the interval bootstrap of bench.report.intervals: 10^6 scores × 1000 resamples, moving-block
                     and stratified, ROC-AUC (10^4 × 100 with --quick); wall time and peak memory of each
  held_karp          exact open Hamiltonian path (smooth/abrupt drift) for n = 12, 16, 20 tasks: seconds, DP memory
  tabular_ste        STE matrices of a 6-task scenario of ~200k records (in memory, no CSV): wall seconds per model
                     and peak memory of the process
  tabular_chain      the whole chain (CSV → index → STE × 3 models → FC1–FC5 → orderings → W → Borda → release) on
                     the synthetic tabular benchmark, and whether the planted tasks were removed
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np

from bench.tools.perf import benchmark, peak_rss_mb, run_isolated


def _tabular_data(n: int, d: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    basis = rng.normal(size=(4, d))
    train = (rng.normal(size=(n, 4)) @ basis + 0.1 * rng.normal(size=(n, d))).astype(np.float32)
    test = np.concatenate([train[: n // 2] + 0.05 * rng.normal(size=(n // 2, d)), rng.normal(size=(n // 2, d))])
    return train, test.astype(np.float32), np.r_[np.zeros(n // 2), np.ones(n // 2)]


def _detector_rates(names: list[str], n: int, d: int) -> dict:
    import torch

    from bench.registry import get

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
    from bench.registry import specs

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

MODELS = ("autoencoder", "iforest", "ae1svm")


def _held_karp_child(n: int) -> dict:
    from bench.tabular.orderings import held_karp

    rng = np.random.default_rng(n)
    A = rng.random((n, n))
    before = peak_rss_mb()
    t0 = time.perf_counter()
    held_karp((A + A.T) / 2)
    return {"s": round(time.perf_counter() - t0, 3), "mb": round(peak_rss_mb() - before)}


@benchmark("held_karp")
def held_karp_bench(args) -> dict:
    """Held–Karp for n = 12, 16, 20 (8, 10 with --quick); each n in a fresh process so its memory is its own."""
    out = {}
    for n in ((8, 10) if args.quick else (12, 16, 20)):
        r = run_isolated(_held_karp_child, n)
        out[f"n{n}_s"], out[f"n{n}_peak_mb"] = r["s"], r["mb"]
    return out


def _ste_child(n_per_task: int, quick: bool, models: tuple) -> dict:
    import pandas as pd

    from bench.registry import get
    from bench.tabular.cic import FEATURES, RawTable
    from bench.tabular.discovery import DiscoverySettings, discover
    from bench.tabular.preprocess import PrepSettings, build_index
    from bench.tabular.ste import ste_run
    from bench.tabular.synthetic import Mixer

    rng = np.random.default_rng(0)
    mixer = Mixer(rng)
    frames = []
    for day in ("Monday", "Tuesday", "Wednesday", "Thursday", "Saturday", "Sunday"):
        x, labels = mixer.day(day, int(0.8 * n_per_task), n_per_task - int(0.8 * n_per_task), 8.0, rng)
        f = pd.DataFrame(x, columns=list(FEATURES))
        f["label"] = (labels != "BENIGN").astype(np.int8)
        f["attack"], f["source"], f["row"], f["day"], f["timestamp"] = labels, f"{day}.csv", np.arange(len(f)), day, ""
        frames.append(f)
    raw = RawTable(pd.concat(frames, ignore_index=True), [])
    out = {"records": len(raw.frame)}
    with tempfile.TemporaryDirectory() as tmp:
        s = DiscoverySettings()
        build_index("synthetic", raw, lambda d: discover(d, s), PrepSettings(), Path(tmp) / "index", s.to_dict())
        for m in models:
            spec = get(m, "tabular")
            t0 = time.perf_counter()
            ste_run(Path(tmp) / "index", m, Path(tmp) / f"{m}.h5", hparams=spec.quick if quick else None,
                    log=lambda line: None)
            out[f"{m}_s"] = round(time.perf_counter() - t0, 1)
    out["peak_mb"] = round(peak_rss_mb())
    return out


@benchmark("tabular_ste")
def tabular_ste(args) -> dict:
    """STE matrices of 6 tasks × ~33k records (default hyperparameters); --quick: 6 × 1000, quick settings.
    Set OMP_NUM_THREADS=2 for the 2-core figure."""
    if args.quick:
        return run_isolated(_ste_child, 1000, True, MODELS)
    return run_isolated(_ste_child, 33_334, False, MODELS)


def _chain_child(quick: bool) -> dict:
    from bench.registry import get
    from bench.tabular.scenario import construct
    from bench.tabular.synthetic import PLANTED, generate

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        n_norm, n_anom = (300, 80) if quick else (600, 150)
        models = ("iforest", "ae1svm") if quick else MODELS
        root = generate(Path(tmp) / "raw", seed=0, n_normal=n_norm, n_anomal=n_anom)
        hp = {m: get(m, "tabular").quick for m in models} if quick else {}
        m = construct("synthetic", Path(tmp) / "out", root=root, models=models, hparams=hp, log=lambda line: None)
        removed = set(m["candidates"]["natural-day"]["removed"])
    planted = {PLANTED["unlearnable"], PLANTED["dominating"]} <= removed and \
        len(removed & set(PLANTED["duplicate"])) == 1 and len(removed) == 3
    return {"records": 7 * (n_norm + n_anom), "s": round(time.perf_counter() - t0, 1),
            "peak_mb": round(peak_rss_mb()), "planted_found": bool(planted)}


@benchmark("tabular_chain")
def tabular_chain(args) -> dict:
    """The whole chain on the synthetic tabular benchmark (7 days × 750 records, default hyperparameters;
    --quick: 7 × 380, Isolation Forest and AE1SVM with quick settings: a smoke test)."""
    return run_isolated(_chain_child, args.quick)

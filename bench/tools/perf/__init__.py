"""Performance benchmarks: `python -m bench perf [--only name[,name]] [--quick]` (`make perf`).

A benchmark is a function `Namespace -> dict of figures` registered with `@benchmark("name")`; they run in
registration order, print one aligned `name  key=value ...` line each and are written to outputs/perf/perf.json.
Figures go in notes, never in timed tests. `--quick` shrinks every benchmark and runs it in this process (no
spawned child per measurement): a smoke test of the code paths, whose figures measure nothing.
"""

from __future__ import annotations

import argparse
import importlib
import json
import multiprocessing
import os
import platform
import resource
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from bench.errors import choice_error
from bench.io import write_text_atomic
from bench.metrics import PixelRocAuc, pixel_roc_auc

BENCHMARKS: dict[str, Callable[[argparse.Namespace], dict]] = {}


def benchmark(name: str):
    """Register the decorated function as benchmark `name`."""

    def register(fn):
        if name in BENCHMARKS:
            raise ValueError(f"benchmark {name!r} is registered twice")
        BENCHMARKS[name] = fn
        return fn

    return register


ISOLATE = True  # main sets it False under --quick: a smoke test measures nothing, so a process start per call
# (importing torch again: seconds each) buys nothing there


def run_isolated(fn, *args):
    """fn(*args) in a fresh spawned process, so its peak memory is its own and not that of earlier benchmarks."""
    if not ISOLATE:
        return fn(*args)
    # An executor, not a Pool: its shutdown lets the child exit normally, where Pool.__exit__ terminates it and
    # the resource tracker then warns about the semaphores torch had open in it.
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(fn, *args).result()


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far, in MB (10^6 bytes).

    Linux: VmHWM from /proc, which belongs to this process image; getrusage's ru_maxrss can carry the parent's
    peak into a spawned child (it survives fork + exec), which made children's deltas meaninglessly small.
    """
    status = Path("/proc/self/status")
    if status.is_file():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024 / 1e6
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 1e6 if sys.platform == "darwin" else peak * 1024 / 1e6  # bytes on macOS, KiB on Linux


def best_of(repeats: int, fn) -> float:
    """Least wall seconds of `repeats` calls: the cost of the work, with other processes' noise taken out."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


# Benchmark inputs, shared by the benchmark modules. Imports are local: every child that run_isolated spawns
# imports this module, so its top-level imports stay light.


def synthetic_splits(root: Path, image_size: int, n_tasks: int, n_train: int, n_test: int, preset: str = "tiny"):
    """{task: (train, test)} splits of a freshly generated synthetic benchmark."""
    from bench.data import read_index
    from bench.data.synthetic import generate
    from bench.data.tasks import task_splits

    generate(root, preset=preset, image_size=image_size, n_tasks=n_tasks, n_train=n_train, n_test=n_test)
    index = read_index("synthetic", root)
    return {t: task_splits(index, root, t, image_size) for t in sorted(index["task"].unique())}


def cpu_extractor(layers, batch_size: int = 32):
    """resnet18 (weights=none) on the CPU, no progress bar."""
    import torch

    from bench.features import FeatureExtractor

    return FeatureExtractor("resnet18", "none", layers, torch.device("cpu"), batch_size=batch_size, progress=False)


def cpu_detector(name: str, image_size: int, *, batch_size: int = 32, **hparams):
    """Detector `name` with its registry defaults (bench.registry) overridden by `hparams`, on a
    `cpu_extractor` of the layers it uses."""
    from bench.registry import get

    spec = get(name)
    params = spec.resolve(hparams)
    return spec.factory(cpu_extractor(spec.layers(params), batch_size), image_size=image_size, **params)


# ---------------------------------------------------------------- pixel_auc

_PIXEL_BATCH = (16, 250, 250)  # 10^6 pixels per update(), like a batch of 16 full-resolution maps
_REFERENCE_PIXELS = 10**6


def _pixel_auc_child(n_batches: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    metric = PixelRocAuc()
    sample: list[tuple[np.ndarray, np.ndarray]] = []
    update_s = 0.0
    before_mb = peak_rss_mb()
    for _ in range(n_batches):
        masks = rng.random(_PIXEL_BATCH, dtype=np.float32) < 0.05
        maps = rng.standard_normal(_PIXEL_BATCH, dtype=np.float32)
        maps += masks  # anomalous pixels score one standard deviation higher: AUC ≈ 0.76
        if sum(m.size for m, _ in sample) < _REFERENCE_PIXELS:
            sample.append((maps, masks))
        start = time.perf_counter()
        metric.update(maps, masks)
        update_s += time.perf_counter() - start
    start = time.perf_counter()
    auc = metric.compute()
    compute_s = time.perf_counter() - start
    peak_mb = peak_rss_mb() - before_mb

    # Imported only now, so that its own memory is not counted in the peak above.
    from sklearn.metrics import roc_auc_score

    maps, masks = (np.concatenate(parts) for parts in zip(*sample))
    mine = pixel_roc_auc(masks, maps)
    reference = roc_auc_score(masks.ravel(), maps.ravel())
    return {
        "pixels": metric.n_pixels,
        "positive": round(metric.n_positive / metric.n_pixels, 4),
        "auc": round(auc, 6),
        "seconds": round(update_s + compute_s, 2),
        "update_s": round(update_s, 2),
        "compute_s": round(compute_s, 2),
        "peak_mb": round(peak_mb),
        "matches_reference": bool(abs(mine - reference) <= 1e-9),
        "reference_pixels": masks.size,
    }


@benchmark("pixel_auc")
def pixel_auc(args: argparse.Namespace) -> dict:
    """Streaming exact pixel ROC-AUC over 10^8 pixels (10^6 with --quick). Target: ≤ 30 s and ≤ 2 GB on 2 cores."""
    n_batches = 1 if args.quick else 100
    return run_isolated(_pixel_auc_child, n_batches, 0)


# ---------------------------------------------------------------- harness


def _format(value) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def figure_line(figures: dict) -> str:
    """`key=value  key=value ...`, floats to 6 significant digits."""
    return "  ".join(f"{key}={_format(value)}" for key, value in figures.items())


# Modules whose @benchmark functions join the registry (imported by `selected`, so `python -m bench perf` sees all).
BENCHMARK_MODULES = tuple(f"bench.tools.perf.{name}"
                          for name in ("spine", "models", "training", "backboneless", "cache", "tabular", "threads",
                                       "report", "assembly", "assembly_analyses"))


def selected(only: str | None) -> list[str]:
    """The benchmarks `--only` names (comma-separated; empty or None: all), in registration order; an unknown name is a
    ConfigError listing the valid ones."""
    for module in BENCHMARK_MODULES:
        importlib.import_module(module)
    if not only:
        return list(BENCHMARKS)
    wanted = {name.strip() for name in only.split(",") if name.strip()}
    unknown = sorted(wanted - BENCHMARKS.keys())
    if unknown:
        raise choice_error("benchmark", unknown[0], BENCHMARKS)
    return [name for name in BENCHMARKS if name in wanted]


def run_benchmarks(args: argparse.Namespace) -> int:
    """`python -m bench perf`: args.only, args.quick, args.out (bench/tools/commands.py); every benchmark gets
    `args` (they read args.quick)."""
    names = selected(args.only)

    import torch

    global ISOLATE
    results = {}
    width = max(map(len, names), default=0)
    ISOLATE, threads = not args.quick, torch.get_num_threads()
    try:
        for name in names:
            results[name] = BENCHMARKS[name](args)
            print(f"{name:<{width}}  {figure_line(results[name])}", flush=True)
    finally:
        ISOLATE = True
        torch.set_num_threads(threads)  # an in-process benchmark may have pinned it

    report = {
        "quick": args.quick,
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "results": results,
    }
    write_text_atomic(args.out, json.dumps(report, indent=2) + "\n")  # a reader never sees half a file
    print(f"wrote {args.out}")
    return 0

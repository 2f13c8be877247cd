"""The thread choice of the tabular track, registered into `bench.tools.perf`.

  tabular_threads  each tabular detector's fit seconds at 1 and 2 torch threads, idle and beside a busy process
                   (one process spinning on a core), with its `released` preset where it has one (else its
                   default) on 1,986 records of 77 features (AE1SVM's case in issue 46 §6); the count
                   `devices.choose_threads` picks for the track here, and AE1SVM's fit at that count beside the busy
                   process over its 1-thread idle fit (target ≤ 1.5)
"""

from __future__ import annotations

import subprocess
import sys
import time
from contextlib import contextmanager

from bench.tools.perf import benchmark, run_isolated
from bench.tools.perf.tabular import _tabular_data

RECORDS, FEATURES = 1986, 77


def _fit_seconds(names: list[str], threads: int, n: int, d: int, quick: bool) -> dict[str, float]:
    """Fit seconds of each detector on `threads` torch threads, in this (fresh) process."""
    import torch

    from bench.registry import get

    before = torch.get_num_threads()  # --quick runs this in the perf process itself: leave its count as found
    torch.set_num_threads(threads)
    train, _, _ = _tabular_data(n, d)
    out = {}
    try:
        for name in names:
            spec = get(name, "tabular")
            preset = "released" if "released" in spec.presets else None
            hparams = spec.resolve({"epochs": 1} if quick and "epochs" in spec.params else {}, preset)
            spec.factory(**spec.resolve({"epochs": 1} if "epochs" in spec.params else {}, preset)).fit(
                train[:64], seed=0)  # imports and first allocations, outside the timing
            t0 = time.perf_counter()
            spec.factory(**hparams).fit(train, seed=0)
            out[name] = time.perf_counter() - t0
    finally:
        torch.set_num_threads(before)
    return out


@contextmanager
def busy_process():
    """Another process keeping one core busy for the block's duration."""
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield
    finally:
        spinner.kill()
        spinner.wait()


@benchmark("tabular_threads")
def tabular_threads(args) -> dict:
    from bench.devices import choose_threads
    from bench.registry import specs

    names = list(specs("tabular"))
    n = 200 if args.quick else RECORDS
    chosen = choose_threads(parallel=False)
    out: dict = {"records": n, "features": FEATURES, "chosen_threads": chosen.threads}
    for load in ("idle", "busy"):
        for threads in (1, 2):
            if load == "busy":
                with busy_process():
                    seconds = run_isolated(_fit_seconds, names, threads, n, FEATURES, args.quick)
            else:
                seconds = run_isolated(_fit_seconds, names, threads, n, FEATURES, args.quick)
            for name, s in seconds.items():
                out[f"{name}_fit_s_{threads}t_{load}"] = round(s, 3)
    at = min(chosen.threads, 2)  # measured at 1 and 2 threads
    out["ae1svm_chosen_busy_over_1t_idle"] = round(out[f"ae1svm_fit_s_{at}t_busy"] / out["ae1svm_fit_s_1t_idle"], 2)
    return out

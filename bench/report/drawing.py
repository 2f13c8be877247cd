"""Draw many figures on every CPU this process may use: matplotlib renders one figure at a time on one core, and at
campaign scale the report's figures (a heatmap per cell, two curves per method) are most of `aggregate`'s time
(1,000 result files: ~800 curves, ~0.4 s each). Each figure is drawn by the same function with the same arguments
whichever process draws it, so the files are the same bytes as when drawn here (tests/report/test_scale.py).
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor

# Below this many figures per extra process, starting it (a spawned interpreter importing pandas and matplotlib:
# ~2 s) costs more than it saves: a regeneration that redraws a few figures draws them here.
MIN_PER_PROCESS = 12


def workers() -> int:
    """CPUs this process may run on (its affinity mask, e.g. a Slurm allocation), or BENCH_REPORT_WORKERS."""
    asked = os.environ.get("BENCH_REPORT_WORKERS", "")
    if asked.strip().isdigit() and int(asked) >= 1:
        return int(asked)
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _draw_chunk(jobs: list[tuple[Callable, tuple]]) -> None:
    for fn, args in jobs:
        fn(*args)


def draw_all(jobs: list[tuple[Callable, tuple]]) -> None:
    """Call fn(*args) for every (fn, args) in `jobs` (module-level functions writing their own files), spread
    over `workers()` processes when there are enough of them; an exception in any is raised here."""
    n = min(workers(), len(jobs) // MIN_PER_PROCESS)
    if n <= 1:
        _draw_chunk(jobs)
        return
    # Spawned, not forked: the parent may hold torch's thread pools (the registry imports the detectors), which a
    # forked child can deadlock on. Interleaved chunks even out the per-figure cost (curves of one kind together).
    chunks = [jobs[k::4 * n] for k in range(4 * n)]
    with ProcessPoolExecutor(max_workers=n, mp_context=multiprocessing.get_context("spawn")) as pool:
        for done in [pool.submit(_draw_chunk, chunk) for chunk in chunks if chunk]:
            done.result()

"""Performance benchmark of `make aggregate` at campaign scale, registered into `bench.tools.perf`.

  aggregate_1000  `aggregate DATASET=all` (every table, the bootstrap intervals at the default 1000 resamples,
                  heatmaps PNG + PDF, the HTML report) over 1,000 synthetic result files: InCLAD's nine detectors
                  × 2 backbones × 3 orderings × NCL/CL on five datasets, seeds 0 and 1 until 1,000, each a 10-task
                  stream with 40 test images per task (16 anomalous) and its per-image scores, so every provenance
                  and score check runs as on real files. Then one more run is added and the aggregation repeated:
                  the regeneration; then `make figures` (every per-method figure of the report as PNG and PDF,
                  drawn on request). Wall seconds and peak memory of each, in a fresh process (target for the
                  first: ≤ 60 s on 2 cores). `--quick`: 6 files, heatmaps PNG only (a smoke test).

The files are made by the same writer as real runs (bench.results.write_run), with R computed from their scores.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.tools.perf import benchmark, peak_rss_mb, run_isolated

DATASETS = ("mvtec", "visa", "btad", "mpdd", "dagm")
ORDERINGS = ("easy_to_hard", "hard_to_easy", "random")
N_TASKS, N_NORMAL, N_ANOMALOUS = 10, 24, 16


def _write_file(outputs: Path, dataset: str, model: str, backbone: str, ordering: str, protocol: str, seed: int,
                rng: np.random.Generator) -> None:
    from bench import results
    from bench.config import ImageInputs, RunConfig
    from bench.metrics import normalized_pr_auc, roc_auc

    tasks = [f"task{t:02d}" for t in range(N_TASKS)]
    tasks = {"hard_to_easy": tasks[::-1], "random": tasks[3:] + tasks[:3]}.get(ordering, tasks)
    cfg = RunConfig(dataset=dataset, root="/data", model=model, tasks=tasks, ordering=ordering, protocol=protocol,
                    seed=seed, inputs=ImageInputs(backbone=backbone, weights="none", image_size=64))
    key = cfg.run_key("f" * 64, "none")
    labels = np.r_[np.zeros(N_NORMAL, np.int8), np.ones(N_ANOMALOUS, np.int8)]
    image, npr = np.full((N_TASKS, N_TASKS), np.nan), np.full((N_TASKS, N_TASKS), np.nan)
    step, task, value = [], [], []
    skill = rng.uniform(0.5, 1.5)
    for i in range(N_TASKS):
        for j in range(i + 1):
            v = (rng.normal(size=labels.size) + labels * skill * (1 - 0.05 * (i - j))).astype(np.float32)
            step.append(np.full(labels.size, i, np.int16))
            task.append(np.full(labels.size, j, np.int16))
            value.append(v)
            image[i, j], npr[i, j] = roc_auc(labels, v), normalized_pr_auc(labels, v)[0]
    n_cells = len(value)
    attrs = {"git_commit": "0" * 40, "git_dirty": 0, "packages": "{}", "python": "3.11", "host": "perf",
             "device": "cpu", "started_at": "2026-01-01T00:00:00+00:00", "finished_at": "2026-01-01T00:01:00+00:00",
             "run_key": key, "run_name": cfg.run_name(key), "status": "complete", "steps_done": N_TASKS,
             "n_tasks": N_TASKS, "config": cfg.to_json(), "config_sha256": cfg.sha256(), "index_sha256": "f" * 64,
             "weights_id": "none", "seed": seed}
    arrays = {"R/image": image, "R/pixel": np.clip(image + 0.1, 0, 1), "R/image_npr_auc": npr,
              "timing/train_s": rng.uniform(1, 100, N_TASKS), "timing/eval_s": rng.uniform(1, 100, N_TASKS),
              "memory/state_bytes": np.arange(1, N_TASKS + 1, dtype=np.int64) * 10**6,
              "scores/step": np.concatenate(step), "scores/task": np.concatenate(task),
              "scores/label": np.tile(labels, n_cells), "scores/value": np.concatenate(value)}
    results.write_run(outputs / dataset / "runs" / f"{cfg.run_name(key)}.h5", attrs, arrays, tasks)


def _grid(n: int) -> list[tuple]:
    from bench.registry import INCLAD_MODELS

    cells = [(d, m, b, o, p) for d in DATASETS for m in INCLAD_MODELS for b in ("resnet18", "wide_resnet50_2")
             for o in ORDERINGS for p in ("ncl", "cl")]
    return [(*cells[k % len(cells)], k // len(cells)) for k in range(n + 1)]  # the last one: the added run


def _aggregate_child(outputs: str, formats: tuple, paper_figures: bool = False) -> dict:
    from bench.report.aggregate import Options, aggregate

    before = peak_rss_mb()
    t0 = time.perf_counter()
    aggregate(Path(outputs), "all", Options(figure_formats=formats, paper_figures=paper_figures), log=lambda *_: None)
    return {"seconds": round(time.perf_counter() - t0, 1), "peak_mb": round(peak_rss_mb() - before),
            "load_avg": round(os.getloadavg()[1], 1)}  # the 5-minute load it ran under: a shared machine's
    # seconds are an upper bound on an idle one's


@benchmark("aggregate_1000")
def aggregate_1000(args) -> dict:
    """aggregate DATASET=all over 1,000 result files (6 and PNG only with --quick), then again after one more."""
    n, formats = (6, ("png",)) if args.quick else (1000, ("png", "pdf"))
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory(prefix="bench-perf-aggregate-") as tmp:
        outputs = Path(tmp) / "outputs"
        grid = _grid(n)
        t0 = time.perf_counter()
        for cell in grid[:-1]:
            _write_file(outputs, *cell, rng)
        made_s = time.perf_counter() - t0
        first = run_isolated(_aggregate_child, str(outputs), formats)
        _write_file(outputs, *grid[-1], rng)
        again = run_isolated(_aggregate_child, str(outputs), formats)
        figures = run_isolated(_aggregate_child, str(outputs), formats, True)
        size = sum(p.stat().st_size for p in outputs.glob("*/runs/*.h5")) / 1e6
    return {"files": n, "files_mb": round(size), "write_files_s": round(made_s, 1), "aggregate_s": first["seconds"],
            "aggregate_peak_mb": first["peak_mb"], "after_one_more_s": again["seconds"],
            "after_one_more_peak_mb": again["peak_mb"], "make_figures_s": figures["seconds"],
            "make_figures_peak_mb": figures["peak_mb"], "load_avg": first["load_avg"]}

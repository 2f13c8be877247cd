"""Benchmarks of the spine: coreset selection, PatchCore per task, backbone passes per image."""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from bench.models.ops.coreset import greedy_coreset, random_projection
from bench.perf import benchmark, cpu_detector, peak_rss_mb, run_isolated, synthetic_splits


def _anomalib_style_steps(x: torch.Tensor, steps: int, gen: torch.Generator) -> float:
    """The common reference loop (a fresh difference matrix and norm per step); seconds for `steps` steps."""
    min_d = None
    idx = int(torch.randint(x.shape[0], (1,), generator=gen))
    t0 = time.perf_counter()
    for _ in range(steps):
        d = torch.linalg.norm(x - x[idx : idx + 1], dim=1, keepdim=True)
        min_d = d if min_d is None else torch.minimum(min_d, d)
        idx = int(torch.argmax(min_d))
    return time.perf_counter() - t0


@benchmark("coreset")
def coreset(args: argparse.Namespace) -> dict:
    """Greedy k-center: 4,096 of 40,960 × 1,536 patches (PatchCore on wide_resnet50_2 scale), 128-d projection."""
    n, d, k = (4096, 1536, 409) if args.quick else (40960, 1536, 4096)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(n, d, generator=gen)
    t0 = time.perf_counter()
    projected = random_projection(x, 128, gen)
    project_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    greedy_coreset(projected, k, generator=gen)
    select_s = time.perf_counter() - t0
    # Same-conditions comparison on a 512-step prefix, alternating (best of 3), against the common reference loop
    # (a fresh difference matrix and norm per step); the machine's load then affects both alike.
    steps = min(k, 512)
    ours, ref = [], []
    for _ in range(3):
        t0 = time.perf_counter()
        greedy_coreset(projected, steps, generator=torch.Generator().manual_seed(1))
        ours.append(time.perf_counter() - t0)
        ref.append(_anomalib_style_steps(projected, steps, gen))
    return {"patches": n, "dim": d, "selected": k, "project_s": round(project_s, 3), "select_s": round(select_s, 3),
            "prefix_steps": steps, "prefix_ours_s": round(min(ours), 3), "prefix_reference_s": round(min(ref), 3),
            "speedup": round(min(ref) / min(ours), 2),
            "threads": torch.get_num_threads()}


def _patchcore_task_child(quick: bool) -> dict:
    from bench.metrics import roc_auc

    size, n_train, n_test = (96, 40, 30) if quick else (224, 60, 40)
    with tempfile.TemporaryDirectory() as tmp:
        splits = synthetic_splits(Path(tmp) / "syn", size, 1, n_train, n_test, preset="visa-scale")
        train, test = next(iter(splits.values()))
        model = cpu_detector("patchcore", size)
        t0 = time.perf_counter()
        model.fit(train, seed=0)
        fit_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        scores = np.concatenate([model.predict(test, idx).scores for idx in test.batches(32)])
        predict_s = time.perf_counter() - t0
        return {"image_size": size, "train_images": len(train), "test_images": len(test),
                "bank": int(model.memory_bank_.shape[0]), "fit_s": round(fit_s, 2), "predict_s": round(predict_s, 2),
                "predict_ms_per_image": round(1000 * predict_s / len(test), 1),
                "image_auc": round(roc_auc(test.labels, scores), 3), "peak_mb": round(peak_rss_mb())}


@benchmark("patchcore_task")
def patchcore_task(args: argparse.Namespace) -> dict:
    """PatchCore (resnet18, weights=none, CPU) fit + predict on one synthetic task at 224 px."""
    return run_isolated(_patchcore_task_child, args.quick)


def _passes_child() -> dict:
    from bench.config import RunConfig
    from bench.continual.runner import execute, prepare
    from bench.data.synthetic import generate
    from bench import results

    with tempfile.TemporaryDirectory() as tmp:
        root = generate(Path(tmp) / "syn", preset="tiny", seed=0)
        tasks = ["chip", "stripes", "disc", "grain", "checker"]
        cfg = RunConfig(dataset="synthetic", root=str(root), model="patchcore", tasks=tasks, weights="none",
                        protocol="cl", image_size=64, batch_size=16, device="cpu")
        path = execute(prepare(cfg, out=Path(tmp) / "run.h5"), progress=False, log=lambda *_: None)
        run = results.read_run(path)
        images = int(run["tasks_info/n_train"].sum() + run["tasks_info/n_test"].sum())
        evaluated = int(sum(run["tasks_info/n_test"][j] for i in range(len(tasks)) for j in range(i + 1)))
        passes = int(run["attrs"]["backbone_forward_images"])
        return {"tasks": len(tasks), "images": images, "images_scored": evaluated, "backbone_passes": passes,
                "passes_per_image": round(passes / images, 3)}


@benchmark("passes")
def passes(args: argparse.Namespace) -> dict:
    """Backbone forward passes per image over a whole 5-task CL run (N(N+1)/2 = 15 evaluations). Target 1."""
    return run_isolated(_passes_child)

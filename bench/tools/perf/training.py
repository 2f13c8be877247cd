"""Performance benchmark of the training loop, registered into `bench.tools.perf`.

  training_epoch  seconds per epoch of STFPM, PaSTe, RD4AD and FastFlow on the same synthetic task, training on
                  the run's cached frozen features vs. recomputing the frozen network every epoch (the same code:
                  `TrainContext.cache_features`), and the peak memory of each. Targets: ≥ 3× for FastFlow and
                  RD4AD (only flows / bottleneck + decoder run per epoch), ≥ 1.3× for STFPM and PaSTe (the
                  student's forward and backward remain).

Seconds per epoch: the fastest of E epochs of one fit, as the loop times them (the cached path's one-time
feature extraction happens before the first epoch and is not counted; `extract_s` is the fit's time outside
its epochs). Sizes: 40 training images at 256 px, resnet18 (weights=none: the cost does not depend on the
weights), Table 7 batch sizes, like the anomalib figures in docs/models.md; E = 3. `--quick`: 16 images at 64 px,
E = 2, no process isolation (a smoke test, not a measurement).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from bench.tools.perf import benchmark, cpu_detector, peak_rss_mb, run_isolated, synthetic_splits

MODELS = ("stfpm", "paste", "rd4ad", "fastflow")


def _epoch_child(model: str, root: str, size: int, n_train: int, epochs: int, cache: bool) -> dict:
    from bench.training.loop import TrainContext

    train, _ = next(iter(synthetic_splits(Path(root), size, 1, n_train, 4).values()))
    det = cpu_detector(model, size, epochs=epochs)
    det.context = TrainContext(cache_features=cache)
    t0 = time.perf_counter()
    det.fit(train, seed=0)
    total = time.perf_counter() - t0
    seconds = det.context.epoch_seconds
    return {"epoch_s": min(seconds), "extract_s": total - sum(seconds), "peak_mb": peak_rss_mb()}


@benchmark("training_epoch")
def training_epoch(args) -> dict:
    size, n_train, epochs = (64, 16, 2) if args.quick else (256, 40, 3)
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for model in MODELS:
            figures = {}
            for cache in (True, False):
                call = (_epoch_child, model, f"{tmp}/{model}{cache}", size, n_train, epochs, cache)
                figures[cache] = run_isolated(*call)
            cached, fresh = figures[True], figures[False]
            out[f"{model}_cached_s"] = round(cached["epoch_s"], 3)
            out[f"{model}_recompute_s"] = round(fresh["epoch_s"], 3)
            out[f"{model}_speedup"] = round(fresh["epoch_s"] / max(cached["epoch_s"], 1e-9), 2)
            out[f"{model}_extract_s"] = round(cached["extract_s"], 3)
            if not args.quick:
                out[f"{model}_peak_mb_cached"] = round(cached["peak_mb"])
                out[f"{model}_peak_mb_recompute"] = round(fresh["peak_mb"])
    return out

"""Benchmarks of the backbone-less detectors (EfficientAD-S, GANomaly): seconds per training epoch and peak
memory, and EfficientAD's scoring throughput (images/s: the paper's selling point), on the CPU.

Each size runs in a spawned child (`run_isolated`), so the peak memory is that of the detector alone. Full:
Table 7 architectures at 256 px on 16 training images (one epoch after a one-epoch warm-up); --quick: 64 px, 8
training and 4 test images (a smoke test).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from bench.tools.perf import benchmark, peak_rss_mb, run_isolated, synthetic_splits

def _child(name: str, size: int, n_train: int, n_test: int) -> dict:
    import numpy as np
    import torch

    from bench.features import ImageSource
    from bench.registry import get

    with tempfile.TemporaryDirectory() as tmp:
        train, test = next(iter(synthetic_splits(Path(tmp) / "syn", size, 1, n_train, n_test).values()))
        source = ImageSource(torch.device("cpu"), batch_size=16, progress=False)
        before = peak_rss_mb()
        spec = get(name)
        det = spec.factory(source, image_size=size, **spec.resolve({"epochs": 1})).fit(train, seed=0)  # warm-up
        t0 = time.perf_counter()
        det.fit(train, seed=1)
        epoch_s = time.perf_counter() - t0
        idx = np.arange(len(test))
        det.predict(test, idx[:2])  # warm-up
        t0 = time.perf_counter()
        det.predict(test, idx)
        score_s = time.perf_counter() - t0
        return {"epoch_s": round(epoch_s, 2), "peak_mb": round(peak_rss_mb() - before),
                "score_images_per_s": round(len(test) / score_s, 1)}


@benchmark("backboneless_epoch")
def backboneless_epoch(args) -> dict:
    """EfficientAD-S (384 channels, batch 1) and GANomaly (64 feature maps, batch 16) at 256 px (64 with
    --quick: 64): seconds of a one-epoch warm-started fit over 16 images (EfficientAD trains on 14: 2 are held
    out for the quantiles; its fit also refits the teacher statistics and quantiles), peak memory over the
    fits, scoring images/s (EfficientAD's includes the teacher, student and autoencoder)."""
    size, n_train, n_test = (64, 8, 4) if args.quick else (256, 16, 16)
    out = {"size": size}
    for name in ("efficientad", "ganomaly"):
        figures = run_isolated(_child, name, size, n_train, n_test)
        out.update({f"{name}_{k}": v for k, v in figures.items()})
    return out

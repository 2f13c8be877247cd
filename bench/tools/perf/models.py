"""Performance benchmarks of PaDiM, CFA and the task-bank (CL) variants, registered into `bench.tools.perf`.

  padim_task   PaDiM fit + predict of one task on precomputed embeddings: batched vs. a per-location loop
  cfa_epoch    seconds per CFA descriptor epoch (cached features) at several image sizes
  cl_growth    eval time per image and state bytes after N = 1…12 tasks for PatchCore-, PaDiM- and CFA-CL
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from bench.tools.perf import benchmark, best_of, cpu_detector, synthetic_splits

# --------------------------------------------------------------- shared


def _linear_fit(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(slope, R²) of the least-squares line through (x, y): how linear growth is."""
    slope, intercept = np.polyfit(x, y, 1)
    residual = y - (slope * x + intercept)
    total = ((y - y.mean()) ** 2).sum()
    return float(slope), float(1 - (residual**2).sum() / total) if total > 0 else 1.0


# --------------------------------------------------------------- padim_task


def padim_reference(train: np.ndarray, test: np.ndarray, eps: float) -> np.ndarray:
    """The straightforward PaDiM: a Python loop over locations, np.cov + np.linalg.inv + Mahalanobis at each.

    train [L, N, d], test [L, M, d] → distances [M, L] (float64). Also the tests' reference for the batched code.
    """
    n_loc, d = train.shape[0], train.shape[2]
    out = np.empty((test.shape[1], n_loc))
    for p in range(n_loc):
        mean = train[p].mean(0)
        inv = np.linalg.inv(np.cov(train[p], rowvar=False) + eps * np.eye(d))
        delta = test[p] - mean
        out[:, p] = np.sqrt(np.einsum("md,de,me->m", delta, inv, delta))
    return out


def padim_batched(train: torch.Tensor, test: torch.Tensor, eps: float, batch_size: int = 32) -> torch.Tensor:
    """The detector's own path on the same embeddings [L, N, d]: moments batch by batch, one batched inverse,
    one bmm per test batch."""
    from bench.models.padim import GaussianMoments, mahalanobis

    acc = GaussianMoments()
    for s in range(0, train.shape[1], batch_size):
        acc.update(train[:, s : s + batch_size].contiguous())
    mean, inv = acc.gaussians(eps)
    batches = range(0, test.shape[1], batch_size)
    return torch.cat([mahalanobis(test[:, s : s + batch_size].contiguous(), mean, inv) for s in batches])


def _padim_embeddings(image_size: int, n_train: int, n_test: int, n_features: int = 100):
    """Real resnet18 (random-init) layer 1–3 embeddings of one synthetic task: train [L, N, d], test [L, M, d]."""
    with tempfile.TemporaryDirectory() as tmp:
        train, test = next(iter(synthetic_splits(Path(tmp) / "syn", image_size, 1, n_train, n_test).values()))
        det = cpu_detector("padim", image_size, n_features=n_features)
        out = []
        for split in (train, test):
            feats = det.extractor(split, np.arange(len(split)), keep=False)
            det._select_features(feats, seed=0)
            out.append(det.embed(feats))
    return out


@benchmark("padim_task")
def padim_task(args) -> dict:
    """PaDiM fit + predict of one task (224 px: 3,136 locations × 100 features; 100 train / 50 test images;
    96 px, 40 / 30 with --quick), batched vs. per-location loop on the same embeddings. Target: ≥ 3× faster."""
    size, n_train, n_test = (96, 40, 30) if args.quick else (224, 100, 50)
    train, test = _padim_embeddings(size, n_train, n_test)
    train64, test64 = train.double().numpy(), test.double().numpy()  # converted once, outside the timing
    batched = padim_batched(train, test, eps=0.01)
    reference = padim_reference(train64, test64, eps=0.01)
    batched_s = best_of(3, lambda: padim_batched(train, test, eps=0.01))
    loop_s = best_of(3, lambda: padim_reference(train64, test64, eps=0.01))
    rel = np.abs(batched.numpy() - reference) / np.maximum(np.abs(reference), 1e-12)
    return {"image_size": size, "locations": train.shape[0], "features": train.shape[2], "n_train": n_train,
            "n_test": n_test, "batched_s": round(batched_s, 3), "loop_s": round(loop_s, 3),
            "speedup": round(loop_s / batched_s, 1), "max_rel_diff": float(f"{rel.max():.2g}")}


# --------------------------------------------------------------- cfa_epoch


@benchmark("cfa_epoch")
def cfa_epoch(args) -> dict:
    """Seconds per CFA descriptor epoch on cached features (40 training images, batch 32, resnet18 layers 1–3)
    at 64, 96 and 224 px (64 only with --quick); the first epoch of each size is a warm-up and not counted."""
    out = {}
    sizes = (64,) if args.quick else (64, 96, 224)
    with tempfile.TemporaryDirectory() as tmp:
        for size in sizes:
            train, _ = next(iter(synthetic_splits(Path(tmp) / f"syn{size}", size, 1, 40, 4).values()))
            det = cpu_detector("cfa", size, epochs=1)
            samples = det.cache(train)
            det.init_descriptor(samples, seed=0)
            bank = det.bank(samples)
            det.train(samples, bank, seed=0)  # warm-up
            det.epochs = 1 if args.quick else 2
            t0 = time.perf_counter()
            det.train(samples, bank, seed=1)
            out[f"epoch_s_{size}px"] = round((time.perf_counter() - t0) / det.epochs, 3)
    return out


# --------------------------------------------------------------- cl_growth


def _growth(protocol, splits, probe) -> tuple[list[float], list[int]]:
    """After each learned task: warm eval milliseconds per image of `probe` (features cached, so this is the
    routing and scoring cost) and the protocol's state bytes."""
    eval_ms, state = [], []
    idx = np.arange(len(probe))
    for step, (train, _test) in enumerate(splits):
        protocol.learn(train, step)
        protocol.predict(probe, idx)  # caches the probe's features
        eval_ms.append(1000 * best_of(5, lambda: protocol.predict(probe, idx)) / len(probe))
        state.append(int(protocol.state_bytes()))
    return eval_ms, state


@benchmark("cl_growth")
def cl_growth(args) -> dict:
    """Eval time per image and state size after N = 1…12 tasks for each CL variant (synthetic, 64 px, 16 train /
    16 test per task; 4 tasks with --quick; CFA 1 epoch: training cost is not what is measured). `*_r2` is the R²
    of a straight line through the curve, `*_slope` its growth per task. One intra-op thread: the shape of the
    curve is the point, and on a shared machine two threads' scheduling noise is larger than one task's cost."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _all_growth(4 if args.quick else 12)
    finally:
        torch.set_num_threads(threads)


def _all_growth(n_tasks: int) -> dict:
    makers = {
        "patchcore": lambda: cpu_detector("patchcore", 64),
        "padim": lambda: cpu_detector("padim", 64),
        "cfa": lambda: cpu_detector("cfa", 64, epochs=1),
    }
    out = {"tasks": n_tasks}
    with tempfile.TemporaryDirectory() as tmp:
        splits = list(synthetic_splits(Path(tmp) / "syn", 64, n_tasks, 16, 16).values())
        probe = splits[0][1]
        n = np.arange(1, n_tasks + 1)
        for name, make in makers.items():
            eval_ms, state = _growth(make().continual(seed=0), splits, probe)
            mb = np.array(state) / 1e6
            ms_slope, ms_r2 = _linear_fit(n, np.array(eval_ms))
            mb_slope, mb_r2 = _linear_fit(n, mb)
            out.update({f"{name}_eval_ms": [round(v, 2) for v in eval_ms], f"{name}_eval_ms_slope": round(ms_slope, 3),
                        f"{name}_eval_r2": round(ms_r2, 3), f"{name}_state_mb": [round(float(v), 2) for v in mb],
                        f"{name}_state_mb_slope": round(mb_slope, 3), f"{name}_state_r2": round(mb_r2, 3)})
    return out

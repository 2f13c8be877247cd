"""Held-out texture tasks for the learning tests and `python tests/textures.py` (learning curves): textures the
quick settings were never chosen on, unlike bench/data/synthetic.py's (chip, disc, grain, checker, stripes).

Each task is a family of numpy-made textures, drawn afresh per image (random phase, scale jitter, noise), with
planted defects (a scratch, a blob of foreign colour, a dark hole) and their masks, written in the MVTec AD
layout so `bench.data.readers.read_mvtec` indexes it.

    python tests/textures.py --models rd4ad,stfpm --epochs 1,2,4,8   # image AUROC vs epoch per task
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from PIL import Image

TEXTURES = ("clouds", "weave", "dots")
DEFECTS = ("scratch", "blob", "hole")


def _smooth_noise(rng, size: int, cells: int) -> np.ndarray:
    """Value noise: a random `cells`² grid bilinearly upsampled to size² (one octave of Perlin-like noise)."""
    grid = rng.random((cells + 1, cells + 1))
    x = np.linspace(0, cells, size, endpoint=False)
    i, f = x.astype(int), x - x.astype(int)
    f = f * f * (3 - 2 * f)  # smoothstep, as Perlin's fade
    rows = grid[i] * (1 - f)[:, None] + grid[i + 1] * f[:, None]
    return rows[:, i] * (1 - f)[None] + rows[:, i + 1] * f[None]


def texture(kind: str, rng, size: int) -> np.ndarray:
    """[size, size, 3] float in [0, 1]."""
    yy, xx = np.mgrid[0:size, 0:size] / size
    if kind == "clouds":
        v = sum(_smooth_noise(rng, size, c) / k for k, c in ((1, 4), (2, 8), (4, 16)))
        v = (v - v.min()) / (np.ptp(v) + 1e-9)
        base = np.stack([0.3 + 0.5 * v, 0.25 + 0.45 * v, 0.2 + 0.3 * v], -1)
    elif kind == "weave":
        f = 8 + rng.uniform(-0.5, 0.5)
        px, py = rng.uniform(0, 2 * np.pi, 2)
        warp = 0.5 + 0.5 * np.sin(2 * np.pi * f * xx + px)
        weft = 0.5 + 0.5 * np.sin(2 * np.pi * f * yy + py)
        over = (np.floor(f * xx + px / (2 * np.pi)) + np.floor(f * yy + py / (2 * np.pi))) % 2
        v = np.where(over == 0, warp, weft)
        base = np.stack([0.2 + 0.4 * v, 0.35 + 0.4 * v, 0.5 + 0.3 * v], -1)
    elif kind == "dots":
        pitch = size / 6
        ox, oy = rng.uniform(0, pitch, 2)
        dx = ((xx * size + ox) % pitch) - pitch / 2
        dy = ((yy * size + oy) % pitch) - pitch / 2
        v = (np.hypot(dx, dy) < pitch * 0.28).astype(float)
        base = np.stack([0.85 - 0.5 * v, 0.8 - 0.2 * v, 0.7 - 0.6 * v], -1)
    else:
        raise ValueError(kind)
    return np.clip(base + rng.normal(0, 0.02, base.shape), 0, 1)


def plant(kind: str, rng, image: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(defective image, mask): one defect of `kind` at a random place."""
    size = image.shape[0]
    yy, xx = np.mgrid[0:size, 0:size]
    cy, cx = rng.uniform(0.25, 0.75, 2) * size
    if kind == "scratch":
        angle = rng.uniform(0, np.pi)
        d = np.abs((xx - cx) * np.sin(angle) - (yy - cy) * np.cos(angle))
        along = np.abs((xx - cx) * np.cos(angle) + (yy - cy) * np.sin(angle))
        mask = (d < size * 0.025) & (along < size * 0.25)
        colour = np.array([0.95, 0.95, 0.9])
    elif kind == "blob":
        r = size * rng.uniform(0.07, 0.11)
        mask = np.hypot(xx - cx, (yy - cy) * 1.4) < r
        colour = np.array([0.2, 0.7, 0.2])
    else:
        mask = np.hypot(xx - cx, yy - cy) < size * rng.uniform(0.05, 0.08)
        colour = np.array([0.05, 0.05, 0.05])
    out = image.copy()
    out[mask] = 0.3 * out[mask] + 0.7 * colour
    return out, mask


def _save(array: np.ndarray, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = (np.clip(array, 0, 1) * 255).round().astype(np.uint8)
    Image.fromarray(data if data.ndim == 3 else data).save(path)


def generate(root: Path, size: int = 64, n_train: int = 16, n_good: int = 8, n_bad: int = 8, seed: int = 0,
             textures=TEXTURES) -> Path:
    """Write the held-out texture tasks at `root` in the MVTec AD layout; returns `root`."""
    root = Path(root)
    for t, kind in enumerate(textures):
        rng = np.random.default_rng([seed, t])
        task = root / kind
        for i in range(n_train):
            _save(texture(kind, rng, size), task / "train" / "good" / f"{i:03d}.png")
        for i in range(n_good):
            _save(texture(kind, rng, size), task / "test" / "good" / f"{i:03d}.png")
        for i in range(n_bad):
            defect = DEFECTS[i % len(DEFECTS)]
            image, mask = plant(defect, rng, texture(kind, rng, size))
            _save(image, task / "test" / defect / f"{i:03d}.png")
            _save(mask.astype(float), task / "ground_truth" / defect / f"{i:03d}_mask.png")
    return root


def splits(root: Path, task: str, size: int):
    """(train, test) TaskSplits of one held-out task."""
    from bench.data.readers import read_mvtec
    from bench.data.tasks import task_splits

    return task_splits(read_mvtec(root, dataset="mvtec"), root, task, size)


def image_auroc(model: str, root: Path, task: str, size: int, seed: int = 0, **settings) -> float:
    """Fit `model` (random-init resnet18 where it has a backbone) on the task's normals; image ROC-AUC on its test."""
    import torch

    from bench.features import FeatureExtractor, ImageSource
    from bench.metrics import roc_auc
    from helpers import create
    from bench.registry import get

    spec = get(model)
    if spec.inputs == "images":
        extractor = ImageSource(torch.device("cpu"), batch_size=8, progress=False)
    else:
        extractor = FeatureExtractor("resnet18", "none", spec.layers(spec.resolve(settings)), torch.device("cpu"),
                                     batch_size=8, progress=False)
    train, test = splits(root, task, size)
    det = create(model, extractor, size, **settings).fit(train, seed=seed)
    return roc_auc(test.labels, det.predict(test, np.arange(len(test))).scores)


def main(argv=None) -> int:
    import tempfile

    p = argparse.ArgumentParser(description="image AUROC vs epoch on held-out textures (random-init resnet18)")
    p.add_argument("--models", default="stfpm,rd4ad,fastflow,paste")
    p.add_argument("--epochs", default="1,2,4,8")
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="on top of the quick settings")
    args = p.parse_args(argv)
    from bench.config import parse_overrides
    from bench.registry import get

    root = generate(Path(tempfile.mkdtemp(prefix="textures-")), size=args.size)
    for model in args.models.split(","):
        for task in TEXTURES:
            curve = []
            for epochs in map(int, args.epochs.split(",")):
                settings = {**get(model).quick, **parse_overrides(args.set), "epochs": epochs}
                curve.append(f"{epochs}:{image_auroc(model, root, task, args.size, **settings):.3f}")
            print(f"{model:<10} {task:<8} " + " ".join(curve), flush=True)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    sys.exit(main())

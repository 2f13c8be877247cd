"""Frozen timm backbones, offline weight staging, and the per-run feature cache.

Weights: `none` (seeded random init, for tests and the demo), `imagenet` (torchvision-style `*.tv_in1k`
weights staged by `make weights` into data/weights/), or a path to a state-dict file. The hub is never
contacted while running: missing weights fail in milliseconds with the staging command.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from bench.config import BACKBONES
from bench.errors import WeightsError, choice_error
from bench.results import file_sha256

LAYERS = ("stem", "layer1", "layer2", "layer3", "layer4")  # stem: conv1 + bn + relu (timm's feature 0)
IMAGENET_TAG = "tv_in1k"  # torchvision's weights: the ones the papers' numbers come from (timm's default differs)


def weights_dir() -> Path:
    return Path(os.environ.get("BENCH_WEIGHTS_DIR", "data/weights"))


def staged_weights_path(backbone: str) -> Path:
    return weights_dir() / f"{backbone}.{IMAGENET_TAG}.safetensors"


def resolve_weights(backbone: str, weights: str) -> tuple[Path | None, str]:
    """(file to load or None, weights id for the run key). Fails fast when a file is missing."""
    if backbone not in BACKBONES:
        raise choice_error("backbone", backbone, BACKBONES)
    if weights == "none":
        return None, "none"
    if weights == "imagenet":
        path = staged_weights_path(backbone)
        if not path.is_file():
            raise WeightsError(
                f"{path}: ImageNet weights for {backbone} are not staged (this machine never downloads them "
                f"at run time). On a machine with internet run `make weights` and copy data/weights/ here, "
                f"or pass --weights none / --weights PATH"
            )
        return path, f"{backbone}.{IMAGENET_TAG}:{_weights_sha256(path)[:16]}"
    path = Path(weights)
    if not path.is_file():
        raise WeightsError(f"{path}: weights file not found (expected imagenet, none, or a state-dict file)")
    return path, f"file:{_weights_sha256(path)[:16]}"


_WEIGHT_HASHES: dict[tuple, str] = {}


def _weights_sha256(path: Path) -> str:
    """file_sha256 of a weights file, once per file version in this process: planning a grid resolves the
    same 45-270 MB file for every run. Keyed by (path, size, mtime), so a rewritten file is hashed again."""
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _WEIGHT_HASHES:
        _WEIGHT_HASHES[key] = file_sha256(path)
    return _WEIGHT_HASHES[key]


def _load_state_dict(path: Path) -> dict:
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            return load_file(str(path))
        sd = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # corrupt or foreign file: say which and why, no traceback
        raise WeightsError(f"{path}: cannot read weights ({type(e).__name__}: {e})") from None
    return sd.get("state_dict", sd) if isinstance(sd, dict) else sd


def create_backbone(name: str, weights: str, layers: tuple[str, ...], seed: int = 0) -> torch.nn.Module:
    """A frozen, eval-mode timm `features_only` model returning the requested layers in order."""
    import timm

    bad = [layer for layer in layers if layer not in LAYERS]
    if bad:
        raise choice_error("layer", bad[0], LAYERS)
    path, _ = resolve_weights(name, weights)
    out_indices = tuple(LAYERS.index(layer) for layer in layers)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)  # `none` = random init, reproducible from the run seed
        model = timm.create_model(name, pretrained=False, features_only=True, out_indices=out_indices)
    if path is not None:
        sd = _load_state_dict(path)
        missing, _unexpected = model.load_state_dict(sd, strict=False)  # unexpected: fc/later layers
        if missing:
            raise WeightsError(f"{path}: not {name} weights (missing {len(missing)} tensors, e.g. {missing[0]})")
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def stage_weights(backbones=BACKBONES) -> list[Path]:
    """Download torchvision-style ImageNet weights through timm (needs internet) into data/weights/."""
    import timm
    from safetensors.torch import save_file

    out = []
    weights_dir().mkdir(parents=True, exist_ok=True)
    for name in backbones:
        model = timm.create_model(f"{name}.{IMAGENET_TAG}", pretrained=True)
        path = staged_weights_path(name)
        tmp = path.with_suffix(".tmp")
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(tmp))
        os.replace(tmp, path)
        out.append(path)
    return out


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device not in ("cpu", "cuda"):
        raise choice_error("device", device, ("auto", "cpu", "cuda"))
    if device == "cuda" and not torch.cuda.is_available():
        raise choice_error("device (CUDA is not available here)", device, ("auto", "cpu"))
    return torch.device(device)


def synchronize(device: torch.device) -> None:
    """Wait for queued GPU work so wall times measure the work, not the launch."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class FeatureExtractor:
    """Runs a frozen backbone with a per-run cache keyed by image: each image is forwarded at most once.

    Cached features live in host memory (float32, per image, per layer) and move to the device on use.
    `keep=False` requests (training images a method never revisits) are not stored.
    """

    def __init__(self, backbone: str, weights: str, layers, device: torch.device, *, seed: int = 0,
                 batch_size: int = 32, workers: int = 0, progress: bool = True):
        self.backbone_name, self.weights, self.layers = backbone, weights, tuple(layers)
        self.device, self.seed, self.batch_size, self.workers = device, seed, batch_size, workers
        self.progress = progress
        self._model = None
        self._cache: dict[str, tuple[torch.Tensor, ...]] = {}
        self.forward_images = 0  # images pushed through the backbone: the cache's efficiency, tested

    @property
    def model(self) -> torch.nn.Module:
        if self._model is None:
            self._model = create_backbone(self.backbone_name, self.weights, self.layers, self.seed).to(self.device)
        return self._model

    @torch.no_grad()
    def _forward(self, images: torch.Tensor) -> list[torch.Tensor]:
        feats = self.model(images.to(self.device))
        self.forward_images += images.shape[0]
        return feats

    def __call__(self, split, idx, keep: bool = True) -> list[torch.Tensor]:
        """Features of `split` rows `idx`: one tensor [B, C, h, w] per layer, on the device."""
        all_keys = split.keys
        keys = [all_keys[i] for i in idx]
        missing = [i for i, k in zip(idx, keys) if k not in self._cache]
        fresh = {}
        if missing:
            feats = self._forward(split.load_images(np.asarray(missing), workers=self.workers))
            for n, i in enumerate(missing):
                per_image = tuple(f[n].detach().to("cpu", copy=True) for f in feats)
                fresh[all_keys[i]] = per_image
                if keep:
                    self._cache[all_keys[i]] = per_image
        rows = [fresh.get(k) or self._cache[k] for k in keys]
        return [torch.stack([r[layer] for r in rows]).to(self.device) for layer in range(len(self.layers))]

    def drop(self, keys) -> None:
        """Forget the cached features of `keys` (training images a method will not revisit)."""
        for key in keys:
            self._cache.pop(key, None)

    def batches(self, split, desc: str, keep: bool = True):
        """Iterate (idx, features) over a whole split with a progress bar."""
        for idx in tqdm(list(split.batches(self.batch_size)), desc=desc, unit="batch", leave=False,
                        disable=not self.progress, mininterval=0.5 if _is_tty() else 30):
            yield idx, self(split, idx, keep=keep)


def _is_tty() -> bool:
    import sys

    return sys.stderr.isatty()

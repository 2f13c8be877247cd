"""Frozen timm backbones, offline weight staging, and the per-run feature cache (bounded, spilling to scratch).

Weights: `none` (seeded random init, for tests and the demo), `imagenet` (torchvision's ImageNet weights, as
timm's `*.tv_in1k` (IMAGENET1K_V1) and `*.tv2_in1k` (IMAGENET1K_V2) files staged by `make weights` into
data/weights/), or a path to a state-dict file. A staged file counts as ImageNet only by content: `make weights`
keeps torchvision's downloaded `.pth` beside the staged file and checks its full SHA-256 against the published
digest shipped here (`PUBLISHED_SHA256`); every run checks it again and checks that the staged file's tensors are
the `.pth`'s, so random weights saved under the staged name, or a self-written record, are refused. A run's
weights id says the check passed (`:published`); the paper comparison counts no other ImageNet run. Which ImageNet
generation `imagenet` means is the detector preset's (ModelSpec.imagenet_weights): InCLAD's code asks torchvision
for DEFAULT (every backbone detector's `inclad` preset), which is V2 for wide_resnet50_2 and V1 for resnet18; the
`original` presets use their papers' V1. The hub is never contacted while running: missing weights fail in
milliseconds with the staging command.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from bench.config import BACKBONES, CACHE_DTYPES, memory_limit_bytes, parse_bytes
from bench.errors import WeightsError, choice_error
from bench.io import atomic_path, file_sha256, file_version

LAYERS = ("stem", "layer1", "layer2", "layer3", "layer4")  # stem: conv1 + bn + relu (timm's feature 0)
IMAGENET_TAG = "tv_in1k"  # torchvision IMAGENET1K_V1, the papers' weights
# torchvision weights generation → timm tag per backbone: what `DEFAULT` resolves to in torchvision (0.13+)
IMAGENET_TAGS = {
    "IMAGENET1K_V1": {"resnet18": "tv_in1k", "wide_resnet50_2": "tv_in1k"},
    "DEFAULT": {"resnet18": "tv_in1k", "wide_resnet50_2": "tv2_in1k"},  # resnet18 has no V2
}
# timm tag -> torchvision's weights enum member (its `.url` ends in the published digest prefix)
TORCHVISION_WEIGHTS = {"tv_in1k": "IMAGENET1K_V1", "tv2_in1k": "IMAGENET1K_V2"}
# Full SHA-256 of each file torchvision publishes that `make weights` stages, by file name. torchvision publishes
# only the 8-hex prefix (the name's suffix, what torch.hub checks); the full digests are the ones independent public
# records of the same download state, each starting with that prefix (read 2026-12-07 with the search tools):
#   resnet18-f37072fd.pth (46,830,571 B): a lerobot setup script's RESNET18_SHA256, a pinned-file table
#     (`RESNET18_WEIGHTS = PinnedFile(...)`), an encoder module's WEIGHTS_SHA256 and four more projects;
#   wide_resnet50_2-95faca4d.pth (138,223,492 B): a PatchCore setup script's WR50_SHA256, a WRN50_2_SHA256 constant
#     with the same size, a PowerShell hash table of torch.hub checkpoints, and several run records;
#   wide_resnet50_2-9ba9bcbe.pth: an anomalib model page (MH-PatchCore, "IMAGENET1K_V2 ... SHA-256") and an
#     unrelated project's third-party notices (torchvision 0.21.0, Wide_ResNet50_2_Weights.IMAGENET1K_V2).
PUBLISHED_SHA256 = {
    "resnet18-f37072fd.pth": "f37072fd47e89c5e827621c5baffa7500819f7896bbacec160b1a16c560e07ec",
    "wide_resnet50_2-95faca4d.pth": "95faca4d11227dddf8633dbb5ff6c8a9003c1aa5b8945c73834b8007b10950b8",
    "wide_resnet50_2-9ba9bcbe.pth": "9ba9bcbebc349d733a72eb7608143fd754e4689ac8d8ce2916ca0bdff6443950",
}
PUBLISHED_MARK = "published"  # the weights id's last field when the run checked its file against the published one
FLOAT16_MAX = 65504.0
# share of the job's memory the feature cache may fill before spilling: the rest holds the backbone's batches, the
# model's state (PatchCore's bank, CFA's replay) and the evaluation's pixel scores
CACHE_FRACTION = 0.5  # torchvision's weights: the ones the papers' numbers come from (timm's default differs)


def weights_dir() -> Path:
    return Path(os.environ.get("BENCH_WEIGHTS_DIR", "data/weights"))


def imagenet_tag(backbone: str, generation: str = "IMAGENET1K_V1") -> str:
    """The timm tag of torchvision's `generation` weights of `backbone` (tv_in1k = V1, tv2_in1k = V2)."""
    if generation not in IMAGENET_TAGS:
        raise choice_error("ImageNet weights generation", generation, IMAGENET_TAGS)
    if backbone not in BACKBONES:
        raise choice_error("backbone", backbone, BACKBONES)
    return IMAGENET_TAGS[generation][backbone]


def staged_weights_path(backbone: str, tag: str = IMAGENET_TAG) -> Path:
    return weights_dir() / f"{backbone}.{tag}.safetensors"


def torchvision_url(backbone: str, tag: str) -> str:
    """torchvision's download address of `backbone`'s `tag` weights; its file name ends in the digest prefix."""
    from torchvision.models import get_model_weights

    return get_model_weights(backbone)[TORCHVISION_WEIGHTS[tag]].url


def published_sha256(url: str) -> str:
    """The full SHA-256 of the file torchvision publishes at `url` (PUBLISHED_SHA256)."""
    name = url.rsplit("/", 1)[-1]
    if name not in PUBLISHED_SHA256:  # a torchvision that names another file: the table must learn its digest
        raise WeightsError(f"{name}: no published SHA-256 shipped for it (bench.features.PUBLISHED_SHA256)")
    return PUBLISHED_SHA256[name]


def kept_source_path(backbone: str, tag: str) -> Path:
    """Where `make weights` keeps torchvision's download of `backbone`'s `tag` weights, beside the staged file
    (data/weights/resnet18-f37072fd.pth): the evidence a run checks the staged file against."""
    return weights_dir() / torchvision_url(backbone, tag).rsplit("/", 1)[-1]


def weights_id(backbone: str, tag: str, path: Path) -> str:
    """The run key's id of staged ImageNet weights that passed `check_torchvision_file`."""
    return f"{backbone}.{tag}:{_weights_sha256(path)[:16]}:{PUBLISHED_MARK}"


def is_published_id(text: str) -> bool:
    """Whether a recorded weights id says its run checked the weights against torchvision's published file (a
    file from before the check has no such field: not verified). Asset ids follow after ';'."""
    return text.split(";", 1)[0].endswith(f":{PUBLISHED_MARK}")


_VERDICTS: dict[tuple, str | None] = {}  # (file versions) -> None when the check passed, else why not


def check_torchvision_file(path: Path, backbone: str, tag: str) -> None:
    """WeightsError unless `path` holds torchvision's published `tag` weights of `backbone`: the `.pth` kept
    beside it has the published full SHA-256 and the staged file's tensors are that file's, value for value.
    Judged once per version of both files in this process (a grid resolves the same file for every run)."""
    source = kept_source_path(backbone, tag)
    restage = f"restage with `make weights` (it keeps {source.name} beside the staged file and checks it)"
    if not source.is_file():
        raise WeightsError(f"{path}: nothing shows these are torchvision's weights ({source} is missing): {restage}")
    key = (_version_key(path), _version_key(source))
    if key not in _VERDICTS:
        _VERDICTS[key] = _published_mismatch(path, source)
    if _VERDICTS[key]:
        raise WeightsError(f"{_VERDICTS[key]}: {restage}")


def _version_key(path: Path) -> tuple:
    """(resolved path, FileVersion): what the per-process caches below key one version of a file by."""
    return os.path.realpath(path), file_version(path)


# The staged tensors the last passing check read, until a load takes them: a run checks the file (resolve_weights)
# and then loads it (create_backbone), and reading 45-270 MB twice would cost a second read, not a second copy
# held. One file at most; a process that checks without loading (planning a grid) keeps that one.
_CHECKED_TENSORS: dict[tuple, dict] = {}


def _published_mismatch(path: Path, source: Path) -> str | None:
    """Why `path` is not the published file `source` names (None: it is)."""
    want = published_sha256(source.name)
    got = _weights_sha256(source)
    if got != want:
        return f"{source}: SHA-256 {got[:16]}… is not torchvision's published {want[:16]}…"
    theirs = _read_tensors(source)
    ours = _read_tensors(path)
    if set(ours) != set(theirs):
        extra = sorted(set(ours) ^ set(theirs))
        return f"{path}: not the tensors of {source.name} ({len(extra)} names differ, e.g. {extra[0]})"
    differ = next((k for k in sorted(ours) if ours[k].dtype != theirs[k].dtype or ours[k].shape != theirs[k].shape
                   or not torch.equal(ours[k], theirs[k])), None)
    if differ is not None:
        return f"{path}: tensor {differ} differs from {source.name}'s"
    _CHECKED_TENSORS.clear()
    _CHECKED_TENSORS[_version_key(path)] = ours
    return None


def _read_tensors(path: Path) -> dict:
    """A weights file's tensors as stored (weights_only: a .pth is read without running its pickle's code)."""
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            sd = load_file(str(path))
        else:
            sd = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # corrupt or foreign file: say which and why, no traceback
        raise WeightsError(f"{path}: cannot read weights ({type(e).__name__}: {' '.join(str(e).split())[:200]})"
                           ) from None
    return sd


def staged_files() -> list[tuple[str, str]]:
    """(backbone, timm tag) of every ImageNet file `make weights` stages: each backbone's V1 and, where
    torchvision's DEFAULT differs (wide_resnet50_2: V2), that one too."""
    return sorted({(b, tags[b]) for tags in IMAGENET_TAGS.values() for b in BACKBONES},
                  key=lambda bt: (BACKBONES.index(bt[0]), bt[1]))


def resolve_weights(backbone: str, weights: str, generation: str = "IMAGENET1K_V1") -> tuple[Path | None, str]:
    """(file to load or None, weights id for the run key). `generation`: which torchvision ImageNet weights
    `imagenet` means (the detector preset's); those are checked as torchvision's published file, and their id says
    so (`:published`). A file of the user's loads as `file:<sha>`. Fails fast when a file is missing."""
    if backbone not in BACKBONES:
        raise choice_error("backbone", backbone, BACKBONES)
    if weights == "none":
        return None, "none"
    if weights == "imagenet":
        tag = imagenet_tag(backbone, generation)
        path = staged_weights_path(backbone, tag)
        if not path.is_file():
            raise WeightsError(
                f"{path}: ImageNet weights {backbone}.{tag} ({generation}) are not staged (this machine never "
                f"downloads them at run time). On a machine with internet run `make weights` and copy "
                f"data/weights/ here, or pass --weights none / --weights PATH"
            )
        check_torchvision_file(path, backbone, tag)
        return path, weights_id(backbone, tag, path)
    path = Path(weights)
    if not path.is_file():
        raise WeightsError(f"{path}: weights file not found (expected imagenet, none, or a state-dict file)")
    return path, f"file:{_weights_sha256(path)[:16]}"


_WEIGHT_HASHES: dict[tuple, str] = {}


def _weights_sha256(path: Path) -> str:
    """file_sha256 of a weights file, once per file version in this process: planning a grid resolves the
    same 45-270 MB file for every run. Keyed by path and FileVersion, so a rewritten file is hashed again."""
    key = _version_key(path)
    if key not in _WEIGHT_HASHES:
        _WEIGHT_HASHES[key] = file_sha256(path)
    return _WEIGHT_HASHES[key]


def _load_state_dict(path: Path) -> dict:
    sd = _CHECKED_TENSORS.pop(_version_key(path), None)
    if sd is None:
        sd = _read_tensors(path)
    sd = sd.get("state_dict", sd) if isinstance(sd, dict) else sd
    if not isinstance(sd, dict) or not sd or not all(isinstance(v, torch.Tensor) for v in sd.values()):
        raise WeightsError(f"{path}: not a state dict (expected a mapping of parameter names to tensors, "
                           f"got {type(sd).__name__})")
    bad = next((k for k, v in sd.items() if v.is_floating_point() and not torch.isfinite(v).all()), None)
    if bad is not None:
        raise WeightsError(f"{path}: tensor {bad} holds NaN or infinite values")
    return sd


def create_backbone(name: str, weights: str, layers: tuple[str, ...], seed: int = 0,
                    generation: str = "IMAGENET1K_V1") -> torch.nn.Module:
    """A frozen, eval-mode timm `features_only` model returning the requested layers in order."""
    import timm

    bad = [layer for layer in layers if layer not in LAYERS]
    if bad:
        raise choice_error("layer", bad[0], LAYERS)
    path, _ = resolve_weights(name, weights, generation)
    out_indices = tuple(LAYERS.index(layer) for layer in layers)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)  # `none` = random init, reproducible from the run seed
        model = timm.create_model(name, pretrained=False, features_only=True, out_indices=out_indices)
    if path is not None:
        sd = _load_state_dict(path)
        try:
            missing, _unexpected = model.load_state_dict(sd, strict=False)  # unexpected: fc/later layers
        except RuntimeError as e:  # same names, other shapes: another backbone's weights
            first = next((line.strip() for line in str(e).splitlines() if "size mismatch" in line), str(e))
            raise WeightsError(f"{path}: not {name} weights ({first[:200]})") from None
        if missing:
            raise WeightsError(f"{path}: not {name} weights (missing {len(missing)} tensors, e.g. {missing[0]})")
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def stage_weights(files=None) -> list[Path]:
    """Download torchvision's ImageNet weights (needs internet) into data/weights/: each published `.pth`, kept
    there once its full SHA-256 is the published one, and beside it the timm state dict runs load: every
    (backbone, tag) of `staged_files()` unless `files` names some."""
    import timm
    from safetensors.torch import save_file

    out = []
    for name, tag in files or staged_files():
        source = _fetch_published(name, tag)
        model = timm.create_model(f"{name}.{tag}", pretrained=False)
        model.load_state_dict(torch.load(source, map_location="cpu", weights_only=True))  # strict: every tensor
        path = staged_weights_path(name, tag)
        with atomic_path(path) as tmp:
            save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(tmp))
        check_torchvision_file(path, name, tag)  # what every run will check: fail here, not on the cluster
        out.append(path)
    return out


def _fetch_published(name: str, tag: str) -> Path:
    """torchvision's `.pth` of `name`'s `tag` weights, kept in data/weights/ once its SHA-256 is the published one;
    taken from torch.hub's cache when there (where timm downloads too: a machine that staged before stays offline)."""
    url = torchvision_url(name, tag)
    kept = kept_source_path(name, tag)
    if not kept.is_file():
        download = Path(torch.hub.get_dir()) / "checkpoints" / kept.name
        if not download.is_file():
            download.parent.mkdir(parents=True, exist_ok=True)
            torch.hub.download_url_to_file(url, str(download))
        with atomic_path(kept) as tmp:
            shutil.copyfile(download, tmp)
    got, want = _weights_sha256(kept), published_sha256(url)
    if got != want:
        raise WeightsError(f"{kept}: SHA-256 {got[:16]}… is not the {want[:16]}… torchvision publishes for {url}: "
                           f"delete it (and torch.hub's copy) and stage again")
    return kept


class FeatureCache:
    """Per-image features held in host memory up to `budget` bytes; beyond it, entries spill to one file in
    `folder`, read back through numpy memory maps. The file is unlinked as soon as it is opened, so it vanishes
    when the cache is closed or the process ends, even by a kill.

    `dtype="float16"` stores each tensor in half precision when its values fit (|x| ≤ 65504; otherwise that tensor
    stays float32); `get` always returns float32.
    """

    def __init__(self, budget: int | None = None, dtype: str = "float32", folder: Path | None = None):
        if dtype not in CACHE_DTYPES:
            raise choice_error("feature cache dtype", dtype, CACHE_DTYPES)
        self.budget, self.dtype, self.folder = budget, dtype, folder
        self._memory: dict[str, tuple[torch.Tensor, ...]] = {}
        self._spilled: dict[str, tuple[tuple[int, str, tuple[int, ...]], ...]] = {}  # (offset, dtype, shape)
        self._file = None
        self.memory_bytes = 0
        self.spilled_bytes = 0  # bytes written to the spill file (dropped entries are not reclaimed)
        self.spilled_images = 0

    def __contains__(self, key: str) -> bool:
        return key in self._memory or key in self._spilled

    def __len__(self) -> int:
        return len(self._memory) + len(self._spilled)

    def stored(self, t: torch.Tensor) -> torch.Tensor:
        """`t` as the cache keeps it: fresh features go through this too, so a cached read equals a fresh one."""
        if self.dtype == "float16" and t.dtype == torch.float32 and t.abs().max() <= FLOAT16_MAX:
            return t.half()
        return t

    def put(self, key: str, tensors: tuple[torch.Tensor, ...]) -> None:
        size = sum(t.nbytes for t in tensors)
        if self.budget is None or self.memory_bytes + size <= self.budget:
            self._memory[key] = tensors
            self.memory_bytes += size
            return
        entries = []
        f = self._spill_file()
        for t in tensors:
            arr = np.ascontiguousarray(t.numpy())
            entries.append((self.spilled_bytes, arr.dtype.str, arr.shape))
            f.write(arr.tobytes())
            self.spilled_bytes += arr.nbytes
        f.flush()
        self._spilled[key] = tuple(entries)
        self.spilled_images += 1

    def get(self, key: str) -> tuple[torch.Tensor, ...]:
        if key in self._memory:
            return self._memory[key]
        return tuple(torch.from_numpy(np.array(np.memmap(self._file, dtype=np.dtype(dt), mode="r", offset=off,
                                                         shape=shape)))
                     for off, dt, shape in self._spilled[key])

    def drop(self, key: str) -> None:
        tensors = self._memory.pop(key, None)
        if tensors is not None:
            self.memory_bytes -= sum(t.nbytes for t in tensors)
        self._spilled.pop(key, None)

    def close(self) -> None:
        self._memory.clear()
        self._spilled.clear()
        self.memory_bytes = 0
        if self._file is not None:
            self._file.close()
            self._file = None

    def _spill_file(self):
        if self._file is None:
            folder = Path(self.folder or scratch_dir())
            folder.mkdir(parents=True, exist_ok=True)
            fd, name = tempfile.mkstemp(prefix="bench-features-", suffix=".spill", dir=folder)
            os.unlink(name)  # the open descriptor keeps the data; nothing is left behind
            self._file = os.fdopen(fd, "w+b")
        return self._file


def scratch_dir(fallback: Path | None = None) -> Path:
    """Node-local scratch for spilled features: $SLURM_TMPDIR, else $TMPDIR, else `fallback` (the run's folder)."""
    for name in ("SLURM_TMPDIR", "TMPDIR"):
        if os.environ.get(name):
            return Path(os.environ[name])
    return Path(fallback or tempfile.gettempdir())


def job_memory_bytes() -> int:
    """The memory this job may use: SLURM's request where set ($SLURM_MEM_PER_NODE, or $SLURM_MEM_PER_CPU × the
    job's CPUs, both in MB), else the cgroup limit or physical memory."""
    if os.environ.get("SLURM_MEM_PER_NODE"):
        return parse_bytes(os.environ["SLURM_MEM_PER_NODE"] + "M", "$SLURM_MEM_PER_NODE")
    if os.environ.get("SLURM_MEM_PER_CPU"):
        cpus = os.environ.get("SLURM_CPUS_PER_TASK") or os.environ.get("SLURM_CPUS_ON_NODE") or "1"
        return parse_bytes(os.environ["SLURM_MEM_PER_CPU"] + "M", "$SLURM_MEM_PER_CPU") * int(cpus)
    return memory_limit_bytes()


def cache_budget(setting: str | None = None) -> int:
    """Bytes the feature cache may hold in memory: `setting` (e.g. '8G'), else $BENCH_CACHE_BUDGET, else
    CACHE_FRACTION of the job's memory (the rest is for the backbone, the model's state and the evaluation)."""
    if setting:
        return parse_bytes(setting, "--cache-budget")
    if os.environ.get("BENCH_CACHE_BUDGET"):
        return parse_bytes(os.environ["BENCH_CACHE_BUDGET"], "$BENCH_CACHE_BUDGET")
    return int(CACHE_FRACTION * job_memory_bytes())


class FeatureExtractor:
    """Runs a frozen backbone with a per-run cache keyed by image: each image is forwarded at most once.

    Cached features live in a `FeatureCache` (host memory up to `cache_budget` bytes, then a spill file in
    `spill_dir`) and move to the device on use. `keep=False` requests (training images a method never revisits)
    are not stored.
    """

    def __init__(self, backbone: str, weights: str, layers, device: torch.device, *, seed: int = 0,
                 batch_size: int = 32, workers: int = 0, progress: bool = True, cache_budget: int | None = None,
                 cache_dtype: str = "float32", spill_dir: Path | None = None, generation: str = "IMAGENET1K_V1"):
        self.backbone_name, self.weights, self.layers = backbone, weights, tuple(layers)
        self.generation = generation  # which ImageNet weights `imagenet` means (the detector preset's)
        self.device, self.seed, self.batch_size, self.workers = device, seed, batch_size, workers
        self.progress = progress
        self._model = None
        self.cache = FeatureCache(cache_budget, cache_dtype, spill_dir)
        self.forward_images = 0  # images pushed through the backbone: the cache's efficiency, tested

    @property
    def model(self) -> torch.nn.Module:
        if self._model is None:
            self._model = create_backbone(self.backbone_name, self.weights, self.layers, self.seed,
                                          self.generation).to(self.device)
        return self._model

    @torch.no_grad()
    def _forward(self, images: torch.Tensor) -> list[torch.Tensor]:
        feats = self.model(images.to(self.device))
        self.forward_images += images.shape[0]
        return feats

    def __call__(self, split, idx, keep: bool = True) -> list[torch.Tensor]:
        """Features of `split` rows `idx`: one float32 tensor [B, C, h, w] per layer, on the device."""
        all_keys = split.keys
        keys = [all_keys[i] for i in idx]
        missing = [i for i, k in zip(idx, keys) if k not in self.cache]
        fresh = {}
        if missing:
            feats = self._forward(split.load_images(np.asarray(missing), workers=self.workers))
            for n, i in enumerate(missing):
                per_image = tuple(self.cache.stored(f[n].detach().to("cpu", copy=True)) for f in feats)
                fresh[all_keys[i]] = per_image
                if keep:
                    self.cache.put(all_keys[i], per_image)
        rows = [fresh.get(k) or self.cache.get(k) for k in keys]
        return [torch.stack([r[layer].float() for r in rows]).to(self.device) for layer in range(len(self.layers))]

    def drop(self, keys) -> None:
        """Forget the cached features of `keys` (images the run will not read again)."""
        for key in keys:
            self.cache.drop(key)

    def close(self) -> None:
        """Free the cache and its spill file."""
        self.cache.close()

    def batches(self, split, desc: str, keep: bool = True):
        """Iterate (idx, features) over a whole split with a progress bar."""
        for idx in tqdm(list(split.batches(self.batch_size)), desc=desc, unit="batch", leave=False,
                        disable=not self.progress, mininterval=0.5 if _is_tty() else 30):
            yield idx, self(split, idx, keep=keep)


def _is_tty() -> bool:
    import sys

    return sys.stderr.isatty()


class ImageSource:
    """What a detector with `ModelSpec.inputs == "images"` gets instead of a FeatureExtractor: raw [0, 1]
    images on the device (the detector applies its own normalisation); no backbone is built."""

    forward_images = 0  # no backbone passes
    cache = None  # nothing is cached: images are read when asked for

    def __init__(self, device: torch.device, *, batch_size: int = 32, workers: int = 0, progress: bool = True):
        self.device, self.batch_size, self.workers, self.progress = device, batch_size, workers, progress

    def drop(self, keys) -> None:
        """The runner's hint that these images are never read again: nothing is held, nothing to drop."""

    def close(self) -> None:
        """Nothing to free."""

    def __call__(self, split, idx) -> torch.Tensor:
        return split.load_images(np.asarray(idx), workers=self.workers, normalize=False).to(self.device)

    def samples(self, samples) -> torch.Tensor:
        """Images of (split, row) samples, possibly of several splits, in order (one read per run of a split)."""
        parts, start = [], 0
        while start < len(samples):
            end = start
            while end < len(samples) and samples[end][0] is samples[start][0]:
                end += 1
            parts.append(self(samples[start][0], [r for _, r in samples[start:end]]))
            start = end
        return torch.cat(parts)

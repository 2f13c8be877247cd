"""Peak host memory per run: what `make submit` checks each memory request against (image runs, from what each
detector's spec declares), and what a tabular run asks for (from its record index's size)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bench.config import TABULAR_REPLAY_RECORDS
from bench.errors import ConfigError

GIB = 2**30
BASE_BYTES = 3 * GIB // 2  # Python, torch, the backbone and a CUDA context, before any data
CHANNELS = {"resnet18": {"stem": 64, "layer1": 64, "layer2": 128, "layer3": 256, "layer4": 512},
            "wide_resnet50_2": {"stem": 64, "layer1": 256, "layer2": 512, "layer3": 1024, "layer4": 2048}}
STRIDES = {"stem": 2, "layer1": 4, "layer2": 8, "layer3": 16, "layer4": 32}


@dataclass(frozen=True)
class MemoryEstimate:
    fixed: int  # bytes the run needs whatever the cache budget: base, a batch, the model's state, pixel scores
    cache: int  # bytes the feature cache would hold unbounded, at its peak

    def peak(self, request: int) -> int:
        """Peak bytes under a job request of `request` bytes: the cache is bounded by its budget (spilling)."""
        from bench.features import CACHE_FRACTION

        return self.fixed + min(self.cache, int(CACHE_FRACTION * request))


def estimate_memory(run) -> MemoryEstimate:
    """A run's peak host memory from its tasks' image counts, backbone, image size and what its detector's spec
    declares: its largest batch pass (`ModelSpec.memory_bytes`), which training features it caches
    (`ModelSpec.train_features`) and its own host state (`ModelSpec.host_state_bytes`)."""
    from bench.registry import HostRun, get

    cfg, image = run.config, run.config.image
    spec = get(cfg.model)
    size = image.image_size
    layers = spec.layers(cfg.hparams)
    dims = tuple((CHANNELS[image.backbone][layer], (-(-size // STRIDES[layer])) ** 2) for layer in layers)
    per_image = sum(c * p for c, p in dims) * (2 if image.feature_dtype == "float16" else 4)
    n_train = tuple(len(run.splits[t].train) for t in cfg.tasks)
    n_test = tuple(len(run.splits[t].test) for t in cfg.tasks)
    cached = sum(n_test) + spec.cached_train_images(cfg.protocol, list(n_train))
    state = spec.host_state(HostRun(protocol=cfg.protocol, hparams=cfg.hparams, image_size=size, layers=dims,
                                    n_train=n_train, n_test=n_test))
    pixel = 2 * 4 * max(n_test) * size * size  # one test split's pixel scores, float32, while the buffer grows
    batch = spec.memory_bytes(size, image.batch_size, cfg.hparams)
    return MemoryEstimate(BASE_BYTES + batch + state + pixel, per_image * cached)


def check_memory_requests(planned: list, grid) -> None:
    """Refuse (one line) a grid whose memory request is below a run's estimated peak. Tabular grids size their
    requests from the record index instead (`tabular_mem_gb`, applied when they are expanded)."""
    if grid.track in ("tabular", "assembly"):  # both size their requests from their data when expanded
        return
    for p in planned:
        request = int(p.resources.mem_gb * GIB)
        need = estimate_memory(p.run).peak(request)
        if need > request:
            cfg = p.run.config
            raise ConfigError(f"{grid.path}: {cfg.model} ({cfg.image.backbone}, {cfg.protocol}, image_size "
                              f"{cfg.image.image_size}) needs about {need / GIB:.0f} GB at its peak, more than its "
                              f"mem_gb request {p.resources.mem_gb:g}: raise resources.mem_gb of {cfg.model}")


def tabular_mem_gb(features_bytes: int, protocol: str, n_records: int = 0, replay_size: int | None = None) -> float:
    """GiB a tabular run needs: the record features (float32, all loaded), the training rows the protocol
    concatenates and a copy made while scoring, plus 1 GiB for the interpreter and the detector. The training rows
    are taken as all records for Cumulative, half for the others (one task), and for Replay half plus its buffer
    (`replay_size` records of `n_records`, the default buffer when None), at most all of them: a buffer larger than
    the stream holds every past record, as Cumulative does."""
    held = 1.0 if protocol in ("cumulative", "cumulative_fresh") else 0.5
    if protocol == "cl" and n_records:
        held = min(1.0, held + (replay_size or TABULAR_REPLAY_RECORDS) / n_records)
    return round((features_bytes * (2 + held)) / GIB + 1, 1)


def features_size(path: Path) -> tuple[int, int]:
    """(bytes, records) of a record index's features.npy, from its header (nothing loaded); (0, 0) when absent."""
    if not path.is_file():
        return 0, 0
    import numpy as np

    try:
        records = np.load(path, mmap_mode="r").shape[0]
    except (OSError, ValueError) as e:
        raise ConfigError(f"{path}: not a readable record feature array ({e}); rebuild the scenario folder with "
                          f"`bench tabular scenarios`") from None
    return path.stat().st_size, int(records)

"""The image track of the continual runner (bench/continual/runner.py): image tasks, the image protocols, levels
`image` and `pixel`.

`prepare_image` resolves the model's settings and reads the dataset index before any work (bad input fails there,
nothing written); `ImageTrack` feeds the run's images through a frozen (or trained) backbone, or raw to detectors
that read images, and evaluates each (step, task) cell: image ROC-AUC, pixel ROC-AUC (on resized masks or at each
mask's native size) and normalised PR-AUC, plus every test image's score.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from bench import tracks
from bench.config import BACKBONES, NO_BACKBONE, RunConfig, check_memory
from bench.continual.guards import check_terminated
from bench.continual.runner import TaskData
from bench.data import generation_record, read_index
from bench.data.digests import content_sha256
from bench.data.images import MaskCounts
from bench.data.index import index_sha256
from bench.data.multi import split_roots
from bench.data.tasks import task_splits, warn_non_square
from bench.errors import ConfigError, NumericalError
from bench.features import FeatureExtractor, ImageSource, cache_budget, resolve_weights, scratch_dir
from bench.image.protocols import check_protocol, make_protocol
from bench.metrics import PixelRocAuc, normalized_pr_auc, pointwise_gap, roc_auc
from bench.registry import get as model_spec
from bench.training.loop import Heartbeat


class ImageTrack(tracks.Track):
    """Images through a frozen (or trained) backbone; levels image and pixel."""

    name = "image"
    levels = ("image", "pixel")
    matrices = ("R/image", "R/pixel", "R/image_npr_auc")
    unit = "images"  # what a task's training split holds, as the run log counts it

    def __init__(self, splits: dict, weights_id: str):
        self.splits = splits
        self.weights_id = weights_id  # the run key's id of the backbone weights and the detector's assets
        self.extractor = None
        self.log = None  # the runner's log, from `start`
        self.presets: list[str] = []  # every preset as near to the run's values as the named one (`prepare_image`)
        self.masks: dict = {}  # test split name → its pixel masks (None: no pixel labels), read once per run

    def start(self, cfg: RunConfig, device, progress: bool, log, out_dir: Path) -> None:
        self.log = log  # evaluation's heartbeat where no progress bar is drawn
        image, spec = cfg.image, model_spec(cfg.model)
        if spec.inputs != "features":  # raw images: no backbone, no ImageNet normalisation imposed
            self.extractor = ImageSource(device, batch_size=image.batch_size, workers=image.workers,
                                         progress=progress)
            return
        self.extractor = FeatureExtractor(image.backbone, image.weights, spec.layers(cfg.hparams),
                                          device, seed=cfg.seed, batch_size=image.batch_size, workers=image.workers,
                                          progress=progress, cache_budget=cache_budget(image.cache_budget),
                                          cache_dtype=image.feature_dtype, spill_dir=scratch_dir(out_dir),
                                          generation=spec.imagenet_generation(cfg.preset))
        self.extractor.model  # load the backbone's weights now: a bad weights file fails before anything is written
        if image.weights == "none":
            log("note: weights=none — the backbone is randomly initialised (seeded); numbers are not comparable "
                "to ImageNet-pretrained results")

    def protocol(self, cfg: RunConfig):
        detector = model_spec(cfg.model).factory(self.extractor, image_size=cfg.image.image_size, **cfg.hparams)
        return make_protocol(cfg.protocol, detector, cfg.seed, [len(self.splits[t].train) for t in cfg.tasks])

    def drop_training(self, task: str) -> None:
        """NCL's hint: this task's training images are never read again (its test images are)."""
        self.extractor.drop(self.splits[task].train.keys)

    def close(self) -> None:
        if self.extractor is not None:
            self.extractor.close()

    def attrs(self) -> dict:
        # images this process pushed through the backbone (the cache keeps it at ≤ 1 per image), and what spilled
        cache = self.extractor.cache  # None for detectors that read raw images
        return {"backbone_forward_images": self.extractor.forward_images, "presets": json.dumps(self.presets),
                **({"cache_budget_bytes": cache.budget, "cache_spilled_images": cache.spilled_images} if cache else {})}

    def evaluate(self, cell: tracks.Cell) -> None:
        _evaluate(cell, self.splits[cell.task_name].test, self.masks, Heartbeat(None if cell.progress else self.log))

    def probe(self, cfg: RunConfig, protocol) -> np.ndarray:
        """Scores of the first task's first test batch under a restored protocol (the runner checks a resumed
        state with them). The batch is the one evaluation scores first, so the features it caches are those
        evaluation would compute; scoring is pointwise, so nothing measured changes."""
        split = self.splits[cfg.tasks[0]].test
        with torch.no_grad():
            pred = protocol.predict(split, next(iter(split.batches(cfg.image.batch_size))))
        return pred.scores if pred.maps is None else np.append(pred.scores, pred.maps.max(axis=(1, 2)))


def prepare_image(config: RunConfig) -> tuple[ImageTrack, str]:
    """(track, index_sha256) of an image run: resolve the model's preset, hyperparameters and version, check its
    memory and backbone, read the dataset index and check every file; bad input fails here, before any work."""
    spec, image = model_spec(config.model), config.image
    check_protocol(config.protocol, spec)
    asked = spec.preset_name(config.preset)
    config.hparams = spec.resolve(config.hparams, asked)
    _resolve_loading(image, spec, asked)
    # the preset the values are, not the name asked: one run key, one recorded name (docs/models.md, "Presets");
    # only presets that load images as this run did count (the loading is part of what a preset ran)
    config.preset, presets = spec.recorded_preset(
        asked, config.hparams, weights_by_preset=spec.inputs == "features" and image.weights == "imagenet",
        same_run=lambda preset: all(spec.loading(preset)[name] == getattr(image, name)
                                    for name in ("normalize", "resize", "feature_dtype")
                                    if getattr(image, name) is not None))
    config.model_version = spec.version
    # before the dataset is read: a size the model cannot hold is one line now, not the OOM killer mid-run
    need = spec.memory_bytes(image.image_size, image.batch_size, config.hparams)
    check_memory(config.model, image.image_size, image.batch_size, need)
    if spec.inputs != "features":
        image.backbone = NO_BACKBONE  # raw images: the backbone named by the CLI default or a grid plays no part
    elif image.backbone == NO_BACKBONE:
        raise ConfigError(f"{config.model} runs on a pretrained backbone: --backbone {NO_BACKBONE} is only for "
                          f"detectors that read raw images (valid: {', '.join(BACKBONES)})")
    index = read_index(config.dataset, config.root)
    index = index[index["task"].isin(config.tasks)].reset_index(drop=True)
    roots = split_roots(config.dataset, config.root)  # {member: root} for the multi-dataset stream
    splits = {t: TaskData(*task_splits(index, roots, t, image.image_size, image.mask_threshold,
                                       image.normalize is not False, image.resize))  # None: ImageSource reads raw
              for t in config.tasks}
    sizes = set()
    for data in splits.values():  # unreadable files fail now, before any work or output
        sizes |= data.train.check_files() | data.test.check_files()
    warn_non_square(config.dataset, sizes, image.image_size)
    weights_id = _inputs_id(config)
    index_sha = index_sha256(index, generation_record(config.dataset, config.root), content_sha256(index, roots))
    track = ImageTrack(splits, weights_id)
    track.presets = presets  # every preset as near to the values, beside the one name (docs/models.md)
    return track, index_sha


def _resolve_loading(image, spec, preset: str) -> None:
    """Fill in how images load (ImageInputs.normalize/.resize/.feature_dtype) from the model preset where the run
    left them None. A detector that reads raw images normalises them itself: its `normalize` is None, whatever was
    given (like its backbone, the setting plays no part in such a run)."""
    loading = spec.loading(preset)
    for name in ("resize", "feature_dtype"):
        if getattr(image, name) is None:
            setattr(image, name, loading[name])
    if spec.inputs != "features":
        image.normalize = None
    elif image.normalize is None:
        image.normalize = loading["normalize"]


def _inputs_id(config: RunConfig) -> str:
    """The run key's id of what the detector consumes: the backbone weights for feature detectors, plus the
    content ids of the assets the detector names (missing ones fail here, fast)."""
    spec = model_spec(config.model)
    image = config.image
    weights_id = (resolve_weights(image.backbone, image.weights, spec.imagenet_generation(config.preset))[1]
                  if spec.inputs == "features" else "images")
    assets = spec.asset_ids(config.hparams)
    return weights_id + "".join(f";{name}={value}" for name, value in sorted(assets.items()))


def split_masks(split, pixel_eval: str):
    """Every mask of a test split for pixel ROC-AUC (resized array or native list), or None when some anomalous
    image has no mask; either way what would bias or skip the pixel metric is said once (per task and run)."""
    if not split.has_pixel_labels:
        anomalous = split.rows["label"] == 1
        missing = int((split.rows.loc[anomalous, "mask_path"] == "").sum())
        warnings.warn(f"{split.name}: pixel ROC-AUC not computed (NaN): {missing} of {int(anomalous.sum())} "
                      "anomalous test images have no mask", stacklevel=2)
        return None
    counts, every = MaskCounts(), np.arange(len(split))
    masks = (split.load_native_masks(every, counts) if pixel_eval == "native" else split.load_masks(every, counts))
    counts.warn(split.name, split.mask_threshold)
    return masks


def update_pixel_metric(pixel: PixelRocAuc, maps: np.ndarray, masks) -> None:
    """Add a batch of maps [B, S, S]; `masks` is [B, S, S] (resized evaluation) or a list of native [H, W] masks,
    each map then upsampled bilinearly to its mask's size and scored there."""
    if isinstance(masks, np.ndarray):
        pixel.update(maps, masks)
        return
    for m, mask in zip(maps, masks):
        if m.shape != mask.shape:
            m = F.interpolate(torch.from_numpy(np.ascontiguousarray(m, dtype=np.float32))[None, None],
                              size=mask.shape, mode="bilinear", align_corners=False)[0, 0].numpy()
        pixel.update(m[None], mask[None])


def _evaluate(cell: tracks.Cell, split, masks: dict, alive: Heartbeat) -> None:
    cfg, protocol, routing, t, j = cell.config, cell.protocol, cell.routing, cell.step, cell.task
    if split.name not in masks:
        masks[split.name] = split_masks(split, cfg.image.pixel_eval)
    mask = masks[split.name]
    pixel = PixelRocAuc() if mask is not None else None
    scores = np.empty(len(split))
    batches = list(split.batches(cfg.image.batch_size))
    done = 0
    for idx in tqdm(batches, desc=f"eval step {t + 1} on {split.task}", unit="batch", leave=False,
                    disable=not cell.progress):
        check_terminated()
        if alive.due():  # no bar off a terminal: a line at least every minute of a long evaluation
            alive.log(f"  evaluating step {t + 1} on {split.task}: {done}/{len(split)} images scored")
        done += len(idx)
        with torch.no_grad():
            pred = protocol.predict(split, idx)
        scores[idx] = pred.scores
        if not np.isfinite(scores[idx]).all() or (pred.maps is not None and not np.isfinite(pred.maps).all()):
            raise NumericalError(f"{cfg.model}: non-finite image scores or anomaly maps on {split.name} at step "
                                 f"{t + 1} (after learning {cfg.tasks[t]}); the model diverged or its settings "
                                 f"are degenerate")
        if pixel is not None and pred.maps is not None:
            update_pixel_metric(pixel, pred.maps, mask[idx] if isinstance(mask, np.ndarray) else
                                [mask[i] for i in idx])
        if pred.routed is not None and routing is not None:
            np.add.at(routing[t, j], pred.routed, 1)
    if j == t:  # once per step, on the task just learned
        check_pointwise(cfg, protocol, split, scores, batches)
    cell.arrays["R/image"][t, j] = roc_auc(split.labels, scores)
    cell.arrays["R/pixel"][t, j] = pixel.compute() if pixel is not None else np.nan
    cell.arrays["R/image_npr_auc"][t, j] = normalized_pr_auc(split.labels, scores)[0]
    cell.scores.append(tracks.ScoreRecord(t, j, split.labels.astype(np.int8), scores.astype(np.float64)))


# The image track's pointwise audit (the tabular track's is bench.tabular.audit): two test images scored alone
# must get the scores they got inside their batches. Far above float noise on any device (batch-size-dependent
# kernels differ by ~1e-6), far below what a batch-dependent detector gives (a batch-mean score: 1e-1)
IMAGE_POINTWISE_RTOL = 1e-3


def check_pointwise(cfg: RunConfig, protocol, split, scores: np.ndarray, batches: list) -> None:
    """BenchError when a detector's image scores depend on the other images of their batch: its ROC-AUC would
    then depend on --batch-size (a plugin's gave ROC-AUC_CL 0.926 / 0.963 / 1.000 at batch sizes 2 / 5 / 8)."""
    if all(len(idx) == 1 for idx in batches):
        return  # every image was scored alone already
    probe = np.array(sorted({0, len(split) - 1}))
    with torch.no_grad():
        alone = np.array([protocol.predict(split, np.array([i])).scores[0] for i in probe], dtype=np.float64)
    gap = pointwise_gap(alone, scores[probe])
    if gap > IMAGE_POINTWISE_RTOL:
        i = int(probe[np.argmax(np.abs(alone - scores[probe]))])
        raise NumericalError(f"{cfg.model}: image scores depend on the batch they are scored in (test image {i} "
                             f"of {split.name}: {alone[list(probe).index(i)]:.6g} alone, {scores[i]:.6g} in its "
                             f"batch of up to {cfg.image.batch_size}; relative gap {gap:.2g}); its ROC-AUC would "
                             "depend on --batch-size: make its predict pointwise (docs/extending.md, \"Your own "
                             "detector\")")


tracks.register("image", prepare_image)

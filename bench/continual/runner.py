"""The continual runner: learn each task of the stream, evaluate every task seen so far, record R.

After every step it checkpoints (protocol state + everything measured) so a killed run resumes at the next
task and ends with the same R as an uninterrupted one, and it rewrites the HDF5 file with status=running
so progress is visible. The final file has status=complete; the checkpoint is then deleted. Each of those
writes may be the last thing a killed job did: a rerun finds the checkpoint of the finished stream and writes
the complete file from it, or finds the complete file and only removes the checkpoint.

The result path belongs to one run, one process at a time runs it, and SIGTERM stops it with its checkpoint kept
(bench/continual/guards.py). Checkpoints are plain data read without unpickling code (bench/checkpoint.py); an
unreadable one, or one with this run's key whose content does not fit the run (steps, array shapes, missing
entries), is moved aside to `<ckpt>.bad-<timestamp>` and the run starts afresh. Epoch checkpoints are bound to the step and weights they continue (bench/training/loop.py).

Both tracks go through this one loop. What differs is a small *track* object (`ImageTrack` here, the tabular one
in bench/tabular/track.py): the task data, a fresh protocol, the metric levels and the arrays they fill, and how
one (task, split) is evaluated. With `evaluation="cross"` (tabular) every task is evaluated after each step.
"""

from __future__ import annotations

import json
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from bench import checkpoint, results, tracks
from bench.config import BACKBONES, NO_BACKBONE, RunConfig, check_max_steps, check_memory
from bench.continual.guards import (check_output, check_terminated, output_lock, remove_stale_temps,
                                   stop_on_sigterm)
from bench.continual.protocols import check_protocol, make_protocol
from bench.data import generation_record, read_index
from bench.data.digests import content_sha256
from bench.data.images import MaskCounts
from bench.data.index import index_sha256
from bench.data.multi import split_roots
from bench.data.tasks import task_splits, warn_non_square
from bench.errors import BenchError, CheckpointError, ConfigError, NumericalError
from bench.features import (FeatureExtractor, ImageSource, cache_budget, resolve_device, resolve_weights,
                            scratch_dir, synchronize)
from bench.metrics import PixelRocAuc, normalized_pr_auc, roc_auc
from bench.models import build_detector, model_layers, resolve_hparams
from bench.registry import get as model_spec
from bench.training.loop import TrainContext, record_losses


@dataclass
class RunState:
    """Everything measured so far; saved in the checkpoint and written to the HDF5 file."""

    n: int
    steps_done: int = 0
    started_at: str = field(default_factory=results.now)
    arrays: dict = field(default_factory=dict)
    scores: list = field(default_factory=list)  # (step, task, label, value[, record[, order]]) per sample, evaluation
    matrices: tuple = ("R/image", "R/pixel", "R/image_npr_auc")  # the track's [n, n] arrays
    commits: list = field(default_factory=list)  # every git commit the run ran under, in order

    def __post_init__(self):
        if not self.arrays:
            self.arrays = {name: np.full((self.n, self.n), np.nan) for name in self.matrices}
            self.arrays.update({
                "timing/train_s": np.full(self.n, np.nan), "timing/eval_s": np.full(self.n, np.nan),
                "memory/state_bytes": np.zeros(self.n, dtype=np.int64),
            })


class TaskData(NamedTuple):
    train: object  # bench.data.tasks.TaskSplit
    test: object


class ImageTrack:
    """Images through a frozen (or trained) backbone; levels image and pixel."""

    name = "image"
    levels = ("image", "pixel")
    matrices = ("R/image", "R/pixel", "R/image_npr_auc")

    def __init__(self, splits: dict):
        self.splits = splits
        self.extractor = None
        self.masks: dict = {}  # test split name → its pixel masks (None: no pixel labels), read once per run

    def start(self, cfg: RunConfig, device, progress: bool, log, out_dir: Path) -> None:
        image = cfg.image
        if model_spec(cfg.model).inputs != "features":  # raw images: no backbone, no ImageNet normalisation imposed
            self.extractor = ImageSource(device, batch_size=image.batch_size, workers=image.workers,
                                         progress=progress)
            return
        self.extractor = FeatureExtractor(image.backbone, image.weights, model_layers(cfg.model, cfg.hparams),
                                          device, seed=cfg.seed, batch_size=image.batch_size, workers=image.workers,
                                          progress=progress, cache_budget=cache_budget(image.cache_budget),
                                          cache_dtype=image.feature_dtype, spill_dir=scratch_dir(out_dir),
                                          generation=model_spec(cfg.model).imagenet_generation(cfg.preset))
        self.extractor.model  # load the backbone's weights now: a bad weights file fails before anything is written
        if image.weights == "none":
            log("note: weights=none — the backbone is randomly initialised (seeded); numbers are not comparable "
                "to ImageNet-pretrained results")

    def protocol(self, cfg: RunConfig):
        return make_protocol(cfg.protocol, build_detector(cfg.model, self.extractor, cfg.image.image_size,
                                                          cfg.hparams),
                             cfg.seed, [len(self.splits[t].train) for t in cfg.tasks])

    def drop_training(self, task: str) -> None:
        """NCL's hint: this task's training images are never read again (its test images are)."""
        self.extractor.drop(self.splits[task].train.keys)

    def close(self) -> None:
        if self.extractor is not None:
            self.extractor.close()

    def attrs(self) -> dict:
        # images this process pushed through the backbone (the cache keeps it at ≤ 1 per image), and what spilled
        cache = self.extractor.cache  # None for detectors that read raw images
        return {"backbone_forward_images": self.extractor.forward_images,
                **({"cache_budget_bytes": cache.budget, "cache_spilled_images": cache.spilled_images} if cache else {})}

    def evaluate(self, run, protocol, state, routing, t, j, progress) -> None:
        _evaluate(run, protocol, state, routing, self.masks, t, j, progress)


@dataclass
class Run:
    """A prepared run: config resolved, data indexed, identity known. `execute()` does the work."""

    config: RunConfig
    out: Path
    splits: dict
    index_sha: str
    weights_id: str
    run_key: str
    track: object = None  # ImageTrack or bench.tabular.track.TabularTrack; None: the image track

    @property
    def checkpoint_path(self) -> Path:
        return self.out.with_name(self.out.name + ".ckpt")

    @property
    def epoch_checkpoint_path(self) -> Path:
        return self.out.with_name(self.out.name + ".epoch.ckpt")


def prepare(config: RunConfig, out: Path | None = None, out_dir: Path | None = None) -> Run:
    """Validate everything that can be validated before any work (bad input fails here, nothing written)."""
    config.validate()
    if config.track != "image":  # a track of its own package (bench.tracks): the runner never imports it
        track, index_sha = tracks.prepare(config)
        return _planned(config, out, out_dir, track.splits, index_sha, "none", track)  # no pretrained weights
    check_protocol(config.protocol, model_spec(config.model))
    config.preset = model_spec(config.model).preset_name(config.preset)
    config.hparams = resolve_hparams(config.model, config.hparams, config.preset)
    config.model_version = model_spec(config.model).version
    image = config.image
    # before the dataset is read: a size the model cannot hold is one line now, not the OOM killer mid-run
    need = model_spec(config.model).memory_bytes(image.image_size, image.batch_size, config.hparams)
    check_memory(config.model, image.image_size, image.batch_size, need)
    if model_spec(config.model).inputs != "features":
        image.backbone = NO_BACKBONE  # raw images: the backbone named by the CLI default or a grid plays no part
    elif image.backbone == NO_BACKBONE:
        raise ConfigError(f"{config.model} runs on a pretrained backbone: --backbone {NO_BACKBONE} is only for "
                          f"detectors that read raw images (valid: {', '.join(BACKBONES)})")
    index = read_index(config.dataset, config.root)
    index = index[index["task"].isin(config.tasks)].reset_index(drop=True)
    roots = split_roots(config.dataset, config.root)  # {member: root} for the multi-dataset stream
    splits = {t: TaskData(*task_splits(index, roots, t, image.image_size, image.mask_threshold))
              for t in config.tasks}
    sizes = set()
    for data in splits.values():  # unreadable files fail now, before any work or output
        sizes |= data.train.check_files() | data.test.check_files()
    warn_non_square(config.dataset, sizes, image.image_size)
    weights_id = _inputs_id(config)
    index_sha = index_sha256(index, generation_record(config.dataset, config.root), content_sha256(index, roots))
    return _planned(config, out, out_dir, splits, index_sha, weights_id, ImageTrack(splits))


def _planned(config, out, out_dir, splits, index_sha, weights_id, track) -> Run:
    key = config.run_key(index_sha, weights_id)
    if out is None:
        out = Path(out_dir or f"outputs/{config.result_set}/runs") / f"{config.run_name(key)}.h5"
    out = Path(out).expanduser()
    check_output(out, key, probe=False)
    return Run(config, out, splits, index_sha, weights_id, key, track)


def _inputs_id(config: RunConfig) -> str:
    """The run key's id of what the detector consumes: the backbone weights for feature detectors, plus the
    content ids of the assets the detector names (missing ones fail here, fast)."""
    spec = model_spec(config.model)
    image = config.image
    weights_id = (resolve_weights(image.backbone, image.weights, spec.imagenet_generation(config.preset))[1]
                  if spec.inputs == "features" else "images")
    assets = spec.asset_ids(config.hparams)
    return weights_id + "".join(f";{name}={value}" for name, value in sorted(assets.items()))


def execute(run: Run, *, progress: bool = True, max_steps: int | None = None, log=print) -> Path:
    """Run (or resume) the stream; returns the result file. `max_steps` stops early (resumable)."""
    check_max_steps(max_steps)
    check_output(run.out, run.run_key)  # again: the file may have changed since planning
    with output_lock(run.out), stop_on_sigterm():
        remove_stale_temps(run.out, (run.checkpoint_path, run.epoch_checkpoint_path), log)
        if results.is_complete(run.out, run.run_key):
            # a kill between the final write and removing the checkpoint leaves it: the run is done
            run.checkpoint_path.unlink(missing_ok=True)
            log(f"{run.out}: already complete (run key {run.run_key[:12]}); nothing to do")
            return run.out
        return _execute(run, progress, max_steps, log)


def _execute(run: Run, progress: bool, max_steps: int | None, log) -> Path:
    cfg, n = run.config, len(run.config.tasks)
    progress = progress and sys.stderr.isatty()  # carriage-return bars garble a SLURM log: there, one line a phase
    device = resolve_device(cfg.device)
    track = run.track or ImageTrack(run.splits)
    track.start(cfg, device, progress, log, run.out.parent)
    protocol = track.protocol(cfg)
    state = _resume(run, protocol, log)
    if state is None:  # a rejected checkpoint may have been half loaded
        protocol, state = track.protocol(cfg), RunState(n, matrices=track.matrices)
    provenance = results.provenance()
    commit = provenance["git_commit"]
    if state.commits and state.commits[-1] != commit:
        log(f"note: resuming under commit {commit[:12]}; steps 1..{state.steps_done} ran under "
            f"{', '.join(c[:12] for c in state.commits)} (all recorded in git_commits)")
    if commit not in state.commits[-1:]:
        state.commits.append(commit)
    base_attrs = {**provenance, "git_commits": json.dumps(state.commits), "run_key": run.run_key,
                  "run_name": run.out.stem, "n_tasks": n, "config": cfg.to_json(), "config_sha256": cfg.sha256(),
                  "index_sha256": run.index_sha, "weights_id": run.weights_id, "seed": cfg.seed,
                  "device": _device_name(device), "track": track.name, "levels": json.dumps(list(track.levels)),
                  "evaluation": cfg.evaluation}
    tasks_info = _tasks_info(run)
    routing = _routing_array(state, n, protocol)
    stop = n if max_steps is None else min(n, state.steps_done + max_steps)
    try:
        for t in range(state.steps_done, stop):
            check_terminated()
            task = cfg.tasks[t]
            evaluated = range(n) if cfg.evaluation == "cross" else range(t + 1)
            log(f"learning task {t + 1}/{n}: {task} ({len(run.splits[task].train)} {_unit(track)}), then "
                f"evaluating {len(evaluated)} task{'s' if len(evaluated) > 1 else ''}")
            synchronize(device)
            t0 = time.perf_counter()
            # gradient-trained detectors checkpoint every epoch: a killed run resumes inside the task
            context = TrainContext(run.epoch_checkpoint_path, run.run_key, progress, log, step=t)
            protocol.detector.context = context  # a protocol with fresh experts hands it on to the new one
            protocol.learn(run.splits[task].train, t)
            if cfg.protocol == "ncl":  # NCL never reads a past task's training split again (its test split, yes)
                track.drop_training(task)
            synchronize(device)
            state.arrays["timing/train_s"][t] = time.perf_counter() - t0
            record_losses(state.arrays, t, n, context.losses)
            protocol.record(state.arrays, t, n)
            t0 = time.perf_counter()
            for j in evaluated:
                track.evaluate(run, protocol, state, routing, t, j, progress)
            synchronize(device)
            state.arrays["timing/eval_s"][t] = time.perf_counter() - t0
            state.arrays["memory/state_bytes"][t] = protocol.state_bytes()
            state.steps_done = t + 1
            _log_step(log, cfg, state, t, track.levels[0], evaluated)
            _save_checkpoint(run, protocol, state)
            run.epoch_checkpoint_path.unlink(missing_ok=True)
            if state.steps_done < n:
                _write(run, state, routing, tasks_info, {**base_attrs, "status": "running", **track.attrs()})
        if state.steps_done == n:
            # also reached by a rerun whose checkpoint already holds the whole stream (killed before this write)
            _write(run, state, routing, tasks_info, {**base_attrs, "status": "complete", **track.attrs()})
            run.checkpoint_path.unlink(missing_ok=True)
    except BaseException as e:
        # leave a visible trace for `make status`, with the reason; the checkpoint allows resuming
        error = (f"interrupted ({str(e) or 'SIGINT'}); resumable: run again" if isinstance(e, KeyboardInterrupt)
                 else f"{type(e).__name__}: {e}" if not isinstance(e, BenchError) else str(e))
        try:
            _write(run, state, routing, tasks_info, {**base_attrs, "status": "failed", "error": error})
        except Exception:  # noqa: BLE001 - a full disk must not hide the original error
            pass
        raise
    finally:
        track.close()  # frees the feature cache and its spill file
    return run.out


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


def _evaluate(run, protocol, state, routing, masks, t, j, progress):
    cfg = run.config
    split = run.splits[cfg.tasks[j]].test
    if split.name not in masks:
        masks[split.name] = split_masks(split, cfg.image.pixel_eval)
    mask = masks[split.name]
    pixel = PixelRocAuc() if mask is not None else None
    scores = np.empty(len(split))
    batches = list(split.batches(cfg.image.batch_size))
    for idx in tqdm(batches, desc=f"eval step {t + 1} on {split.task}", unit="batch", leave=False,
                    disable=not progress):
        check_terminated()
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
    state.arrays["R/image"][t, j] = roc_auc(split.labels, scores)
    state.arrays["R/pixel"][t, j] = pixel.compute() if pixel is not None else np.nan
    state.arrays["R/image_npr_auc"][t, j] = normalized_pr_auc(split.labels, scores)[0]
    state.scores.append((t, j, split.labels.astype(np.int8), scores.astype(np.float64)))


def _routing_array(state: RunState, n: int, protocol):
    if not protocol.routes:
        return None
    return state.arrays.setdefault("routing/counts", np.zeros((n, n, n), dtype=np.int64))


def _tasks_info(run: Run) -> dict:
    tests = [run.splits[t].test for t in run.config.tasks]
    return {
        "tasks_info/n_train": np.array([len(run.splits[t].train) for t in run.config.tasks]),
        "tasks_info/n_test": np.array([len(s) for s in tests]),
        "tasks_info/prevalence": np.array([s.labels.mean() for s in tests]),
    }


def _write(run, state, routing, tasks_info, attrs):
    extra = {}
    if routing is not None:
        # routing/own_fraction[i, j]: share of task j's test images sent to task j's own bank after step i
        with np.errstate(invalid="ignore", divide="ignore"):
            own = np.diagonal(routing, axis1=1, axis2=2) / routing.sum(2)
        extra["routing/own_fraction"] = np.where(np.tri(len(own), dtype=bool), own, np.nan)
    scores = {}
    if state.scores:
        scores = {
            "scores/step": np.concatenate([np.full(len(v), t, np.int16) for t, _, _, v, *_ in state.scores]),
            "scores/task": np.concatenate([np.full(len(v), j, np.int16) for _, j, _, v, *_ in state.scores]),
            "scores/label": np.concatenate([lab for _, _, lab, *_ in state.scores]),
            "scores/value": np.concatenate([v for _, _, _, v, *_ in state.scores]),
        }
        if len(state.scores[0]) > 4:  # tabular: each score's row in the record index (index.csv)
            scores["scores/record"] = np.concatenate([s[4] for s in state.scores])
        if all(len(s) > 5 for s in state.scores):  # tabular with timestamps: each record's stream position
            scores["scores/order"] = np.concatenate([s[5] for s in state.scores])
    finished = results.now() if attrs["status"] != "running" else ""
    attrs = {**attrs, "steps_done": state.steps_done, "started_at": state.started_at, "finished_at": finished}
    results.write_run(run.out, attrs, {**state.arrays, **tasks_info, **extra, **scores}, run.config.tasks)


def _save_checkpoint(run: Run, protocol, state: RunState) -> None:
    checkpoint.save(run.checkpoint_path, {
        "run_key": run.run_key, "protocol": protocol.state_dict(), "steps_done": state.steps_done,
        "started_at": state.started_at, "arrays": state.arrays, "scores": state.scores,
        "git_commits": list(state.commits)})


def _resume(run: Run, protocol, log) -> RunState | None:
    path = run.checkpoint_path
    if not path.is_file():
        return None
    n = len(run.config.tasks)
    try:
        ckpt = checkpoint.load(path)
        if not isinstance(ckpt, dict) or ckpt.get("run_key") != run.run_key:
            log(f"{path}: checkpoint belongs to another run key; starting from scratch")
            return None
        state = _checked_state(path, ckpt, n, (run.track or ImageTrack).matrices)
        protocol.load_state_dict(ckpt["protocol"])
    except (CheckpointError, KeyError, TypeError, ValueError, RuntimeError, AttributeError, IndexError) as e:
        bad = checkpoint.move_aside(path)
        reason = str(e) if isinstance(e, CheckpointError) else f"{path}: unusable checkpoint ({type(e).__name__}: {e})"
        log(f"warning: {reason}; moved it to {bad.name} and starting the run afresh")
        return None
    log(f"resuming {run.out.name} after step {state.steps_done}/{n}")
    return state


def _checked_state(path: Path, ckpt: dict, n: int, matrices: tuple) -> RunState:
    """The RunState a checkpoint holds, or CheckpointError naming what does not fit this run's n tasks: a file
    with the right key but other content must be moved aside, not fail every rerun later, mid-run."""
    steps = ckpt["steps_done"]
    if not isinstance(steps, int) or isinstance(steps, bool) or not 1 <= steps <= n:
        raise CheckpointError(f"{path}: steps_done={steps!r} outside 1..{n}")
    commits = ckpt["git_commits"]
    if not isinstance(commits, list) or not all(isinstance(c, str) for c in commits):
        raise CheckpointError(f"{path}: git_commits={commits!r} is not a list of commits")
    if not isinstance(ckpt["started_at"], str):
        raise CheckpointError(f"{path}: started_at={ckpt['started_at']!r} is not a time")
    arrays, expected = ckpt["arrays"], RunState(n, matrices=matrices).arrays
    if not isinstance(arrays, dict) or not all(isinstance(a, np.ndarray) for a in arrays.values()):
        raise CheckpointError(f"{path}: arrays is not a set of named arrays")
    for name, array in expected.items():
        if name not in arrays or arrays[name].shape != array.shape:
            got = arrays[name].shape if name in arrays else "missing"
            raise CheckpointError(f"{path}: array {name} is {got}, expected shape {array.shape} for {n} tasks")
    for name, array in arrays.items():  # protocol-specific arrays (train/loss, routing/…): one row per step
        if array.ndim == 0 or array.shape[0] != n:
            raise CheckpointError(f"{path}: array {name} has shape {array.shape}, expected {n} rows")
    scores = ckpt["scores"]
    if not isinstance(scores, list) or not all(_score_ok(s, steps, n) for s in scores):
        raise CheckpointError(f"{path}: scores are not (step, task, labels, values) records of steps 1..{steps}")
    return RunState(n, steps, ckpt["started_at"], arrays, [tuple(s) for s in scores], matrices, commits)


def _score_ok(record, steps: int, n: int) -> bool:
    if not isinstance(record, (list, tuple)) or not 4 <= len(record) <= 6:
        return False
    t, j, labels, values = record[:4]
    return (isinstance(t, int) and isinstance(j, int) and 0 <= t < steps and 0 <= j < n
            and all(isinstance(a, np.ndarray) and a.ndim == 1 for a in record[2:])
            and all(len(a) == len(values) for a in record[2:]))


def _log_step(log, cfg, state, t, level="image", evaluated=None):
    a = state.arrays
    row = " ".join(f"{a[f'R/{level}'][t, j]:.3f}" for j in (evaluated or range(t + 1)))
    log(f"[step {t + 1}/{len(cfg.tasks)}] {cfg.tasks[t]:<14} train {a['timing/train_s'][t]:6.1f}s "
        f"eval {a['timing/eval_s'][t]:6.1f}s  {level} R[{t + 1},:] = {row}")


def _unit(track) -> str:
    return "records" if track.name == "tabular" else "images"


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return f"cuda:{torch.cuda.get_device_name(device)}"
    return "cpu"

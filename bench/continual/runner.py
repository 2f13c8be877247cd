"""The continual runner: learn each task of the stream, evaluate every task seen so far, record R.

After every step it checkpoints (protocol state + everything measured) so a killed run resumes at the next
task and ends with the same R as an uninterrupted one, and it rewrites the HDF5 file with status=running
so progress is visible. The final file has status=complete; the checkpoint is then deleted.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
from tqdm import tqdm

from bench import results
from bench.config import RunConfig
from bench.continual.protocols import make_protocol
from bench.data import generation_record, read_index
from bench.data.index import index_sha256
from bench.data.multi import split_roots
from bench.data.tasks import task_splits
from bench.errors import BenchError
from bench.features import FeatureExtractor, resolve_device, resolve_weights, synchronize
from bench.metrics import PixelRocAuc, normalized_pr_auc, roc_auc, summarize
from bench.models import build_detector, model_layers, resolve_hparams
from bench.training.loop import TrainContext, record_losses


@dataclass
class RunState:
    """Everything measured so far; saved in the checkpoint and written to the HDF5 file."""

    n: int
    steps_done: int = 0
    started_at: str = field(default_factory=results.now)
    arrays: dict = field(default_factory=dict)
    scores: list = field(default_factory=list)  # (step, task, label, value) per image per evaluation

    def __post_init__(self):
        if not self.arrays:
            nan2 = lambda: np.full((self.n, self.n), np.nan)  # noqa: E731
            self.arrays = {
                "R/image": nan2(), "R/pixel": nan2(), "R/image_npr_auc": nan2(),
                "timing/train_s": np.full(self.n, np.nan), "timing/eval_s": np.full(self.n, np.nan),
                "memory/state_bytes": np.zeros(self.n, dtype=np.int64),
            }


class TaskData(NamedTuple):
    train: object  # bench.data.tasks.TaskSplit
    test: object


@dataclass
class Run:
    """A prepared run: config resolved, data indexed, identity known. `execute()` does the work."""

    config: RunConfig
    out: Path
    splits: dict
    index_sha: str
    weights_id: str
    run_key: str

    @property
    def checkpoint_path(self) -> Path:
        return self.out.with_name(self.out.name + ".ckpt")

    @property
    def epoch_checkpoint_path(self) -> Path:
        return self.out.with_name(self.out.name + ".epoch.ckpt")


def prepare(config: RunConfig, out: Path | None = None, out_dir: Path | None = None) -> Run:
    """Validate everything that can be validated before any work (bad input fails here, nothing written)."""
    config.hparams = resolve_hparams(config.model, config.hparams)
    index = read_index(config.dataset, config.root)
    index = index[index["task"].isin(config.tasks)].reset_index(drop=True)
    roots = split_roots(config.dataset, config.root)  # {member: root} for the multi-dataset stream
    splits = {t: TaskData(*task_splits(index, roots, t, config.image_size)) for t in config.tasks}
    for data in splits.values():  # unreadable files fail now, before any work or output
        data.train.check_files()
        data.test.check_files()
    _, weights_id = resolve_weights(config.backbone, config.weights)
    index_sha = index_sha256(index, generation_record(config.dataset, config.root))
    key = config.run_key(index_sha, weights_id)
    if out is None:
        out = Path(out_dir or f"outputs/{config.dataset}/runs") / f"{config.run_name(key)}.h5"
    return Run(config, Path(out), splits, index_sha, weights_id, key)


def execute(run: Run, *, progress: bool = True, max_steps: int | None = None, log=print) -> Path:
    """Run (or resume) the stream; returns the result file. `max_steps` stops early (resumable)."""
    cfg, n = run.config, len(run.config.tasks)
    if results.is_complete(run.out, run.run_key):
        log(f"{run.out}: already complete (run key {run.run_key[:12]}); nothing to do")
        return run.out
    device = resolve_device(cfg.device)
    run.out.parent.mkdir(parents=True, exist_ok=True)
    extractor = FeatureExtractor(cfg.backbone, cfg.weights, model_layers(cfg.model, cfg.hparams), device,
                                 seed=cfg.seed, batch_size=cfg.batch_size, workers=cfg.workers, progress=progress)
    protocol = make_protocol(cfg.protocol, build_detector(cfg.model, extractor, cfg.image_size, cfg.hparams),
                             cfg.seed, [len(run.splits[t].train) for t in cfg.tasks])
    state = _resume(run, protocol, log) or RunState(n)
    if cfg.weights == "none":
        log("note: weights=none — the backbone is randomly initialised (seeded); numbers are not comparable "
            "to ImageNet-pretrained results")
    base_attrs = {**results.provenance(), "run_key": run.run_key, "run_name": run.out.stem, "n_tasks": n,
                  "config": cfg.to_json(), "config_sha256": cfg.sha256(), "index_sha256": run.index_sha,
                  "weights_id": run.weights_id, "seed": cfg.seed, "device": _device_name(device)}
    tasks_info = _tasks_info(run)
    masks: dict[str, np.ndarray] = {}
    routing = _routing_array(state, n, protocol)
    stop = n if max_steps is None else min(n, state.steps_done + max_steps)
    try:
        for t in range(state.steps_done, stop):
            task = cfg.tasks[t]
            synchronize(device)
            t0 = time.perf_counter()
            # gradient-trained detectors checkpoint every epoch: a killed run resumes inside the task
            protocol.detector.context = TrainContext(run.epoch_checkpoint_path, f"{run.run_key}:{t}", progress, log)
            protocol.learn(run.splits[task].train, t)
            synchronize(device)
            state.arrays["timing/train_s"][t] = time.perf_counter() - t0
            record_losses(state.arrays, t, n, protocol.detector.context.losses)
            protocol.record(state.arrays, t, n)
            t0 = time.perf_counter()
            for j in range(t + 1):
                _evaluate(run, protocol, state, routing, masks, t, j, progress)
            synchronize(device)
            state.arrays["timing/eval_s"][t] = time.perf_counter() - t0
            state.arrays["memory/state_bytes"][t] = protocol.state_bytes()
            state.steps_done = t + 1
            _log_step(log, cfg, state, t)
            _save_checkpoint(run, protocol, state)
            run.epoch_checkpoint_path.unlink(missing_ok=True)
            status = "complete" if state.steps_done == n else "running"
            # images this process pushed through the backbone (the cache keeps it at ≤ 1 per image)
            _write(run, state, routing, tasks_info, {**base_attrs, "status": status,
                                                      "backbone_forward_images": extractor.forward_images})
    except BenchError:
        raise
    except BaseException as e:
        if state.steps_done:  # leave a visible trace for `make status`; the checkpoint allows resuming
            _write(run, state, routing, tasks_info, {**base_attrs, "status": "failed",
                                                      "error": f"{type(e).__name__}: {e}"})
        raise
    if state.steps_done == n:
        run.checkpoint_path.unlink(missing_ok=True)
    return run.out


def _evaluate(run, protocol, state, routing, masks, t, j, progress):
    cfg = run.config
    split = run.splits[cfg.tasks[j]].test
    if split.name not in masks and split.has_pixel_labels:
        masks[split.name] = split.load_masks(np.arange(len(split)))
    pixel = PixelRocAuc() if split.has_pixel_labels else None
    scores = np.empty(len(split))
    batches = list(split.batches(cfg.batch_size))
    for idx in tqdm(batches, desc=f"eval step {t + 1} on {split.task}", unit="batch", leave=False,
                    disable=not progress):
        with torch.no_grad():
            pred = protocol.predict(split, idx)
        scores[idx] = pred.scores
        if pixel is not None and pred.maps is not None:
            pixel.update(pred.maps, masks[split.name][idx])
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
            "scores/step": np.concatenate([np.full(len(v), t, np.int16) for t, _, _, v in state.scores]),
            "scores/task": np.concatenate([np.full(len(v), j, np.int16) for _, j, _, v in state.scores]),
            "scores/label": np.concatenate([lab for _, _, lab, _ in state.scores]),
            "scores/value": np.concatenate([v for _, _, _, v in state.scores]),
        }
    finished = results.now() if attrs["status"] != "running" else ""
    attrs = {**attrs, "steps_done": state.steps_done, "started_at": state.started_at, "finished_at": finished}
    results.write_run(run.out, attrs, {**state.arrays, **tasks_info, **extra, **scores}, run.config.tasks)


def _save_checkpoint(run: Run, protocol, state: RunState) -> None:
    tmp = run.checkpoint_path.with_name(run.checkpoint_path.name + ".tmp")
    torch.save({"run_key": run.run_key, "protocol": protocol.state_dict(), "steps_done": state.steps_done,
                "started_at": state.started_at, "arrays": state.arrays, "scores": state.scores}, tmp)
    os.replace(tmp, run.checkpoint_path)


def _resume(run: Run, protocol, log) -> RunState | None:
    path = run.checkpoint_path
    if not path.is_file():
        return None
    ckpt = torch.load(path, map_location="cpu", weights_only=False)
    if ckpt.get("run_key") != run.run_key:
        log(f"{path}: checkpoint belongs to another run key; starting from scratch")
        return None
    protocol.load_state_dict(ckpt["protocol"])
    log(f"resuming {run.out.name} after step {ckpt['steps_done']}/{len(run.config.tasks)}")
    return RunState(len(run.config.tasks), ckpt["steps_done"], ckpt["started_at"], ckpt["arrays"], ckpt["scores"])


def _log_step(log, cfg, state, t):
    a = state.arrays
    row = " ".join(f"{a['R/image'][t, j]:.3f}" for j in range(t + 1))
    log(f"[step {t + 1}/{len(cfg.tasks)}] {cfg.tasks[t]:<14} train {a['timing/train_s'][t]:6.1f}s "
        f"eval {a['timing/eval_s'][t]:6.1f}s  image R[{t + 1},:] = {row}")


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return f"cuda:{torch.cuda.get_device_name(device)}"
    return "cpu"


def final_summary(path: Path) -> dict:
    run = results.read_run(path)
    return {level: summarize(run[f"R/{level}"]) for level in ("image", "pixel")}


"""The one training loop of gradient-trained detectors (their base class: bench.models.gradient).

The loop (`train`) owns the rest: epochs, a seeded sample order, explicit train()/eval(), the per-epoch mean
loss (the runner stores it as `train/loss`, step × epoch), a progress bar on a terminal and elsewhere (a SLURM
log) a line at least every minute (`Heartbeat`: epoch, samples done, loss), an
error naming the epoch when the loss is not finite, and an epoch checkpoint (`TrainContext.checkpoint`): a run
killed mid-task resumes at the last finished epoch and ends with the same weights as an uninterrupted one.

An epoch checkpoint is bound to the training it continues: the run key, the step, which training of the step,
the number of epochs and samples, and a SHA-256 of the weights the training started from (for a warm start, the
state the runner's main checkpoint restored). One left by an earlier training of the same run is stale and simply
overwritten; one that is unreadable, of another run, of a later step, or that does not fit (epoch beyond the
epochs, losses or module shapes that disagree) is moved aside to `<ckpt>.bad-<time>` with a warning, and the
training starts from its first epoch: a requeued job never fails for ever on a file it cannot use.
"""

from __future__ import annotations

import hashlib
import sys
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn
from tqdm import tqdm

from bench import checkpoint
from bench.errors import CheckpointError, NonFiniteLossError


# Where no progress bar is drawn (a SLURM log is not a terminal) a long phase logs a line at most this often, so a
# log shows one at least every minute unless one batch takes longer than the rest of it.
HEARTBEAT_S = 30.0
clock = time.monotonic  # what Heartbeat reads (module-level: tests replace it with a fake clock)


class Heartbeat:
    """Lines showing that a long phase is alive: `due()` is True (and restarts the interval) when HEARTBEAT_S have
    passed since the phase began or since its last line; never where `log` is None (a progress bar is drawn)."""

    def __init__(self, log: Callable | None):
        self.log, self.last = log, clock()

    def due(self) -> bool:
        now = clock()
        if self.log is None or now - self.last < HEARTBEAT_S:
            return False
        self.last = now
        return True


@dataclass
class TrainContext:
    """What the runner tells the loop about the current step. The default: no checkpoint, silent."""

    checkpoint: Path | None = None  # epoch checkpoint file; None = no mid-task resume
    tag: str = ""  # the run (its run key): a checkpoint of another run is moved aside, never loaded
    progress: bool = False
    log: Callable = lambda *_: None
    # where no progress bar is drawn, the log that gets a line at least every minute (Heartbeat); None: no lines
    heartbeat: Callable | None = None
    cache_features: bool = True  # False: recompute the frozen network every epoch (the perf baseline only)
    losses: list = field(default_factory=list)  # per-epoch mean losses of this step's trainings, in order
    epoch_seconds: list = field(default_factory=list)  # wall seconds of each of those epochs
    calls: int = 0  # trainings run in this step (a protocol may train more than once per step)
    step: int = 0  # the runner's step (task index): with `calls`, orders the trainings of a run


@contextmanager
def seeded(seed: int):
    """Run the block with the global torch RNG seeded from `seed` (and restored afterwards): random inits that
    depend on nothing but `seed`. The stream is derived from `seed`, not `seed` itself, so a student built with
    seed s never equals a random-init (weights=none) teacher built with torch.manual_seed(s)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(np.random.SeedSequence([seed, 2]).generate_state(1)[0]))
        yield


def epoch_seed(seed: int, epoch: int) -> int:
    return int(np.random.SeedSequence([seed, epoch, 1]).generate_state(1)[0])


def _runs(samples):
    """Consecutive runs of one split: (split, row indices) — one extractor/image call each."""
    start = 0
    while start < len(samples):
        end = start
        while end < len(samples) and samples[end][0] is samples[start][0]:
            end += 1
        yield samples[start][0], np.array([r for _, r in samples[start:end]], dtype=np.int64)
        start = end


def sample_features(extractor, samples, keep: bool = True) -> list[torch.Tensor]:
    """Backbone features of (split, row) samples, in order, one tensor per layer, on the extractor's device."""
    parts = [extractor(split, rows, keep=keep) for split, rows in _runs(samples)]
    return [torch.cat(layer) for layer in zip(*parts)]


def sample_images(samples, device, workers: int = 0) -> torch.Tensor:
    """Raw (normalised) images [B, 3, S, S] of (split, row) samples, in order."""
    return torch.cat([split.load_images(rows, workers=workers) for split, rows in _runs(samples)]).to(device)


def _batches(samples, batch_size: int):
    return [samples[s : s + batch_size] for s in range(0, len(samples), batch_size)]


def _optimizer_state(opt: torch.optim.Optimizer) -> dict:
    """An optimizer's state dict with string keys (checkpoints store plain data with string keys only)."""
    sd = opt.state_dict()
    return {"state": {str(k): v for k, v in sd["state"].items()}, "param_groups": sd["param_groups"]}


def _load_optimizer_state(opt: torch.optim.Optimizer, state: dict) -> None:
    opt.load_state_dict({"state": {int(k): v for k, v in state["state"].items()},
                         "param_groups": state["param_groups"]})


def state_sha256(modules: dict[str, nn.Module]) -> str:
    """SHA-256 of the modules' weights and buffers (names, dtypes, shapes, values; memory layout ignored)."""
    h = hashlib.sha256()
    for name in sorted(modules):
        for key, value in sorted(modules[name].state_dict().items()):
            t = value.detach().cpu().contiguous()
            h.update(f"{name}.{key}:{t.dtype}:{tuple(t.shape)}\n".encode())
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


# what resuming an epoch checkpoint restores: its digest is saved with it and checked before any of it is used
RESTORED = ("epoch", "losses", "modules", "optimizers", "schedulers", "order_rng")


def _binding(ctx: TrainContext, start: str, epochs: int, n_samples: int) -> dict:
    """What an epoch checkpoint must match to be continued: this run, step, training, start weights and sizes."""
    return {"tag": ctx.tag, "step": ctx.step, "call": ctx.calls, "start": start, "epochs": epochs,
            "samples": n_samples}


def _load_epoch(ctx: TrainContext, binding: dict, modules: dict[str, nn.Module]) -> dict | None:
    """The epoch checkpoint that continues this training, or None (absent, stale, or moved aside as unusable)."""
    path = ctx.checkpoint
    if path is None or not path.is_file():
        return None
    try:
        state = checkpoint.load(path)
        if not isinstance(state, dict) or state.get("tag") != binding["tag"]:
            raise CheckpointError(f"{path}: epoch checkpoint of another run")
        where = (state.get("step"), state.get("call"))
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in where):
            raise CheckpointError(f"{path}: epoch checkpoint without a valid step/training index")
        if where < (binding["step"], binding["call"]):
            return None  # left by a finished training of this run (killed before its removal): overwritten
        _check_epoch(path, state, binding, modules)
    except CheckpointError as e:
        bad = checkpoint.move_aside(path)
        ctx.log(f"warning: {e}; moved it to {bad.name} and training this task from its first epoch")
        return None
    return state


def _check_epoch(path: Path, state: dict, binding: dict, modules: dict[str, nn.Module]) -> None:
    """CheckpointError unless `state` is a consistent checkpoint of exactly this training."""
    for key in ("step", "call", "start", "epochs", "samples"):
        if state.get(key) != binding[key]:
            raise CheckpointError(f"{path}: epoch checkpoint does not continue this training ({key} "
                                  f"{state.get(key)!r}, expected {binding[key]!r})")
    epoch, losses = state.get("epoch"), state.get("losses")
    if not isinstance(epoch, int) or not 1 <= epoch <= binding["epochs"]:
        raise CheckpointError(f"{path}: epoch {epoch!r} outside 1..{binding['epochs']}")
    if (not isinstance(losses, list) or len(losses) != epoch
            or not all(isinstance(v, float) and np.isfinite(v) for v in losses)):
        raise CheckpointError(f"{path}: losses do not list {epoch} finite per-epoch values")
    saved = state.get("modules")
    if not isinstance(saved, dict) or set(saved) != set(modules):
        raise CheckpointError(f"{path}: modules {sorted(saved) if isinstance(saved, dict) else saved!r}, "
                              f"expected {sorted(modules)}")
    for name, module in modules.items():
        mine = module.state_dict()
        theirs = saved[name]
        if (not isinstance(theirs, dict) or set(theirs) != set(mine)
                or any(not isinstance(theirs[k], torch.Tensor) or theirs[k].shape != v.shape
                       for k, v in mine.items())):
            raise CheckpointError(f"{path}: weights of module {name!r} do not match its architecture")
    for key in ("optimizers", "schedulers"):
        if not isinstance(state.get(key), list):
            raise CheckpointError(f"{path}: no {key} list")
    if not isinstance(state.get("order_rng"), torch.Tensor):
        raise CheckpointError(f"{path}: no sample-order generator state")
    if state.get("digest") != checkpoint.digest({key: state[key] for key in RESTORED}):
        raise CheckpointError(f"{path}: epoch checkpoint's weights or training state do not match the digest saved "
                              f"with them (changed after it was written)")


@dataclass(frozen=True)
class _Plan:
    """What `train` was asked: the samples, the seed of their order and of each epoch's draws, epochs, batch size."""

    samples: list
    seed: int
    epochs: int
    batch_size: int


@dataclass
class _Training:
    """What one training carries from epoch to epoch, and what an epoch checkpoint saves and restores."""

    modules: dict[str, nn.Module]
    optimizers: list
    schedulers: list
    order_rng: torch.Generator  # draws each epoch's sample order
    losses: list[float] = field(default_factory=list)  # per-epoch mean losses so far
    start: int = 0  # the first epoch to train: after a resume, the number of epochs already done


def _fresh(detector: "GradientDetector", modules: dict[str, nn.Module], seed: int) -> _Training:
    """A training from epoch 0 of `modules` as they are: new optimizers and schedulers, the seeded order."""
    optimizers = detector.optimizers()
    return _Training(modules, optimizers, detector.schedulers(optimizers), torch.Generator().manual_seed(seed))


def _restore(ctx, run: _Training, resumed: dict) -> bool:
    """Load a checked epoch checkpoint into `run`; False (after moving it aside) when torch still refuses a part
    of it."""
    try:
        for name, module in run.modules.items():
            module.load_state_dict(resumed["modules"][name])
        if len(resumed["optimizers"]) != len(run.optimizers) or len(resumed["schedulers"]) != len(run.schedulers):
            raise ValueError("optimizer or scheduler count differs")
        for opt, state in zip(run.optimizers, resumed["optimizers"]):
            _load_optimizer_state(opt, state)
        for sched, state in zip(run.schedulers, resumed["schedulers"]):
            sched.load_state_dict(state)
        run.order_rng.set_state(resumed["order_rng"])
    except (KeyError, TypeError, ValueError, RuntimeError, AttributeError, IndexError) as e:
        bad = checkpoint.move_aside(ctx.checkpoint)
        ctx.log(f"warning: {ctx.checkpoint}: unusable epoch checkpoint ({type(e).__name__}: "
                f"{str(e).splitlines()[0] if str(e) else ''}); moved it to {bad.name} and training this task "
                f"from its first epoch")
        return False
    return True


def _resume(detector: "GradientDetector", run: _Training, binding: dict, plan: _Plan) -> _Training:
    """`run` continued after the last epoch of this training's checkpoint where one is usable; else `run` as it
    was (no usable checkpoint), or a fresh training of the start weights (torch refused a part of it)."""
    ctx = detector.context
    resumed = _load_epoch(ctx, binding, run.modules)
    if resumed is None:
        return run
    # a half-loaded state must not be trained on: keep the start weights until the load succeeded
    initial = {name: {k: v.detach().clone() for k, v in m.state_dict().items()} for name, m in run.modules.items()}
    if _restore(ctx, run, resumed):  # a killed run: continue
        run.losses, run.start = list(resumed["losses"]), resumed["epoch"]
        ctx.log(f"resuming training after epoch {run.start}/{plan.epochs} from {ctx.checkpoint}")
        return run
    for name, module in run.modules.items():
        module.load_state_dict(initial[name])
    return _fresh(detector, run.modules, plan.seed)


def _cache_features(detector: "GradientDetector", samples: list) -> None:
    """Forward every sample once, in fixed batches of the sample order, where the run caches features: they are
    then bit-identical whether a run was resumed or not (CPU kernels may round differently for other batch
    compositions)."""
    if detector.context.cache_features and detector.inputs_features:
        for batch in _batches(samples, detector.extractor.batch_size):
            sample_features(detector.extractor, batch)


def _epoch(detector: "GradientDetector", plan: _Plan, run: _Training, epoch: int, alive: Heartbeat) -> float:
    """Train one epoch (0-based `epoch`) over the samples in the run's seeded order, then step the schedulers;
    returns the epoch's mean loss. A non-finite loss is an error naming the epoch."""
    for module in run.modules.values():
        module.train()
    n = len(plan.samples)
    order = torch.randperm(n, generator=run.order_rng).tolist()
    total, count = 0.0, 0
    with seeded(epoch_seed(plan.seed, epoch)):  # dropout, noise: the same draws after a resume
        for b, batch in enumerate(_batches([plan.samples[i] for i in order], plan.batch_size)):
            value = detector.train_step(batch, run.optimizers)
            if alive.due():
                alive.log(f"  {detector.name} epoch {epoch + 1}/{plan.epochs}: {min((b + 1) * plan.batch_size, n)}"
                          f"/{n} samples" + (f", last epoch's loss {run.losses[-1]:.6g}" if run.losses else ""))
            if value is None:  # the detector dropped this batch untrained (e.g. one record under BatchNorm)
                continue
            if not np.isfinite(value):
                raise NonFiniteLossError(f"{detector.name}: training loss became {value} in epoch "
                                         f"{epoch + 1}/{plan.epochs} (lower the learning rate with --set lr=...)")
            total, count = total + value * len(batch), count + len(batch)
    for sched in run.schedulers:
        sched.step()
    return total / count


def _save_epoch(ctx: TrainContext, binding: dict, run: _Training, done: int) -> None:
    """The epoch checkpoint after `done` epochs: what `_restore` loads, bound to this training, with its digest."""
    restored = {"epoch": done, "losses": run.losses, "order_rng": run.order_rng.get_state(),
                "modules": {name: m.state_dict() for name, m in run.modules.items()},
                "optimizers": [_optimizer_state(o) for o in run.optimizers],
                "schedulers": [s.state_dict() for s in run.schedulers]}
    checkpoint.save(ctx.checkpoint, {**binding, **restored, "digest": checkpoint.digest(restored)})


def train(detector: "GradientDetector", samples: list, seed: int, *, epochs: int, batch_size: int) -> list[float]:
    """Train `detector`'s modules on `samples` for `epochs`; returns the per-epoch mean losses (see module doc)."""
    ctx = detector.context
    ctx.calls += 1
    plan = _Plan(samples, seed, epochs, batch_size)
    run = _fresh(detector, detector.modules(), seed)
    binding = None
    if ctx.checkpoint is not None:
        binding = _binding(ctx, state_sha256(run.modules), epochs, len(samples))
        run = _resume(detector, run, binding, plan)
    _cache_features(detector, samples)
    drawn = ctx.progress and _is_tty()
    bar = tqdm(total=epochs, initial=run.start, desc=f"train {detector.name}", unit="epoch", leave=False,
               disable=not drawn)
    alive = Heartbeat(None if drawn else ctx.heartbeat)
    for epoch in range(run.start, epochs):
        t0 = time.perf_counter()
        run.losses.append(_epoch(detector, plan, run, epoch, alive))
        ctx.epoch_seconds.append(time.perf_counter() - t0)
        bar.update(1)
        bar.set_postfix(loss=f"{run.losses[-1]:.4g}")
        if alive.due():
            alive.log(f"  {detector.name} epoch {epoch + 1}/{epochs} loss {run.losses[-1]:.6g} "
                      f"({ctx.epoch_seconds[-1]:.1f}s)")
        if binding is not None:
            _save_epoch(ctx, binding, run, epoch + 1)
    bar.close()
    for module in run.modules.values():
        module.eval()
    ctx.losses.extend(run.losses)
    return run.losses


def descend(loss: torch.Tensor, optimizers) -> float:
    """One gradient step of every optimizer on `loss`; returns its value. A non-finite loss touches no weight
    (the loop then raises, naming the epoch)."""
    value = float(loss.detach())
    if not np.isfinite(value):
        return value
    for opt in optimizers:
        opt.zero_grad(set_to_none=True)
    loss.backward()
    for opt in optimizers:
        opt.step()
    return value


def record_losses(arrays: dict, step: int, n_tasks: int, losses: list[float]) -> None:
    """`train/loss` [step, epoch]: per-epoch mean training loss, NaN-padded to the longest training so far."""
    if not losses:
        return
    old = arrays.get("train/loss", np.full((n_tasks, 0), np.nan))
    out = np.full((n_tasks, max(old.shape[1], len(losses))), np.nan)
    out[:, : old.shape[1]] = old
    out[step, : len(losses)] = losses
    arrays["train/loss"] = out


def _is_tty() -> bool:
    return sys.stderr.isatty()

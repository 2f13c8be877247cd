"""The continual runner: learn each task of the stream, evaluate every task seen so far, record R.

After every step it checkpoints (protocol state + everything measured) so a killed run resumes at the next
task and ends with the same R as an uninterrupted one, and it rewrites the HDF5 file with status=running
so progress is visible. The final file has status=complete; the checkpoint is then deleted. Each of those
writes may be the last thing a killed job did: a rerun finds the checkpoint of the finished stream and writes
the complete file from it, or finds the complete file and only removes the checkpoint.

The result path belongs to one run, one process at a time runs it, and SIGTERM stops it with its checkpoint kept
(bench/continual/guards.py). Checkpoints are plain data read without unpickling code (bench/checkpoint.py); an
unreadable one, or one with this run's key whose content does not fit the run (steps, array shapes, missing
entries, a protocol state holding NaN, or one that cannot score this run's first task: a bank of another width),
is moved aside to `<ckpt>.bad-<timestamp>` with a warning and the run starts afresh. Epoch checkpoints are bound to the step and weights they continue (bench/training/loop.py).

Every track goes through this one loop. What differs is a small `bench.tracks.Track`, prepared by the module its
track registered in bench.tracks (bench/image/track.py, bench/tabular/track.py): the task data, a fresh protocol,
the metric levels and the arrays they fill, and how one cell (`bench.tracks.Cell`: step, task) is evaluated. With
`evaluation="cross"` (tabular) every task is evaluated after each step.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

from bench import checkpoint, results, tracks
from bench.config import RunConfig, check_max_steps
from bench.continual.guards import (check_output, check_terminated, output_lock, remove_stale_temps,
                                   stop_on_sigterm)
from bench.devices import resolve_device, synchronize, use_threads
from bench.errors import BenchError, CheckpointError
from bench.metrics import MOSTLY_TIED, largest_tie
from bench.training.loop import TrainContext, record_losses


@dataclass
class RunState:
    """Everything measured so far; saved in the checkpoint and written to the HDF5 file."""

    n: int
    matrices: tuple  # the track's [n, n] arrays
    steps_done: int = 0
    started_at: str = field(default_factory=results.now)
    arrays: dict = field(default_factory=dict)
    scores: list[tracks.ScoreRecord] = field(default_factory=list)  # one per evaluated cell
    commits: list = field(default_factory=list)  # every git commit the run ran under, in order
    dirty: int = 0  # git_dirty over every step so far: 1 if any ran from a dirty tree, else -1 if any outside git

    def __post_init__(self):
        if not self.arrays:
            self.arrays = {name: np.full((self.n, self.n), np.nan) for name in self.matrices}
            self.arrays.update({
                "timing/train_s": np.full(self.n, np.nan), "timing/eval_s": np.full(self.n, np.nan),
                "memory/state_bytes": np.zeros(self.n, dtype=np.int64),
                # torch's CPU threads while each step ran (0: not recorded): a resumed run may change it between
                # steps, and on CPU a trained detector's numbers depend on it (docs/cluster.md, "Threads")
                "timing/cpu_threads": np.zeros(self.n, dtype=np.int64),
            })


class TaskData(NamedTuple):
    train: object  # bench.data.tasks.TaskSplit
    test: object


@dataclass
class Run:
    """A prepared run: config resolved, data indexed, identity known. `execute()` does the work."""

    config: RunConfig
    out: Path
    index_sha: str
    run_key: str
    track: tracks.Track  # what its track's module prepared (bench.tracks.prepare)

    @property
    def splits(self) -> dict:
        """{task: TaskData} from the track, which may read them only now (a tabular index's records)."""
        return self.track.splits

    @property
    def checkpoint_path(self) -> Path:
        return self.out.with_name(self.out.name + ".ckpt")

    @property
    def epoch_checkpoint_path(self) -> Path:
        return self.out.with_name(self.out.name + ".epoch.ckpt")


def prepare(config: RunConfig, out: Path | None = None, out_dir: Path | None = None) -> Run:
    """Validate everything that can be validated before any work (bad input fails here, nothing written)."""
    config.validate()
    track, index_sha = tracks.prepare(config)  # by the track's registered name: the runner imports no track
    key = config.run_key(index_sha, track.weights_id)
    if out is None:
        out = Path(out_dir or f"outputs/{config.result_set}/runs") / f"{config.run_name(key)}.h5"
    out = Path(out).expanduser()
    check_output(out, key, probe=False)
    return Run(config, out, index_sha, key, track)


def execute(run: Run, *, progress: bool = True, max_steps: int | None = None, log=print) -> Path:
    """Run (or resume) the stream; returns the result file. `max_steps` stops early (resumable)."""
    check_max_steps(max_steps)
    check_output(run.out, run.run_key)  # again: the file may have changed since planning
    if results.is_complete(run.out, run.run_key) and not os.access(run.out.parent, os.W_OK | os.X_OK):
        # a finished result on a read-only mount: no lock can be taken there, and none is needed to report it
        log(f"{run.out}: already complete (run key {run.run_key[:12]}); nothing to do")
        return run.out
    # the thread count is chosen here, so a run executed in-process (a test, a notebook) gets the count a job gets
    with output_lock(run.out), stop_on_sigterm(), use_threads(tracks.parallel_ops(run.config.track)):
        remove_stale_temps(run.out, (run.checkpoint_path, run.epoch_checkpoint_path), log)
        if results.is_complete(run.out, run.run_key):
            # a kill between the final write and removing the checkpoint leaves it: the run is done
            run.checkpoint_path.unlink(missing_ok=True)
            log(f"{run.out}: already complete (run key {run.run_key[:12]}); nothing to do")
            return run.out
        return _execute(run, progress, max_steps, log)


@dataclass(frozen=True)
class RunAttributes:
    """The attributes every result file of a run carries (besides status and the counts `_write` adds): its
    identity, provenance and where it ran."""

    provenance: dict  # bench.results.provenance(): commit, packages, host, SLURM ids, ...
    git_dirty: int
    git_commits: tuple[str, ...]
    run_key: str
    run_name: str
    n_tasks: int
    config: str  # the RunConfig's JSON
    config_sha256: str
    index_sha256: str
    weights_id: str
    seed: int
    device: str
    track: str
    levels: tuple[str, ...]
    evaluation: str
    # a float32 training run sums in another order with another thread count, so on CPU a trained detector's R is
    # reproducible at the same count (a job's: its SLURM cpus, OMP_NUM_THREADS)
    cpu_threads: int
    # the machine's 1-minute load average as this execution started (the end: `_write`): timings made under load
    # mislead, and so may a shared machine's thread count
    load_avg_start: float

    def as_attrs(self) -> dict:
        fields = {k: v for k, v in self.__dict__.items() if k != "provenance"}
        return {**self.provenance, **fields, "git_commits": json.dumps(list(self.git_commits)),
                "levels": json.dumps(list(self.levels))}


def _execute(run: Run, progress: bool, max_steps: int | None, log) -> Path:
    cfg, n = run.config, len(run.config.tasks)
    progress = progress and sys.stderr.isatty()  # carriage-return bars garble a SLURM log: there, one line a phase
    device = resolve_device(cfg.device)
    track = run.track
    track.start(cfg, device, progress, log, run.out.parent)
    protocol = track.protocol(cfg)
    state = _resume(run, protocol, log)
    if state is None:  # a rejected checkpoint may have been half loaded
        protocol, state = track.protocol(cfg), RunState(n, track.matrices)
    base_attrs = _run_attributes(run, state, device, log).as_attrs()
    tasks_info = _tasks_info(run)
    routing = _routing_array(state, n, protocol)
    stop = n if max_steps is None else min(n, state.steps_done + max_steps)
    if n == 1:  # said before the work, not discovered in a summary of NaNs
        log("note: a stream of one task: ROC-AUC_CL is its one cell; BWT and forgetting need a second task and "
            "are reported as n/a (one task)")
    try:
        if state.steps_done == 0:
            _check_storable_before_work(protocol, cfg)
        for t in range(state.steps_done, stop):
            _step(run, protocol, state, t, device, routing, progress, log)
            if state.steps_done < n:
                _write(run, state, routing, tasks_info, {**base_attrs, "status": "running", **track.attrs()})
        if state.steps_done == n:
            # also reached by a rerun whose checkpoint already holds the whole stream (killed before this write)
            _write(run, state, routing, tasks_info, {**base_attrs, "status": "complete", **track.attrs()})
            run.checkpoint_path.unlink(missing_ok=True)
    except BaseException as e:
        _write_failure(run, state, routing, tasks_info, base_attrs, e)
        raise
    finally:
        track.close()  # frees the feature cache and its spill file
    return run.out


def _run_attributes(run: Run, state: RunState, device, log) -> RunAttributes:
    """The file's attributes for this execution; records the commit it runs under in `state` (a resumed run may
    span several, each recorded, and is dirty if any step ran from a dirty tree)."""
    cfg = run.config
    provenance = results.provenance()
    commit = provenance["git_commit"]
    if state.commits and state.commits[-1] != commit:
        log(f"note: resuming under commit {commit[:12]}; steps 1..{state.steps_done} ran under "
            f"{', '.join(c[:12] for c in state.commits)} (all recorded in git_commits)")
    if commit not in state.commits[-1:]:
        state.commits.append(commit)
    state.dirty = _dirtier(state.dirty, int(provenance["git_dirty"]))
    return RunAttributes(
        provenance=provenance, git_dirty=state.dirty, git_commits=tuple(state.commits), run_key=run.run_key,
        run_name=run.out.stem, n_tasks=len(cfg.tasks), config=cfg.to_json(), config_sha256=cfg.sha256(),
        index_sha256=run.index_sha, weights_id=run.track.weights_id, seed=cfg.seed, device=_device_name(device),
        track=run.track.name, levels=tuple(run.track.levels), evaluation=cfg.evaluation,
        cpu_threads=torch.get_num_threads(), load_avg_start=load_average())


def _step(run: Run, protocol, state: RunState, t: int, device, routing, progress: bool, log) -> None:
    """Learn task t, evaluate the tasks the protocol's evaluation asks for, record timings, checkpoint."""
    cfg, n, track = run.config, len(run.config.tasks), run.track
    check_terminated()
    task = cfg.tasks[t]
    evaluated = range(n) if cfg.evaluation == "cross" else range(t + 1)
    log(f"learning task {t + 1}/{n}: {task} ({len(run.splits[task].train)} {track.unit}), then "
        f"evaluating {len(evaluated)} task{'s' if len(evaluated) > 1 else ''}")
    synchronize(device)
    t0 = time.perf_counter()
    # gradient-trained detectors checkpoint every epoch: a killed run resumes inside the task
    context = TrainContext(run.epoch_checkpoint_path, run.run_key, progress, log, step=t,
                           heartbeat=None if progress else log)
    protocol.hand_over(context)
    protocol.learn(run.splits[task].train, t)
    if cfg.protocol == "ncl":  # NCL never reads a past task's training split again (its test split, yes)
        track.drop_training(task)
    synchronize(device)
    state.arrays["timing/train_s"][t] = time.perf_counter() - t0
    state.arrays["timing/cpu_threads"][t] = torch.get_num_threads()
    record_losses(state.arrays, t, n, context.losses)
    protocol.record(state.arrays, t, n)
    t0 = time.perf_counter()
    for j in evaluated:
        track.evaluate(tracks.Cell(cfg, protocol, t, j, state.arrays, state.scores, routing, progress))
    odd = next((s for s in state.scores if not isinstance(s, tracks.ScoreRecord)), None)
    if odd is not None:  # a track's own mistake, said where it is made rather than when the file is written
        raise TypeError(f"track {track.name!r} recorded scores as a {type(odd).__name__}, expected a "
                        f"bench.tracks.ScoreRecord")
    synchronize(device)
    state.arrays["timing/eval_s"][t] = time.perf_counter() - t0
    state.arrays["memory/state_bytes"][t] = protocol.state_bytes()
    state.steps_done = t + 1
    _log_step(log, cfg, state, t, track.levels[0], evaluated)
    _warn_ties(log, cfg, state, t, track.unit)
    _save_checkpoint(run, protocol, state)
    run.epoch_checkpoint_path.unlink(missing_ok=True)


def _write_failure(run: Run, state: RunState, routing, tasks_info, base_attrs: dict, e: BaseException) -> None:
    """Leave a visible trace for `make status`, with the reason; the checkpoint allows resuming."""
    error = (f"interrupted ({str(e) or 'SIGINT'}); resumable: run again" if isinstance(e, KeyboardInterrupt)
             else f"{type(e).__name__}: {e}" if not isinstance(e, BenchError) else str(e))
    try:
        _write(run, state, routing, tasks_info, {**base_attrs, "status": "failed", "error": error})
    except Exception:  # noqa: BLE001 - a full disk must not hide the original error
        pass


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
    scores = _score_arrays(state.scores) if state.scores else {}
    finished = results.now() if attrs["status"] != "running" else ""
    attrs = {**attrs, "steps_done": state.steps_done, "started_at": state.started_at, "finished_at": finished,
             "load_avg_end": load_average()}
    results.write_run(run.out, attrs, {**state.arrays, **tasks_info, **extra, **scores}, run.config.tasks)


def _score_arrays(records: list[tracks.ScoreRecord]) -> dict[str, np.ndarray]:
    """scores/<column> of every evaluated cell, concatenated in evaluation order; an optional column only where
    every cell has it."""
    arrays = {
        "scores/step": np.concatenate([np.full(len(r.values), r.step, np.int16) for r in records]),
        "scores/task": np.concatenate([np.full(len(r.values), r.task, np.int16) for r in records]),
        "scores/label": np.concatenate([r.labels for r in records]),
        "scores/value": np.concatenate([r.values for r in records]),
    }
    for name in tracks.ScoreRecord.EXTRA:
        if all(getattr(r, name) is not None for r in records):
            arrays[f"scores/{name}"] = np.concatenate([getattr(r, name) for r in records])
    return arrays


def _check_storable_before_work(protocol, cfg) -> None:
    """A state no checkpoint can hold (a plugin's detector keeping, say, a scikit-learn estimator from its
    constructor on) is refused before the first task, where the untrained protocol can show its state; one with
    nothing to show until it has learned (PaDiM's Gaussian) is checked at its first checkpoint instead."""
    try:
        state = protocol.state_dict()
    except Exception:  # noqa: BLE001 - an untrained detector may have no state yet: not an error of the run
        return
    checkpoint.check_storable(state, f"the state of detector {cfg.model!r} ({cfg.protocol})")


def _save_checkpoint(run: Run, protocol, state: RunState) -> None:
    checkpoint.save(run.checkpoint_path, {
        "run_key": run.run_key, "protocol": protocol.state_dict(), "steps_done": state.steps_done,
        "started_at": state.started_at, "arrays": state.arrays,
        "scores": [s.to_plain() for s in state.scores],
        "git_commits": list(state.commits), "git_dirty": state.dirty})


def _dirtier(a: int, b: int) -> int:
    """The git_dirty of two stretches of one run: dirty (1) if either was, else unknown (-1) if either was."""
    return 1 if 1 in (a, b) else -1 if -1 in (a, b) else 0


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
        state = _checked_state(path, ckpt, n, run.track.matrices)
        _check_finite(path, ckpt["protocol"], "protocol")
        protocol.load_state_dict(ckpt["protocol"])
        # the state must fit this run (a bank of another width fails in the first scoring, on every rerun): score
        # a sample of the first task with it, as evaluation will (pointwise scoring: nothing else changes)
        if not np.isfinite(run.track.probe(run.config, protocol)).all():
            raise CheckpointError(f"{path}: the restored state scores the first task's test samples as NaN or "
                                  f"infinite")
    except (CheckpointError, KeyError, TypeError, ValueError, RuntimeError, AttributeError, IndexError) as e:
        bad = checkpoint.move_aside(path)
        first = str(e).splitlines()[0] if str(e) else ""
        reason = (str(e) if isinstance(e, CheckpointError)
                  else f"{path}: unusable checkpoint ({type(e).__name__}: {first})")
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
    dirty = ckpt.get("git_dirty", -1)  # a checkpoint from before it was recorded: its steps' tree is unknown
    if dirty not in (-1, 0, 1) or isinstance(dirty, bool):
        raise CheckpointError(f"{path}: git_dirty={dirty!r} is not -1, 0 or 1")
    if not isinstance(ckpt["started_at"], str):
        raise CheckpointError(f"{path}: started_at={ckpt['started_at']!r} is not a time")
    arrays, expected = ckpt["arrays"], RunState(n, matrices).arrays
    if not isinstance(arrays, dict) or not all(isinstance(a, np.ndarray) for a in arrays.values()):
        raise CheckpointError(f"{path}: arrays is not a set of named arrays")
    if "timing/cpu_threads" not in arrays:  # a checkpoint from before threads were recorded per step: unknown
        arrays = {**arrays, "timing/cpu_threads": np.zeros(n, dtype=np.int64)}
    for name, array in expected.items():
        if name not in arrays or arrays[name].shape != array.shape:
            got = arrays[name].shape if name in arrays else "missing"
            raise CheckpointError(f"{path}: array {name} is {got}, expected shape {array.shape} for {n} tasks")
    for name, array in arrays.items():  # protocol-specific arrays (train/loss, routing/…): one row per step
        if array.ndim == 0 or array.shape[0] != n:
            raise CheckpointError(f"{path}: array {name} has shape {array.shape}, expected {n} rows")
    scores = _checked_scores(ckpt["scores"], steps, n)
    if scores is None:
        raise CheckpointError(f"{path}: scores are not score records of steps 1..{steps}")
    return RunState(n, matrices, steps, ckpt["started_at"], arrays, scores, commits, dirty)


def _check_finite(path: Path, obj, where: str) -> None:
    """CheckpointError naming the first array or tensor of `obj` (plain data) holding NaN or infinity: every
    detector's state is finite, so such a value was planted or is left by a diverged step that is not this run's."""
    if isinstance(obj, dict):
        for key, value in obj.items():
            _check_finite(path, value, f"{where}/{key}")
    elif isinstance(obj, (list, tuple)):
        for i, value in enumerate(obj):
            _check_finite(path, value, f"{where}[{i}]")
    elif _non_finite(obj):
        raise CheckpointError(f"{path}: {where} holds NaN or infinite values")


def _non_finite(value) -> bool:
    if isinstance(value, torch.Tensor):
        return value.is_floating_point() and not bool(torch.isfinite(value).all())
    return isinstance(value, np.ndarray) and value.dtype.kind == "f" and not bool(np.isfinite(value).all())


def _checked_scores(plain, steps: int, n: int) -> list[tracks.ScoreRecord] | None:
    """The checkpoint's score records, or None when any is not one of steps 1..steps and tasks 1..n."""
    if not isinstance(plain, list):
        return None
    try:
        records = [tracks.ScoreRecord.from_plain(s) for s in plain]
    except (ValueError, TypeError, KeyError):
        return None
    return records if all(0 <= r.step < steps and 0 <= r.task < n for r in records) else None


def _log_step(log, cfg, state, t, level: str, evaluated) -> None:
    a = state.arrays
    row = " ".join(f"{a[f'R/{level}'][t, j]:.3f}" for j in evaluated)
    log(f"[step {t + 1}/{len(cfg.tasks)}] {cfg.tasks[t]:<14} train {a['timing/train_s'][t]:6.1f}s "
        f"eval {a['timing/eval_s'][t]:6.1f}s  {level} R[{t + 1},:] = {row}")


def _warn_ties(log, cfg, state, t, unit: str) -> None:
    """One warning per cell of step t whose test scores are mostly one value: its ROC-AUC is set by ties."""
    for record in state.scores:
        count, value = largest_tie(record.values)
        if record.step == t and count > MOSTLY_TIED * len(record.values):
            log(f"warning: step {t + 1}, task {cfg.tasks[record.task]}: {count} of {len(record.values)} test {unit} "
                f"have one score ({value:.6g}); its ROC-AUC is decided by ties (counted in the summary; docs/models.md, Ties)")


def load_average() -> float:
    """The machine's 1-minute load average (runnable processes; compare with cpu_threads); NaN where the system
    has none."""
    try:
        return float(os.getloadavg()[0])
    except OSError:
        return float("nan")


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return f"cuda:{torch.cuda.get_device_name(device)}"
    return "cpu"

"""Replay side by side: what the replay adapters share (CFA-CL in `cfa.py`; CL = Replay of every gradient-trained
detector through `replay_section`: `stfpm.py`, `rd4ad.py`, `paste.py`, `fastflow.py`, `ganomaly.py`,
`efficientad.py`).

The released replay is upstream pyCLAD v0.3.0's (the version InCLAD ran; lifelonglab/pyCLAD at tag v0.3.0):
`strategies/replay/replay.py` (`ReplayEnhancedStrategy`: fit on buffer ∪ task, then update the buffer),
`strategies/replay/buffers/{buffer,adaptive_balanced}.py` (`AdaptiveBalancedReplayBuffer`: after each task every
task keeps ⌊max_size / tasks⌋ items), `strategies/replay/selection/{selection,random}.py` (`RandomSelection`:
`random.sample` on Python's global generator), `strategies/strategy.py` and `output/output_writer.py` (the base
classes), staged as `<folder>/pyCLAD/src/pyclad/...`. InCLAD's fork (routing-cad-icdm) imports
`pyclad.strategies.replay.buffers.buffer` in `strategies/vision/cfa_cl.py:8` and builds CFA-CL and replay with
`AdaptiveBalancedReplayBuffer(selection_method=RandomSelection(), max_size=...)`, but the fork's index holds
none of those files: upstream's are used (`use_upstream`), not stand-ins.

Fair draws: the released buffer draws with `random.sample` from Python's global generator (which the fork's runner
seeds once per run: `set_global_seeds` in examples/clvad/run_continual_visual_ad.py), the suite's with a seeded
numpy permutation: different streams. The released side runs first (`random` seeded here the same way), and the
suite's buffer is then given the released buffer's content after each task (`impose`), in the released order;
each side's own share arithmetic is printed beside (`composition`). Training is lock-step: both sides take
`--cl-steps` steps per task over the same batches of the same training set (`shared_order`: sorted by (task, row),
then one seeded permutation, standing in for either side's shuffled loader). What each side computes from the set
itself (its order, the banks) is its own code.
"""

from __future__ import annotations

import random
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

UPSTREAM = "pyCLAD"  # the folder under --released holding upstream pyCLAD v0.3.0's files


def use_upstream(folder: Path) -> None:
    """Put upstream pyCLAD's staged files on the path right after the fork's (`harness.use_released` first):
    the fork's own files win, upstream's come before the harness's placeholders."""
    src = folder / UPSTREAM / "src"
    buffer = src / "pyclad/strategies/replay/buffers/adaptive_balanced.py"
    if not buffer.is_file():
        raise SystemExit(f"error: {buffer} not found: stage upstream pyCLAD v0.3.0's replay files there first")
    sys.path.insert(1, str(src))


def released_buffer(capacity: int):
    from pyclad.strategies.replay.buffers.adaptive_balanced import AdaptiveBalancedReplayBuffer
    from pyclad.strategies.replay.selection.random import RandomSelection

    return AdaptiveBalancedReplayBuffer(selection_method=RandomSelection(), max_size=capacity)


@dataclass(frozen=True)
class Stream:
    """The training splits of a stream: the released side's data are [N, 2] arrays of (task index, row)."""

    trains: list

    def rows(self, task: int) -> np.ndarray:
        return np.stack([np.full(len(self.trains[task]), task), np.arange(len(self.trains[task]))], 1)

    def samples(self, data: np.ndarray) -> list:
        """(split, row) samples, the suite's form, of released data."""
        return [(self.trains[int(t)], int(r)) for t, r in np.asarray(data)]

    def data(self, samples) -> np.ndarray:
        index = {split.task: t for t, split in enumerate(self.trains)}  # by name: a protocol may re-root splits
        return np.array([[index[split.task], row] for split, row in samples], dtype=np.int64).reshape(-1, 2)


def shared_order(data: np.ndarray, seed: int) -> np.ndarray:
    """The training order both sides use for one task: sorted by (task, row), then a seeded permutation."""
    data = np.asarray(data, dtype=np.int64)
    ordered = data[np.lexsort((data[:, 1], data[:, 0]))]
    return ordered[np.random.default_rng(seed).permutation(len(ordered))]


def step_batches(data: np.ndarray, batch: int, steps: int) -> list[np.ndarray]:
    """`steps` batches of `batch` rows of `data`, in order, cycling."""
    plan = [data[s:s + batch] for s in range(0, len(data), batch)]
    return [plan[i % len(plan)] for i in range(steps)]


def snapshot(buffer, stream: Stream) -> dict[str, list[int]]:
    """The released buffer's content as the suite's ReplayBuffer holds it: task name → rows, in buffer order."""
    out: dict[str, list[int]] = {}
    for data in buffer._buffers:
        for task, row in np.asarray(data, dtype=np.int64).reshape(-1, 2):
            out.setdefault(stream.trains[int(task)].task, []).append(int(row))
    return out


def impose(suite_buffer, content: dict[str, list[int]]) -> None:
    """Give the suite's ReplayBuffer the released selection (same tasks, same rows, same order)."""
    if list(content) != list(suite_buffer.items_)[:len(content)]:
        raise SystemExit(f"error: buffers hold different tasks: {list(content)} vs {list(suite_buffer.items_)}")
    suite_buffer.items_ = {task: list(rows) for task, rows in content.items()}


def composition(items: dict[str, list]) -> str:
    return ", ".join(f"{task} {len(rows)}" for task, rows in items.items()) or "empty"


def recorded(scores, seen: list):
    """`scores` (a test split's image scores) that also appends what it returns to `seen`."""
    def wrapped(test):
        out = np.asarray(scores(test), np.float64)
        seen.append(out)
        return out
    return wrapped


def score_gap(ours: list, theirs: list) -> float:
    """max over the R matrix's cells of max |Δ| / max |released score|: what ROC-AUC's ranks can hide."""
    return max(float(np.abs(a - b).max() / np.abs(b).max()) for a, b in zip(ours, theirs))


def seed_python(seed: int) -> None:
    """The released RandomSelection draws from Python's global `random`: seeded here so a run repeats."""
    random.seed(seed)


class TaskRowsToFeatures(torch.nn.Module):
    """A released backbone module standing in as the suite's feature extractor over several splits: its input is
    [N, 2] (split index into `splits`, row); runs of one split go through the extractor together, in order."""

    def __init__(self, extractor, splits: list):
        super().__init__()
        self.extractor, self.splits = extractor, list(splits)

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        from itertools import groupby

        pairs = [(int(t), int(r)) for t, r in x.long().tolist()]
        parts = [self.extractor(self.splits[t], [r for _, r in run]) for t, run in groupby(pairs, key=lambda p: p[0])]
        return [torch.cat(layer) for layer in zip(*parts)]


# --- a lock-step replay run for any gradient-trained detector (FastFlow, GANomaly, EfficientAD adapters) -----------


@dataclass
class LockSide:
    """One side of a lock-step replay run. `begin(data)` is called at each fit (one per task, on buffer ∪ task: `data`
    its [N, 2] (task, row) rows) and returns the step taking one batch of such rows (a fresh optimiser per fit, as
    both sides build one; statistics over `data` the training needs, e.g. EfficientAD's teacher normalisation, are
    taken here); `end(data)`, if given, runs after the steps (e.g. EfficientAD's map quantiles);
    `scores(test)` scores a test split's images."""

    begin: object
    scores: object
    end: object = None


@dataclass
class ReplayRun:
    """Both R matrices of a replay run, each side's own buffer composition after each task, and the image-score
    gap over every cell (`score_gap`, scores put on the released scale by the suite side's `scores`)."""

    ours: np.ndarray
    theirs: np.ndarray
    own: list
    contents: list
    score_gap: float


def lock_fit(side: LockSide, stream: Stream, calls: list, batch: int, steps: int):
    """The fit both sides' replay calls: `steps` steps over `shared_order` of the fit's data (seeded by the call's
    index, the same on both sides), then `side.end`."""
    def fit(data) -> None:
        data = np.asarray(data, dtype=np.int64).reshape(-1, 2)
        step = side.begin(data)
        for rows in step_batches(shared_order(data, len(calls)), batch, steps):
            step(rows)
        if side.end is not None:
            side.end(data)
        calls.append(len(data))
    return fit


def released_replay(stream: Stream, tasks: list, side: LockSide, batch: int, steps: int, capacity: int,
                    seen: list):
    """R of upstream pyCLAD v0.3.0's ReplayEnhancedStrategy + AdaptiveBalancedReplayBuffer around a model whose
    fit is `lock_fit` of `side`; returns R and the buffer after each task (task → rows)."""
    from types import SimpleNamespace

    from harness import r_matrix
    from pyclad.strategies.replay.replay import ReplayEnhancedStrategy

    buffer = released_buffer(capacity)
    model = SimpleNamespace(fit=lock_fit(side, stream, [], batch, steps))  # the strategy calls only fit
    strategy, contents = ReplayEnhancedStrategy(model, buffer), []

    def learn(i, _train):
        strategy.learn(stream.rows(i))
        contents.append(snapshot(buffer, stream))

    return r_matrix(tasks, learn, recorded(side.scores, seen)), contents


def suite_replay(det, protocol, stream: Stream, tasks: list, side: LockSide, batch: int, steps: int,
                 contents: list, seen: list):
    """R of the suite's Replay protocol (bench/image/protocols.py) with `det.fit_samples` replaced by `lock_fit`
    of `side` and its buffer given the released content after each task; returns R and its own composition."""
    from harness import r_matrix

    fit = lock_fit(side, stream, [], batch, steps)

    def fit_samples(samples, _seed):
        fit(stream.data(samples))
        return det

    det.fit_samples = fit_samples
    own = []

    def learn(i, train):
        protocol.learn(train, i)
        own.append(composition(protocol.buffer_.items_))
        impose(protocol.buffer_, contents[i])

    return r_matrix(tasks, learn, recorded(side.scores, seen)), own


def replay_run(det, protocol, stream: Stream, tasks: list, sides: tuple, batch: int, steps: int,
               seed: int = 0) -> ReplayRun:
    """Both sides over the stream: the released first (Python's `random` seeded), then the suite's with the
    released buffer imposed; `sides` = (suite LockSide, released LockSide), from the same weights."""
    ours_side, theirs_side = sides
    seed_python(seed)
    seen_theirs, seen_ours = [], []
    theirs, contents = released_replay(stream, tasks, theirs_side, batch, steps, det.replay_size, seen_theirs)
    ours, own = suite_replay(det, protocol, stream, tasks, ours_side, batch, steps, contents, seen_ours)
    return ReplayRun(ours, theirs, own, [composition(c) for c in contents], score_gap(seen_ours, seen_theirs))


def print_replay(report, name: str, run: ReplayRun, capacity: int, steps: int, batch: int, scale: str) -> None:
    """The buffer compositions, both R matrices with their largest cell gap, and the image-score gap."""
    from harness import print_matrices

    report.note(f"{name} replay buffer after each task (capacity {capacity}): suite's own draw "
                f"[{'; '.join(run.own)}], released [{'; '.join(run.contents)}]")
    print_matrices(report, f"{name} CL = Replay, {steps} steps of {batch} per task", run.ours, run.theirs)
    report.row(f"{name} replay: image scores{scale}, all cells, max |Δ| / max", "", "", run.score_gap)


def suite_side(det, stream: Stream, modules, scale: float = 1.0) -> LockSide:
    """The suite's side of a lock-step replay run for a detector trained by `det.train_step`: each fit a fresh
    `det.optimizers()` (the suite's training loop builds them per task), `modules` switched to train mode before
    each step (as the loop does), image scores × `scale` (the released scale)."""
    def begin(_data):
        opts = det.optimizers()

        def step(rows):
            for module in modules:
                module.train()
            det.train_step(stream.samples(rows), opts)
        return step

    return LockSide(begin, lambda test: det.predict(test, list(range(len(test)))).scores * scale)


def image_side(new_step, stream: Stream, scores) -> LockSide:
    """The released side for a network trained on images: `new_step()` returns step(images) on a fresh optimiser
    (every released fit builds a new Trainer, so `configure_optimizers` runs again); the images are loaded as the
    suite loads them; `scores(test)` gives the released image scores of a test split."""
    from bench.training.loop import sample_images

    def begin(_data):
        step = new_step()
        return lambda rows: step(sample_images(stream.samples(rows), torch.device("cpu")))

    return LockSide(begin, scores)


def replay_section(report, name: str, det, tasks: list, sides_of, args, batch: int, seed: int = 0,
                   scale: str = "") -> None:
    """CL = Replay over `tasks` (harness.tiny_stream), printed: the suite's `--protocol cl` (Replay, floor shares,
    its capacity rule) beside upstream's ReplayEnhancedStrategy + AdaptiveBalancedReplayBuffer of that capacity,
    from the weights both sides hold now; `sides_of(stream)` gives the (suite, released) LockSides."""
    from bench.image.protocols import make_protocol

    use_upstream(args.released)
    stream = Stream([train for train, _ in tasks])
    protocol = make_protocol("cl", det, seed, [len(s) for s in stream.trains])
    run = replay_run(det, protocol, stream, tasks, sides_of(stream), batch, args.cl_steps, seed)
    print_replay(report, name, run, det.replay_size, args.cl_steps, batch, scale)

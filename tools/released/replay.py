"""Replay side by side: what the replay adapters (`cfa.py`'s CFA-CL, `stfpm.py`'s replay) share.

The released replay is upstream pyCLAD v0.3.0's (the version InCLAD ran; lifelonglab/pyCLAD at tag v0.3.0):
`strategies/replay/replay.py` (`ReplayEnhancedStrategy`: fit on buffer ∪ task, then update the buffer),
`strategies/replay/buffers/{buffer,adaptive_balanced}.py` (`AdaptiveBalancedReplayBuffer`: after each task every
task keeps ⌊max_size / tasks⌋ items), `strategies/replay/selection/{selection,random}.py` (`RandomSelection`:
`random.sample` on Python's global generator), `strategies/strategy.py` and `output/output_writer.py` (the base classes),
staged as `<folder>/pyCLAD/src/pyclad/...`. InCLAD's fork (routing-cad-icdm) imports
`pyclad.strategies.replay.buffers.buffer` in `strategies/vision/cfa_cl.py:8` and builds CFA-CL and replay with
`AdaptiveBalancedReplayBuffer(selection_method=RandomSelection(), max_size=...)`, but the fork's index holds
none of those files: upstream's are used (`use_upstream`), not stand-ins.

Fair draws: the released buffer draws with `random.sample` from Python's global generator (which the fork's runner
seeds once per run: `set_global_seeds` in examples/clvad/run_continual_visual_ad.py), the suite's with a seeded
numpy permutation: different streams. The released side runs first (`random` seeded here the same way), and the
suite's buffer is then given the released buffer's content after each task (`impose`), in the released order;
each side's own share arithmetic is printed beside (`composition`). Training is lock-step: both sides take
`--cl-steps` steps per task over the same batches of the same training set (`shared_order`: sorted by (task, row), then one seeded permutation, standing in for either
side's shuffled loader). What each side computes from the set itself (its order, the banks) is its own code.
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
        pairs = [(int(t), int(r)) for t, r in x.long().tolist()]
        parts, start = [], 0
        while start < len(pairs):
            end = start
            while end < len(pairs) and pairs[end][0] == pairs[start][0]:
                end += 1
            parts.append(self.extractor(self.splits[pairs[start][0]], [r for _, r in pairs[start:end]]))
            start = end
        return [torch.cat(layer) for layer in zip(*parts)]


class LockstepModel:
    """A released Lightning model inside upstream's ReplayEnhancedStrategy (it calls only `fit`), its fit replaced
    by lock-step steps: `steps` steps of `batch` rows in `shared_order` (seeded by the number of fits so far, as
    the suite's side), the images loaded as the suite loads them. `new_step()` returns a step(images) -> loss on a
    fresh optimiser: every released fit builds a new Trainer and so calls `configure_optimizers` again."""

    def __init__(self, stream: Stream, new_step, steps: int, batch: int):
        self.stream, self.new_step, self.steps, self.batch = stream, new_step, steps, batch
        self.fits: list[int] = []  # training-set size of each fit

    def fit(self, data: np.ndarray) -> None:
        from bench.training.loop import sample_images

        step = self.new_step()
        for rows in step_batches(shared_order(data, len(self.fits)), self.batch, self.steps):
            step(sample_images(self.stream.samples(rows), torch.device("cpu")))
        self.fits.append(len(data))


@dataclass(frozen=True)
class ReleasedSide:
    """What the generic replay comparison needs of a released model: `new_step()` (see LockstepModel) and
    `scores(test)`, the released image scores of a test split (numpy)."""

    new_step: object
    scores: object


@dataclass(frozen=True)
class SuiteSide:
    """The suite's detector (built, weights equal to the released side's), the module its steps train
    (switched to train mode before each step, as the training loop does) and the factor that puts its image
    scores on the released scale."""

    det: object
    net: torch.nn.Module
    scale: float = 1.0


def released_replay_r(side: ReleasedSide, stream: Stream, tasks, capacity: int, steps: int, batch: int,
                      seen: list):
    """R of upstream pyCLAD v0.3.0's ReplayEnhancedStrategy + AdaptiveBalancedReplayBuffer(RandomSelection(),
    capacity) around a LockstepModel; returns R and the buffer's content after each task (`snapshot`)."""
    from harness import r_matrix
    from pyclad.strategies.replay.replay import ReplayEnhancedStrategy

    buffer = released_buffer(capacity)
    strategy, contents = ReplayEnhancedStrategy(LockstepModel(stream, side.new_step, steps, batch), buffer), []

    def learn(i, train):
        strategy.learn(stream.rows(i))
        contents.append(snapshot(buffer, stream))

    return r_matrix(tasks, learn, recorded(side.scores, seen)), contents


def suite_replay_r(side: SuiteSide, protocol, stream: Stream, tasks, contents: list, steps: int, batch: int,
                   seen: list):
    """R of the suite's Replay protocol (bench/image/protocols.py) with the detector's fit replaced by the same
    lock-step steps (a fresh optimiser per task, as the suite's training loop builds it) and its buffer given the
    released content after each task; returns R and its own composition after each task, before the imposition."""
    from harness import r_matrix

    det, calls, own = side.det, [], []

    def fit_samples(samples, _seed):
        opts = det.optimizers()
        for rows in step_batches(shared_order(stream.data(samples), len(calls)), batch, steps):
            side.net.train()
            det.train_step(stream.samples(rows), opts)
        calls.append(len(samples))
        return det

    det.fit_samples = fit_samples

    def learn(i, train):
        protocol.learn(train, i)
        own.append(composition(protocol.buffer_.items_))
        impose(protocol.buffer_, contents[i])

    def scores(test):
        return det.predict(test, list(range(len(test)))).scores * side.scale

    return r_matrix(tasks, learn, recorded(scores, seen)), own


def replay_side_by_side(report, label: str, suite: SuiteSide, released: ReleasedSide, tasks, args,
                        seed: int = 0, batch: int = 8) -> None:
    """CL = Replay over the 3-task stream `tasks`: the suite's `--protocol cl` (Replay, its capacity rule) beside
    upstream's ReplayEnhancedStrategy with a buffer of the same capacity, both sides from the weights they hold
    now, `args.cl_steps` lock-step steps of `batch` images per task over the same training set, the released
    buffer's seeded draw imposed on the suite's after each task. Prints each side's own buffer composition, both
    R matrices, their largest cell difference and the image scores' largest gap."""
    from harness import print_matrices
    from bench.image.protocols import make_protocol

    use_upstream(args.released)
    stream = Stream([train for train, _ in tasks])
    protocol = make_protocol("cl", suite.det, seed, [len(s) for s in stream.trains])
    capacity = suite.det.replay_size
    seed_python(seed)
    seen_theirs, seen_ours = [], []
    theirs, contents = released_replay_r(released, stream, tasks, capacity, args.cl_steps, batch, seen_theirs)
    ours, own = suite_replay_r(suite, protocol, stream, tasks, contents, args.cl_steps, batch, seen_ours)
    report.note(f"{label} replay buffer after each task (capacity {capacity}): suite's own draw "
                f"[{'; '.join(own)}], released [{'; '.join(composition(c) for c in contents)}]")
    print_matrices(report, f"{label} CL = Replay, {args.cl_steps} steps per task", ours, theirs)
    scaled = "" if suite.scale == 1 else f" × {suite.scale:g}"
    report.row(f"{label} replay: image scores{scaled}, all cells, max |Δ| / max", "", "",
               score_gap(seen_ours, seen_theirs))

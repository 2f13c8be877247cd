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

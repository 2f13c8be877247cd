"""Issue 30 §2: the track contract (bench.tracks.Track, Cell) and a toy third track run through the one runner.

The toy track is what a newcomer's track would be: its own run inputs, its own `prepare` registered by name, a
Track subclass overriding only `protocol` and `evaluate`, and a protocol on the engine's base. Through it the
runner must write a complete result file whose R matrix is what the toy's own metric gives, and resume a stopped
run to the same file content.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest

from bench import config as config_mod
from bench import results, tracks
from bench.continual import runner
from bench.continual.protocol import Protocol
from bench.continual.runner import TaskData
from bench.metrics import roc_auc

TASKS = ["a", "b", "c"]
CENTRES = {"a": 0.0, "b": 4.0, "c": -3.0}  # each task's normal samples; anomalies sit 2.5 above its centre


class Samples:
    """A split of scalar samples: what the runner counts (`len`) and, for a test split, `labels`."""

    def __init__(self, x, labels=None):
        self.x = np.asarray(x, dtype=np.float64)
        self.labels = None if labels is None else np.asarray(labels, dtype=np.int8)

    def __len__(self):
        return len(self.x)


def toy_splits(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    splits = {}
    for task, c in CENTRES.items():
        normal, anomalous = c + rng.normal(size=20), c + 2.5 + rng.normal(size=10)
        splits[task] = TaskData(Samples(c + rng.normal(size=40)),
                                Samples(np.concatenate([normal, anomalous]), [0] * 20 + [1] * 10))
    return splits


class NearestCentre(Protocol):
    """Keeps every learned task's mean; a sample's score is its distance to the nearest one."""

    def __init__(self, seed: int):
        super().__init__(detector=_Detector(), seed=seed)
        self.centres = np.empty(0)

    def learn(self, split, step: int) -> None:
        self.centres = np.append(self.centres, split.x.mean())

    def predict(self, split, idx):
        return np.abs(split.x[idx, None] - self.centres[None]).min(axis=1)

    def state_dict(self) -> dict:
        return {"centres": self.centres.copy()}

    def load_state_dict(self, state: dict) -> None:
        self.centres = np.asarray(state["centres"], dtype=np.float64)


class _Detector:
    context = None  # the runner's training context lands here (Protocol.hand_over)


class ToyTrack(tracks.Track):
    name = "toy"
    levels = ("sample",)
    matrices = ("R/sample",)

    def __init__(self, splits):
        self.splits = splits

    def protocol(self, cfg):
        return NearestCentre(cfg.seed)

    def evaluate(self, cell: tracks.Cell) -> None:
        split = self.splits[cell.task_name].test
        scores = cell.protocol.predict(split, np.arange(len(split)))
        cell.arrays["R/sample"][cell.step, cell.task] = roc_auc(split.labels, scores)
        cell.scores.append(tracks.ScoreRecord(cell.step, cell.task, split.labels, scores))


@dataclass
class ToyInputs:
    """The toy track's run inputs: nothing but what RunConfig asks of every track's inputs."""

    track: ClassVar[str] = "toy"
    datasets: ClassVar[tuple[str, ...]] = ("toy-gauss",)
    protocols: ClassVar[tuple[str, ...]] = ("cl",)
    evaluations: ClassVar[tuple[str, ...]] = ("continual",)
    predates: ClassVar[tuple[str, ...]] = ()

    def validate(self) -> None:
        pass

    def key_preimage(self, core, index_sha256: str, weights_id: str) -> dict:
        return {"track": "toy", "dataset": core.dataset, "tasks": list(core.tasks), "seed": core.seed,
                "index_sha256": index_sha256}

    def name_parts(self) -> tuple[str, ...]:
        return ()

    def result_set(self, dataset: str) -> str:
        return dataset


@pytest.fixture
def toy_track(monkeypatch):
    """Registers the toy track (its inputs and its prepare) for one test, as a track's module would."""
    monkeypatch.setitem(config_mod.INPUTS, "toy", ToyInputs)
    monkeypatch.setitem(tracks._PREPARE, "toy", lambda cfg: (ToyTrack(toy_splits(cfg.seed)), "toy-index-sha"))
    return lambda **kw: config_mod.RunConfig(dataset="toy-gauss", root=".", model="nearest-centre",
                                             tasks=list(TASKS), protocol="cl", device="cpu", inputs=ToyInputs(), **kw)


def expected_R(seed: int = 0) -> np.ndarray:
    """The toy's R computed here, outside the runner: after step t, distance to the nearest of t+1 task means."""
    splits, n = toy_splits(seed), len(TASKS)
    R = np.full((n, n), np.nan)
    for t in range(n):
        centres = np.array([splits[k].train.x.mean() for k in TASKS[: t + 1]])
        for j in range(t + 1):
            test = splits[TASKS[j]].test
            R[t, j] = roc_auc(test.labels, np.abs(test.x[:, None] - centres[None]).min(axis=1))
    return R


def test_a_third_track_runs_through_the_runner_and_records_its_own_levels(toy_track, tmp_path):
    run = runner.prepare(toy_track(), out=tmp_path / "toy.h5")
    assert isinstance(run.track, ToyTrack)
    lines = []
    runner.execute(run, progress=False, log=lines.append)
    data = results.read_run(run.out)
    assert data["attrs"]["status"] == "complete" and data["attrs"]["track"] == "toy"
    assert data["attrs"]["levels"] == '["sample"]'
    np.testing.assert_allclose(data["R/sample"], expected_R(), equal_nan=True)
    # the default unit counts what a training split holds
    assert any("learning task 1/3: a (40 samples)" in line for line in lines)
    # learning a far task does not move the first one's score much: the toy keeps every centre
    assert data["R/sample"][2, 0] > 0.8


def test_a_stopped_toy_run_resumes_to_the_same_matrix(toy_track, tmp_path):
    run = runner.prepare(toy_track(), out=tmp_path / "toy.h5")
    runner.execute(run, progress=False, max_steps=1, log=lambda *_: None)
    assert run.checkpoint_path.is_file()
    lines = []
    runner.execute(runner.prepare(toy_track(), out=tmp_path / "toy.h5"), progress=False, log=lines.append)
    assert any("resuming toy.h5 after step 1/3" in line for line in lines)
    np.testing.assert_allclose(results.read_run(run.out)["R/sample"], expected_R(), equal_nan=True)
    assert not run.checkpoint_path.exists()


def test_the_track_base_defaults_do_nothing_and_its_two_duties_are_required():
    class Minimal(tracks.Track):
        name, levels, matrices = "minimal", ("x",), ("R/x",)

        def protocol(self, cfg):
            return None

        def evaluate(self, cell):
            pass

    t = Minimal()
    assert t.unit == "samples" and t.weights_id == "none" and t.attrs() == {}
    assert t.probe(None, None).shape == (0,)  # nothing probed: the runner's finiteness check passes
    assert t.start(None, None, False, print, None) is None and t.drop_training("a") is None and t.close() is None

    class NoEvaluate(tracks.Track):
        def protocol(self, cfg):
            return None

    with pytest.raises(TypeError, match="evaluate"):
        NoEvaluate()


def test_prepare_refuses_what_is_not_a_track(toy_track, monkeypatch):
    monkeypatch.setitem(tracks._PREPARE, "toy", lambda cfg: (object(), "sha"))
    with pytest.raises(TypeError, match="expected a bench.tracks.Track"):
        runner.prepare(toy_track())


def test_the_built_in_tracks_are_tracks():
    from bench.image.track import ImageTrack
    from bench.tabular.track import TabularTrack

    assert issubclass(ImageTrack, tracks.Track) and issubclass(TabularTrack, tracks.Track)


def test_a_cell_names_its_task():
    cell = tracks.Cell(config_mod.RunConfig(dataset="d", root=".", model="m", tasks=["x", "y"]), None, 1, 0, {}, [])
    assert cell.task_name == "x" and cell.routing is None and cell.progress is False

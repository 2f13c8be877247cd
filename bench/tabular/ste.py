"""Single-task experts and STE matrices: a tabular run of the continual runner in cross-evaluation mode.

For each task i of the candidate (in the given order) a fresh detector learns task i's training records; it is
then evaluated on the test set of EVERY task j (upper triangle too): M[i, j] = ROC-AUC. `ste_run` is a thin call of
bench.continual.runner (protocol "ste", evaluation "cross"), so checkpointing, the lock, atomic writes, resuming
and SIGTERM handling are the image track's. Every expert starts from the run's seed, so a row does not depend on
the expert's position in the order or on which process computed it.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from bench.errors import ConfigError, DatasetError
from bench.tabular.protocols import Naive


class Expert(Naive):
    """Protocol "ste": the detector after step i is a fresh one fitted on task i alone (seeded by the run seed)."""

    restores_model = False  # its state holds no detector (see state_dict): a resumed state has nothing to score

    def __init__(self, factory, seed: int):
        super().__init__(factory(), seed)
        self.factory = factory

    def learn(self, split, step: int) -> None:
        if step > 0:
            self.replace(self.factory())
        self.step_, self.trained_ = step, len(split)
        self.detector.fit(split.X, self.seed)

    def state_dict(self) -> dict:
        # nothing carries over to the next step (its expert starts fresh) and every finished step's numbers are in
        # the runner's state: a resumed run needs no detector
        return {"step": self.step_, "batches": list(self.batches_)}

    def load_state_dict(self, state: dict) -> None:
        self.step_, self.batches_ = state["step"], [tuple(b) for b in state["batches"]]


def index_meta(index_dir) -> dict:
    path = Path(index_dir) / "index.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise DatasetError(f"{path}: unreadable or missing (build the record index with `bench tabular index`; "
                           f"{e})") from None


def ste_run(index_dir, model: str, out: Path, *, seed: int = 0, hparams: dict | None = None,
            preset: str | None = None, tasks: list[str] | None = None, max_steps: int | None = None,
            log=print) -> Path:
    """Compute (or resume, or reuse) the STE matrix of `model` on the record index in `index_dir`; `preset` (None:
    the model's default) is what its hparams start from, and what the run records."""
    from bench.config import RunConfig, TabularInputs
    from bench.continual.runner import execute, prepare

    meta = index_meta(index_dir)
    tasks = list(tasks or sorted(meta.get("tasks", {})))
    if len(set(tasks)) != len(tasks):
        raise ConfigError(f"tasks {tasks} repeat a task")
    config = RunConfig(dataset=meta.get("dataset", ""), root=str(index_dir), model=model, tasks=tasks,
                       ordering="candidate", protocol="ste", seed=seed, hparams=dict(hparams or {}),
                       preset=preset, device="cpu", inputs=TabularInputs(), evaluation="cross")
    return execute(prepare(config, out=Path(out)), progress=False, max_steps=max_steps, log=log)


def read_matrix(path) -> tuple[list[str], np.ndarray, dict]:
    """(tasks, M, attrs) of a complete STE run file."""
    from bench.results import read_run

    run = read_run(path)
    a = run["attrs"]
    if a.get("evaluation") != "cross" or a.get("status") != "complete":
        raise ConfigError(f"{path}: not a complete STE (cross-evaluation) run file (status {a.get('status')})")
    return run["tasks"], np.asarray(run["R/record"], dtype=np.float64), a

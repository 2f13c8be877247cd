"""The image track's run configuration: a validated RunConfig whose task order is resolved against the dataset
(what `bench run` and every image grid point build)."""

from __future__ import annotations

from pathlib import Path

from bench.config import ImageInputs, RunConfig, task_list
from bench.data import read_index
from bench.data.stream import resolve_tasks


def build_run_config(dataset: str, root, model: str, *, ordering: str | None = None,
                     tasks: list[str] | str | None = None, protocol: str = "cl", seed: int = 0,
                     device: str = "auto", hparams: dict | None = None, preset: str | None = None,
                     inputs: ImageInputs | None = None, label: str | None = None) -> RunConfig:
    """A validated image RunConfig whose task order is resolved against the dataset at `root` (`~` expanded):
    what `bench run` and every grid point build. Settings are checked before the dataset is read."""
    if isinstance(tasks, str):
        tasks = task_list(tasks)
    root = Path(root).expanduser()
    config = RunConfig(dataset=dataset, root=str(root), model=model, tasks=[], protocol=protocol, seed=seed,
                       device=device, hparams=dict(hparams or {}), preset=preset, label=label,
                       inputs=inputs or ImageInputs())
    config.validate(tasks=False)
    available = sorted(read_index(dataset, root)["task"].unique())
    config.ordering, config.tasks = resolve_tasks(dataset, root, available, ordering, tasks)
    return config.validate()

"""The multi-dataset stream's sample index: tasks `<dataset>/<concept>`, each read from its own dataset's root.

Which tasks form the stream is data/scenarios/multi.json's task list. A dataset's root is, first match wins:
$BENCH_ROOT_<DATASET>, its entry in the roots file, data/raw/<dataset>. The roots file is data/roots.yaml (see
data/roots.example.yaml); for `--dataset multi`, `--root` (or $BENCH_ROOT_MULTI) names another roots file.
Index rows keep their member dataset in the `dataset` column and paths relative to that dataset's root.
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import yaml

from bench.data import manifest
from bench.data.datasets import read_single
from bench.data.index import COLUMNS, sort_index
from bench.datasets import names
from bench.errors import ConfigError, DatasetError

MULTI = "multi"
ROOTS_FILE = Path("data/roots.yaml")


def load_roots(path) -> dict[str, Path]:
    """{dataset: root} from a roots file (a missing file is an empty mapping)."""
    path = Path(path)
    if not path.is_file():
        return {}
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: unreadable roots file ({exc}); expected `<dataset>: <root>` lines") from None
    if data is None:
        return {}
    valid = [d for d in names("image") if d != MULTI]
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping `<dataset>: <root>` (datasets: {', '.join(valid)})")
    roots = {}
    for name, root in data.items():
        if name not in valid:
            raise ConfigError(f"{path}: unknown dataset {name!r} (valid: {', '.join(valid)})")
        if not isinstance(root, str) or not root.strip():
            raise ConfigError(f"{path}: the root of {name} must be a path string, got {root!r}")
        roots[name] = Path(os.path.expandvars(root.strip())).expanduser()
    return roots


def default_root(dataset: str, roots_file=None) -> Path:
    """Where a dataset lives unless --root says otherwise; for `multi`, the roots file."""
    env = os.environ.get(f"BENCH_ROOT_{dataset.upper()}")
    if dataset == MULTI:
        return Path(env) if env else ROOTS_FILE
    if env:
        return Path(env)
    return load_roots(roots_file or ROOTS_FILE).get(dataset, Path(f"data/raw/{dataset}"))


def member_roots(roots_file, datasets) -> dict[str, Path]:
    return {d: default_root(d, roots_file) for d in sorted(set(datasets))}


def split_task(task: str) -> tuple[str, str]:
    dataset, sep, concept = task.partition("/")
    if not sep or not dataset or not concept:
        raise ConfigError(f"multi-dataset task {task!r} is not <dataset>/<concept>")
    return dataset, concept


def stream_tasks() -> list[str]:
    m = manifest.load(MULTI)
    if m is None:
        raise DatasetError(f"{manifest.manifest_path(MULTI)}: no multi-dataset manifest (create it with "
                           f"`python -m bench scenarios multi`, see docs/scenarios.md)")
    return list(m["tasks"])


def read_multi(roots_file) -> pd.DataFrame:
    """The index of every task of the multi-dataset manifest, read from each member dataset's own root."""
    by_dataset: dict[str, list[str]] = {}
    for task in stream_tasks():
        dataset, concept = split_task(task)
        by_dataset.setdefault(dataset, []).append(concept)
    parts = []
    for dataset, root in member_roots(roots_file, by_dataset).items():
        if not root.is_dir():
            raise DatasetError(f"{root}: the {dataset} root of the multi-dataset stream does not exist (set "
                               f"BENCH_ROOT_{dataset.upper()} or `{dataset}: <root>` in {roots_file})")
        index = read_single(dataset, root)
        missing = sorted(set(by_dataset[dataset]) - set(index["task"]))
        if missing:
            raise DatasetError(f"{root}: {dataset} concepts {missing} of the multi-dataset stream are not there")
        sub = index[index["task"].isin(by_dataset[dataset])].copy()
        sub["task"] = dataset + "/" + sub["task"]
        parts.append(sub)
    return sort_index(pd.concat(parts, ignore_index=True)[COLUMNS])


def split_roots(dataset: str, root):
    """What task_splits needs to load images: the dataset root, or {member: root} for the multi stream."""
    if dataset != MULTI:
        return Path(root)
    return member_roots(root, [split_task(t)[0] for t in stream_tasks()])

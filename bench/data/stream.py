"""Task streams: which tasks a run sees, in which order.

An ordering is named (`--ordering easy_to_hard|hard_to_easy|random|alphabetical`) or explicit
(`--tasks a,b,c`). Named curricula come from the dataset's manifest in data/scenarios/<dataset>.json
($BENCH_SCENARIOS_DIR overrides the folder; bench/data/manifest.py has the schema); for the synthetic
benchmark without a manifest, from the mean defect contrast the generator records in synthetic.json.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from bench.data.manifest import load as load_manifest
from bench.errors import ConfigError, DatasetError, choice_error

RANDOM_ORDER_SEED = 0  # the synthetic benchmark's random ordering; manifests record their own seed


def manifest_orderings(dataset: str, root: Path) -> dict[str, list[str]]:
    """Named orderings available for a dataset (empty when it has no manifest)."""
    manifest = load_manifest(dataset)
    if manifest is not None:
        return {name: list(value["tasks"]) for name, value in manifest["orderings"].items()}
    if dataset == "synthetic":
        return _synthetic_orderings(Path(root))
    return {}


def _synthetic_orderings(root: Path) -> dict[str, list[str]]:
    meta_path = root / "synthetic.json"
    if not meta_path.is_file():
        return {}
    try:
        meta = json.loads(meta_path.read_text())
        # Higher mean defect contrast = easier task (the generator measures it on what it wrote).
        contrast = {t["name"]: float(t["defect_contrast"]["mean"]) for t in meta["tasks"]}
    except (ValueError, KeyError, TypeError) as e:
        raise DatasetError(f"{meta_path}: corrupt generation record ({type(e).__name__}: {e}); regenerate with "
                           "`python -m bench data --dataset synthetic`") from None
    easy_to_hard = sorted(contrast, key=lambda t: (-contrast[t], t))
    rng = np.random.default_rng(RANDOM_ORDER_SEED)
    return {
        "easy_to_hard": easy_to_hard,
        "hard_to_easy": easy_to_hard[::-1],
        "random": [easy_to_hard[i] for i in rng.permutation(len(easy_to_hard))],
    }


def resolve_tasks(dataset: str, root, available: list[str], ordering: str | None = None,
                  tasks: list[str] | None = None) -> tuple[str, list[str]]:
    """(ordering name, ordered task list), validated against the tasks the dataset index holds."""
    if (ordering is None) == (tasks is None):
        raise ConfigError("give exactly one of --ordering NAME or --tasks a,b,c")
    if tasks is not None:
        name, order = "custom", list(tasks)
    elif ordering == "alphabetical":
        name, order = ordering, sorted(available)
    else:
        named = manifest_orderings(dataset, root)
        if ordering not in named:
            raise choice_error(f"ordering for {dataset}", ordering, ["alphabetical", *named])
        name, order = ordering, named[ordering]
    missing = [t for t in order if t not in available]
    if missing:
        raise DatasetError(f"{root}: tasks {missing} of the {name} ordering are not in the dataset "
                           f"(found: {', '.join(sorted(available))})")
    if len(set(order)) != len(order):
        raise ConfigError(f"the {name} ordering repeats a task: {order}")
    return name, order

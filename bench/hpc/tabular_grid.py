"""Tabular grids (`track: tabular`, e.g. jobs/tabular-synthetic.yaml, jobs/cicids2017.yaml), loaded and expanded.

They have no backbone axis; their root is a scenario folder (`bench tabular scenarios --out DIR`): the selected
candidate's record index and the six consensus orderings of release/orderings.json (an ordering name is a task
order). Their memory request is the grid's or, when larger, an estimate from the record index's size
(bench.hpc.memory.tabular_mem_gb). Their optional `index_settings` ({preprocessing: {rebalance: true}, discovery:
{...}}) names settings the record index must have been built with: a root built otherwise is refused when the grid
is expanded (bench.tabular.track.record_settings). `replay_size` (the grid's, or a model's) sizes the Replay buffer
of its cl runs; a model's `preset` names one of its tabular registry presets; both are checked when the grid is
loaded. A tabular grid validates a released scenario (CAD §4: with models other than the ones that built it), so
the construction models (bench.tabular.scenario.MODELS) are refused in it, except in a grid marked
`construction_check: true` (jobs/tabular-synthetic-construction-check.yaml), which checks the construction.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path

from bench.config import TabularInputs
from bench.errors import ConfigError
from bench.hpc.gridschema import (AXES, SHARED_KEYS, Grid, PlannedRun, Profile, Resources, Selection, check_keys,
                                  check_model_settings, filter_axis, list_of, parse_models, parse_resources,
                                  positive_int, run_device)
from bench.hpc.memory import features_size, tabular_mem_gb

TABULAR_GRID_KEYS = ("dataset", "track", "resources", "index_settings", "construction_check", "replay_size", *AXES)
TABULAR_MODEL_KEYS = ("orderings", "protocols", "seeds", "preset", "hparams", "replay_size", "resources")
# a tabular grid's settings the record index must have been built with (TabularInputs; checked when expanded)
INDEX_SETTINGS = ("preprocessing", "discovery", "index_content_sha256")


def load_tabular_grid(name: str, path: Path, data: dict) -> Grid:
    from bench.config import TABULAR_DATASETS, TABULAR_PROTOCOLS, RunConfig
    from bench.datasets import is_known, names
    from bench.tabular.orderings import ORDERINGS

    dataset = data.get("dataset")
    if dataset not in TABULAR_DATASETS and not (isinstance(dataset, str) and is_known(dataset, "tabular")):
        raise ConfigError(f"{path}: unknown tabular dataset {dataset!r} (valid: {', '.join(names('tabular'))})")
    expected = RunConfig(dataset=dataset, root="", model="", tasks=[], inputs=TabularInputs()).result_set
    if expected != name:
        raise ConfigError(f"{path}: a tabular grid of {dataset!r} is named {expected!r}, not {name!r}")
    bad = sorted(set(data) & {"backbones", *SHARED_KEYS})
    if bad:
        raise ConfigError(f"{path}: {bad} are image-track settings; a tabular grid has none")
    check_keys(data, TABULAR_GRID_KEYS, path, "the grid")
    index_settings = data.get("index_settings") or {}
    if not isinstance(index_settings, dict):
        raise ConfigError(f"{path}: index_settings must be a mapping (preprocessing: {{...}}, discovery: {{...}})")
    check_keys(index_settings, INDEX_SETTINGS, path, "index_settings")
    try:
        TabularInputs(**index_settings).validate()
    except ConfigError as e:
        raise ConfigError(f"{path}: index_settings: {e}") from None
    models = parse_models(data, path, TABULAR_MODEL_KEYS, ("orderings", "protocols", "seeds"))
    grid = Grid(dataset=name, path=path, models=models, backbones=["-"],
                orderings=list_of(data["orderings"], str, path, "orderings"),
                protocols=list_of(data["protocols"], str, path, "protocols"),
                seeds=list_of(data["seeds"], int, path, "seeds"),
                resources=parse_resources(data.get("resources") or {}, Resources(), path, "the grid"),
                track="tabular", index_settings=index_settings, data=dataset, replay_size=data.get("replay_size"))
    _check_validation_models(path, data, models)
    # ste is a cross-evaluation run (`bench tabular ste`, the scenario search), not a continual grid axis
    grid_protocols = tuple(p for p in TABULAR_PROTOCOLS if p != "ste")
    for model, overrides in models.items():
        grid.model_resources(model)
        if not isinstance(overrides.get("hparams") or {}, dict):
            raise ConfigError(f"{path}: hparams of model {model!r} must be a mapping name -> value")
        check_model_settings(model, overrides, path, "tabular")
        for axis, valid in (("orderings", ORDERINGS), ("protocols", grid_protocols)):
            bad = [v for v in grid.axis(model, axis) if v not in valid]
            if bad:
                raise ConfigError(f"{path}: unknown {axis[:-1]} {bad[0]!r} (valid: {', '.join(valid)})")
    _check_replay_size(grid, data)
    return grid


def _check_replay_size(grid: Grid, data: dict) -> None:
    """`replay_size` (the grid's, or a model's) sizes the Replay buffer of the cl runs: a positive integer, set where
    some run is cl (elsewhere it would change nothing, so it is refused rather than ignored)."""
    settings = [("replay_size", data["replay_size"], list(grid.models))] if "replay_size" in data else []
    settings += [(f"replay_size of model {m!r}", o["replay_size"], [m]) for m, o in grid.models.items()
                 if "replay_size" in o]
    for where, size, models in settings:
        positive_int(size, grid.path, where)
        if not any("cl" in grid.axis(m, "protocols") for m in models):
            raise ConfigError(f"{grid.path}: {where} sizes the Replay buffer, but no run of "
                              f"{', '.join(models)} uses protocol cl (add cl to its protocols or drop replay_size)")


def _check_validation_models(path: Path, data: dict, models: dict) -> None:
    """A validation grid runs no model that built the scenario (its FC1-FC5 and orderings were computed on the
    same test splits, so those models would validate their own choices); only a construction-check grid may."""
    from bench.registry import specs
    from bench.tabular.scenario import MODELS as CONSTRUCTION_MODELS

    check = data.get("construction_check", False)
    if not isinstance(check, bool):
        raise ConfigError(f"{path}: construction_check must be true or false, got {check!r}")
    bad = [m for m in models if m in CONSTRUCTION_MODELS]
    if bad and not check:
        validators = ", ".join(m for m in specs("tabular") if m not in CONSTRUCTION_MODELS)
        raise ConfigError(f"{path}: {', '.join(bad)} built the scenario (construction models) and cannot validate "
                          f"it; use {validators}, or a construction-check grid "
                          f"(construction_check: true, e.g. jobs/tabular-synthetic-construction-check.yaml)")


def tabular_source(root: Path) -> tuple[Path, dict]:
    """(record index folder, {ordering: task order}) of a scenario folder (`bench tabular scenarios --out`)."""
    import json

    release = Path(root) / "release"
    try:
        manifest = json.loads((release / "manifest.json").read_text())
        orderings = json.loads((release / "orderings.json").read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"{release}: no readable scenario release (manifest.json, orderings.json; build it with "
                          f"`bench tabular scenarios --out {root}`): {e}") from None
    from bench.tabular.orderings import check_orderings
    from bench.tabular.ste import index_meta

    index = Path(root) / "candidates" / manifest["selected_candidate"] / "index"
    check_orderings(orderings, index_meta(index).get("tasks", {}), f"{release / 'orderings.json'}")
    return index, orderings


def expand_tabular(grid: Grid, profile: Profile, selection: Selection, models: list, root: Path,
                    runs_dir: Path, log) -> list[PlannedRun]:
    from bench.config import RunConfig
    from bench.continual.runner import prepare
    from bench.registry import get

    if selection.backbones:
        raise ConfigError(f"{grid.path}: a tabular grid has no backbone axis (drop --backbones)")
    index, orderings = tabular_source(root)
    features, n_records = features_size(index / "features.npy")
    planned, said = [], set()
    for model in models:
        get(model, "tabular")  # an unknown model names the registered ones
        base = grid.model_resources(model)
        if not profile.use_gpus:
            base = replace(base, gpus=0)
        axes = [filter_axis(grid.axis(model, a), getattr(selection, a), a, grid)
                for a in ("orderings", "protocols", "seeds")]
        axes[0] = _distinct_orderings(axes[0], orderings, root, said, log)
        for ordering, protocol, seed in itertools.product(*axes):
            replay = grid.replay(model) if protocol == "cl" else None
            resources = replace(base, mem_gb=max(base.mem_gb, tabular_mem_gb(features, protocol, n_records, replay)))
            inputs = TabularInputs(**grid.index_settings,  # prepare replaces, never edits, them
                                   replay_size=replay)
            config = RunConfig(dataset=grid.data, root=str(index), model=model, tasks=list(orderings[ordering]),
                               ordering=ordering, protocol=protocol, seed=seed, inputs=inputs,
                               device=run_device(profile, resources), preset=grid.models[model].get("preset"),
                               hparams=dict(grid.models[model].get("hparams") or {}))
            planned.append(PlannedRun(prepare(config, out_dir=runs_dir), resources))
    return planned


def _distinct_orderings(names: list, orderings: dict, root: Path, said: set, log) -> list:
    """The orderings to run. Two consensus orderings can put the tasks in the same order (likely with few tasks):
    they are one scenario and one run key, so the first name given runs it and the others are skipped, said once."""
    first, keep = {}, []
    for name in names:
        if name not in orderings:
            raise ConfigError(f"{root}/release/orderings.json: no ordering {name!r} (has: {', '.join(orderings)})")
        order = tuple(orderings[name])
        if order not in first:
            first[order] = name
            keep.append(name)
        elif name not in said:
            said.add(name)
            log(f"note: ordering {name} puts the tasks in the order of {first[order]} ({' → '.join(order)}): one "
                f"scenario, run once and reported as {first[order]}")
    return keep

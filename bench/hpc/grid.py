"""Grids (`jobs/<dataset>.yaml`) and resource profiles (`jobs/profiles/<name>.yaml`), expanded into runs.

A grid declares the cartesian product models × backbones × orderings × protocols × seeds, the settings every run
shares (weights, image size, batch size), and per-model overrides (image size, batch size, backbones, protocols,
hyperparameters, resources). A profile says how a cluster is asked for those resources (partition, GPU gres,
constraint, account). Every run is prepared with `runner.prepare`, the same call `python -m bench run` makes, so
its run key and result path are exactly the ones a local run would have.

Tabular grids (`track: tabular`) are bench/hpc/tabular_grid.py's, stream-assembly grids (`track: assembly`)
bench/hpc/assembly_grid.py's; the memory each run needs is bench/hpc/memory.py's.
"""

from __future__ import annotations

import itertools
import sys
from dataclasses import replace
from pathlib import Path

from bench.config import NO_BACKBONE, ImageInputs
from bench.errors import BenchError, ConfigError
# the schema's public names stay importable from here: most callers (CLI, tests) use grid.load_profile,
# grid.Selection, grid.REPO beside grid.load_grid and grid.expand
from bench.hpc.gridschema import (AXES, JOBS_DIR, REPO, SHARED_KEYS, Grid, PlannedRun, Profile,  # noqa: F401
                                  Resources, Selection, check_keys, check_model_settings, filter_axis, grid_path,
                                  list_of, load_profile, load_yaml, parse_models, parse_resources, positive_int,
                                  run_device, unique_keys)
from bench.hpc.assembly_grid import expand_assembly, load_assembly_grid
from bench.hpc.tabular_grid import expand_tabular, load_tabular_grid


MODEL_KEYS = ("backbones", "orderings", "protocols", "seeds", "image_size", "batch_size", "preset", "hparams",
              "resources")
GRID_KEYS = ("dataset", "track", "resources", *AXES, *SHARED_KEYS)


def load_grid(dataset: str, path: Path | None = None) -> Grid:
    """Parse and validate a grid file; every problem names the file and what was expected."""
    from bench.config import BACKBONES, DATASETS, IMAGE_PROTOCOLS
    from bench.datasets import is_known, names

    if path is None and not grid_path(dataset).is_file():  # valid: a grid is needed only to submit the dataset
        raise ConfigError(f"{grid_path(dataset)}: dataset {dataset!r} has no cluster grid, so it cannot be submitted "
                          "(write one: docs/cluster.md, section 2; or pass --grid FILE)")
    path = Path(path or grid_path(dataset))
    data = load_yaml(path, "grid")
    if data.get("track", "image") == "tabular":
        return load_tabular_grid(dataset, path, data)
    if data.get("track") == "assembly":
        return load_assembly_grid(dataset, path, data)
    check_keys(data, GRID_KEYS, path, "the grid")
    if data.get("dataset") != dataset:
        raise ConfigError(f"{path}: declares dataset {data.get('dataset')!r}, expected {dataset!r}")
    if dataset not in DATASETS and not is_known(dataset, "image"):  # a plugin's is loaded
        raise ConfigError(f"{path}: unknown dataset {dataset!r} (valid: {', '.join(names('image'))})")
    models = parse_models(data, path, MODEL_KEYS, ("backbones", "orderings", "protocols", "seeds"))
    grid = Grid(dataset=dataset, path=path, models=models,
                backbones=list_of(data["backbones"], str, path, "backbones"),
                orderings=list_of(data["orderings"], str, path, "orderings"),
                protocols=list_of(data["protocols"], str, path, "protocols"),
                seeds=list_of(data["seeds"], int, path, "seeds"),
                resources=parse_resources(data.get("resources") or {}, Resources(), path, "the grid"),
                **{k: data[k] for k in SHARED_KEYS if k in data})
    for key in ("image_size", "batch_size", "workers"):
        if getattr(grid, key) is not None:
            positive_int(getattr(grid, key), path, key, minimum=0 if key == "workers" else 1)
    if not isinstance(grid.weights, str):
        raise ConfigError(f"{path}: weights must be imagenet, none or a path, got {grid.weights!r}")
    for model, overrides in models.items():
        for key in ("image_size", "batch_size"):
            if key in overrides:
                positive_int(overrides[key], path, f"{key} of model {model!r}")
        if not isinstance(overrides.get("hparams") or {}, dict):
            raise ConfigError(f"{path}: hparams of model {model!r} must be a mapping name -> value")
        check_model_settings(model, overrides, path)
        for axis, kind in (("backbones", str), ("orderings", str), ("protocols", str), ("seeds", int)):
            if axis in overrides:
                list_of(overrides[axis], kind, path, f"{axis} of model {model!r}")
        grid.model_resources(model)
        bad = [b for b in grid.axis(model, "backbones") if b not in BACKBONES]
        if bad:
            raise ConfigError(f"{path}: unknown backbone {bad[0]!r} (valid: {', '.join(BACKBONES)})")
        bad = [p for p in grid.axis(model, "protocols") if p not in IMAGE_PROTOCOLS]
        if bad:
            raise ConfigError(f"{path}: unknown protocol {bad[0]!r} (valid: {', '.join(IMAGE_PROTOCOLS)})")
    return grid


def expand(grid: Grid, profile: Profile, selection: Selection, root: Path, outputs: Path,
           log=lambda line: print(line, file=sys.stderr)) -> list[PlannedRun]:
    """Every run of the (filtered) grid, prepared: validated data, run key, result path. `log` takes notes on
    what was planned otherwise than asked (a tabular ordering that repeats another's task order)."""
    from bench.continual.runner import prepare
    from bench.data.reuse import reuse_reads
    from bench.image.config import build_run_config
    from bench.registry import get, specs

    models = filter_axis(list(grid.models), selection.models, "models", grid)
    if grid.track == "tabular":
        runs_dir = outputs / grid.dataset / "runs"
        return unique_keys(grid, expand_tabular(grid, profile, selection, models, root, runs_dir, log))
    if grid.track == "assembly":
        return unique_keys(grid, expand_assembly(grid, profile, selection, models, root,
                                                 outputs / grid.dataset / "runs", log))
    for model in models:  # unimplemented models fail loudly: a silently smaller grid would go unnoticed
        try:
            get(model)
        except BenchError as e:
            ready = ",".join(m for m in grid.models if m in specs()) or "<none yet>"
            raise ConfigError(f"{grid.path}: {e}; restrict the grid to implemented models: MODELS={ready} "
                              f"(--models {ready})") from None
    planned = []
    runs_dir = outputs / grid.dataset / "runs"
    with reuse_reads():  # one index read and one header check per split for the whole grid
        for model in models:
            resources = grid.model_resources(model)
            if not profile.use_gpus:
                resources = replace(resources, gpus=0)
            axes = [filter_axis(grid.axis(model, a), getattr(selection, a), a, grid)
                    for a in ("backbones", "orderings", "protocols", "seeds")]
            if get(model).inputs != "features":
                # raw-image detectors have no backbone: one run per ordering × protocol × seed, whatever the
                # backbone axis or filter names (a finished one is skipped when the other backbone's half is sent)
                axes[0] = [NO_BACKBONE]
            for backbone, ordering, protocol, seed in itertools.product(*axes):
                inputs = ImageInputs(backbone=backbone, weights=grid.weights,
                                     image_size=grid.models[model].get("image_size",
                                                                       grid.image_size or get(model).image_size),
                                     batch_size=grid.models[model].get("batch_size", grid.batch_size),
                                     workers=grid.workers)
                config = build_run_config(grid.dataset, root, model, ordering=ordering, protocol=protocol, seed=seed,
                                          device=run_device(profile, resources),
                                          hparams=grid.models[model].get("hparams"),
                                          preset=grid.models[model].get("preset"), inputs=inputs)
                planned.append(PlannedRun(prepare(config, out_dir=runs_dir), resources))
    return unique_keys(grid, planned)

"""Single-task experts (InCLAD §3): one run per concept × method (tasks=[concept], protocol ncl), collected into
the STE table (CSV: dataset, concept, method, backbone, roc_auc, then provenance columns).

The jobs are ordinary RunConfigs, so the local loop (`run_local`) and a cluster array run the same thing and write
the same result files; `collect` then reads those files, wherever they were made.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from bench import results
from bench.config import ImageInputs, RunConfig
from bench.continual.runner import execute, prepare
from bench.data import read_index
from bench.data.reuse import reuse_reads
from bench.errors import ConfigError, DatasetError
from bench.registry import INCLAD_STE_MODELS, specs
from bench.scenarios.rank import STE_COLUMNS

STE_METHODS = INCLAD_STE_MODELS  # InCLAD's three single-task experts


def default_methods() -> list[str]:
    """The STE methods implemented so far (all three once PaDiM and CFA land)."""
    return [m for m in STE_METHODS if m in specs()]


def check_methods(methods: list[str]) -> list[str]:
    for m in methods:
        if m not in specs():
            raise ConfigError(f"unknown method {m!r} (valid: {', '.join(specs())})")
    if not methods:
        raise ConfigError(f"no STE method is implemented yet (need one of {', '.join(STE_METHODS)})")
    return methods


def plan(dataset: str, root, methods: list[str], inputs: ImageInputs, *, seed: int = 0,
         device: str = "auto") -> list[RunConfig]:
    """One single-task NCL run per method × concept (every concept the dataset's reader finds), each with a copy
    of `inputs`."""
    if dataset == "multi":
        raise ConfigError("the multi-dataset stream is selected from the per-dataset STE results: run "
                          "`python -m bench scenarios multi` (or `make scenarios DATASET=multi`)")
    concepts = sorted(read_index(dataset, root)["task"].unique())
    return [RunConfig(dataset=dataset, root=str(root), model=m, tasks=[c], ordering=f"ste-{c}", protocol="ncl",
                      seed=seed, device=device, inputs=replace(inputs))
            for m in check_methods(methods) for c in concepts]


def run_local(configs: list[RunConfig], runs_dir: Path, *, progress: bool = True, log=print) -> None:
    """Run the jobs one after another here (complete result files are skipped, killed ones resume). All are
    prepared first: bad input fails before any work, and the dataset is read once."""
    with reuse_reads():
        runs = [prepare(cfg, out_dir=runs_dir) for cfg in configs]
    for i, (cfg, run) in enumerate(zip(configs, runs), start=1):
        log(f"[STE {i}/{len(configs)}] {cfg.model} on {cfg.dataset}/{cfg.tasks[0]}")
        execute(run, progress=progress, log=log)


def collect(configs: list[RunConfig], runs_dir: Path) -> pd.DataFrame:
    """The STE table from the jobs' result files; fails listing the jobs whose file is missing or incomplete."""
    rows, missing = [], []
    with reuse_reads():
        runs = [prepare(cfg, out_dir=runs_dir) for cfg in configs]
    for cfg, run in zip(configs, runs):
        if not results.is_complete(run.out, run.run_key):
            missing.append(f"{cfg.model}/{cfg.tasks[0]}")
            continue
        value = float(results.read_run(run.out)["R/image"][0, 0])
        if not np.isfinite(value):
            raise DatasetError(f"{run.out}: ROC-AUC of {cfg.dataset}/{cfg.tasks[0]} is NaN (one-class test set); "
                               f"such a concept cannot be ranked")
        rows.append({"dataset": cfg.dataset, "concept": cfg.tasks[0], "method": cfg.model,
                     "backbone": cfg.image.backbone, "roc_auc": value, "weights": run.track.weights_id,
                     "image_size": cfg.image.image_size, "seed": cfg.seed,
                     "run_file": run.out.name})
    if missing:
        raise DatasetError(f"{runs_dir}: {len(missing)} of {len(configs)} STE runs are not complete "
                           f"({', '.join(missing[:5])}{', ...' if len(missing) > 5 else ''}); run them first")
    table = pd.DataFrame(rows)
    return table[STE_COLUMNS + [c for c in table.columns if c not in STE_COLUMNS]]


def planned_runs(configs: list[RunConfig], runs_dir: Path, profile, grid_file: Path | None = None) -> list:
    """The jobs as bench.hpc planned runs (what `make submit` sends): each prepared into `runs_dir`, asking for
    its model's resources in the dataset's grid file (jobs/<dataset>.yaml; a model the grid does not list gets
    the grid's default resources). As in grid expansion, a cpu profile drops GPU requests and `device=auto`
    becomes the profile's device (cuda when the run asks for a GPU, else cpu); the device is not part of the run
    key, so the result files are those of `run_local`."""
    from dataclasses import replace

    from bench.hpc import grid as grids

    if not configs:
        return []
    grid = grids.load_grid(configs[0].dataset, grid_file)
    planned = []
    with reuse_reads():
        for cfg in configs:
            resources = grid.model_resources(cfg.model) if cfg.model in grid.models else grid.resources
            if not profile.use_gpus:
                resources = replace(resources, gpus=0)
            if cfg.device == "auto":
                cfg = replace(cfg, device=grids.run_device(profile, resources))
            planned.append(grids.PlannedRun(prepare(cfg, out_dir=runs_dir), resources))
    return planned

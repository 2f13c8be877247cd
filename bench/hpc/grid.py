"""Grids (`jobs/<dataset>.yaml`) and resource profiles (`jobs/profiles/<name>.yaml`), expanded into runs.

A grid declares the cartesian product models × backbones × orderings × protocols × seeds, the settings every run
shares (weights, image size, batch size), and per-model overrides (image size, batch size, backbones, protocols,
hyperparameters, resources). A profile says how a cluster is asked for those resources (partition, GPU gres,
constraint, account). Every run is prepared with `runner.prepare`, the same call `python -m bench run` makes, so
its run key and result path are exactly the ones a local run would have.

Tabular grids (`track: tabular`, e.g. jobs/tabular-synthetic.yaml, jobs/cicids2017.yaml) have no backbone axis;
their root is a scenario folder (`bench tabular scenarios --out DIR`): the selected candidate's record index and the
six consensus orderings of release/orderings.json (an ordering name is a task order). Their memory request is the
grid's or, when larger, an estimate from the record index's size (see `tabular_mem_gb`). Their optional
`index_settings` ({preprocessing: {rebalance: true}, discovery: {...}}) names settings the record index must have
been built with: a root built otherwise is refused when the grid is expanded (bench.tabular.track.record_settings).
`replay_size` (the grid's, or a model's) sizes the Replay buffer of its cl runs; a model's `preset` names one of its
tabular registry presets; both are checked when the grid is loaded.
A tabular grid validates a released scenario (CAD §4: with models other than the ones that built it), so the
construction models (bench.tabular.scenario.MODELS) are refused in it, except in a grid marked
`construction_check: true` (jobs/tabular-synthetic-construction-check.yaml), which checks the construction.
"""

from __future__ import annotations

import itertools
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from bench.config import NO_BACKBONE, TABULAR_REPLAY_RECORDS, ImageInputs, TabularInputs
from bench.errors import BenchError, ConfigError
# the schema's public names stay importable from here: most callers (CLI, tests) use grid.load_profile,
# grid.Selection, grid.REPO beside grid.load_grid and grid.expand
from bench.hpc.gridschema import (AXES, JOBS_DIR, REPO, Grid, PlannedRun, Profile, Resources, Selection,  # noqa: F401
                                  check_keys, check_model_settings, filter_axis, grid_path, list_of, load_profile,
                                  load_yaml, parse_models, parse_resources, positive_int, run_device, unique_keys)


SHARED_KEYS = ("weights", "image_size", "batch_size", "workers")
MODEL_KEYS = ("backbones", "orderings", "protocols", "seeds", "image_size", "batch_size", "preset", "hparams",
              "resources")
GRID_KEYS = ("dataset", "track", "resources", *AXES, *SHARED_KEYS)
TABULAR_GRID_KEYS = ("dataset", "track", "resources", "index_settings", "construction_check", "replay_size", *AXES)
TABULAR_MODEL_KEYS = ("orderings", "protocols", "seeds", "preset", "hparams", "replay_size", "resources")
# a tabular grid's settings the record index must have been built with (TabularInputs; checked when expanded)
INDEX_SETTINGS = ("preprocessing", "discovery", "index_content_sha256")


def load_grid(dataset: str, path: Path | None = None) -> Grid:
    """Parse and validate a grid file; every problem names the file and what was expected."""
    from bench.config import BACKBONES, DATASETS, IMAGE_PROTOCOLS
    from bench.datasets import is_known, names

    path = Path(path or grid_path(dataset))
    data = load_yaml(path, "grid")
    if data.get("track", "image") == "tabular":
        return _load_tabular(dataset, path, data)
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


def _load_tabular(name: str, path: Path, data: dict) -> Grid:
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


def tabular_mem_gb(features_bytes: int, protocol: str, n_records: int = 0, replay_size: int | None = None) -> float:
    """GiB a tabular run needs: the record features (float32, all loaded), the training rows the protocol
    concatenates and a copy made while scoring, plus 1 GiB for the interpreter and the detector. The training rows
    are taken as all records for Cumulative, half for the others (one task), and for Replay half plus its buffer
    (`replay_size` records of `n_records`, the default buffer when None), at most all of them: a buffer larger than
    the stream holds every past record, as Cumulative does."""
    held = 1.0 if protocol in ("cumulative", "cumulative_fresh") else 0.5
    if protocol == "cl" and n_records:
        held = min(1.0, held + (replay_size or TABULAR_REPLAY_RECORDS) / n_records)
    return round((features_bytes * (2 + held)) / 2**30 + 1, 1)


def _features_size(path: Path) -> tuple[int, int]:
    """(bytes, records) of a record index's features.npy, from its header (nothing loaded); (0, 0) when absent."""
    if not path.is_file():
        return 0, 0
    import numpy as np

    try:
        records = np.load(path, mmap_mode="r").shape[0]
    except (OSError, ValueError) as e:
        raise ConfigError(f"{path}: not a readable record feature array ({e}); rebuild the scenario folder with "
                          f"`bench tabular scenarios`") from None
    return path.stat().st_size, int(records)


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
        return unique_keys(grid, _expand_tabular(grid, profile, selection, models, root, runs_dir, log))
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


def _expand_tabular(grid: Grid, profile: Profile, selection: Selection, models: list, root: Path,
                    runs_dir: Path, log) -> list[PlannedRun]:
    from bench.config import RunConfig
    from bench.continual.runner import prepare
    from bench.registry import get

    if selection.backbones:
        raise ConfigError(f"{grid.path}: a tabular grid has no backbone axis (drop --backbones)")
    index, orderings = tabular_source(root)
    features, n_records = _features_size(index / "features.npy")
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


# --- peak memory per run: what `make submit` checks each memory request against ---------------------------------

GIB = 2**30
BASE_BYTES = 3 * GIB // 2  # Python, torch, the backbone and a CUDA context, before any data
CHANNELS = {"resnet18": {"stem": 64, "layer1": 64, "layer2": 128, "layer3": 256, "layer4": 512},
            "wide_resnet50_2": {"stem": 64, "layer1": 256, "layer2": 512, "layer3": 1024, "layer4": 2048}}
STRIDES = {"stem": 2, "layer1": 4, "layer2": 8, "layer3": 16, "layer4": 32}
@dataclass(frozen=True)
class MemoryEstimate:
    fixed: int  # bytes the run needs whatever the cache budget: base, a batch, the model's state, pixel scores
    cache: int  # bytes the feature cache would hold unbounded, at its peak

    def peak(self, request: int) -> int:
        """Peak bytes under a job request of `request` bytes: the cache is bounded by its budget (spilling)."""
        from bench.features import CACHE_FRACTION

        return self.fixed + min(self.cache, int(CACHE_FRACTION * request))


def estimate_memory(run) -> MemoryEstimate:
    """A run's peak host memory from its tasks' image counts, backbone, image size and what its detector's spec
    declares: its largest batch pass (`ModelSpec.memory_bytes`), which training features it caches
    (`ModelSpec.train_features`) and its own host state (`ModelSpec.host_state_bytes`)."""
    from bench.registry import HostRun, get

    cfg, image = run.config, run.config.image
    spec = get(cfg.model)
    size = image.image_size
    layers = spec.layers(cfg.hparams)
    dims = tuple((CHANNELS[image.backbone][layer], (-(-size // STRIDES[layer])) ** 2) for layer in layers)
    per_image = sum(c * p for c, p in dims) * (2 if image.feature_dtype == "float16" else 4)
    n_train = tuple(len(run.splits[t].train) for t in cfg.tasks)
    n_test = tuple(len(run.splits[t].test) for t in cfg.tasks)
    cached = sum(n_test) + spec.cached_train_images(cfg.protocol, list(n_train))
    state = spec.host_state(HostRun(protocol=cfg.protocol, hparams=cfg.hparams, image_size=size, layers=dims,
                                    n_train=n_train, n_test=n_test))
    pixel = 2 * 4 * max(n_test) * size * size  # one test split's pixel scores, float32, while the buffer grows
    batch = spec.memory_bytes(size, image.batch_size, cfg.hparams)
    return MemoryEstimate(BASE_BYTES + batch + state + pixel, per_image * cached)


def check_memory_requests(planned: list, grid: "Grid") -> None:
    """Refuse (one line) a grid whose memory request is below a run's estimated peak. Tabular grids size their
    requests from the record index instead (`tabular_mem_gb`, applied when they are expanded)."""
    if grid.track == "tabular":
        return
    for p in planned:
        request = int(p.resources.mem_gb * GIB)
        need = estimate_memory(p.run).peak(request)
        if need > request:
            cfg = p.run.config
            raise ConfigError(f"{grid.path}: {cfg.model} ({cfg.image.backbone}, {cfg.protocol}, image_size "
                              f"{cfg.image.image_size}) needs about {need / GIB:.0f} GB at its peak, more than its "
                              f"mem_gb request {p.resources.mem_gb:g}: raise resources.mem_gb of {cfg.model}")

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
import math
import re
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

import yaml

from bench.config import DEVICES, NO_BACKBONE, TABULAR_REPLAY_RECORDS, ImageInputs, TabularInputs, setting_default
from bench.errors import BenchError, ConfigError

REPO = Path(__file__).resolve().parents[2]
JOBS_DIR = REPO / "jobs"
PROFILES_DIR = JOBS_DIR / "profiles"

AXES = ("models", "backbones", "orderings", "protocols", "seeds")
SHARED_KEYS = ("weights", "image_size", "batch_size", "workers")
MODEL_KEYS = ("backbones", "orderings", "protocols", "seeds", "image_size", "batch_size", "preset", "hparams",
              "resources")
GRID_KEYS = ("dataset", "track", "resources", *AXES, *SHARED_KEYS)
TABULAR_GRID_KEYS = ("dataset", "track", "resources", "index_settings", "construction_check", "replay_size", *AXES)
TABULAR_MODEL_KEYS = ("orderings", "protocols", "seeds", "preset", "hparams", "replay_size", "resources")
# a tabular grid's settings the record index must have been built with (TabularInputs; checked when expanded)
INDEX_SETTINGS = ("preprocessing", "discovery", "index_content_sha256")
PROFILE_KEYS = ("partition", "account", "qos", "constraint", "gres", "use_gpus", "device", "array_parallelism",
                "setup", "sbatch")


@dataclass(frozen=True)
class Resources:
    """What one run asks the scheduler for. Runs with equal resources share a job array."""

    gpus: int = 0
    cpus: int = 1
    mem_gb: float = 8
    time_min: int = 60

    def label(self) -> str:
        return f"{self.gpus}gpu-{self.cpus}cpu-{self.mem_gb:g}G-{self.time_min}min"


@dataclass
class Profile:
    name: str
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    constraint: str | None = None
    gres: str | None = None  # template such as "gpu:h100:{gpus}"; None: --gpus-per-node
    use_gpus: bool = True  # false (cpu profile): GPU requests of the grid are dropped
    device: str = "auto"
    array_parallelism: int = 64
    setup: list = field(default_factory=list)
    sbatch: dict = field(default_factory=dict)  # any other sbatch option, e.g. {"mail-type": "FAIL"}
    path: Path | None = None

    def placeholders(self) -> list[str]:
        """Settings still holding a `<placeholder>` of the shipped profile files."""
        values = {k: getattr(self, k) for k in ("partition", "account", "qos", "constraint", "gres")}
        values.update({f"sbatch.{k}": v for k, v in self.sbatch.items()})
        return [f"{k}={v}" for k, v in values.items() if isinstance(v, str) and re.search(r"<[^>]*>", v)]


@dataclass
class PlannedRun:
    run: "runner.Run"  # bench.continual.runner.Run (imported lazily: it loads torch)
    resources: Resources

    @property
    def key(self) -> str:
        return self.run.run_key

    @property
    def name(self) -> str:
        return self.run.out.stem


@dataclass
class Grid:
    dataset: str
    path: Path
    models: dict  # model name -> per-model overrides
    backbones: list
    orderings: list
    protocols: list
    seeds: list
    resources: Resources
    # the run settings a grid may omit default as a `bench run` does (ImageInputs' fields), except image_size
    weights: str = setting_default(ImageInputs, "weights")
    image_size: int | None = None  # None: each model's paper input size (its registry spec's image_size)
    batch_size: int = setting_default(ImageInputs, "batch_size")
    workers: int = setting_default(ImageInputs, "workers")
    track: str = "image"
    index_settings: dict = field(default_factory=dict)  # tabular: {preprocessing: {...}, discovery: {...}}
    replay_size: int | None = None  # tabular: the cl runs' Replay buffer (None: the default, REPLAY_RECORDS)
    data: str = ""  # the dataset the runs read (the grid's name is its result set: tabular-synthetic → synthetic)

    def axis(self, model: str, name: str) -> list:
        return list(self.models[model].get(name, getattr(self, name)))

    def replay(self, model: str) -> int | None:
        """The Replay buffer size of `model`'s cl runs: its own replay_size, else the grid's (None: default)."""
        return self.models[model].get("replay_size", self.replay_size)

    def model_resources(self, model: str) -> Resources:
        return _resources(self.models[model].get("resources") or {}, self.resources, self.path, model)


def _load_yaml(path: Path, what: str) -> dict:
    if not path.is_file():
        raise ConfigError(f"{path}: no such {what} file")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of {what} settings at the top level")
    return data


def _check_keys(data: dict, valid, path: Path, where: str) -> None:
    unknown = sorted(set(data) - set(valid))
    if unknown:
        raise ConfigError(f"{path}: unknown key(s) {unknown} in {where} (valid: {', '.join(valid)})")


def _list_of(value, kind, path: Path, where: str) -> list:
    items = value if isinstance(value, list) else [value]
    if not items or not all(isinstance(v, kind) and not isinstance(v, bool) for v in items):
        raise ConfigError(f"{path}: {where} must be a non-empty list of {kind.__name__}, got {value!r}")
    return items


def _resources(data: dict, base: Resources, path: Path, where: str) -> Resources:
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: resources of {where} must be a mapping, got {data!r}")
    _check_keys(data, ("gpus", "cpus", "mem_gb", "time_min"), path, f"resources of {where}")
    res = replace(base, **data)
    ok = (isinstance(res.gpus, int) and res.gpus >= 0 and isinstance(res.cpus, int) and res.cpus >= 1
          and isinstance(res.mem_gb, (int, float)) and 0 < res.mem_gb < math.inf and isinstance(res.time_min, int)
          and res.time_min >= 1)
    if not ok:
        raise ConfigError(f"{path}: resources of {where} need gpus >= 0, cpus >= 1, finite mem_gb > 0, time_min >= 1 "
                          f"(integers except mem_gb), got {res}")
    return res


def _positive_int(value, path: Path, where: str, minimum: int = 1) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ConfigError(f"{path}: {where} must be an integer >= {minimum}, got {value!r}")


def grid_path(dataset: str) -> Path:
    return JOBS_DIR / f"{dataset}.yaml"


def load_grid(dataset: str, path: Path | None = None) -> Grid:
    """Parse and validate a grid file; every problem names the file and what was expected."""
    from bench.config import BACKBONES, DATASETS, IMAGE_PROTOCOLS

    path = Path(path or grid_path(dataset))
    data = _load_yaml(path, "grid")
    if data.get("track", "image") == "tabular":
        return _load_tabular(dataset, path, data)
    _check_keys(data, GRID_KEYS, path, "the grid")
    if data.get("dataset") != dataset:
        raise ConfigError(f"{path}: declares dataset {data.get('dataset')!r}, expected {dataset!r}")
    if dataset not in DATASETS:
        raise ConfigError(f"{path}: unknown dataset {dataset!r} (valid: {', '.join(DATASETS)})")
    models = _models(data, path, MODEL_KEYS, ("backbones", "orderings", "protocols", "seeds"))
    grid = Grid(dataset=dataset, path=path, models=models,
                backbones=_list_of(data["backbones"], str, path, "backbones"),
                orderings=_list_of(data["orderings"], str, path, "orderings"),
                protocols=_list_of(data["protocols"], str, path, "protocols"),
                seeds=_list_of(data["seeds"], int, path, "seeds"),
                resources=_resources(data.get("resources") or {}, Resources(), path, "the grid"),
                **{k: data[k] for k in SHARED_KEYS if k in data})
    for key in ("image_size", "batch_size", "workers"):
        if getattr(grid, key) is not None:
            _positive_int(getattr(grid, key), path, key, minimum=0 if key == "workers" else 1)
    if not isinstance(grid.weights, str):
        raise ConfigError(f"{path}: weights must be imagenet, none or a path, got {grid.weights!r}")
    for model, overrides in models.items():
        for key in ("image_size", "batch_size"):
            if key in overrides:
                _positive_int(overrides[key], path, f"{key} of model {model!r}")
        if not isinstance(overrides.get("hparams") or {}, dict):
            raise ConfigError(f"{path}: hparams of model {model!r} must be a mapping name -> value")
        _check_model_settings(model, overrides, path)
        for axis, kind in (("backbones", str), ("orderings", str), ("protocols", str), ("seeds", int)):
            if axis in overrides:
                _list_of(overrides[axis], kind, path, f"{axis} of model {model!r}")
        grid.model_resources(model)
        bad = [b for b in grid.axis(model, "backbones") if b not in BACKBONES]
        if bad:
            raise ConfigError(f"{path}: unknown backbone {bad[0]!r} (valid: {', '.join(BACKBONES)})")
        bad = [p for p in grid.axis(model, "protocols") if p not in IMAGE_PROTOCOLS]
        if bad:
            raise ConfigError(f"{path}: unknown protocol {bad[0]!r} (valid: {', '.join(IMAGE_PROTOCOLS)})")
    return grid


def _check_model_settings(model: str, overrides: dict, path: Path, track: str = "image") -> None:
    """A model's `preset` names one of its registry presets and its `hparams` resolve on it (names, ranges, the
    files a preset requires), checked at load: an error names the grid and the model entry, not a CLI option."""
    from bench.registry import get

    where = ", ".join(k for k in ("preset", "hparams") if k in overrides) or "settings"
    try:
        if "preset" in overrides and not isinstance(overrides["preset"], str):
            raise ConfigError(f"expected a preset name, got {overrides['preset']!r}")
        spec = get(model, track)
        spec.asset_ids(spec.resolve(overrides.get("hparams"), overrides.get("preset")))
    except ConfigError as e:
        raise ConfigError(f"{path}: {where} of model {model!r}: {e}") from None


def _models(data: dict, path: Path, model_keys, axes) -> dict:
    """The grid's `models` as {model: overrides} (a list means no overrides), each override key one of
    `model_keys`, and every axis in `axes` present at the top level; ConfigError naming the grid otherwise."""
    models = data.get("models")
    if isinstance(models, list):
        models = {m: {} for m in models}
    if not isinstance(models, dict) or not models:
        raise ConfigError(f"{path}: 'models' must be a non-empty list or a mapping model -> overrides")
    for model, overrides in models.items():
        overrides = models[model] = overrides or {}
        if not isinstance(overrides, dict):
            raise ConfigError(f"{path}: overrides of model {model!r} must be a mapping, got {overrides!r}")
        _check_keys(overrides, model_keys, path, f"model {model!r}")
    for key in axes:
        if key not in data:
            raise ConfigError(f"{path}: missing '{key}' (a list)")
    return models


def _load_tabular(name: str, path: Path, data: dict) -> Grid:
    from bench.config import TABULAR_DATASETS, TABULAR_PROTOCOLS, RunConfig
    from bench.tabular.orderings import ORDERINGS

    dataset = data.get("dataset")
    if dataset not in TABULAR_DATASETS:
        raise ConfigError(f"{path}: unknown tabular dataset {dataset!r} (valid: {', '.join(TABULAR_DATASETS)})")
    expected = RunConfig(dataset=dataset, root="", model="", tasks=[], inputs=TabularInputs()).result_set
    if expected != name:
        raise ConfigError(f"{path}: a tabular grid of {dataset!r} is named {expected!r}, not {name!r}")
    bad = sorted(set(data) & {"backbones", *SHARED_KEYS})
    if bad:
        raise ConfigError(f"{path}: {bad} are image-track settings; a tabular grid has none")
    _check_keys(data, TABULAR_GRID_KEYS, path, "the grid")
    index_settings = data.get("index_settings") or {}
    if not isinstance(index_settings, dict):
        raise ConfigError(f"{path}: index_settings must be a mapping (preprocessing: {{...}}, discovery: {{...}})")
    _check_keys(index_settings, INDEX_SETTINGS, path, "index_settings")
    try:
        TabularInputs(**index_settings).validate()
    except ConfigError as e:
        raise ConfigError(f"{path}: index_settings: {e}") from None
    models = _models(data, path, TABULAR_MODEL_KEYS, ("orderings", "protocols", "seeds"))
    grid = Grid(dataset=name, path=path, models=models, backbones=["-"],
                orderings=_list_of(data["orderings"], str, path, "orderings"),
                protocols=_list_of(data["protocols"], str, path, "protocols"),
                seeds=_list_of(data["seeds"], int, path, "seeds"),
                resources=_resources(data.get("resources") or {}, Resources(), path, "the grid"),
                track="tabular", index_settings=index_settings, data=dataset, replay_size=data.get("replay_size"))
    _check_validation_models(path, data, models)
    # ste is a cross-evaluation run (`bench tabular ste`, the scenario search), not a continual grid axis
    grid_protocols = tuple(p for p in TABULAR_PROTOCOLS if p != "ste")
    for model, overrides in models.items():
        grid.model_resources(model)
        if not isinstance(overrides.get("hparams") or {}, dict):
            raise ConfigError(f"{path}: hparams of model {model!r} must be a mapping name -> value")
        _check_model_settings(model, overrides, path, "tabular")
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
        _positive_int(size, grid.path, where)
        if not any("cl" in grid.axis(m, "protocols") for m in models):
            raise ConfigError(f"{grid.path}: {where} sizes the Replay buffer, but no run of "
                              f"{', '.join(models)} uses protocol cl (add cl to its protocols or drop replay_size)")


def _check_validation_models(path: Path, data: dict, models: dict) -> None:
    """A validation grid runs no model that built the scenario (its FC1-FC5 and orderings were computed on the
    same test splits, so those models would validate their own choices); only a construction-check grid may."""
    from bench.tabular.scenario import MODELS as CONSTRUCTION_MODELS

    check = data.get("construction_check", False)
    if not isinstance(check, bool):
        raise ConfigError(f"{path}: construction_check must be true or false, got {check!r}")
    bad = [m for m in models if m in CONSTRUCTION_MODELS]
    if bad and not check:
        raise ConfigError(f"{path}: {', '.join(bad)} built the scenario (construction models) and cannot validate "
                          f"it; use vae, deepsvdd, dagmm, neutralad, or a construction-check grid "
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


def load_profile(name: str, path: Path | None = None) -> Profile:
    path = Path(path or PROFILES_DIR / f"{name}.yaml")
    if not path.is_file():
        known = sorted(p.stem for p in PROFILES_DIR.glob("*.yaml"))
        raise ConfigError(f"{path}: no such profile (valid: {', '.join(known)})")
    data = _load_yaml(path, "profile")
    _check_keys(data, PROFILE_KEYS, path, "the profile")
    profile = Profile(name=name, path=path, **data)
    if not isinstance(profile.setup, list) or not isinstance(profile.sbatch, dict):
        raise ConfigError(f"{path}: 'setup' must be a list of shell lines and 'sbatch' a mapping")
    if not isinstance(profile.array_parallelism, int) or profile.array_parallelism < 1:
        raise ConfigError(f"{path}: array_parallelism must be a positive integer")
    try:
        (profile.gres or "").format(gpus=1)
    except (KeyError, IndexError, ValueError):
        raise ConfigError(f"{path}: gres may only use the field {{gpus}}, got {profile.gres!r}") from None
    if profile.device not in DEVICES:
        raise ConfigError(f"{path}: device must be one of {', '.join(DEVICES)}, got {profile.device!r}")
    return profile


@dataclass
class Selection:
    """Command-line filters: None keeps the whole axis."""

    models: list | None = None
    backbones: list | None = None
    orderings: list | None = None
    protocols: list | None = None
    seeds: list | None = None

    def as_dict(self) -> dict:
        return {axis: getattr(self, axis) for axis in AXES}


def _filter(values: list, wanted: list | None, axis: str, grid: Grid) -> list:
    if wanted is None:
        return values
    declared = sorted({str(v) for m in grid.models for v in (grid.axis(m, axis) if axis != "models" else [m])})
    unknown = [w for w in wanted if str(w) not in declared]
    if unknown:
        raise ConfigError(f"{grid.path}: {axis} {unknown} not in the grid (declared: {', '.join(declared)})")
    return [v for v in values if str(v) in {str(w) for w in wanted}]


def expand(grid: Grid, profile: Profile, selection: Selection, root: Path, outputs: Path,
           log=lambda line: print(line, file=sys.stderr)) -> list[PlannedRun]:
    """Every run of the (filtered) grid, prepared: validated data, run key, result path. `log` takes notes on
    what was planned otherwise than asked (a tabular ordering that repeats another's task order)."""
    from bench.continual.runner import prepare
    from bench.data.reuse import reuse_reads
    from bench.data.stream import build_run_config
    from bench.models import check_model, implemented
    from bench.registry import get

    models = _filter(list(grid.models), selection.models, "models", grid)
    if grid.track == "tabular":
        runs_dir = outputs / grid.dataset / "runs"
        return _unique(grid, _expand_tabular(grid, profile, selection, models, root, runs_dir, log))
    for model in models:  # unimplemented models fail loudly: a silently smaller grid would go unnoticed
        try:
            check_model(model)
        except BenchError as e:
            ready = ",".join(m for m in grid.models if m in implemented()) or "<none yet>"
            raise ConfigError(f"{grid.path}: {e}; restrict the grid to implemented models: MODELS={ready} "
                              f"(--models {ready})") from None
    planned = []
    runs_dir = outputs / grid.dataset / "runs"
    with reuse_reads():  # one index read and one header check per split for the whole grid
        for model in models:
            resources = grid.model_resources(model)
            if not profile.use_gpus:
                resources = replace(resources, gpus=0)
            axes = [_filter(grid.axis(model, a), getattr(selection, a), a, grid)
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
    return _unique(grid, planned)


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
        axes = [_filter(grid.axis(model, a), getattr(selection, a), a, grid)
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


def _unique(grid: Grid, planned: list[PlannedRun]) -> list[PlannedRun]:
    keys = [p.key for p in planned]
    if len(set(keys)) != len(keys):
        raise ConfigError(f"{grid.path}: two grid points give the same run key (duplicate values in an axis?)")
    return planned


def run_device(profile: Profile, resources: Resources) -> str:
    """`device=auto` on a profile: the profile's device, or cuda when the run asks for a GPU, else cpu."""
    if profile.device != "auto":
        return profile.device
    return "cuda" if resources.gpus else "cpu"


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
    from bench.models import model_layers
    from bench.registry import HostRun, get

    cfg, image = run.config, run.config.image
    spec = get(cfg.model)
    size = image.image_size
    layers = model_layers(cfg.model, cfg.hparams)
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

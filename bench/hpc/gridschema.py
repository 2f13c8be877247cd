"""The grid schema both tracks share: where grids and profiles live, YAML loading and key checks, what a run asks
the scheduler for (`Resources`), how a cluster is asked (`Profile`, `jobs/profiles/<name>.yaml`), a parsed grid
(`Grid`), a planned run (`PlannedRun`) and the command line's axis filters (`Selection`). The image grid
(bench.hpc.grid, which also dispatches by track) and the tabular grid (bench.hpc.tabular_grid) build on it."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

import yaml

from bench.config import DEVICES, ImageInputs, setting_default
from bench.errors import ConfigError


REPO = Path(__file__).resolve().parents[2]
JOBS_DIR = REPO / "jobs"
PROFILES_DIR = JOBS_DIR / "profiles"
AXES = ("models", "backbones", "orderings", "protocols", "seeds")
# the settings every run of an image grid shares (a tabular grid refuses them: it has none)
SHARED_KEYS = ("weights", "image_size", "batch_size", "workers")
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
        return parse_resources(self.models[model].get("resources") or {}, self.resources, self.path, model)


def load_yaml(path: Path, what: str) -> dict:
    if not path.is_file():
        raise ConfigError(f"{path}: no such {what} file")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of {what} settings at the top level")
    return data


def check_keys(data: dict, valid, path: Path, where: str) -> None:
    unknown = sorted(set(data) - set(valid))
    if unknown:
        raise ConfigError(f"{path}: unknown key(s) {unknown} in {where} (valid: {', '.join(valid)})")


def list_of(value, kind, path: Path, where: str) -> list:
    items = value if isinstance(value, list) else [value]
    if not items or not all(isinstance(v, kind) and not isinstance(v, bool) for v in items):
        raise ConfigError(f"{path}: {where} must be a non-empty list of {kind.__name__}, got {value!r}")
    return items


def parse_resources(data: dict, base: Resources, path: Path, where: str) -> Resources:
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: resources of {where} must be a mapping, got {data!r}")
    check_keys(data, ("gpus", "cpus", "mem_gb", "time_min"), path, f"resources of {where}")
    res = replace(base, **data)
    ok = (isinstance(res.gpus, int) and res.gpus >= 0 and isinstance(res.cpus, int) and res.cpus >= 1
          and isinstance(res.mem_gb, (int, float)) and 0 < res.mem_gb < math.inf and isinstance(res.time_min, int)
          and res.time_min >= 1)
    if not ok:
        raise ConfigError(f"{path}: resources of {where} need gpus >= 0, cpus >= 1, finite mem_gb > 0, time_min >= 1 "
                          f"(integers except mem_gb), got {res}")
    return res


def positive_int(value, path: Path, where: str, minimum: int = 1) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ConfigError(f"{path}: {where} must be an integer >= {minimum}, got {value!r}")


def grid_path(dataset: str) -> Path:
    return JOBS_DIR / f"{dataset}.yaml"


def check_model_settings(model: str, overrides: dict, path: Path, track: str = "image") -> None:
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


def parse_models(data: dict, path: Path, model_keys, axes) -> dict:
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
        check_keys(overrides, model_keys, path, f"model {model!r}")
    for key in axes:
        if key not in data:
            raise ConfigError(f"{path}: missing '{key}' (a list)")
    return models


def load_profile(name: str, path: Path | None = None) -> Profile:
    path = Path(path or PROFILES_DIR / f"{name}.yaml")
    if not path.is_file():
        known = sorted(p.stem for p in PROFILES_DIR.glob("*.yaml"))
        raise ConfigError(f"{path}: no such profile (valid: {', '.join(known)})")
    data = load_yaml(path, "profile")
    check_keys(data, PROFILE_KEYS, path, "the profile")
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


def filter_axis(values: list, wanted: list | None, axis: str, grid: Grid) -> list:
    if wanted is None:
        return values
    declared = sorted({str(v) for m in grid.models for v in (grid.axis(m, axis) if axis != "models" else [m])})
    unknown = [w for w in wanted if str(w) not in declared]
    if unknown:
        raise ConfigError(f"{grid.path}: {axis} {unknown} not in the grid (declared: {', '.join(declared)})")
    return [v for v in values if str(v) in {str(w) for w in wanted}]


def unique_keys(grid: Grid, planned: list[PlannedRun]) -> list[PlannedRun]:
    keys = [p.key for p in planned]
    if len(set(keys)) != len(keys):
        raise ConfigError(f"{grid.path}: two grid points give the same run key (duplicate values in an axis?)")
    return planned


def run_device(profile: Profile, resources: Resources) -> str:
    """`device=auto` on a profile: the profile's device, or cuda when the run asks for a GPU, else cpu."""
    if profile.device != "auto":
        return profile.device
    return "cuda" if resources.gpus else "cpu"

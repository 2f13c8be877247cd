"""Run configuration: a common core plus the track's inputs, JSON round-trip, and the hashes that identify a run.

A RunConfig is the common core of every run (dataset, root, task order, model, protocol, seed, hyperparameters,
evaluation mode, device) plus its track's inputs, `inputs`: `ImageInputs` (backbone, weights, image size, batch
size, pixel evaluation mode, feature-cache dtype, loader threads, cache budget) or `TabularInputs` (the
preprocessing and task-discovery settings of the record index at `root`, a folder from `bench tabular index`).
`config.image` / `config.tabular` return the inputs of that track and fail loudly on the other one.
`evaluation` is "continual" (after task i, tasks 0..i) or "cross" (after task i, every task: the STE matrix).

The *run key* hashes everything that changes the result (dataset content, task order, model, its algorithm
version, protocol, seed, hyperparameters; for images also backbone, weights content, image size, batch size, pixel
evaluation mode and feature dtype) and nothing that does not (paths, device, worker count, cache budget). A
tabular run's data identity is the index's `index_sha256`, which covers the raw files' bytes and every
preprocessing and discovery setting. The *config hash* covers the whole configuration and is recorded as
provenance.

Every run-level setting is checked in one place, `RunConfig.validate()` (core, then `inputs.validate()`), before
any work: `bench.data.stream.build_run_config` (what the CLI and the grids call) and `runner.prepare` (what every
run goes through, the demo's too) both call it; `prepare` then checks the hyperparameters against the model's
registry spec.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import ClassVar

from bench.errors import ConfigError

# 3: the config JSON nests the track's inputs ("inputs"); 2: attributes track, levels, evaluation; 1: image runs
# before those. Files of every schema here are read (RunConfig.from_json reads the flat configs of 1 and 2).
SCHEMA_VERSION = 3
READABLE_SCHEMAS = (1, 2, 3)
# The run key's preimage carries its own version. Schemas 2 and 3 changed attributes and the config's layout, not
# what a result depends on, so image run keys stay those computed under schema 1 and tabular keys those of schema 2
# (files and grids made before keep their identity).
RUN_KEY_SCHEMA = 1
# 3: the preimage also holds the SHA-256 of the record index's files (index.csv, features.npy): `index_sha256`
# covers only the raw files and the settings, so an index edited or rebuilt otherwise kept its runs' keys. A
# file written before (its config has no index_content_sha256) keeps and is checked against its schema-2 key.
TABULAR_RUN_KEY_SCHEMA = 3
# Image-run settings added after schema 1. A schema-1 file's config JSON lacks them; read back they are None and
# left out of its run key, so such a file keeps (and is checked against) the key it was written with.
LATER_FIELDS = ("model_version", "pixel_eval", "feature_dtype", "mask_threshold")
# Mask pixels above this 8-bit value are defect (bench/data/images.py). Files recorded before the setting existed
# read back mask_threshold=None: their rule, any nonzero pixel, and their run key without it.
MASK_THRESHOLD = 127
MASK_THRESHOLD_RANGE = (0, 254)
TRACKS = ("image", "tabular")
EVALUATIONS = ("continual", "cross")
# ste: a fresh single-task expert per task; cumulative_fresh: a new model per step on all data so far
TABULAR_PROTOCOLS = ("ncl", "cl", "cumulative", "cumulative_fresh", "mste", "ste")
BACKBONES = ("resnet18", "wide_resnet50_2")  # here, not in bench.features, so the CLI lists them without torch
# the backbone of a detector that reads raw images (EfficientAD, GANomaly: InCLAD Table 7's "—"): `runner.prepare`
# sets it, so such a run has one identity (key, file name, table row) whatever backbone a command line or grid named
NO_BACKBONE = "none"
DATASETS = ("synthetic", "mvtec", "visa", "btad", "mpdd", "dagm", "multi")  # likewise without pandas
TABULAR_DATASETS = ("synthetic", "cicids2017", "cicids2018", "cicunsw", "multi")
# What `make submit/status/aggregate DATASET=` names: a result set, outputs/<name>/runs (RunConfig.result_set).
RESULT_SETS = DATASETS + tuple(d if d not in DATASETS else f"tabular-{d}" for d in TABULAR_DATASETS)
# The image track's protocols (bench.image.protocols): ncl, train on each task as it comes; cl, the detector's
# own continual variant (task banks) or Replay for gradient-trained detectors; cumulative, retrain on every past
# task's images (the upper reference; gradient-trained detectors only, refused at prepare time for the others).
# TABULAR_PROTOCOLS above is the tabular track's (bench.tabular.protocols; ste is the cross-evaluation expert).
# The CLI, the grids, the protocol modules and RunConfig.validate read these two.
IMAGE_PROTOCOLS = ("ncl", "cl", "cumulative")
DEVICES = ("auto", "cpu", "cuda")
# Pixel ROC-AUC at image_size² (masks resized nearest-neighbour: the default) or at each mask's own size (maps
# upsampled bilinearly): see docs/reports.md.
PIXEL_EVALS = ("resized", "native")
# how the feature cache stores frozen-backbone features (see bench.features.FeatureCache); part of the run key
CACHE_DTYPES = ("float32", "float16")
# Ranges of the run-level settings. Below 32 px the deepest backbone layer used (stride 16) has no neighbourhood;
# seeds feed numpy's and torch's generators, which take unsigned 32-bit values everywhere.
IMAGE_SIZE_RANGE = (32, 8192)
BATCH_SIZE_RANGE = (1, 4096)
SEED_RANGE = (0, 2**32 - 1)
WORKERS_RANGE = (0, 256)
# Bytes per input pixel of one forward pass: the float32 RGB input (12) and the backbone's activations, which for
# a ResNet add up to about ten times the input before the pooled layers (measured peak on resnet18: ~100).
BYTES_PER_PIXEL = 128


@dataclass
class ImageInputs:
    """The image track's inputs: which frozen backbone (and weights) sees the images, at what size and batch, how
    pixels are evaluated and how its features are cached. `workers` (loader threads) and `cache_budget` change no
    result and stay out of the run key. `pixel_eval`/`feature_dtype` read back None from schema-1 files,
    `mask_threshold` from every file written before it was recorded."""

    track: ClassVar[str] = "image"
    backbone: str = "resnet18"
    weights: str = "imagenet"
    image_size: int = 224
    batch_size: int = 32
    pixel_eval: str | None = "resized"
    # float16 changed no R cell by more than 2e-4 against float32 on the synthetic demo benchmark (PatchCore,
    # PaDiM, CFA; docs/cluster.md) and halves the cache; values beyond float16's range stay float32
    feature_dtype: str | None = "float16"
    mask_threshold: int | None = MASK_THRESHOLD
    workers: int = 0
    cache_budget: str = ""  # e.g. "8G"; empty: $BENCH_CACHE_BUDGET or half the job's memory

    def validate(self) -> None:
        for name, valid in (("backbone", (*BACKBONES, NO_BACKBONE)), ("pixel_eval", PIXEL_EVALS),
                            ("feature_dtype", CACHE_DTYPES)):
            if getattr(self, name) not in valid:
                raise ConfigError(f"unknown {name} {getattr(self, name)!r} (valid: {', '.join(valid)})")
        if not isinstance(self.weights, str) or not self.weights.strip():
            raise ConfigError(f"weights={self.weights!r}: expected imagenet, none or a weights file path")
        for name, (low, high) in (("image_size", IMAGE_SIZE_RANGE), ("batch_size", BATCH_SIZE_RANGE),
                                  ("workers", WORKERS_RANGE)):
            check_int(name, getattr(self, name), low, high)
        if self.mask_threshold is not None:
            check_int("mask_threshold", self.mask_threshold, *MASK_THRESHOLD_RANGE)
        if not isinstance(self.cache_budget, str):
            raise ConfigError(f"cache_budget={self.cache_budget!r}: expected a size such as 8G, or empty")
        if self.cache_budget:
            parse_bytes(self.cache_budget)

    def identity(self, weights_id: str) -> dict:
        """The image inputs' part of the run key (`weights_id`: the weights' content id, not their path)."""
        return {"backbone": self.backbone, "weights": weights_id, "image_size": self.image_size,
                "batch_size": self.batch_size,
                **{name: getattr(self, name) for name in ("pixel_eval", "feature_dtype", "mask_threshold")
                   if getattr(self, name) is not None}}


@dataclass
class TabularInputs:
    """The tabular track's inputs: the settings the record index at `root` was built with (`bench tabular index`:
    preprocessing, e.g. train_fraction or rebalance, and task discovery). `runner.prepare` checks every setting
    given here against the index (a mismatch is an error naming the index) and fills in the rest from it, so the
    run's config records them all. They stay out of the run key: the index's `index_sha256` already covers them
    and the raw files' bytes."""

    track: ClassVar[str] = "tabular"
    preprocessing: dict = field(default_factory=dict)
    discovery: dict = field(default_factory=dict)
    # SHA-256 over index.csv and features.npy, set by `runner.prepare` (a value given beforehand must match);
    # part of the run key (TABULAR_RUN_KEY_SCHEMA 3). None in files written before it existed.
    index_content_sha256: str | None = None

    def validate(self) -> None:
        for name in ("preprocessing", "discovery"):
            if not isinstance(getattr(self, name), dict):
                raise ConfigError(f"{name}={getattr(self, name)!r}: expected a mapping setting -> value")
        content = self.index_content_sha256
        if content is not None and (not isinstance(content, str) or len(content) != 64):
            raise ConfigError(f"index_content_sha256={content!r}: expected a SHA-256 hex digest or nothing")


INPUTS = {"image": ImageInputs, "tabular": TabularInputs}


@dataclass
class RunConfig:
    """A run: the common core (dataset, task order, model, protocol, seed, hyperparameters, how it evaluates, where
    it runs) and its track's inputs (`inputs`: ImageInputs or TabularInputs; `track` follows from them)."""

    dataset: str
    root: str
    model: str
    tasks: list[str]
    ordering: str = "custom"
    protocol: str = "cl"
    seed: int = 0
    hparams: dict = field(default_factory=dict)
    evaluation: str = "continual"
    device: str = "auto"
    # the model's algorithm version (its registry spec's `version`), set by `runner.prepare` like the resolved
    # hparams, so this module needs no model import; part of the run key: a fixed algorithm recomputes its runs
    model_version: int | None = None
    # the hyperparameter preset the run's hparams start from (the model's registry spec names its presets); None
    # asks for the model's default preset, whose name `prepare` records. Not in the run key: the resolved hparams
    # are, so a preset is part of a run's identity through the values it sets. Files before it read back None.
    preset: str | None = None
    inputs: ImageInputs | TabularInputs = field(default_factory=ImageInputs)

    @property
    def track(self) -> str:
        return self.inputs.track

    @property
    def image(self) -> ImageInputs:
        """The image inputs; ConfigError on a tabular run (it has no backbone, weights or image size)."""
        if not isinstance(self.inputs, ImageInputs):
            raise ConfigError(f"{self.model} on {self.dataset}: a {self.track} run has no image inputs")
        return self.inputs

    @property
    def tabular(self) -> TabularInputs:
        if not isinstance(self.inputs, TabularInputs):
            raise ConfigError(f"{self.model} on {self.dataset}: a {self.track} run has no record index settings")
        return self.inputs

    def validate(self, *, tasks: bool = True) -> "RunConfig":
        """Check every run-level setting (type, range, choices) and return self; ConfigError names the setting
        and what is allowed. `tasks=False` skips the task list (not known before the dataset is read). The model's
        hyperparameters are checked by its registry spec (`bench.models.resolve_hparams`, in `runner.prepare`)."""
        self.root = str(Path(self.root).expanduser())  # every reader then sees the same path
        if not isinstance(self.inputs, tuple(INPUTS.values())):
            raise ConfigError(f"inputs={self.inputs!r}: expected ImageInputs or TabularInputs")
        tabular = self.track == "tabular"
        datasets, protocols = (TABULAR_DATASETS, TABULAR_PROTOCOLS) if tabular else (DATASETS, IMAGE_PROTOCOLS)
        if self.dataset not in datasets:
            raise ConfigError(f"unknown {self.track} dataset {self.dataset!r} (valid: {', '.join(datasets)})")
        if self.evaluation not in (EVALUATIONS if tabular else ("continual",)):
            raise ConfigError(f"evaluation={self.evaluation!r} is not allowed on the {self.track} track (valid: "
                              f"{', '.join(EVALUATIONS if tabular else ('continual',))})")
        for name, valid in (("protocol", protocols), ("device", DEVICES)):
            if getattr(self, name) not in valid:
                raise ConfigError(f"unknown {name} {getattr(self, name)!r} (valid: {', '.join(valid)})")
        check_int("seed", self.seed, *SEED_RANGE)
        check_file_name("--ordering", self.ordering)
        if self.model_version is not None:
            check_int("model_version", self.model_version, 1, 10**6)
        if self.preset is not None and (not isinstance(self.preset, str) or not self.preset.strip()):
            raise ConfigError(f"preset={self.preset!r}: expected a preset name of model {self.model}")
        if tasks:
            names = self.tasks
            if not isinstance(names, list) or not names or not all(isinstance(t, str) and t for t in names):
                raise ConfigError(f"tasks={names!r}: expected a non-empty list of task names")
            if len(set(names)) != len(names):
                raise ConfigError(f"tasks repeat a task: {names}")
        if not isinstance(self.hparams, dict):
            raise ConfigError(f"hparams={self.hparams!r}: expected a mapping name -> value")
        self.inputs.validate()
        return self

    def to_json(self) -> str:
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "inputs"}
        data.update(track=self.track, inputs=asdict(self.inputs))
        return json.dumps(data, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> "RunConfig":
        """Schema 3 nests the track's inputs; schemas 1 and 2 wrote one flat object (image fields on both tracks,
        ignored on the tabular one; schema 1 without `track`, `evaluation` and the LATER_FIELDS)."""
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ConfigError(f"config is a {type(data).__name__}, expected an object")
        track = data.pop("track", "image")
        if track not in INPUTS:
            raise ConfigError(f"unknown track {track!r} (valid: {', '.join(TRACKS)})")
        image_keys = {f.name for f in fields(ImageInputs)}
        if "inputs" in data:
            given = data.pop("inputs")
            if track == "image" and isinstance(given, dict):  # written before a later field was recorded
                given = {**{k: None for k in LATER_FIELDS if k in image_keys}, **given}
        else:  # schema 1 or 2
            flat = {k: data.pop(k) for k in image_keys & set(data)}
            given = {**{k: None for k in LATER_FIELDS if k in image_keys}, **flat} if track == "image" else {}
            data.setdefault("model_version", None)
        unknown = set(data) - {f.name for f in fields(cls)}
        if unknown:
            raise ConfigError(f"unknown config fields {sorted(unknown)}")
        if not isinstance(given, dict):
            raise ConfigError(f"inputs={given!r}: expected an object of {track} input fields")
        inputs_cls = INPUTS[track]
        extra = set(given) - {f.name for f in fields(inputs_cls)}
        if extra:
            raise ConfigError(f"unknown {track} input fields {sorted(extra)}")
        return cls(**data, inputs=inputs_cls(**given))

    def sha256(self) -> str:
        return hashlib.sha256(self.to_json().encode()).hexdigest()

    def identity(self, index_sha256: str, weights_id: str) -> dict:
        """What the result depends on: the run key's preimage. A tabular run depends on no backbone, weights or
        image size; it does depend on the detector's version (its registry spec, `model_version`). An image run's
        preimage is the one schema 1 defined (RUN_KEY_SCHEMA), so its key survived the schema changes."""
        if self.track == "tabular":
            content = self.tabular.index_content_sha256
            return {"track": "tabular", "dataset": self.dataset, "index_sha256": index_sha256,
                    "tasks": list(self.tasks), "model": self.model, "version": self.model_version,
                    "protocol": self.protocol, "evaluation": self.evaluation, "seed": self.seed,
                    "hparams": self.hparams,  # a file from before schema 3 keeps its schema-2 preimage
                    **({"schema": 2} if content is None else
                       {"schema": TABULAR_RUN_KEY_SCHEMA, "index_content_sha256": content})}
        return {"dataset": self.dataset, "index_sha256": index_sha256, "tasks": list(self.tasks),
                "model": self.model, "protocol": self.protocol, "seed": self.seed, "hparams": self.hparams,
                "schema": RUN_KEY_SCHEMA, **self.image.identity(weights_id),
                **({"model_version": self.model_version} if self.model_version is not None else {})}

    def run_key(self, index_sha256: str, weights_id: str) -> str:
        payload = json.dumps(self.identity(index_sha256, weights_id), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(payload.encode()).hexdigest()

    @property
    def result_set(self) -> str:
        """The name of this run's outputs/<name>/runs folder (and of `make aggregate DATASET=<name>`): the dataset,
        prefixed `tabular-` where an image dataset has the same name (the synthetic benchmarks)."""
        if self.track == "tabular" and self.dataset in DATASETS:
            return f"tabular-{self.dataset}"
        return self.dataset

    def run_name(self, run_key: str) -> str:
        """Readable file stem: what a human looks for, plus the key that makes it unique."""
        dataset = self.dataset.replace("/", "-")
        if self.track == "tabular":
            return f"{dataset}_{self.model}_{self.protocol}_{self.ordering}_s{self.seed}_{run_key[:12]}"
        return (f"{dataset}_{self.model}_{self.image.backbone}_{self.protocol}_{self.ordering}_s{self.seed}_"
                f"{run_key[:12]}")


# what a name that becomes part of a file or folder name may hold: no path separator, not "." or ".."
FILE_NAME_CHARS = "letters, digits and -_."


def check_file_name(what: str, value) -> str:
    """`value` when it can be used inside a file name (letters, digits, `-_.`; not `.`/`..`), else ConfigError."""
    import re

    if not isinstance(value, str) or not re.fullmatch(r"[A-Za-z0-9_.\-]+", value) or value in (".", ".."):
        raise ConfigError(f"{what} {value!r} is not allowed: it becomes part of a file name (expected "
                          f"{FILE_NAME_CHARS}, no path separators, not . or ..)")
    return value


def parse_overrides(items: list[str]) -> dict:
    """--set key=value (value parsed as JSON when it parses, else kept as a string)."""
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--set expects key=value, got {item!r}")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def option_name(name: str) -> str:
    return "--" + name.replace("_", "-")


def check_int(name: str, value, low: int, high: int) -> int:
    """`value` as an int in [low, high], or ConfigError naming the option."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(f"{option_name(name)} {value!r} is not allowed (expected an integer from {low} to {high})")
    return value


def parse_bytes(text, what: str = "--cache-budget") -> int:
    """'8G', '512M', '1.5T', '300000' (bytes) → bytes; ConfigError otherwise."""
    units = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
    value = str(text).strip().upper().removesuffix("B").removesuffix("I")
    unit = value[-1:] if value[-1:] in units and value[-1:] else ""
    try:
        number = float(value[:-1] if unit else value)
    except ValueError:
        number = -1
    if not 0 <= number < 2**63:
        raise ConfigError(f"{what} {text!r}: expected a size such as 8G, 512M or a number of bytes")
    return int(number * units[unit])


def check_max_steps(value) -> None:
    if value is not None:
        check_int("max_steps", value, 1, 10**6)


def memory_limit_bytes() -> int:
    """What this process may use: the cgroup limit where one is set, else physical memory."""
    try:
        text = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if text.isdigit():
            return int(text)
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def memory_estimate(image_size: int, batch_size: int) -> int:
    """A rough lower bound of the bytes one batch needs on its way through a frozen ResNet backbone: the default
    of `ModelSpec.memory_bytes` (a detector that trains networks on the images says what it needs)."""
    return BYTES_PER_PIXEL * batch_size * image_size * image_size


def check_memory(model: str, image_size: int, batch_size: int, need: int) -> None:
    """Refuse a run whose batches need more than this machine's memory (`need`: the model's estimate, see
    `ModelSpec.memory_bytes`), instead of being killed by the kernel mid-run."""
    have = memory_limit_bytes()
    if need > have:
        raise ConfigError(f"{model} at --image-size {image_size} with --batch-size {batch_size} needs about "
                          f"{need / 2**30:.1f} GiB (its memory estimate), more than the {have / 2**30:.1f} GiB "
                          f"this machine has: lower --image-size or --batch-size (or the model's batch_size)")

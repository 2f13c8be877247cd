"""Run configuration: a common core plus the track's inputs, JSON round-trip, and the hashes that identify a run.

A RunConfig is the common core of every run (dataset, root, task order, model, protocol, seed, hyperparameters,
evaluation mode, device) plus its track's inputs, `inputs`: `ImageInputs` (backbone, weights, image size, batch
size, pixel evaluation mode, feature-cache dtype, loader threads, cache budget) or `TabularInputs` (the
preprocessing and task-discovery settings of the record index at `root`, a folder from `bench tabular index`).
`config.image` / `config.tabular` return the inputs of that track and fail loudly on the other one.
`evaluation` is "continual" (after task i, tasks 0..i) or "cross" (after task i, every task: the STE matrix).

The *run key* hashes everything that changes the result (dataset content, task order, model, its algorithm
version, protocol, seed, hyperparameters; for images also backbone, weights content, image size, batch size, pixel
evaluation mode, feature dtype, and input normalisation and resize mode where not the earlier defaults) and
nothing that does not (paths, device, worker count, cache budget). A tabular run's data identity is the index's `index_sha256`, which covers the raw files' bytes and every
preprocessing and discovery setting. The *config hash* covers the whole configuration and is recorded as
provenance.

Every run-level setting is checked in one place, `RunConfig.validate()` (core, then `inputs.validate()`), before
any work: `bench.image.config.build_run_config` (what the CLI and the grids call) and `runner.prepare` (what every
run goes through, the demo's too) both call it; `prepare` then checks the hyperparameters against the model's
registry spec.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import ClassVar

from bench.datasets import built_in, is_assembly_set, is_known, names, result_sets
from bench.datasets import result_set as dataset_result_set
from bench.errors import ConfigError
from bench.tracks import TRACK_NAMES

ALL_RESULT_SETS = "all"  # `aggregate --dataset all`: every result set, so no run may be labelled so

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
LATER_FIELDS = ("model_version", "pixel_eval", "feature_dtype", "mask_threshold", "normalize", "resize")
# Hyperparameters only a replay buffer reads (the image track's cl protocols: Replay, CFA's task banks). They are
# left out of the key of ncl and cumulative runs, whose results they cannot change, so those keep their keys.
REPLAY_HPARAMS = ("replay_share",)
# Mask pixels above this 8-bit value are defect (bench/data/images.py). Files recorded before the setting existed
# read back mask_threshold=None: their rule, any nonzero pixel, and their run key without it.
MASK_THRESHOLD = 127
MASK_THRESHOLD_RANGE = (0, 254)
TRACKS = TRACK_NAMES  # bench.tracks holds the one table of tracks
EVALUATIONS = ("continual", "cross")
# ste: a fresh single-task expert per task; cumulative_fresh: a new model per step on all data so far
TABULAR_PROTOCOLS = ("ncl", "cl", "cumulative", "cumulative_fresh", "mste", "ste")
BACKBONES = ("resnet18", "wide_resnet50_2")  # here, not in bench.features, so the CLI lists them without torch
# the backbone of a detector that reads raw images (EfficientAD, GANomaly: InCLAD Table 7's "—"): `runner.prepare`
# sets it, so such a run has one identity (key, file name, table row) whatever backbone a command line or grid named
NO_BACKBONE = "none"
# The built-in datasets of each track, from their registrations (bench.datasets: no reader imported, likewise
# without pandas); plugins come on top where a command lists them (bench.datasets.names).
DATASETS = built_in("image")
TABULAR_DATASETS = built_in("tabular")
# What `make submit/status/aggregate DATASET=` names: a result set, outputs/<name>/runs (RunConfig.result_set).
RESULT_SETS = result_sets()
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
# How an image is resized to image_size (bench.data.images.load_image): "float", bilinear on its [0, 1] values (PIL
# mode F, the more precise); "8bit", InCLAD's released loader (8-bit RGB, PIL BILINEAR, rounded to uint8).
RESIZES = ("float", "8bit")
# What image runs did before `normalize` and `resize` were recorded: a run with these values keeps its run key.
IMAGE_LOADING_DEFAULTS = {"normalize": True, "resize": "float"}
# Ranges of the run-level settings. Below 32 px the deepest backbone layer used (stride 16) has no neighbourhood;
# seeds feed numpy's and torch's generators, which take unsigned 32-bit values everywhere.
IMAGE_SIZE_RANGE = (32, 8192)
BATCH_SIZE_RANGE = (1, 4096)
SEED_RANGE = (0, 2**32 - 1)
# The tabular Replay (cl) buffer in records: the released CAD framework's 25,000 by default (bench.tabular.protocols);
# here so the run key can leave the default out (a Replay run's key from before the setting stays its key). Any
# positive size is allowed: a buffer larger than the stream keeps every past record, like Cumulative.
TABULAR_REPLAY_RECORDS = 25_000
REPLAY_SIZE_RANGE = (1, 2**63 - 1)
WORKERS_RANGE = (0, 256)
# Bytes per input pixel of one forward pass: the float32 RGB input (12) and the backbone's activations, which for
# a ResNet add up to about ten times the input before the pooled layers (measured peak on resnet18: ~100).
BYTES_PER_PIXEL = 128


def setting(default, help: str, *, choices: tuple | None = None, range: tuple[int, int] | None = None,
            default_text: str | None = None, none_ok: bool = False):
    """A run setting's dataclass field: its one default, what it means, and the values it takes (`choices`, or
    an integer `range`). Validation checks the values, and the CLI builds the setting's option (type, choices,
    `--help` with the default) from the field (`add_setting_options`), so neither types them again.
    `default_text`: how `--help` states a default the value does not say (an empty size: the environment's);
    `none_ok`: None passes the check (a setting that files recorded before it existed read back as None)."""
    return field(default=default, metadata={"help": help, "choices": choices, "range": range,
                                            "default_text": default_text, "none_ok": none_ok})


def check_setting(item, value) -> None:
    """ConfigError unless `value` is one of the `setting` field `item`'s choices or an integer in its range."""
    meta = item.metadata
    if value is None and meta.get("none_ok"):
        return
    if meta.get("choices") is not None and value not in meta["choices"]:
        raise ConfigError(f"unknown {item.name} {value!r} (valid: {', '.join(meta['choices'])})")
    if meta.get("range") is not None:
        check_int(item.name, value, *meta["range"])


def setting_default(cls, name: str):
    """The default of dataclass `cls`'s field `name`: for code that fills in a setting a user may omit."""
    return next(item.default for item in fields(cls) if item.name == name)


def add_setting_options(parser, cls, names, **overrides) -> None:
    """`--<name>` options of the `setting` fields `names` of dataclass `cls`: the field's default (and its type),
    choices and help, with "(default: ...)" appended. `overrides[name]` replaces argparse keywords where a command
    differs (a `help` of its own, or a default of None that the command resolves itself, stated by the override's
    `default_text`)."""
    by_name = {item.name: item for item in fields(cls)}
    for name in names:
        item, given = by_name[name], dict(overrides.get(name, {}))
        meta = item.metadata
        default = given.pop("default", item.default)
        shown = given.pop("default_text", None) or meta["default_text"] or default
        kwargs = {"default": default, "help": f"{given.pop('help', meta['help'])} (default: {shown})"}
        if isinstance(item.default, int):
            kwargs["type"] = int
        if meta["choices"] is not None:
            kwargs["choices"] = meta["choices"]
        if meta["range"] is not None:
            kwargs["metavar"] = "{}-{}".format(*meta["range"])
        parser.add_argument(option_name(name), **{**kwargs, **given})


@dataclass
class ImageInputs:
    """The image track's inputs: which frozen backbone (and weights) sees the images, at what size and batch, how
    pixels are evaluated and how its features are cached. `workers` (loader threads) and `cache_budget` change no
    result and stay out of the run key. `pixel_eval`/`feature_dtype` read back None from schema-1 files,
    `mask_threshold` from every file written before it was recorded."""

    track: ClassVar[str] = "image"
    # what a run of this track may name (RunConfig.validate)
    datasets: ClassVar[tuple[str, ...]] = DATASETS
    protocols: ClassVar[tuple[str, ...]] = IMAGE_PROTOCOLS
    evaluations: ClassVar[tuple[str, ...]] = ("continual",)
    # the fields a file may predate (LATER_FIELDS): read back as None, left out of its run key
    predates: ClassVar[tuple[str, ...]] = ("pixel_eval", "feature_dtype", "mask_threshold", "normalize", "resize")
    backbone: str = setting("resnet18", f"frozen feature extractor ({NO_BACKBONE}: what detectors that read raw "
                                        f"images record, whatever is given)", choices=(*BACKBONES, NO_BACKBONE))
    weights: str = setting("imagenet", "imagenet (staged by `make weights`) | none | PATH")
    image_size: int = setting(224, "input side in pixels", range=IMAGE_SIZE_RANGE)
    batch_size: int = setting(32, "images per scoring batch (through the backbone and the detector); part of the "
                                  "run key", range=BATCH_SIZE_RANGE)
    pixel_eval: str | None = setting("resized", "pixel ROC-AUC at image-size² (masks resized) or at each mask's "
                                                "own size (maps upsampled); part of the run key", choices=PIXEL_EVALS)
    # float16 halves the cache and changed no R cell by more than 2e-4 against float32 on the synthetic demo
    # benchmark (PatchCore, PaDiM, CFA; docs/cluster.md), but it moves scores, so InCLAD's float32 is the `inclad`
    # presets' value (bench.registry.PRESET_IMAGE_LOADING); values beyond float16's range stay float32. None: the
    # model preset's, which `runner.prepare` records
    feature_dtype: str | None = setting(None, "how cached backbone features are stored; part of the run key",
                                        choices=CACHE_DTYPES, none_ok=True,
                                        default_text="the model preset's: float32 under inclad, else float16")
    mask_threshold: int | None = setting(
        MASK_THRESHOLD, "mask pixels above this 8-bit value are defect (16-bit masks: the same fraction of 65535); "
                        "part of the run key", range=MASK_THRESHOLD_RANGE, none_ok=True)
    # How images are loaded for the detector; None: the model preset's value (ModelSpec.image_loading), which
    # `runner.prepare` records. In the run key only where they differ from IMAGE_LOADING_DEFAULTS, so the runs of
    # a detector whose loading did not change keep their keys.
    normalize: bool | None = setting(None, "ImageNet-normalise images before the backbone (false: raw [0, 1] "
                                           "pixels); part of the run key", none_ok=True,
                                     default_text="the model preset's")
    resize: str | None = setting(None, "how images are resized to the input size: float (bilinear on [0, 1] "
                                       "values) or 8bit (InCLAD's loader: 8-bit RGB, PIL bilinear); part of the "
                                       "run key", choices=RESIZES, none_ok=True, default_text="the model preset's")
    workers: int = setting(4, "threads decoding images (does not change results)", range=WORKERS_RANGE)
    cache_budget: str = setting("", "memory the feature cache may hold before spilling to scratch, e.g. 8G",
                                default_text="$BENCH_CACHE_BUDGET or half the job's memory")

    def validate(self) -> None:
        for item in fields(self):
            check_setting(item, getattr(self, item.name))
        if not isinstance(self.weights, str) or not self.weights.strip():
            raise ConfigError(f"weights={self.weights!r}: expected imagenet, none or a weights file path")
        if self.normalize is not None and not isinstance(self.normalize, bool):
            raise ConfigError(f"normalize={self.normalize!r}: expected true or false")
        if not isinstance(self.cache_budget, str):
            raise ConfigError(f"cache_budget={self.cache_budget!r}: expected a size such as 8G, or empty")
        if self.cache_budget:
            parse_bytes(self.cache_budget)

    def key_preimage(self, core: "RunConfig", index_sha256: str, weights_id: str) -> dict:
        """An image run's key preimage: the one schema 1 defined (RUN_KEY_SCHEMA), so its key survived the schema
        changes; the weights enter by their content id (`weights_id`), not their path."""
        return {"dataset": core.dataset, "index_sha256": index_sha256, "tasks": list(core.tasks),
                "model": core.model, "protocol": core.protocol, "seed": core.seed,
                "hparams": {k: v for k, v in core.hparams.items()
                            if core.protocol == "cl" or k not in REPLAY_HPARAMS},
                "schema": RUN_KEY_SCHEMA, "backbone": self.backbone, "weights": weights_id,
                "image_size": self.image_size, "batch_size": self.batch_size,
                **{name: getattr(self, name) for name in self.predates
                   if getattr(self, name) not in (None, IMAGE_LOADING_DEFAULTS.get(name))},
                **({"model_version": core.model_version} if core.model_version is not None else {})}

    def summary(self) -> dict:
        """The inputs' columns of a results row (bench.results.summary_row)."""
        return {"backbone": self.backbone, "weights": self.weights, "image_size": self.image_size}

    def name_parts(self) -> tuple[str, ...]:
        """What the run's file name says of its inputs, between the model and the protocol."""
        return (self.backbone,)

    def result_set(self, dataset: str) -> str:
        return dataset


@dataclass
class TabularInputs:
    """The tabular track's inputs: the settings the record index at `root` was built with (`bench tabular index`:
    preprocessing, e.g. train_fraction or rebalance, and task discovery). `runner.prepare` checks every setting
    given here against the index (a mismatch is an error naming the index) and fills in the rest from it, so the
    run's config records them all. They stay out of the run key: the index's `index_sha256` already covers them
    and the raw files' bytes."""

    track: ClassVar[str] = "tabular"
    datasets: ClassVar[tuple[str, ...]] = TABULAR_DATASETS
    protocols: ClassVar[tuple[str, ...]] = TABULAR_PROTOCOLS
    evaluations: ClassVar[tuple[str, ...]] = EVALUATIONS
    predates: ClassVar[tuple[str, ...]] = ()  # index_content_sha256's None is its own default
    preprocessing: dict = field(default_factory=dict)
    discovery: dict = field(default_factory=dict)
    # SHA-256 over index.csv and features.npy, set by `runner.prepare` (a value given beforehand must match);
    # part of the run key (TABULAR_RUN_KEY_SCHEMA 3). None in files written before it existed.
    index_content_sha256: str | None = None
    # records in the Replay (cl) buffer; None: TABULAR_REPLAY_RECORDS, which `runner.prepare` records in a cl run's
    # config. Only cl has a bounded buffer, so another protocol refuses a size (bench.tabular.track). In the run key
    # only when it differs from the default (identity). None in files written before it existed.
    replay_size: int | None = setting(None, "records in the Replay buffer (protocol cl only)",
                                      range=REPLAY_SIZE_RANGE, none_ok=True,
                                      default_text=f"{TABULAR_REPLAY_RECORDS:,}, the released framework's")
    # how the Replay (cl) buffer shares its records between past tasks (bench.training.replay.SHARE_RULES), set by
    # `runner.prepare` from the preset: "floor" under `released` (pyCLAD's ⌊capacity / tasks⌋), else "water". In
    # the run key only when "floor": every earlier run filled its buffer with water. None before it existed.
    replay_share: str | None = None
    # what a non-finite record score does (bench.tabular.track), set by `runner.prepare` from the preset: "released"
    # (the CAD framework's metrics: NaN/+inf → the largest finite score, −inf → the smallest) under `released`,
    # else "stop" (a NumericalError). In the run key only when "released". None before it existed.
    nonfinite: str | None = None

    def validate(self) -> None:
        for name in ("preprocessing", "discovery"):
            if not isinstance(getattr(self, name), dict):
                raise ConfigError(f"{name}={getattr(self, name)!r}: expected a mapping setting -> value")
        if self.replay_size is not None:
            check_int("replay_size", self.replay_size, *REPLAY_SIZE_RANGE)
        if self.replay_share is not None and not isinstance(self.replay_share, str):
            raise ConfigError(f"replay_share={self.replay_share!r}: expected the name of a replay share rule")
        if self.nonfinite not in (None, "stop", "released"):
            raise ConfigError(f"nonfinite={self.nonfinite!r}: expected stop or released")
        content = self.index_content_sha256
        if content is not None and (not isinstance(content, str) or len(content) != 64):
            raise ConfigError(f"index_content_sha256={content!r}: expected a SHA-256 hex digest or nothing")

    def key_preimage(self, core: "RunConfig", index_sha256: str, weights_id: str) -> dict:
        """A tabular run's key preimage: no backbone, weights or image size, but the detector's version (its
        registry spec, `model_version`); a file from before schema 3 keeps its schema-2 preimage."""
        content = self.index_content_sha256
        replay = self.replay_size  # changes only Replay's results; the default keeps the earlier keys
        return {"track": "tabular", "dataset": core.dataset, "index_sha256": index_sha256,
                "tasks": list(core.tasks), "model": core.model, "version": core.model_version,
                "protocol": core.protocol, "evaluation": core.evaluation, "seed": core.seed, "hparams": core.hparams,
                **({"schema": 2} if content is None else
                   {"schema": TABULAR_RUN_KEY_SCHEMA, "index_content_sha256": content}),
                **({"replay_size": replay} if core.protocol == "cl" and replay not in (
                    None, TABULAR_REPLAY_RECORDS) else {}),
                **({"replay_share": "floor"} if core.protocol == "cl" and self.replay_share == "floor" else {}),
                **({"nonfinite": "released"} if self.nonfinite == "released" else {})}

    def summary(self) -> dict:
        return {"backbone": "", "weights": "", "image_size": math.nan}

    def name_parts(self) -> tuple[str, ...]:
        return ()

    def result_set(self, dataset: str) -> str:
        """`tabular-<dataset>` where an image dataset has the same name (the synthetic benchmarks)."""
        return dataset_result_set(dataset, self.track)


INPUTS = {cls.track: cls for cls in (ImageInputs, TabularInputs)}  # each track's run inputs, by its `track`


@dataclass
class RunConfig:
    """A run: the common core (dataset, task order, model, protocol, seed, hyperparameters, how it evaluates, where
    it runs) and its track's inputs (`inputs`: ImageInputs or TabularInputs; `track` follows from them)."""

    dataset: str
    root: str
    model: str
    tasks: list[str]
    ordering: str = "custom"
    # the choices are the track's: IMAGE_PROTOCOLS or TABULAR_PROTOCOLS (checked in validate)
    protocol: str = setting("cl", "continual protocol: ncl trains on each task as it comes, cl runs the detector's "
                                  "continual variant (task banks, or replay)")
    seed: int = setting(0, "seed of every random draw of the run", range=SEED_RANGE)
    hparams: dict = field(default_factory=dict)
    evaluation: str = "continual"
    device: str = setting("auto", "where the run computes (auto: cuda when available, else cpu)", choices=DEVICES)
    # the model's algorithm version (its registry spec's `version`), set by `runner.prepare` like the resolved
    # hparams, so this module needs no model import; part of the run key: a fixed algorithm recomputes its runs
    model_version: int | None = None
    # the hyperparameter preset the run's hparams start from (the model's registry spec names its presets); None
    # asks for the model's default preset, whose name `prepare` records. Not in the run key: the resolved hparams
    # are, so a preset is part of a run's identity through the values it sets. Files before it read back None.
    preset: str | None = setting(None, "hyperparameter preset of the model; --set overrides apply on top",
                                 default_text="its default preset, e.g. inclad: what InCLAD's released code ran")
    # the data's own name where it is read through another dataset's reader (own images via `mvtec`, an improved
    # CIC-IDS2017 via `cicunsw`): the result set, the file name, every table's and title's dataset. Not in the run
    # key (the data's content is); left out of the config JSON when unset, so earlier configs hash as before.
    label: str | None = setting(None, "name of the data in result sets, file names, tables and titles when it is "
                                      "read through another dataset's reader", default_text="the dataset's name")
    inputs: ImageInputs | TabularInputs = field(default_factory=ImageInputs)

    @property
    def name(self) -> str:
        """What tables and titles call the data: the label, else the dataset."""
        return self.label or self.dataset

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
        hyperparameters are checked by its registry spec (`ModelSpec.resolve`, called by the track's prepare that
        `runner.prepare` dispatches to: `bench.image.track.prepare_image`, `bench.tabular.track.prepare_tabular`)."""
        self.root = str(Path(self.root).expanduser())  # every reader then sees the same path
        if not isinstance(self.inputs, tuple(INPUTS.values())):
            raise ConfigError(f"inputs={self.inputs!r}: expected ImageInputs or TabularInputs")
        inputs = self.inputs  # what a run of its track may name
        if self.dataset not in inputs.datasets and not is_known(self.dataset, self.track):  # a plugin's is loaded
            raise ConfigError(f"unknown {self.track} dataset {self.dataset!r} (valid: "
                              f"{', '.join(names(self.track))})")
        if self.evaluation not in inputs.evaluations:
            raise ConfigError(f"evaluation={self.evaluation!r} is not allowed on the {self.track} track (valid: "
                              f"{', '.join(inputs.evaluations)})")
        for name, valid in (("protocol", inputs.protocols), ("device", DEVICES)):
            if getattr(self, name) not in valid:
                raise ConfigError(f"unknown {name} {getattr(self, name)!r} (valid: {', '.join(valid)})")
        check_int("seed", self.seed, *SEED_RANGE)
        check_file_name("--ordering", self.ordering)
        if self.label is not None:
            check_file_name("--label", self.label)
            check_label(self.label, self.inputs.result_set(self.dataset))
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
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "inputs"
                and not (f.name == "label" and self.label is None)}
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
        inputs_cls = INPUTS[track]
        own_keys = {f.name for f in fields(inputs_cls)}
        if "inputs" in data:
            given = data.pop("inputs")
        else:  # schema 1 or 2: the image fields, flat, on both tracks; a tabular run never used them
            flat = {k: data.pop(k) for k in {f.name for f in fields(ImageInputs)} & set(data)}
            given = {k: v for k, v in flat.items() if k in own_keys}
            data.setdefault("model_version", None)
        unknown = set(data) - {f.name for f in fields(cls)}
        if unknown:
            raise ConfigError(f"unknown config fields {sorted(unknown)}")
        if not isinstance(given, dict):
            raise ConfigError(f"inputs={given!r}: expected an object of {track} input fields")
        given = {**{k: None for k in inputs_cls.predates}, **given}  # written before a later field was recorded
        extra = set(given) - own_keys
        if extra:
            raise ConfigError(f"unknown {track} input fields {sorted(extra)}")
        return cls(**data, inputs=inputs_cls(**given))

    def sha256(self) -> str:
        return hashlib.sha256(self.to_json().encode()).hexdigest()

    def identity(self, index_sha256: str, weights_id: str) -> dict:
        """What the result depends on: the run key's preimage, as the track's inputs define it."""
        return self.inputs.key_preimage(self, index_sha256, weights_id)

    def run_key(self, index_sha256: str, weights_id: str) -> str:
        payload = json.dumps(self.identity(index_sha256, weights_id), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(payload.encode()).hexdigest()

    @property
    def result_set(self) -> str:
        """The name of this run's outputs/<name>/runs folder (and of `make aggregate DATASET=<name>`): the dataset,
        prefixed `tabular-` where an image dataset has the same name (the synthetic benchmarks); a run's label
        replaces it."""
        return self.label or self.inputs.result_set(self.dataset)

    def run_name(self, run_key: str) -> str:
        """Readable file stem: what a human looks for, plus the key that makes it unique."""
        parts = (self.name.replace("/", "-"), self.model, *self.inputs.name_parts(), self.protocol, self.ordering,
                 f"s{self.seed}", run_key[:12])
        return "_".join(parts)


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


def check_label(label: str, own: str) -> str:
    """A run's label is its result set (outputs/<label>/runs): not `all` (aggregate's every result set) and not
    another dataset's result set, whose tables the run would silently join; `own`, the run's own, is allowed."""
    if label == ALL_RESULT_SETS or (label != own and (label in result_sets(plugins_too=True)
                                                      or is_assembly_set(label))):
        what = "aggregate's name for every result set" if label == ALL_RESULT_SETS else "another dataset's result set"
        raise ConfigError(f"--label {label!r} is {what}: the run would be mixed into its tables; choose a name of "
                          f"your own data")
    return label


def task_list(text: str, flag: str = "--tasks") -> list[str]:
    """A comma-separated task order as typed: every entry a name (`a,,b` is a typo, not two tasks; an empty
    list names no task rather than every one)."""
    names = [t.strip() for t in str(text).split(",")]
    if not all(names):
        raise ConfigError(f"{flag} {text!r}: expected comma-separated task names, none of them empty (e.g. a,b,c)")
    return names


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

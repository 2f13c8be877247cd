"""The detector registry: each detector file registers one `ModelSpec`; every list of models comes from here.

A spec carries what the rest of the suite needs to know about a detector without reading its code: the label
used in tables, every hyperparameter with its default (InCLAD Tables 6/7), type and allowed range, the small
"quick" setting used by tests and the demo, what it consumes (backbone features or raw images), and an algorithm
version that is part of the run key (bump it whenever the method's results change, so old result files are not
reused). Hyperparameters are checked here, before any work: a bad value is one line naming the key, the value
and what is allowed.

Presets: a detector may name sets of hyperparameter values (InCLAD's released code, the method's own paper, a
framework's released code). The spec's `params` defaults are its default preset's values; every other preset lists
only the values that differ. The run key covers the values a run resolves to, so two presets that agree on every
value give one run, and a run records the preset its values are (`ModelSpec.recorded_preset`), not the name
asked. `ParamTable` is the same mechanism for
settings that belong to no detector (e.g. the tabular framework's filter thresholds).
"""

from __future__ import annotations

import importlib
import inspect
import math
import pkgutil
from dataclasses import dataclass, field
from typing import Any, Callable

from bench import plugins
from bench.config import CACHE_DTYPES, IMAGE_LOADING_DEFAULTS, RESIZES, memory_estimate
from bench.errors import BenchError, ConfigError, choice_error
from bench.tracks import DETECTOR_PACKAGES, TRACK_NAMES
from bench.tracks import TRACKS as _TRACK_TABLE

# The nine InCLAD detectors in their canonical order (tables, listings); which detectors exist is the registry's
# business (specs(), names()), not this tuple's.
INCLAD_MODELS = ("patchcore", "padim", "cfa", "stfpm", "rd4ad", "efficientad", "paste", "fastflow", "ganomaly")
# Two more facts of the published benchmark: its three single-task experts, whose matrices order the streams
# (InCLAD App. B), and the three methods whose MultiDataset rows its Table 2 reports.
INCLAD_STE_MODELS = ("patchcore", "padim", "cfa")
INCLAD_MULTI_MODELS = ("cfa", "paste", "padim")
# Detectors from other packages: an entry point of this group, named after the detector, whose value is the module
# that calls register(ModelSpec(name=<that name>, ...)) when imported (docs/extending.md, "Your own detector").
ENTRY_POINT_GROUP = plugins.DETECTORS
BACKBONE_LAYERS = ("layer1", "layer2", "layer3", "layer4")
# modules of the detector packages that are not detectors
_INFRASTRUCTURE = {"base", "gradient", "ops"}
TRACKS = TRACK_NAMES
INPUTS = {name: t.spec_inputs for name, t in _TRACK_TABLE.items()}  # what a spec's `inputs` may say, per track
IMAGENET_GENERATIONS = ("IMAGENET1K_V1", "DEFAULT")  # torchvision's names: the papers' V1, or what DEFAULT gives
# How images (and their cached backbone features) are loaded when a run leaves ImageInputs.normalize / .resize /
# .feature_dtype unset: LOADING_DEFAULTS, then the values for a preset of this name for every detector, then the
# detector's own (ModelSpec.image_loading). The loader belongs to the runner, not to a model: InCLAD's runner reads
# every dataset through `_load_image` (src/pyclad/data/readers/visual_benchmark_reader.py: 8-bit RGB, PIL
# BILINEAR, rounded to uint8) and computes in float32, while a float16 cache moves scores (by up to 5 % of a cell's
# score range for CFA, and re-routes an image of PatchCore-CL on the synthetic benchmark).
LOADING_DEFAULTS = {**IMAGE_LOADING_DEFAULTS, "feature_dtype": "float16"}
PRESET_IMAGE_LOADING = {"inclad": {"resize": "8bit", "feature_dtype": "float32"}}
# How a feature-based detector holds its training features in the host feature cache (ModelSpec.train_features), for
# the grid's memory model (bench.hpc.memory): "single_pass" fits each task in one pass and caches none; "epochs"
# revisits a task's training features every epoch, so the cache keeps that task's while it trains (about 0.2× more
# for replay); "replay" keeps every task's for CL replay (NCL drops a finished task's). A spec that declares nothing
# is taken as the largest of these, so an undeclared plugin is over-estimated, never under-.
TRAIN_FEATURES = ("single_pass", "epochs", "replay")
TRAINED_STATE_BYTES = 2**30  # a gradient-trained detector's networks, optimiser and replay indices


@dataclass(frozen=True)
class HostRun:
    """What a detector's `ModelSpec.host_state_bytes` sees of a planned run (no files read, no torch)."""

    protocol: str
    hparams: dict
    image_size: int
    layers: tuple  # (channels, patches per image) of each backbone layer it reads, in layer order; () for images
    n_train: tuple  # training images per task, in task order
    n_test: tuple

    @property
    def banks(self) -> int:
        """Banks or distributions a memory-bank detector keeps: one under NCL, one per task otherwise."""
        return 1 if self.protocol == "ncl" else len(self.n_train)


def trained_state(run: HostRun) -> int:
    """`ModelSpec.host_state_bytes` of a gradient-trained detector: its networks, optimiser and replay indices."""
    return TRAINED_STATE_BYTES


def undeclared_state(run: HostRun) -> int:
    """The host state assumed of a detector that declares none: a trained detector's, or every training feature
    of the stream in float32 (a memory bank that keeps them all), whichever is larger."""
    per_image = sum(c * p for c, p in run.layers) * 4
    return max(TRAINED_STATE_BYTES, per_image * sum(run.n_train))


_LOADING_VALUES = {"normalize": lambda v: isinstance(v, bool), "resize": lambda v: v in RESIZES,
                   "feature_dtype": lambda v: v in CACHE_DTYPES}


@dataclass(frozen=True)
class Param:
    """One hyperparameter: default, type and allowed range. `check` returns the value in its canonical type."""

    default: Any
    kind: str  # "int" | "float" | "bool" | "str" | "layers"
    low: float | None = None
    high: float | None = None
    low_open: bool = False  # True: low itself is not allowed
    choices: tuple | None = None
    doc: str = ""
    high_open: bool = False  # True: high itself is not allowed (e.g. Adam's β < 1)
    odd: bool = False  # int: odd values only, or 0 (a kernel size, 0 = the detector's own rule)

    def allowed(self) -> str:
        if self.kind == "layers":
            return f"a non-empty list of distinct layers from {', '.join(BACKBONE_LAYERS)}, in order"
        if self.choices is not None:
            return "one of " + ", ".join(map(str, self.choices))
        if self.kind == "bool":
            return "true or false"
        lo = "" if self.low is None else f"{'>' if self.low_open else '≥'} {self.low:g}"
        hi = "" if self.high is None else f"{'<' if self.high_open else '≤'} {self.high:g}"
        bounds = " and ".join(b for b in (lo, hi) if b)
        kind = {"int": "an odd integer or 0" if self.odd else "an integer", "float": "a finite number",
                "str": "a string"}[self.kind]
        return f"{kind} {bounds}".strip()

    def check(self, model: str, key: str, value):
        try:
            out = self._coerce(value)
        except (TypeError, ValueError):
            out = None
        if out is None or not self._in_range(out):
            raise ConfigError(f"{model} hyperparameter {key}={value!r} is not allowed (expected {self.allowed()})")
        return out

    def _coerce(self, value):
        if self.kind == "int":
            if isinstance(value, bool):
                return None
            if isinstance(value, float) and not value.is_integer():
                return None
            return int(value) if not isinstance(value, str) else int(value.strip())
        if self.kind == "float":
            if isinstance(value, bool):
                return None
            out = float(value)
            return out if math.isfinite(out) else None
        if self.kind == "bool":
            if isinstance(value, bool):
                return value
            return {"true": True, "false": False}.get(str(value).strip().lower())
        if self.kind == "str":
            return value if isinstance(value, str) else None
        if self.kind == "layers":
            items = value.split(",") if isinstance(value, str) else value
            if not isinstance(items, (list, tuple)) or not items:
                return None
            items = [str(i).strip() for i in items]
            if any(i not in BACKBONE_LAYERS for i in items) or len(set(items)) != len(items):
                return None
            return sorted(items, key=BACKBONE_LAYERS.index)
        raise ValueError(self.kind)

    def _in_range(self, value) -> bool:
        if self.choices is not None and value not in self.choices:
            return False
        if self.odd and value and value % 2 == 0:
            return False
        if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
            return False
        return self.high is None or value < self.high or (not self.high_open and value == self.high)


def Int(default: int, low: float | None = None, high: float | None = None, doc: str = "",  # noqa: N802
        odd: bool = False) -> Param:
    return Param(default, "int", low, high, doc=doc, odd=odd)


def Float(default: float, low: float | None = None, high: float | None = None, *, low_open: bool = False,  # noqa: N802
          high_open: bool = False, doc: str = "") -> Param:
    return Param(float(default), "float", low, high, low_open, doc=doc, high_open=high_open)


def Bool(default: bool, doc: str = "") -> Param:  # noqa: N802
    return Param(default, "bool", doc=doc)


def Choice(default: str, choices: tuple, doc: str = "") -> Param:  # noqa: N802
    return Param(default, "str", choices=tuple(choices), doc=doc)


def Layers(default: tuple[str, ...], doc: str = "") -> Param:  # noqa: N802
    return Param(list(default), "layers", doc=doc)


def resolve_params(owner: str, params: dict[str, Param], presets: dict[str, dict], default_preset: str,
                   preset: str | None = None, overrides: dict | None = None) -> dict:
    """Defaults, then the named preset's values (None: the default preset), then checked `overrides`; unknown
    preset or parameter names list the valid ones. What ModelSpec and ParamTable resolve through."""
    name = default_preset if preset is None else preset
    if name not in presets:
        raise choice_error(f"{owner} preset", name, presets)
    values = {k: (list(p.default) if isinstance(p.default, list) else p.default) for k, p in params.items()}
    for source in (presets[name], overrides or {}):
        for key, value in source.items():
            if key not in params:
                raise choice_error(f"{owner} hyperparameter", key, params)
            values[key] = params[key].check(owner, key, value)
    return values


def check_presets(owner: str, params: dict[str, Param], presets: dict[str, dict], default_preset: str) -> None:
    """Registration-time check: the default preset exists and sets nothing (the defaults are its values), and
    every preset's values are valid parameters in range."""
    if default_preset not in presets or presets[default_preset]:
        raise RuntimeError(f"{owner}: default preset {default_preset!r} must be listed with no values "
                           f"(the parameter defaults are its values)")
    for name in presets:
        resolve_params(owner, params, presets, default_preset, name)


def backbone_memory(image_size: int, batch_size: int, hparams: dict) -> int:
    """The default `ModelSpec.memory_bytes`: a scoring batch through a frozen ResNet backbone."""
    return memory_estimate(image_size, batch_size)


def pixel_memory(train: float, score: float = 0.0, *, features: bool, fixed: int = 0,
                 scale: Callable[[dict], float] | None = None) -> Callable:
    """A `ModelSpec.memory_bytes` measured per pixel: `train` bytes per pixel of a training batch
    (hparams["batch_size"]: activations, gradients, optimiser work) or `score` per pixel of a scoring batch (the
    run's --batch-size), whichever pass is larger, times `scale(hparams)` (a width relative to the calibrated
    one), plus `fixed` bytes (trained weights with their gradients and optimiser state); `features`: plus the
    frozen backbone's scoring batch (`backbone_memory`)."""

    def memory_bytes(image_size: int, batch_size: int, hparams: dict) -> int:
        pixels = image_size * image_size
        own = max(train * hparams.get("batch_size", 0), score * batch_size) * pixels
        own *= scale(hparams) if scale is not None else 1.0
        return fixed + int(own) + (backbone_memory(image_size, batch_size, hparams) if features else 0)

    return memory_bytes


@dataclass(frozen=True)
class ParamTable:
    """Named, typed, ranged settings that belong to no detector, with presets: one `resolve` for the CLI, the
    grids and the records (e.g. the tabular framework's FC1-FC5 thresholds)."""

    name: str
    params: dict[str, Param]
    presets: dict[str, dict] = field(default_factory=lambda: {"default": {}})
    default_preset: str = "default"

    def __post_init__(self):
        check_presets(self.name, self.params, self.presets, self.default_preset)

    def resolve(self, overrides: dict | None = None, preset: str | None = None) -> dict:
        return resolve_params(self.name, self.params, self.presets, self.default_preset, preset, overrides)


@dataclass(frozen=True)
class ModelSpec:
    """What the suite knows about a detector. Image track: `factory(extractor, image_size=..., **hparams)` builds
    it; tabular track (bench/tabular/detectors/): `factory(**hparams)`."""

    name: str
    label: str  # as printed in tables
    factory: Callable
    params: dict[str, Param]
    quick: dict = field(default_factory=dict)  # small settings for tests and the demo (printed by the demo)
    demo: bool = False  # one of `make demo`'s detectors (bench/tools/demo.py: cheap enough for its 10 minutes)
    inputs: str = "features"  # "features": frozen backbone layers via the run's FeatureExtractor; "images": raw
    version: int = 1  # algorithm version: part of the run key; bump when results change
    source: str = ""  # where the defaults come from (e.g. "InCLAD Table 6")
    layers_of: Callable | None = None  # hparams → backbone layers, for detectors without a `layers` parameter
    # assets(hparams) -> {name: content id} of the external files a detector names (checked, fast); in the run key
    assets: Callable[[dict], dict] | None = None
    track: str = "image"  # "image" | "tabular": which runs can use it
    # the input size the method's paper (and InCLAD Tables 6-7) used; `bench run` without --image-size takes it,
    # and the paper comparison counts a run comparable only at it. None: not an image detector
    image_size: int | None = None
    transductive: bool = False  # tabular: scores depend on the scoring batch (ECOD, COPOD, DIF); see bench.tabular.audit
    # tabular: preset → what it reproduces (bench.tabular.fidelity.Fidelity's values, e.g. "released"); a preset
    # named `released` that is not listed is released, any other the suite's
    preset_fidelity: dict[str, str] = field(default_factory=dict)
    # named hyperparameter sets {name: values differing from the defaults}; the default preset's values are the
    # `params` defaults, so it maps to {}
    presets: dict[str, dict] = field(default_factory=lambda: {"default": {}})
    default_preset: str = "default"
    # memory_bytes(image_size, batch_size, hparams) -> bytes the detector's largest batch pass needs at its peak
    # (batch_size: the run's --batch-size; a trained detector's training batch is in hparams). `runner.prepare`
    # refuses a run it does not fit, and the grid's memory check adds it; measured figures: docs/cluster.md
    memory_bytes: Callable[[int, int, dict], int] = backbone_memory
    # preset → which torchvision ImageNet weights `--weights imagenet` means for it: "IMAGENET1K_V1" or "DEFAULT"
    # (torchvision's current default: V2 for wide_resnet50_2, V1 for resnet18; bench.features.IMAGENET_TAGS).
    # A property of the preset, not a hyperparameter: the weights are an input of the run (ImageInputs.weights)
    # and enter the run key through their id. Presets not listed use IMAGENET1K_V1
    imagenet_weights: dict[str, str] = field(default_factory=dict)
    # preset → how the image track loads this detector's images ({"normalize": bool, "resize": one of RESIZES,
    # "feature_dtype": one of CACHE_DTYPES}), over PRESET_IMAGE_LOADING (by preset name) over LOADING_DEFAULTS. Like
    # the weights, inputs of the run (ImageInputs.normalize/.resize/.feature_dtype), not hyperparameters; a run may
    # set them itself
    image_loading: dict[str, dict] = field(default_factory=dict)
    # what the grid's host-memory model (bench.hpc.memory) needs: how the training features stay in the feature
    # cache (one of TRAIN_FEATURES; None: undeclared, the largest) and the detector's own host state in bytes as a
    # function of the run (banks, distributions, trained networks; None: undeclared, `undeclared_state`)
    train_features: str | None = None
    host_state_bytes: Callable[[HostRun], int] | None = None

    def __post_init__(self):
        check_presets(self.name, self.params, self.presets, self.default_preset)
        if self.train_features is not None and self.train_features not in TRAIN_FEATURES:
            raise choice_error(f"{self.name}: train_features", self.train_features, TRAIN_FEATURES)
        for preset, values in self.image_loading.items():
            valid = _LOADING_VALUES
            if preset not in self.presets or any(k not in valid or not valid[k](v) for k, v in values.items()):
                raise RuntimeError(f"{self.name}: image_loading {preset!r}: {values!r} must name a preset and set "
                                   f"normalize (true/false), resize ({', '.join(RESIZES)}) or feature_dtype "
                                   f"({', '.join(CACHE_DTYPES)})")
        for preset, generation in self.imagenet_weights.items():
            if preset not in self.presets or generation not in IMAGENET_GENERATIONS:
                raise RuntimeError(f"{self.name}: imagenet_weights {preset!r}: {generation!r} must name a preset "
                                   f"and one of {', '.join(IMAGENET_GENERATIONS)}")

    def imagenet_generation(self, preset: str | None) -> str:
        """The torchvision weights generation `--weights imagenet` resolves to under `preset` (None: default)."""
        return self.imagenet_weights.get(self.preset_name(preset), "IMAGENET1K_V1")

    def loading(self, preset: str | None) -> dict:
        """{"normalize", "resize", "feature_dtype"}: how the image track loads this detector's images under `preset`."""
        name = self.preset_name(preset)
        return {**LOADING_DEFAULTS, **PRESET_IMAGE_LOADING.get(name, {}), **self.image_loading.get(name, {})}

    def defaults(self) -> dict:
        return {k: (list(p.default) if isinstance(p.default, list) else p.default) for k, p in self.params.items()}

    def preset_name(self, preset: str | None) -> str:
        """`preset`, checked, or the default preset's name for None."""
        name = self.default_preset if preset is None else preset
        if name not in self.presets:
            raise choice_error(f"{self.name} preset", name, self.presets)
        return name

    def resolve(self, overrides: dict | None = None, preset: str | None = None) -> dict:
        """Defaults, the preset's values (None: the default preset), then checked overrides; an unknown name
        lists the valid ones."""
        return resolve_params(self.name, self.params, self.presets, self.default_preset, preset, overrides)

    def recorded_preset(self, asked: str | None, hparams: dict, *, weights_by_preset: bool,
                        same_run: Callable[[str], bool] | None = None) -> tuple[str, list]:
        """(the preset name a run with the resolved `hparams` records, every preset as near): decided by
        the values, not by the name asked, so every run of one key records the same (`--preset original --set
        blur_sigma=0`, equal to `inclad`, records inclad, whichever command made the file). Among the presets that
        give the run's inputs (all of them, or with `weights_by_preset` those whose ImageNet weights generation is
        the asked one's, and with `same_run` those it accepts: whether a preset runs as this run did beyond its
        values, e.g. the image loading or a track's preset-bound settings), the first in the spec's order with the
        fewest values differing from `hparams`: the exact match where there is one; every preset at that distance
        is listed (a tabular model's `released` may equal its `suite`). No preset gives the run's inputs (loading
        set by hand): the asked name."""
        generation = self.imagenet_generation(asked)
        same_inputs = [p for p in self.presets
                       if (not weights_by_preset or self.imagenet_generation(p) == generation)
                       and (same_run is None or same_run(p))]
        if not same_inputs:
            return self.preset_name(asked), [self.preset_name(asked)]

        def differing(preset: str) -> int:
            values = self.resolve(preset=preset)
            return sum(values.get(k) != hparams.get(k) for k in set(values) | set(hparams))

        fewest = min(differing(p) for p in same_inputs)
        nearest = [p for p in same_inputs if differing(p) == fewest]
        return nearest[0], nearest

    def cached_train_images(self, protocol: str, n_train: list) -> int:
        """Training images whose features the host feature cache holds at its peak (see TRAIN_FEATURES)."""
        if self.inputs != "features":
            return 0
        held = {"single_pass": 0, "epochs": round(1.2 * max(n_train)),
                "replay": max(n_train) if protocol == "ncl" else sum(n_train)}
        return held[self.train_features] if self.train_features is not None else max(held.values())

    def host_state(self, run: HostRun) -> int:
        """Bytes of the detector's own host state in `run` (its declaration, or the safe undeclared default)."""
        return int((self.host_state_bytes or undeclared_state)(run))

    def asset_ids(self, hparams: dict) -> dict:
        return self.assets(hparams) if self.assets is not None else {}

    def layers(self, hparams: dict) -> tuple[str, ...]:
        if self.inputs != "features":
            return ()
        return tuple(self.layers_of(hparams)) if self.layers_of else tuple(hparams.get("layers", ()))


_SPECS: dict[str, ModelSpec] = {}
_BUILT_IN: set[str] = set()  # names the suite's own detector packages registered
_DISCOVERED = False
_PLUGIN_ERRORS: dict[str, str] = {}  # entry point name -> the one line its load failed with


def register(spec: ModelSpec) -> ModelSpec:
    """Called once, at the bottom of the detector's own file. A name is registered once: a second spec under it
    (another factory, or the same factory with other defaults) would move every run of the first."""
    if spec.name in _SPECS and _SPECS[spec.name] != spec:
        owner = "a built-in detector" if spec.name in _BUILT_IN else "another module"
        raise RuntimeError(f"detector {spec.name!r} registered twice (it is {owner}'s name)")
    _check_spec(spec)
    _SPECS[spec.name] = spec
    return spec


def _check_spec(spec: ModelSpec) -> None:
    """What a plugin's spec must get right before any run uses it (the suite's own are checked the same way)."""
    if spec.track not in TRACKS:
        raise choice_error(f"{spec.name}: track", spec.track, TRACKS)
    if spec.inputs not in INPUTS[spec.track]:
        raise choice_error(f"{spec.name}: inputs", spec.inputs, INPUTS[spec.track])
    for key, param in spec.params.items():
        default = list(param.default) if isinstance(param.default, list) else param.default
        param.check(spec.name, key, default)  # a default outside its own range: ConfigError naming it
    spec.resolve(spec.quick)
    _check_factory(spec)


def _check_factory(spec: ModelSpec) -> None:
    """The factory accepts what a run will pass it (ModelSpec's doc): every declared parameter by name, and on the
    image track the extractor and `image_size`. Otherwise the first run of the detector dies in a TypeError."""
    try:
        signature = inspect.signature(spec.factory)
    except (TypeError, ValueError):  # a callable without an introspectable signature: nothing to check
        return
    given = dict.fromkeys(spec.params)
    call = "factory(**hparams)"
    args: tuple = ()
    if spec.track == "image":
        args, given, call = (None,), {"image_size": None, **given}, "factory(extractor, image_size=..., **hparams)"
    try:
        signature.bind(*args, **given)
    except TypeError as e:
        raise ConfigError(f"{spec.name}: its factory {getattr(spec.factory, '__qualname__', spec.factory)}"
                          f"{signature} does not accept its declared parameters ({e}); a run calls {call} with "
                          f"hparams {', '.join(spec.params) or '(none)'}") from None


def _discover_built_ins() -> None:
    """Import every detector module of each track's detector package (bench.tracks.DETECTOR_PACKAGES): each
    registers itself. Plugins are imported only when asked for by name (`get`) or listed with their specs."""
    global _DISCOVERED
    if _DISCOVERED:
        return
    for prefix in DETECTOR_PACKAGES.values():  # by name: the registry imports no track
        for name in _module_names(importlib.import_module(prefix)):
            importlib.import_module(f"{prefix}.{name}")
    _BUILT_IN.update(_SPECS)
    _DISCOVERED = True


def _module_names(package) -> list[str]:
    return [i.name for i in pkgutil.iter_modules(package.__path__)
            if i.name not in _INFRASTRUCTURE and not i.name.startswith("_")]


def _warn_once(text: str) -> None:
    plugins.warn_once(text)


def _entry_points() -> dict:
    """{name: entry point} of the detector plugins (bench.plugins: scanned once per environment; a copy)."""
    return plugins.entry_points(ENTRY_POINT_GROUP)


def _load_plugin(entry) -> None:
    """Import one plugin's module (bench.plugins.load_into); every way the import can fail (SystemExit and
    KeyboardInterrupt included), or a module that registers no detector of its entry point's name, is one BenchError
    naming the distribution and entry point, remembered so it is raised again, not retried."""

    def wrong(added: set) -> str | None:
        if entry.name in _SPECS and entry.name not in _BUILT_IN:
            return None
        return (f"{plugins.describe(entry, 'detector')} registered no detector named {entry.name!r}: its module "
                f"must call bench.registry.register(ModelSpec(name={entry.name!r}, ...))"
                + (" (it is a built-in detector's name)" if entry.name in _BUILT_IN else ""))

    plugins.load_into(entry, "detector", _SPECS, _PLUGIN_ERRORS, wrong)


def _load_plugins() -> None:
    """Every plugin not loaded yet, for the listings (specs()): one that fails is a warning and left out; a run
    that names it gets the error (`get`)."""
    _discover_built_ins()
    for name, entry in _entry_points().items():
        if name in _SPECS and name not in _BUILT_IN:  # loaded already
            continue
        try:
            _load_plugin(entry)
        except BenchError as e:
            _warn_once(f"{e}; left out")


def names(track: str = "image") -> tuple[str, ...]:
    """A track's detector names without importing any detector or plugin (no torch; the CLI's --model choices):
    the modules of its detector package and the plugins' entry-point names, in specs()' order. A plugin's track is
    known only once it is loaded, so a plugin of the other track is listed too; `get` then refuses it, listing
    the valid names."""
    if track not in TRACKS:
        raise choice_error("track", track, TRACKS)
    package = importlib.import_module(DETECTOR_PACKAGES[track])  # by name: the registry imports no track
    found = set(_module_names(package)) | set(_entry_points())
    first = INCLAD_MODELS if track == "image" else ()
    return tuple(m for m in first if m in found) + tuple(sorted(found - set(first)))


def specs(track: str = "image") -> dict[str, ModelSpec]:
    """Registered detectors of one track; image: InCLAD's nine first in their canonical order, then by name."""
    if track not in TRACKS:
        raise choice_error("track", track, TRACKS)
    _load_plugins()
    mine = {m for m, s in _SPECS.items() if s.track == track}
    order = [m for m in INCLAD_MODELS if m in mine] + sorted(mine - set(INCLAD_MODELS))
    return {m: _SPECS[m] for m in order}


def get(name: str, track: str = "image") -> ModelSpec:
    """The spec of `name`, importing only the plugin of that name (a broken plugin stops only what uses it)."""
    if track not in TRACKS:
        raise choice_error("track", track, TRACKS)
    _discover_built_ins()
    if name not in _SPECS:
        entries = _entry_points()
        if name in entries:
            _load_plugin(entries[name])
    spec = _SPECS.get(name)
    if spec is None or spec.track != track:  # listing the valid names loads the other plugins
        raise choice_error("tabular model" if track == "tabular" else "model", name, specs(track))
    return spec

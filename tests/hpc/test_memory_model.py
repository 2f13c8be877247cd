"""The host-memory model behind `make submit`'s memory check: what each detector's spec declares decides its
estimate, never its name. The built-ins' estimates are pinned (memory_pins.json, recorded before the per-model
knowledge moved from the grid into the specs), and a plugin detector is estimated from its own declaration, or
safely over-estimated when it declares nothing."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from bench.config import BACKBONES, IMAGE_PROTOCOLS, ImageInputs, RunConfig
from bench.hpc import grid as grids
from bench.hpc.grid import GIB, estimate_memory
from bench.errors import ConfigError
from bench.image.protocols import check_protocol
from bench.registry import INCLAD_MODELS, get
from helpers import write_grid

PINS = Path(__file__).with_name("memory_pins.json")
REQUEST = 16 * GIB  # the job request the pinned peaks are taken under


def protocols(model: str) -> list[str]:
    """The image protocols `model` can run (cumulative needs a gradient-trained detector)."""
    out = []
    for protocol in IMAGE_PROTOCOLS:
        try:
            check_protocol(protocol, get(model))
            out.append(protocol)
        except ConfigError:
            pass
    return out


def estimates_of_a_planned_grid(root: Path, tmp_path: Path) -> dict:
    """{model/backbone/protocol: [fixed, cache, peak]} of every run of a small grid over every built-in detector,
    both backbones and every image protocol (each model at its paper image size, its default preset)."""
    path = write_grid(tmp_path / "all.yaml", models={m: {"protocols": protocols(m)} for m in INCLAD_MODELS}, backbones=list(BACKBONES),
                      protocols=list(IMAGE_PROTOCOLS), orderings=["easy_to_hard"], image_size=None)
    data = json.loads(path.read_text())
    del data["image_size"]
    path.write_text(json.dumps(data))
    grid = grids.load_grid("synthetic", path)
    out = {}
    for p in grids.expand(grid, grids.load_profile("cpu"), grids.Selection(), root, tmp_path / "out"):
        cfg = p.run.config
        est = estimate_memory(p.run)
        out[f"{cfg.model}/{cfg.image.backbone}/{cfg.protocol}"] = [est.fixed, est.cache, est.peak(REQUEST)]
    return out


def visa_run(model: str, backbone: str, protocol: str, preset: str, dtype: str, hparams: dict | None = None):
    """A run as the planner sees it with VisA's image counts (12 tasks, 722 train / 180 test), without files."""
    tasks = [f"t{i}" for i in range(12)]
    hp = get(model).resolve(hparams, preset)
    cfg = RunConfig(dataset="visa", root=".", model=model, tasks=tasks, protocol=protocol, hparams=hp,
                    inputs=ImageInputs(backbone=backbone if get(model).inputs == "features" else "none",
                                       feature_dtype=dtype))
    return SimpleNamespace(config=cfg, splits={t: SimpleNamespace(train=[0] * 722, test=[0] * 180) for t in tasks})


def estimates_with_visa_counts() -> dict:
    out = {}
    for model in INCLAD_MODELS:
        for preset in get(model).presets:
            for backbone in BACKBONES:
                for protocol in protocols(model):
                    for dtype in ("float16", "float32"):
                        est = estimate_memory(visa_run(model, backbone, protocol, preset, dtype))
                        out[f"{model}/{preset}/{backbone}/{protocol}/{dtype}"] = [est.fixed, est.cache,
                                                                                  est.peak(REQUEST)]
    return out


def test_the_builtin_estimates_are_the_pinned_ones(tiny_root, tmp_path):
    pins = json.loads(PINS.read_text())
    planned = estimates_of_a_planned_grid(tiny_root, tmp_path)
    # raw-image detectors plan one run per ordering × protocol, whatever the backbone axis
    assert len(planned) == sum(len(protocols(m)) * (2 if get(m).inputs == "features" else 1) for m in INCLAD_MODELS)
    assert planned == pins["planned_grid"]
    assert estimates_with_visa_counts() == pins["visa_counts"]

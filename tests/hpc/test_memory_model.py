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
from bench.hpc.memory import GIB, estimate_memory
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


def plan_plugin(monkeypatch, root: Path, tmp_path: Path, **declared):
    """The one planned run (cl, resnet18) of a plugin detector registered here: STFPM under another name, with
    the host-memory declarations `declared` in place of STFPM's."""
    from dataclasses import replace

    from bench import registry

    spec = replace(get("stfpm"), name="plugin_det", **{"train_features": None, "host_state_bytes": None, **declared})
    monkeypatch.setitem(registry._SPECS, spec.name, spec)
    path = write_grid(tmp_path / "plugin.yaml", models={spec.name: {}}, orderings=["easy_to_hard"],
                      protocols=["cl"])
    [planned] = grids.expand(grids.load_grid("synthetic", path), grids.load_profile("cpu"), grids.Selection(),
                             root, tmp_path / "out")
    return planned.run


def test_a_plugin_detector_is_estimated_from_its_own_declaration(monkeypatch, tiny_root, tmp_path):
    seen = []

    def host_state_bytes(run):
        seen.append(run)
        return 7 * GIB + run.banks  # a bank per task: the estimate must follow the run it is given

    run = plan_plugin(monkeypatch, tiny_root, tmp_path, train_features="single_pass",
                      host_state_bytes=host_state_bytes)
    plugin = estimate_memory(run)
    stfpm = estimate_memory(SimpleNamespace(config=replace_model(run.config, "stfpm"), splits=run.splits))
    n_tasks = len(run.config.tasks)
    assert [s.banks for s in seen] == [n_tasks] and seen[0].n_train == tuple(len(run.splits[t].train)
                                                                           for t in run.config.tasks)
    # the same run under STFPM's declarations (trained state 1 GiB, features revisited every epoch)
    assert plugin.fixed - stfpm.fixed == 7 * GIB + n_tasks - GIB
    per_image = stfpm.cache // (sum(len(run.splits[t].test) for t in run.config.tasks)
                                + round(1.2 * max(len(run.splits[t].train) for t in run.config.tasks)))
    assert plugin.cache == per_image * sum(len(run.splits[t].test) for t in run.config.tasks)  # single pass


def test_a_plugin_that_declares_nothing_is_over_estimated(monkeypatch, tiny_root, tmp_path):
    run = plan_plugin(monkeypatch, tiny_root, tmp_path)
    plugin = estimate_memory(run)
    n_train = [len(run.splits[t].train) for t in run.config.tasks]
    for declared in ({"train_features": f} for f in ("single_pass", "epochs", "replay")):
        spec = get("plugin_det")
        from dataclasses import replace

        from bench import registry

        monkeypatch.setitem(registry._SPECS, "plugin_det", replace(spec, **declared, host_state_bytes=None))
        assert estimate_memory(run).cache <= plugin.cache  # undeclared caching: at least any declared one
        monkeypatch.setitem(registry._SPECS, "plugin_det", spec)
    stfpm = estimate_memory(SimpleNamespace(config=replace_model(run.config, "stfpm"), splits=run.splits))
    assert plugin.cache > stfpm.cache  # more than STFPM's "epochs" on a 5-task CL stream (keeps every task's)
    assert plugin.fixed >= stfpm.fixed  # at least a trained detector's state
    # the undeclared state: every training feature of the stream in float32, when that exceeds 1 GiB
    assert get("plugin_det").host_state(SimpleNamespace(layers=((1024, 28 * 28),), n_train=tuple(n_train))) \
        == max(GIB, 1024 * 28 * 28 * 4 * sum(n_train))
    from bench.registry import TRAINED_STATE_BYTES, undeclared_state

    big = SimpleNamespace(layers=((1024, 28 * 28),), n_train=(722,) * 12)
    assert undeclared_state(big) > TRAINED_STATE_BYTES


def test_a_spec_declares_a_known_caching():
    from dataclasses import replace

    with pytest.raises(ConfigError, match="train_features"):
        replace(get("stfpm"), train_features="sometimes")


def replace_model(config, model: str):
    from dataclasses import replace

    return replace(config, model=model)

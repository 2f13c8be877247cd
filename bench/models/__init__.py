"""Detector registry: one file per detector, one factory."""

from __future__ import annotations

from bench.errors import ConfigError, choice_error

# The nine InCLAD detectors; those without a file yet are rejected with a clear message, never skipped.
ALL_MODELS = ("patchcore", "padim", "cfa", "stfpm", "rd4ad", "efficientad", "paste", "fastflow", "ganomaly")

# Hyperparameter defaults: InCLAD Table 6 (the CL-adapted methods) and Table 7.
DEFAULTS: dict[str, dict] = {
    "patchcore": dict(layers=["layer2", "layer3"], coreset_ratio=0.1, projection_dim=128, n_starts=10,
                      blur_sigma=4.0, previous_ratio=0.25),
    "padim": dict(layers=["layer1", "layer2", "layer3"], n_features=100, eps=0.01, blur_sigma=4.0),
    # replay_size (CL only) is not given by InCLAD: images kept for replay, split equally between past tasks.
    "cfa": dict(layers=["layer1", "layer2", "layer3"], epochs=50, lr=1e-3, weight_decay=5e-4, k_neighbors=3,
                repulsion_neighbors=3, blur_sigma=4.0, replay_size=100),
}


def _classes() -> dict:
    from bench.models.cfa import Cfa
    from bench.models.padim import Padim
    from bench.models.patchcore import PatchCore

    return {"patchcore": PatchCore, "padim": Padim, "cfa": Cfa}


def implemented() -> tuple[str, ...]:
    return tuple(_classes())


def check_model(name: str) -> None:
    if name not in ALL_MODELS:
        raise choice_error("model", name, ALL_MODELS)
    if name not in _classes():
        raise ConfigError(f"model {name!r} is not implemented yet (implemented: {', '.join(implemented())})")


def resolve_hparams(name: str, overrides: dict | None = None) -> dict:
    """Defaults merged with overrides; an unknown hyperparameter name lists the valid ones."""
    check_model(name)
    params = dict(DEFAULTS[name])
    for key, value in (overrides or {}).items():
        if key not in params:
            raise choice_error(f"{name} hyperparameter", key, params)
        params[key] = value
    return params


def build_detector(name: str, extractor, image_size: int, hparams: dict):
    check_model(name)
    return _classes()[name](extractor, image_size=image_size, **hparams)


def model_layers(name: str, hparams: dict) -> tuple[str, ...]:
    return tuple(hparams.get("layers", ()))

"""Detectors: one file per detector, each registering a `ModelSpec` (bench.registry); one factory."""

from __future__ import annotations

from bench.registry import get, specs


def implemented() -> tuple[str, ...]:
    return tuple(specs())


def check_model(name: str) -> None:
    get(name)


def resolve_hparams(name: str, overrides: dict | None = None, preset: str | None = None) -> dict:
    """Registry defaults, the preset's values (None: the model's default preset), then type- and range-checked
    overrides."""
    return get(name).resolve(overrides, preset)


def build_detector(name: str, extractor, image_size: int, hparams: dict):
    """The detector `name` with fully resolved `hparams` (see resolve_hparams)."""
    return get(name).factory(extractor, image_size=image_size, **hparams)


def create(name: str, extractor, image_size: int, **overrides):
    """The detector `name` with its registry defaults, `overrides` checked: what tests and benchmarks call."""
    return build_detector(name, extractor, image_size, resolve_hparams(name, overrides))


def model_layers(name: str, hparams: dict) -> tuple[str, ...]:
    return get(name).layers(hparams)

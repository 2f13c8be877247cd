"""A preset's fidelity, declared with its registration, decides the tabular track's released behaviour: a detector
from outside with a released preset of any name gets the released evaluation, non-finite policy and Replay share
rule without touching track code (bench/tabular/fidelity.py)."""

from __future__ import annotations

import dataclasses

import pytest
from test_tabular_runner import config, index  # noqa: F401 (module fixture)

import bench.registry as registry
from bench.continual.runner import prepare
from bench.errors import ConfigError
from bench.tabular.fidelity import Fidelity, behaviour, fidelity


@pytest.fixture
def plugin(monkeypatch):
    """`cadforest`: Isolation Forest registered from outside with a preset `cad` that declares the released
    fidelity and a preset `wide` that is the suite's (its values differ, so no preset name decides anything)."""
    base = registry.get("iforest", "tabular")
    spec = dataclasses.replace(base, name="cadforest", label="CADForest",
                               presets={**base.presets, "cad": {}, "wide": {"n_estimators": 50}},
                               preset_fidelity={"cad": "released"})
    monkeypatch.setitem(registry._SPECS, "cadforest", spec)  # as a plugin's registration would leave it
    return spec


def test_the_declared_fidelity_decides_and_a_released_name_alone_still_means_released(plugin):
    assert fidelity(plugin, "cad") is Fidelity.RELEASED and fidelity(plugin, "wide") is Fidelity.SUITE
    assert fidelity(plugin, "released") is Fidelity.RELEASED  # the built-ins' convention, undeclared
    assert behaviour(plugin, "cad") == behaviour(registry.get("iforest", "tabular"), "released")


def test_a_plugin_preset_declared_released_runs_the_released_protocol(plugin, index):
    cad = prepare(config(index, "cl", model="cadforest", preset="cad"), out=index.parent / "cad.h5").config
    assert (cad.evaluation, cad.tabular.nonfinite, cad.tabular.replay_share) == ("cross", "released", "floor")
    wide = prepare(config(index, "cl", model="cadforest", preset="wide"), out=index.parent / "wide.h5").config
    assert (wide.tabular.nonfinite, wide.tabular.replay_share) == ("stop", "water")
    assert wide.evaluation != "cross"


def test_an_unknown_fidelity_is_one_error_naming_the_detector_and_preset(plugin):
    odd = dataclasses.replace(plugin, preset_fidelity={"cad": "faithful"})
    with pytest.raises(ConfigError, match="cadforest: preset 'cad' fidelity"):
        behaviour(odd, "cad")

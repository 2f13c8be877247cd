"""Faithful tabular validation (issue 20): the grids validate with models that did not build the scenario."""

from __future__ import annotations

import pytest
import yaml

from bench.errors import ConfigError
from bench.hpc import grid as grids
from bench.tabular.scenario import MODELS as CONSTRUCTION_MODELS

VALIDATION_MODELS = {"vae", "deepsvdd", "dagmm", "neutralad"}  # CAD §4's phase 2


def tabular_grids():
    """Every shipped tabular grid: (result-set name, path, parsed YAML)."""
    out = []
    for path in sorted(grids.JOBS_DIR.glob("*.yaml")):
        data = yaml.safe_load(path.read_text())
        if data.get("track") == "tabular":
            name = "tabular-synthetic" if data["dataset"] == "synthetic" else (
                "tabular-multi" if data["dataset"] == "multi" else data["dataset"])
            out.append((name, path, data))
    return out


def test_every_tabular_grid_validates_with_other_models_than_construction():
    found = tabular_grids()
    assert {p.name for _, p, _ in found} >= {"cicids2017.yaml", "cicids2018.yaml", "cicunsw.yaml",
                                            "tabular-multi.yaml", "tabular-synthetic.yaml"}
    checks = []
    for name, path, data in found:
        grid = grids.load_grid(name, path)
        if data.get("construction_check"):
            checks.append(path.name)
            continue
        assert not set(grid.models) & set(CONSTRUCTION_MODELS), path.name
        assert set(grid.models) == VALIDATION_MODELS, path.name
    assert checks == ["tabular-synthetic-construction-check.yaml"]  # the one place construction models run


def test_a_construction_model_in_a_validation_grid_is_one_line_naming_the_grid(tmp_path):
    data = yaml.safe_load(grids.grid_path("tabular-synthetic").read_text())
    data["models"]["iforest"] = {}
    path = tmp_path / "tabular-synthetic.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=r"tabular-synthetic.yaml: iforest built the scenario.*"
                                          r"tabular-synthetic-construction-check.yaml") as err:
        grids.load_grid("tabular-synthetic", path)
    assert "\n" not in str(err.value)
    data["construction_check"] = "yes"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match="construction_check must be true or false"):
        grids.load_grid("tabular-synthetic", path)

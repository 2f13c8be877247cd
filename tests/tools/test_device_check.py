"""`make device-check`, the CPU-vs-GPU agreement check run when a GPU is lent: on the CPU against itself every
run repeats exactly (the check's own machinery, and CPU determinism), a missing device exits 2 in seconds, and a
cell NaN on one device only counts as a disagreement."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from bench.cli import main
from bench.tools import device_check
from helpers import one_error_line


# One detector of each kind the check treats differently: frozen with task banks (scores compared), trained with
# task banks (routing compared), trained on a frozen backbone, trained without one. Each detector's own CPU
# determinism is pinned by tests/models/test_contract.py; this test pins the check's machinery.
CHECKED = ["patchcore", "cfa", "stfpm", "ganomaly"]


@pytest.mark.slow
def test_cpu_against_itself_agrees_exactly(tmp_path, capsys):
    out = tmp_path / "check.json"
    assert main(["device-check", "--device", "cpu", "--quick", "--models", ",".join(CHECKED), "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    rows = report["agreement"]
    assert [(r["model"], r["protocol"]) for r in rows] == [(m, p) for m in CHECKED for p in ("ncl", "cl")]
    assert all(r["ok"] and r["max_abs_dR"] == 0 and r["max_rel_dscore"] == 0 for r in rows)
    assert all(r["routing_equal"] for r in rows if "routing_equal" in r)
    assert {r["model"] for r in rows if "routing_equal" in r} == {"patchcore", "cfa"}  # task banks
    assert report["ok"] is True and "all agree" in capsys.readouterr().out


def test_by_default_every_detector_is_checked_trained_ones_for_one_epoch(tmp_path, monkeypatch):
    """Without --models the check covers every detector module of bench.models (and plugin): `names()` lists them
    without importing any, so a detector that fails to register, or one left out of the default, is caught."""
    from bench.registry import names, specs

    checked = {}

    def record(root, work, device, models):  # the settings each model would be checked with, without running it
        checked.update({model: device_check.MODELS[model] for model in models})
        return []

    monkeypatch.setattr(device_check, "agreement", record)
    assert main(["device-check", "--device", "cpu", "--quick", "--out", str(tmp_path / "c.json")]) == 0
    assert list(checked) == list(names())
    trained = [m for m, spec in specs().items() if "epochs" in spec.params]
    assert trained and all(checked[m]["epochs"] == 1 for m in trained)


@pytest.mark.parametrize("models", ["patchcore,nope", ","])
def test_unknown_or_no_models_are_refused_in_one_line(tmp_path, capsys, models):
    assert main(["device-check", "--device", "cpu", "--models", models, "--out", str(tmp_path / "c.json")]) == 2
    err = one_error_line(capsys)
    assert "known: patchcore" in err and not (tmp_path / "c.json").exists()
    assert ("nope" in err) == ("nope" in models)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_missing_device_exits_2_without_a_report(tmp_path, capsys):
    out = tmp_path / "check.json"
    assert main(["device-check", "--device", "cuda", "--out", str(out)]) == 2
    assert "CUDA is not available" in capsys.readouterr().err and not out.exists()


def test_a_cell_defined_on_one_device_only_is_a_disagreement():
    a = np.array([[0.9, np.nan], [0.8, 0.7]])
    assert device_check._r_difference(a, a + 0.01) == pytest.approx(0.01)
    b = a.copy()
    b[0, 1] = 0.5
    assert device_check._r_difference(a, b) == float("inf")

"""`make device-check`, the CPU-vs-GPU agreement check run when a GPU is lent: on the CPU against itself every
run repeats exactly (the check's own machinery, and CPU determinism), a missing device exits 2 in seconds, and a
cell NaN on one device only counts as a disagreement."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from bench import device_check


# One detector of each kind the check treats differently: frozen with task banks (scores compared), trained with
# task banks (routing compared), trained on a frozen backbone, trained without one. Each detector's own CPU
# determinism is pinned by tests/test_contract.py; this test pins the check's machinery.
CHECKED = ["patchcore", "cfa", "stfpm", "ganomaly"]


@pytest.mark.slow
def test_cpu_against_itself_agrees_exactly(tmp_path, capsys):
    out = tmp_path / "check.json"
    assert device_check.main(["--device", "cpu", "--quick", "--models", ",".join(CHECKED), "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    rows = report["agreement"]
    assert [(r["model"], r["protocol"]) for r in rows] == [(m, p) for m in CHECKED for p in ("ncl", "cl")]
    assert all(r["ok"] and r["max_abs_dR"] == 0 and r["max_rel_dscore"] == 0 for r in rows)
    assert all(r["routing_equal"] for r in rows if "routing_equal" in r)
    assert {r["model"] for r in rows if "routing_equal" in r} == {"patchcore", "cfa"}  # task banks
    assert report["ok"] is True and "all agree" in capsys.readouterr().out


def test_every_registered_detector_is_checked_by_default_and_unknown_ones_refused(tmp_path, capsys):
    from bench.models.registry import specs

    assert list(device_check.MODELS) == list(specs())
    with pytest.raises(SystemExit) as exit_:
        device_check.main(["--device", "cpu", "--models", "patchcore,nope", "--out", str(tmp_path / "c.json")])
    assert exit_.value.code == 2 and "nope" in capsys.readouterr().err and not (tmp_path / "c.json").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_missing_device_exits_2_without_a_report(tmp_path, capsys):
    out = tmp_path / "check.json"
    assert device_check.main(["--device", "cuda", "--out", str(out)]) == 2
    assert "CUDA is not available" in capsys.readouterr().err and not out.exists()


def test_a_cell_defined_on_one_device_only_is_a_disagreement():
    a = np.array([[0.9, np.nan], [0.8, 0.7]])
    assert device_check._r_difference(a, a + 0.01) == pytest.approx(0.01)
    b = a.copy()
    b[0, 1] = 0.5
    assert device_check._r_difference(a, b) == float("inf")

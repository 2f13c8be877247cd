"""Degenerate numbers are said, not published silently (issue 31 §5): a cell whose test scores are mostly one
value is warned of and counted in the summary beside NaN cells; the PatchCore-CL ties seen on real files are the
distance-weighted compression of InCLAD App. C.1 (reproduced below), not a defect; a one-task stream says "BWT n/a
(one task)" before the work and in its summary. Each test fails on the code before the issue."""

from __future__ import annotations

import numpy as np
import torch

from bench import results
from bench.cli import main
from bench.continual.runner import execute, prepare
from bench.models.ops.coreset import greedy_coreset
from bench.models.ops.knn import nn_distance
from bench.models.patchcore import PatchCore
from helpers import make_run_config

RUN = ["run", "--dataset", "synthetic", "--model", "patchcore", "--weights", "none", "--image-size", "64",
       "--batch-size", "8", "--device", "cpu", "--workers", "0", "--no-progress"]


def test_patchcore_cl_compression_ties_old_images_that_share_a_patch_near_the_new_task():
    """The finding behind the real-file ties (27 of 28 bottle images one score after the first compression): InCLAD
    App. C.1 weights each old patch by its distance to the current task, w(z) = min_c ||z - c||, and keeps
    argmax w(z)·min_s ||z - s||. A patch every old image shares (a uniform background) that lies near the new
    task gets a small w and is dropped; each old image's largest patch distance is then that shared patch's
    distance to the compressed bank, one number for every image. Plain k-center at the same budget keeps the
    patch and nothing ties: the ties are the method's (bench/models/patchcore.py PatchCoreTaskBanks.learn)."""
    g = torch.Generator().manual_seed(0)
    d, patches = 16, 64
    background = torch.zeros(d)
    background[0] = 1.0

    def images(n):  # 48 background patches, identical in every image, and 16 object patches that vary
        x = background.repeat(n, patches, 1).clone()
        x[:, :16] = 2.0 + torch.randn(n, 16, d, generator=g)
        return x

    old_bank = torch.cat([background[None], images(8)[:, :16].reshape(-1, d)])  # a native coreset holds it
    new_task = background * 1.2 + 0.05 * torch.randn(200, d, generator=g)  # surfaces near the old background
    b_t = max(1, int(0.25 * len(new_task)))  # ρ = 0.25, t = 2
    weighted = old_bank[greedy_coreset(old_bank, b_t, weights=nn_distance(old_bank, new_task))]
    plain = old_bank[greedy_coreset(old_bank, b_t, generator=torch.Generator().manual_seed(3))]
    test = images(12).reshape(-1, d)

    def largest_tie(bank):
        scores = nn_distance(test, bank).view(12, patches).max(1).values.numpy()
        return int(np.unique(scores, return_counts=True)[1].max())

    assert float(nn_distance(background[None], weighted)) > 1.0  # dropped by the weighting
    assert float(nn_distance(background[None], plain)) == 0.0  # kept without it
    assert largest_tie(weighted) == 12 and largest_tie(plain) == 1


def test_a_cell_with_most_scores_tied_is_warned_and_counted_in_the_summary(tiny_root, tmp_path, monkeypatch):
    """Every test image of `chip` gets one score (what the compression above does to a real task): both its cells
    are warned of when evaluated, and the summary line and runs.csv row count 2 of 3 cells, as they count NaN
    cells; the cells of `disc` are not."""
    original = PatchCore.predict

    def flat_on_chip(self, split, idx):
        pred = original(self, split, idx)
        if split.task == "chip":
            pred.scores = np.full_like(pred.scores, 0.25)
        return pred

    monkeypatch.setattr(PatchCore, "predict", flat_on_chip)
    messages = []
    run = prepare(make_run_config(tiny_root, ["chip", "disc"], protocol="ncl"), out=tmp_path / "r.h5")
    path = execute(run, progress=False, log=messages.append)
    warned = [m for m in messages if m.startswith("warning: ") and "have one score" in m]
    assert len(warned) == 2 and all("task chip:" in m and "16 of 16 test images" in m for m in warned), messages
    assert "(2/3 cells with most scores tied)" in results.summary_lines(path)[0]
    assert results.summary_row(results.read_run(path))["tied_cells"] == 2


def test_a_one_task_run_says_bwt_is_not_applicable_up_front_and_in_its_summary(tiny_root, tmp_path, capsys):
    """A one-task stream ended in "BWT +nan FM nan" and "(1 tasks": now a note before the work and "n/a (one
    task)" in the summary, with no NaN printed."""
    assert main([*RUN, "--root", str(tiny_root), "--tasks", "chip", "--out", str(tmp_path / "one.h5")]) == 0
    out = capsys.readouterr().out
    assert "(1 task, " in out
    note = out.index("BWT and forgetting need a second task")
    assert note < out.index("learning task 1/1")
    summary = out[out.index("results: "):]
    assert "BWT n/a (one task)" in summary and "FM n/a (one task)" in summary and "nan" not in summary.lower()


def test_a_filtering_failure_names_each_pass_and_writes_its_record_before_the_error(tmp_path):
    """Issue 31 §5: scenario construction that filtered every task away logged `kept [...] removed [...] mean W
    None` and failed with counts only; now each pass says which task went by which criteria, the candidate's
    record (candidates/<name>/filtering.json) is written before the error, and the message counts "0 tasks"."""
    import json

    import pytest

    from bench.errors import ConfigError
    from bench.registry import get
    from bench.tabular.discovery import DiscoverySettings
    from bench.tabular.filtering import FilterSettings
    from bench.tabular.scenario import construct
    from bench.tabular.synthetic import generate

    root = generate(tmp_path / "raw", seed=0, n_normal=200, n_anomal=50)
    said = []
    with pytest.raises(ConfigError) as info:  # γ_l = 0.5: no ROC-AUC beats the baseline by more, FC1 flags all
        construct("synthetic", tmp_path / "out", root=root, candidates=[DiscoverySettings()], models=("iforest",),
                  hparams={"iforest": get("iforest", "tabular").quick}, fs=FilterSettings(gamma_l=0.5),
                  log=said.append)
    record = json.loads((tmp_path / "out" / "candidates" / "natural-day" / "filtering.json").read_text())
    assert record["kept"] == [] and len(record["passes"]) == len(record["removed"]) > 1
    line = next(s for s in said if s.startswith("candidate natural-day: kept"))
    assert line.startswith("candidate natural-day: kept 0 tasks; pass 1 removed ") and "(FC1" in line
    assert "mean W undefined" in line and "[" not in line and "None" not in line
    assert "natural-day: 0 tasks" in str(info.value) and "filtering.json" in str(info.value)

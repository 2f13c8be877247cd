"""End to end: real runs made by the runner (tiny synthetic preset, 64 px, weights=none) aggregate and verify."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from bench import results
from bench.cli import main
from bench.continual.runner import execute, prepare
from bench.metrics import roc_auc, summarize
from bench.report.bootstrap import roc_auc_cl_interval
from helpers import make_run_config

pytestmark = pytest.mark.slow
TASKS = ("stripes", "checker", "disc")


@pytest.fixture(scope="module")
def outputs(tiny_root, tmp_path_factory):
    """PatchCore NCL and CL on a 3-task stream, as `make demo` makes them (one ordering, fewer tasks)."""
    outputs = tmp_path_factory.mktemp("report") / "outputs"
    runs_dir = outputs / "synthetic" / "runs"
    runs_dir.mkdir(parents=True)
    for protocol in ("ncl", "cl"):
        cfg = make_run_config(tiny_root, TASKS, protocol=protocol, batch_size=16)
        execute(prepare(cfg, out_dir=runs_dir), progress=False, log=lambda *a: None)
    return outputs


def test_runner_files_aggregate_and_verify(outputs, capsys):
    args = ["--dataset", "synthetic", "--outputs", str(outputs)]
    assert main(["aggregate", *args, "--bootstrap", "200"]) == 0
    assert main(["verify", *args]) == 0
    assert "verified synthetic" in capsys.readouterr().out
    tables, files = outputs / "synthetic/tables", sorted((outputs / "synthetic/runs").glob("*.h5"))
    table = pd.read_csv(tables / "table2.csv")
    for path in files:
        run = results.read_run(path)
        protocol = json.loads(run["attrs"]["config"])["protocol"]
        for level in ("image", "pixel"):
            expected = summarize(run[f"R/{level}"])
            for metric in ("roc_auc_cl", "bwt"):
                cell = table[(table["metric"] == metric) & (table["level"] == level) & (table["protocol"] == protocol)]
                assert cell["mean"].item() == pytest.approx(expected[metric]) and cell["n_runs"].item() == 1
    for level in ("image", "pixel"):
        for protocol in ("ncl", "cl"):
            assert (outputs / f"synthetic/figures/heatmap_synthetic_custom_{protocol}_{level}.png").is_file()
    routing = pd.read_csv(tables / "routing.csv")
    assert list(routing["protocol"]) == ["cl"] and 0 <= routing["routing_accuracy"].item() <= 1
    runs = pd.read_csv(tables / "runs.csv")
    assert (runs["image_roc_auc_cl_ci_low"] <= runs["image_roc_auc_cl"]).all()
    assert (runs["image_roc_auc_cl"] <= runs["image_roc_auc_cl_ci_high"]).all()
    manifest = json.loads((tables / "manifest.json").read_text())
    assert sorted(e["path"] for e in manifest["inputs"]) == sorted(f"synthetic/runs/{p.name}" for p in files)
    assert "Rests on 2 complete runs from commit" in (tables / "table2.md").read_text()


def test_stored_scores_reproduce_R_so_the_bootstrap_resamples_the_right_images(outputs):
    """The bootstrap reads scores/* as (step, task) blocks in test-set order: those blocks must give R back."""
    for path in sorted((outputs / "synthetic/runs").glob("*.h5")):
        run = results.read_run(path)
        step, task = run["scores/step"], run["scores/task"]
        for i in range(len(TASKS)):
            for j in range(i + 1):
                cell = (step == i) & (task == j)
                assert roc_auc(run["scores/label"][cell], run["scores/value"][cell]) == run["R/image"][i, j]
        lo, hi = roc_auc_cl_interval(run, 300)
        assert lo <= summarize(run["R/image"])["roc_auc_cl"] <= hi and np.isfinite([lo, hi]).all()

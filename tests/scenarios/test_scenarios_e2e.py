"""`make scenarios DATASET=synthetic` end to end: STE runs → STE table → orderings → manifest with file lists,
which `run --ordering` then uses (tiny preset, 64 px, weights=none)."""

from __future__ import annotations

import os
import subprocess
import sys

import pandas as pd
import pytest

from bench import results
from bench.cli import main
from bench.data import manifest
from bench.data.synthetic import generate
from bench.hpc.grid import REPO
from bench.registry import specs


@pytest.mark.slow
def test_make_scenarios_writes_a_manifest_that_run_uses(tmp_path, monkeypatch):
    root = generate(tmp_path / "synthetic", preset="tiny", seed=0, n_tasks=2)
    scen, out = tmp_path / "scenarios", tmp_path / "out"
    env = {**os.environ, "BENCH_SCENARIOS_DIR": str(scen)}
    methods = [m for m in ("patchcore", "padim") if m in specs()]  # CFA trains for ~1 min per concept
    # -o: never (re)build the venv stamp from a test; PY: the interpreter running the tests
    cmd = ["make", "-s", "-o", ".venv/.installed", "scenarios", "DATASET=synthetic", f"ROOT={root}",
           f"SCENARIOS_OUT={out}", f"PY={sys.executable}",
           f"SCENARIOS_ARGS=--methods {','.join(methods)} --weights none --image-size 64 --batch-size 16 "
           f"--device cpu --workers 0 --no-progress"]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]

    ste = pd.read_csv(out / "ste.csv")
    assert sorted(zip(ste["concept"], ste["method"])) == sorted((c, m) for c in ("checker", "stripes")
                                                                for m in methods)
    assert ste["roc_auc"].between(0, 1).all()
    assert (out / "synthetic_ordering.md").is_file() and (out / "spearman.md").is_file()

    monkeypatch.setenv("BENCH_SCENARIOS_DIR", str(scen))
    m = manifest.load("synthetic")
    assert m["source"]["kind"] == "ste" and m["tasks"] == ["checker", "stripes"]
    assert sorted(m["files"]) == m["tasks"] and m["files"]["stripes"]["test"]["n"] == 16

    run_file = tmp_path / "run.h5"
    assert main(["run", "--dataset", "synthetic", "--root", str(root), "--ordering", "hard_to_easy",
                 "--weights", "none", "--protocol", "ncl", "--image-size", "64", "--batch-size", "16",
                 "--device", "cpu", "--workers", "0", "--out", str(run_file), "--no-progress"]) == 0
    run = results.read_run(run_file)
    assert run["tasks"] == m["orderings"]["hard_to_easy"]["tasks"]
    assert run["attrs"]["status"] == "complete"

"""`make perf` keeps working: every registered benchmark runs at --quick sizes and its correctness figures hold
(timings are not asserted: machines are noisy, and the figures of record go in notes)."""

from __future__ import annotations

import json

import pytest

from bench.cli import main
from bench.tools import perf
from helpers import one_error_line


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    out = tmp_path_factory.mktemp("perf") / "perf.json"
    assert main(["perf", "--quick", "--out", str(out)]) == 0
    return json.loads(out.read_text())


@pytest.mark.slow
def test_every_benchmark_reports(quick):
    assert quick["quick"] is True
    assert list(quick["results"]) == list(perf.BENCHMARKS)
    assert all(quick["results"][name] for name in perf.BENCHMARKS)


@pytest.mark.slow
def test_correctness_figures_hold(quick):
    res = quick["results"]
    assert res["pixel_auc"]["matches_reference"] is True
    assert res["passes"]["passes_per_image"] == 1
    assert res["padim_task"]["max_rel_diff"] < 1e-4  # batched PaDiM = per-location loop
    assert res["patchcore_task"]["image_auc"] >= 0.9
    assert res["assembly_bocpd"]["scores_match"] is True  # the compiled scorer = the released arithmetic
    assert res["assembly_build_audit"]["records"] > 0 and 0 < res["assembly_build_audit"]["overlap"]
    assert res["assembly_bootstrap"]["max_abs_diff"] < 1e-9  # the compiled bootstrap = the per-resample loop
    assert res["assembly_analyses"]["records"] > 0


@pytest.mark.slow
def test_cl_growth_memory_is_one_model_per_task(quick):
    growth = quick["results"]["cl_growth"]
    n = growth["tasks"]
    for model in ("padim", "cfa"):
        mb = growth[f"{model}_state_mb"]
        assert len(mb) == n and growth[f"{model}_state_r2"] == pytest.approx(1, abs=1e-3)
    # PatchCore's old banks share a fixed budget: its state stays far below n native banks
    assert growth["patchcore_state_mb"][-1] < n * growth["patchcore_state_mb"][0] / 2


def test_unknown_benchmark_is_refused_in_one_line_listing_the_valid_ones(tmp_path, capsys):
    assert main(["perf", "--only", "coreset,nope", "--out", str(tmp_path / "p.json")]) == 2
    err = one_error_line(capsys)
    assert "'nope'" in err and "coreset" in err and "pixel_auc" in err
    assert not (tmp_path / "p.json").exists()

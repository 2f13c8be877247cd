"""`scenarios ste --cluster slurm|local|debug`: the single-task experts go through `make submit`'s job machinery
(bench.hpc.commands.submit_runs), their records apart from the dataset grid's, and the STE table is collected from
the result files the jobs wrote. The SLURM test needs a reachable controller (`bash jobs/slurm/local-cluster.sh
start`); it is skipped otherwise, unless BENCH_REQUIRE_SLURM=1 makes that a failure."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest

from bench import results
from bench.data.synthetic import generate
from bench.hpc import records
from bench.hpc import status as st
from bench.hpc.grid import REPO
from helpers import cancel_recorded_jobs, squeue_state, write_grid
from helpers import cli_stdout as bench

WAIT_S = 600


@pytest.fixture(scope="module")
def two_concepts(tmp_path_factory) -> Path:
    return generate(tmp_path_factory.mktemp("ste_hpc") / "syn", preset="tiny", seed=0, n_tasks=2)


def ste_args(root, out, *extra) -> list:
    return ["scenarios", "ste", "--dataset", "synthetic", "--root", root, "--out", out, "--methods", "patchcore",
            "--weights", "none", "--image-size", "64", "--batch-size", "16", "--device", "cpu", "--workers", "0",
            "--no-progress", *extra]


def latest(out: Path) -> dict[str, dict]:
    """concept -> latest submission entry of the STE records (<out>/submissions/)."""
    entries = records.latest_entries(records.load_records(out.parent, out.name))
    return {e["run_name"].split("_ste-")[1].split("_")[0]: e for e in entries.values()}


def check_table(out: Path, entries: dict[str, dict]) -> pd.DataFrame:
    """ste.csv holds one row per concept, read from the result file its job wrote."""
    table = pd.read_csv(out / "ste.csv")
    assert sorted(table["concept"]) == ["checker", "stripes"] and set(table["method"]) == {"patchcore"}
    for row in table.itertuples():
        entry = entries[row.concept]
        assert Path(entry["out"]) == out.resolve() / "runs" / row.run_file
        run = results.read_run(Path(entry["out"]))
        assert (run["attrs"]["status"], run["attrs"]["run_key"]) == ("complete", entry["run_key"])
        assert row.roc_auc == pytest.approx(float(run["R/image"][0, 0]))
    return table


def test_dry_run_asks_for_the_grid_files_model_resources(two_concepts, tmp_path):
    out = bench(*ste_args(two_concepts, tmp_path / "scen", "--cluster", "slurm", "--dry-run"))
    # jobs/synthetic.yaml: patchcore gets the grid's resources {cpus: 2, mem_gb: 4, time_min: 30}
    assert re.search(r"sbatch --array=0-1%2 --cpus-per-task=2 --job-name=bench-ste-synthetic-[0-9a-f]{8}-0 --mem=4096MB .*"
                     r"--time=30", out), out
    assert out.count("_ncl_ste-") == 2 and not (tmp_path / "scen").exists()  # nothing submitted, nothing written


def test_make_scenarios_passes_the_cluster_through():
    out = subprocess.run(["make", "-n", "-o", ".venv/.installed", "scenarios", "DATASET=synthetic",
                          "STE_CLUSTER=slurm", "PROFILE=h100", "PARALLELISM=3"], cwd=REPO, capture_output=True,
                         text=True, check=True).stdout
    assert re.search(r"-m bench scenarios ste --dataset synthetic +--out \S+ --cluster slurm --profile h100 "
                     r"+--parallelism 3", out), out
    assert "ste.pending" in out  # rank/index wait for the jobs
    out = subprocess.run(["make", "-n", "-o", ".venv/.installed", "scenarios", "DATASET=synthetic"], cwd=REPO,
                         capture_output=True, text=True, check=True).stdout
    assert "--cluster" not in out and "ste.pending" not in out  # default: in this process, as before


@pytest.mark.slow
def test_debug_cluster_runs_the_jobs_collects_and_a_rerun_skips_them(two_concepts, tmp_path):
    out = tmp_path / "scen"
    text = bench(*ste_args(two_concepts, out, "--cluster", "debug"))
    assert "2 runs ran" in text and "STE table" in text
    (record,) = records.load_records(out.parent, out.name)
    assert Path(record["path"]).parent == out / "submissions"  # apart from the grid's outputs/<dataset>/submissions
    assert record["command"] == "scenarios ste" and record["cluster"] == "debug" and record["profile"] == "cpu"
    entries = latest(out)
    assert sorted(entries) == ["checker", "stripes"]
    assert all(Path(e["log_out"]).parent == out / "logs" for e in entries.values())
    first = check_table(out, entries)
    mtimes = {c: Path(e["out"]).stat().st_mtime_ns for c, e in entries.items()}

    (out / "ste.csv").unlink()
    text = bench(*ste_args(two_concepts, out, "--cluster", "debug"))
    assert "2 complete" in text and "0 not submitted" in text and "runs ran" not in text
    assert len(records.load_records(out.parent, out.name)) == 1  # nothing submitted again
    assert {c: Path(e["out"]).stat().st_mtime_ns for c, e in entries.items()} == mtimes
    pd.testing.assert_frame_equal(check_table(out, entries), first)
    bench(*ste_args(two_concepts, out, "--collect-only"))
    pd.testing.assert_frame_equal(check_table(out, entries), first)


def _queued(job_id: str) -> bool:
    return squeue_state(job_id) in st.RUNNING | st.PENDING


@pytest.mark.slurm
@pytest.mark.slow
def test_slurm_array_of_ste_runs_is_collected(require_slurm, two_concepts, tmp_path):
    # one CPU per run, so both fit a small node at once
    grid = write_grid(tmp_path / "grid.yaml", orderings=["easy_to_hard"], protocols=["ncl"],
                      resources={"gpus": 0, "cpus": 1, "mem_gb": 2, "time_min": 10})
    out = tmp_path / "scen"
    submit = ste_args(two_concepts, out, "--cluster", "slurm", "--profile", "cpu", "--grid", grid)
    try:
        text = bench(*submit)
        assert "submitted array" in text and "--collect-only" in text
        assert (out / "ste.pending").is_file() and not (out / "ste.csv").exists()
        entries = latest(out)
        assert len({e["array_job_id"] for e in entries.values()} - {""}) == 1
        assert sorted(e["array_task_id"] for e in entries.values()) == ["0", "1"]

        deadline = time.time() + WAIT_S
        while not all(st.result_attrs(Path(e["out"])).get("status") == "complete" for e in entries.values()):
            gone = [e for e in entries.values() if not _queued(e["job_id"])
                    and st.result_attrs(Path(e["out"])).get("status") != "complete"]
            if gone or time.time() > deadline:
                logs = "\n".join(Path(e["log_err"]).read_text()[-2000:] for e in gone if Path(e["log_err"]).is_file())
                pytest.fail(f"STE array job did not complete ({len(gone)} gone):\n{logs}")
            time.sleep(1)

        bench(*ste_args(two_concepts, out, "--collect-only"))
        check_table(out, entries)
        for e in entries.values():
            attrs = results.read_run(Path(e["out"]))["attrs"]
            assert (attrs["slurm_array_job_id"], attrs["slurm_array_task_id"]) == (e["array_job_id"],
                                                                                     e["array_task_id"])
        text = bench(*submit)  # every run complete: nothing submitted, the table collected, the marker gone
        assert "2 complete" in text and "STE table" in text and "submitted array" not in text
        assert len(records.load_records(out.parent, out.name)) == 1 and not (out / "ste.pending").exists()
    finally:
        cancel_recorded_jobs(out.parent, out.name)

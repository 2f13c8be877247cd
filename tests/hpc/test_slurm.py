"""On a real SLURM (CI: `bash jobs/slurm/local-cluster.sh start`, accounting disabled): a small synthetic grid runs
as a job array and every result records its job and array ids; a killed array task resumes after `resubmit`,
and a preempted one is requeued by submitit and resumes, both ending with the R of an uninterrupted run.

Skipped where `sinfo` cannot reach a controller, unless BENCH_REQUIRE_SLURM=1 (CI), which makes that a failure.
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bench import results
from bench.hpc import records, status as st
from helpers import cancel_recorded_jobs, squeue_state, write_grid
from helpers import cli_stdout as bench

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

N_TASKS = 5  # the tiny preset's tasks: a killed run has steps left to resume
WAIT_S = 900  # a ceiling, not a measurement: nine detectors on 2 loaded cores took 276-300+ s


@pytest.fixture(scope="module")
def slurm(require_slurm):
    submitted: list[Path] = []
    yield submitted
    for outputs in submitted:  # never leave this module's jobs behind, whatever failed
        cancel_recorded_jobs(outputs, "synthetic")


@pytest.fixture(scope="module")
def grid(tmp_path_factory) -> Path:
    return write_grid(tmp_path_factory.mktemp("slurm_grid") / "grid.yaml", orderings=["easy_to_hard"],
                      resources={"gpus": 0, "cpus": 1, "mem_gb": 2, "time_min": 10})


def submit(slurm, grid, root, outputs, *extra) -> str:
    slurm.append(outputs)
    return bench("submit", "--dataset", "synthetic", "--grid", grid, "--root", root, "--outputs", outputs,
                 "--cluster", "slurm", "--profile", "cpu", *extra)


def entries(outputs) -> dict[str, dict]:
    """run protocol -> latest submission entry."""
    latest = records.latest_entries(records.load_records(outputs, "synthetic"))
    return {("cl" if "_cl_" in e["run_name"] else "ncl"): e for e in latest.values()}


def wait_until(predicate, what: str, outputs, timeout=WAIT_S, poll=0.05):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(poll)
    pytest.fail(f"timed out after {timeout}s waiting for {what}\n" + bench("status", "--dataset", "synthetic",
                                                                           "--outputs", outputs))


def wait_all_complete(outputs):
    def done():
        out = bench("status", "--dataset", "synthetic", "--outputs", outputs)
        total, complete, failed = map(int, re.search(
            r"total (\d+) runs: (\d+) complete, \d+ running, \d+ pending, (\d+) failed", out).groups())
        assert not failed, f"a job failed:\n{out}"
        return complete == total
    wait_until(done, "every run to complete", outputs, poll=1)


def first_step_written(entry):
    attrs = st.result_attrs(Path(entry["out"]))
    return attrs if attrs.get("steps_done", 0) >= 1 and attrs.get("status") != "complete" else None


def r_matrices(path) -> dict:
    run = results.read_run(Path(path))
    return {level: run[f"R/{level}"] for level in ("image", "pixel")}


@pytest.fixture(scope="module")
def reference(slurm, grid, tiny_root, tmp_path_factory):
    """The grid submitted once as a real array and run to completion: the uninterrupted runs."""
    outputs = tmp_path_factory.mktemp("slurm_e2e")
    out = submit(slurm, grid, tiny_root, outputs)
    assert "submitted array" in out
    wait_all_complete(outputs)
    return outputs


def test_grid_runs_as_one_array_and_records_its_ids(reference, grid, tiny_root):
    runs = entries(reference)
    array_ids = {e["array_job_id"] for e in runs.values()}
    assert len(array_ids) == 1 and "" not in array_ids
    assert sorted(e["array_task_id"] for e in runs.values()) == ["0", "1"]
    for entry in runs.values():
        run = results.read_run(Path(entry["out"]))
        attrs = run["attrs"]
        assert (attrs["status"], attrs["run_key"], attrs["steps_done"]) == ("complete", entry["run_key"], N_TASKS)
        assert attrs["slurm_array_job_id"] == entry["array_job_id"]
        assert attrs["slurm_array_task_id"] == entry["array_task_id"]
        assert attrs["slurm_job_id"].isdigit()
        lower = np.tril(np.ones((N_TASKS, N_TASKS), bool))
        assert np.isfinite(run["R/image"][lower]).all() and np.isnan(run["R/image"][~lower]).all()
        log = Path(entry["log_out"])
        assert log.name == f"{entry['array_job_id']}_{entry['array_task_id']}_0_log.out"
        assert log.parent == reference / "synthetic" / "logs"
        text = log.read_text()
        assert f"run {entry['run_name']}" in text and f"[step {N_TASKS}/{N_TASKS}]" in text
    assert "nothing to submit" in bench("submit", "--dataset", "synthetic", "--grid", grid, "--root", tiny_root,
                                        "--outputs", reference, "--cluster", "slurm")
    assert len(records.load_records(reference, "synthetic")) == 1  # idempotent: no second submission


def test_killed_array_task_resumes_after_resubmit(slurm, reference, grid, tiny_root, tmp_path):
    submit(slurm, grid, tiny_root, tmp_path)
    cl = entries(tmp_path)["cl"]
    assert cl["array_task_id"], "the runs must go out as an array"
    first = wait_until(lambda: first_step_written(cl), "the first checkpointed step", tmp_path)
    job = subprocess.run(["squeue", "-h", "-j", cl["job_id"], "-o", "%A"], capture_output=True,
                         text=True).stdout.strip()
    subprocess.run(["scancel", "--signal=KILL", f"{job}.0"], check=True)  # kill -9 of the task's process
    wait_until(lambda: squeue_state(cl["job_id"]) not in ("RUNNING", "COMPLETING"), "the kill", tmp_path)
    killed = st.result_attrs(Path(cl["out"]))
    assert killed["status"] != "complete" and killed["steps_done"] < N_TASKS, "killed too late to test a resume"

    status = bench("status", "--dataset", "synthetic", "--outputs", tmp_path)
    line = next(x for x in status.splitlines() if cl["run_name"] in x)
    assert line.startswith("failed") and "Killed" in line and cl["log_err"] in status
    out = bench("resubmit", "--dataset", "synthetic", "--outputs", tmp_path)
    assert f"failed: {cl['run_name']}" in out and "1 run submitted" in out
    wait_all_complete(tmp_path)

    again = entries(tmp_path)["cl"]
    assert again["job_id"] != cl["job_id"]
    final = results.read_run(Path(cl["out"]))["attrs"]
    assert final["started_at"] == first["started_at"]  # resumed, not restarted
    assert final["slurm_job_id"] != first["slurm_job_id"]
    assert f"resuming {Path(cl['out']).name} after step {killed['steps_done']}/{N_TASKS}" in \
        Path(again["log_out"]).read_text()
    uninterrupted = r_matrices(entries(reference)["cl"]["out"])
    for level, r in r_matrices(cl["out"]).items():
        np.testing.assert_array_equal(r, uninterrupted[level], err_msg=f"R/{level} differs after resuming")


def test_preempted_task_is_requeued_and_resumes(slurm, reference, grid, tiny_root, tmp_path):
    submit(slurm, grid, tiny_root, tmp_path, "--protocols", "cl")
    cl = entries(tmp_path)["cl"]
    first = wait_until(lambda: first_step_written(cl), "the first checkpointed step", tmp_path)
    subprocess.run(["scancel", "--signal=USR2", cl["job_id"]], check=True)  # what SLURM sends before preempting
    wait_until(lambda: squeue_state(cl["job_id"]) == "PENDING", "submitit's requeue", tmp_path)
    status = bench("status", "--dataset", "synthetic", "--outputs", tmp_path)
    assert next(x for x in status.splitlines() if cl["run_name"] in x).startswith("pending")
    # SLURM holds a requeued job for ~2 minutes (BeginTime); release it now to keep the test short.
    subprocess.run(["scontrol", "update", f"JobId={cl['job_id']}", "StartTime=now"], check=True)
    wait_all_complete(tmp_path)

    final = results.read_run(Path(cl["out"]))["attrs"]
    assert final["started_at"] == first["started_at"] and final["slurm_job_id"] == first["slurm_job_id"]
    log = Path(cl["log_out"]).read_text()
    assert "Requeued job" in log and f"resuming {Path(cl['out']).name} after step" in log
    uninterrupted = r_matrices(entries(reference)["cl"]["out"])
    for level, r in r_matrices(cl["out"]).items():
        np.testing.assert_array_equal(r, uninterrupted[level], err_msg=f"R/{level} differs after the requeue")


def test_all_nine_detectors_run_as_an_array_and_aggregate_into_table_2(slurm, tmp_path):
    """InCLAD's nine methods through the whole suite on the real SLURM: the shipped synthetic grid (its models and
    quick settings, shortened to one epoch on 2 tasks of 8 images at 64 px, one ordering) runs as one array, and
    `aggregate` makes a nine-method Table 2 and the timing tables, the backbone-less detectors in their own."""
    import yaml

    from bench.data.synthetic import generate
    from bench.registry import get, specs

    root = generate(tmp_path / "nine", preset="tiny", seed=0, n_tasks=2, n_train=8, n_test=8)
    shipped = yaml.safe_load((Path(__file__).parents[2] / "jobs/synthetic.yaml").read_text())
    assert set(shipped["models"]) == set(specs())
    models = {m: {"hparams": {**o.get("hparams", {}), **({"epochs": 1} if "epochs" in get(m).params else {})}}
              for m, o in shipped["models"].items()}
    grid = write_grid(tmp_path / "nine.yaml", models=models, orderings=["easy_to_hard"],
                      resources={"gpus": 0, "cpus": 1, "mem_gb": 4, "time_min": 10})
    outputs = tmp_path / "out"
    assert "submitted array" in submit(slurm, grid, root, outputs)
    wait_all_complete(outputs)
    bench("aggregate", "--dataset", "synthetic", "--outputs", outputs, "--bootstrap", "0")
    tables = outputs / "synthetic" / "tables"
    per_method = pd.read_csv(tables / "per_method.csv")
    assert set(per_method["model"]) == set(specs())
    assert set(per_method.loc[per_method["model"].isin(["efficientad", "ganomaly"]), "backbone"]) == {"none"}
    n = len(specs())  # every Table 2 cell pools the nine methods' runs: "runs (methods)" per cell
    assert f"| Synthetic | Easy-to-Hard | ROC-AUC_CL ↑ | {n} ({n}) | {n} ({n}) | {n} ({n}) | {n} ({n}) |" in (
        tables / "table2.md").read_text()
    timing = (tables / "timing.md").read_text()
    with_backbone, without = timing.split("## Execution times without a backbone")
    assert all(get(m).label in with_backbone for m in specs() if get(m).inputs == "features")
    assert {get(m).label for m in specs() if get(m).inputs != "features"} == {"EfficientAD", "GANomaly"}
    assert "EfficientAD" in without and "GANomaly" in without and "EfficientAD" not in with_backbone

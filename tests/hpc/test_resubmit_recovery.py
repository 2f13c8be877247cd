"""A submission killed after sbatch (issue 46 §3) leaves a record "submitting", its runs without job ids; `status`
finds the jobs in the queue by name. `resubmit` (and `submit`) must write those ids back into the record: the queue
forgets a job MinJobAge after it ends, and a run whose record still had no id then read "never queued" (its failure
and log lost, "not submitted" instead of "failed"). Without a cluster: the fake sbatch and squeue of test_hangup."""

from __future__ import annotations

import json

import pytest

from bench.hpc import records
from helpers import cli_stdout as cli
from helpers import write_grid
from test_hangup import bench, fake_slurm, small_root  # noqa: F401 (fixtures)
from test_slurm_trust import grid, slurm  # noqa: F401 (fixtures)

RESOURCES = {"gpus": 0, "cpus": 1, "mem_gb": 2, "time_min": 10}


def _submit_killed(fake_slurm, small_root, tmp_path, *extra):
    """`submit` SIGKILLed right after its first sbatch: the record stays "submitting", without job ids."""
    grid = write_grid(tmp_path / "grid.yaml", orderings=["easy_to_hard"], resources=RESOURCES)
    outputs = tmp_path / "out"
    killed = bench(fake_slurm, "submit", "--dataset", "synthetic", "--grid", grid, "--root", small_root,
                   "--outputs", outputs, "--cluster", "slurm", "--profile", "cpu", *extra, HANGUP="KILL")
    assert killed.returncode != 0, killed.stdout
    (record,) = records.load_records(outputs, "synthetic")
    assert record["state"] == "submitting" and not any(run["job_id"] for run in record["runs"])
    return outputs, record["path"]


def _run_lines(result) -> list[str]:
    return [x for x in result.stdout.splitlines() if "_cl_" in x or "_ncl_" in x]


@pytest.mark.slow(reason="end to end: `bench submit` in a subprocess against a fake sbatch")
def test_resubmit_records_the_job_ids_found_in_the_queue(fake_slurm, small_root, tmp_path):
    outputs, path = _submit_killed(fake_slurm, small_root, tmp_path)
    again = bench(fake_slurm, "resubmit", "--dataset", "synthetic", "--outputs", outputs)
    assert again.returncode == 0 and "nothing to submit" in again.stdout, again.stdout + again.stderr
    assert f"{path}: recorded the job ids of an interrupted submission" in again.stdout
    record = json.loads(open(path).read())
    assert record["state"] == "submitted"
    assert sorted(run["job_id"] for run in record["runs"]) == ["42_0", "42_1"]
    assert all(run["job_id"] in run["log_err"] for run in record["runs"]), record["runs"]

    (fake_slurm / "queue").write_text("")  # the jobs ended without a result and the queue forgot them
    status = bench(fake_slurm, "status", "--dataset", "synthetic", "--outputs", outputs)
    lines = _run_lines(status)
    assert len(lines) == 2 and all(x.startswith("failed") and "job no longer queued" in x for x in lines), \
        status.stdout
    assert {x.split("job ")[1].split()[0] for x in lines} == {"42_0", "42_1"}, status.stdout

    third = bench(fake_slurm, "resubmit", "--dataset", "synthetic", "--outputs", outputs)
    assert third.returncode == 0 and "failed: " in third.stdout, third.stdout + third.stderr
    assert len((fake_slurm / "sbatch.log").read_text().splitlines()) == 2  # the failed runs, once


@pytest.mark.slow(reason="end to end: `bench submit` in a subprocess against a fake sbatch")
def test_a_batch_never_sent_stays_unrecorded_and_is_sent_once(fake_slurm, small_root, tmp_path):
    """Killed after the first of two arrays (one run each): the first's id is recorded, the record stays
    "submitting" for the run never sent, which `resubmit` sends (once) under a record of its own."""
    outputs, path = _submit_killed(fake_slurm, small_root, tmp_path, "--max-array-size", "1")
    again = bench(fake_slurm, "resubmit", "--dataset", "synthetic", "--outputs", outputs)
    assert again.returncode == 0, again.stdout + again.stderr
    first = json.loads(open(path).read())
    assert first["state"] == "submitting"
    assert sorted(run["job_id"] for run in first["runs"]) == ["", "42"]
    assert len((fake_slurm / "sbatch.log").read_text().splitlines()) == 2
    status = bench(fake_slurm, "status", "--dataset", "synthetic", "--outputs", outputs)
    lines = _run_lines(status)
    assert len(lines) == 2 and all(x.startswith("pending") for x in lines), status.stdout
    assert {x.split("job ")[1].split()[0] for x in lines} == {"42", "43"}, status.stdout
    assert "nothing to submit" in bench(fake_slurm, "resubmit", "--dataset", "synthetic", "--outputs",
                                        outputs).stdout


@pytest.mark.slow(reason="end to end: `bench submit` in a subprocess against a fake sbatch")
def test_status_alone_leaves_the_records_as_they_are(fake_slurm, small_root, tmp_path):
    """`status` holds no submission lock: a live submit may still own a "submitting" record, so status finds the
    jobs in the queue without writing."""
    outputs, path = _submit_killed(fake_slurm, small_root, tmp_path)
    before = open(path).read()
    status = bench(fake_slurm, "status", "--dataset", "synthetic", "--outputs", outputs)
    assert all(x.startswith("pending") for x in _run_lines(status)), status.stdout
    assert open(path).read() == before


@pytest.mark.slurm
@pytest.mark.slow(reason="a real SLURM: a job kept pending behind one holding the node")
def test_on_a_real_slurm_resubmit_records_the_job_a_killed_submit_left(slurm, grid, tiny_root, tmp_path):
    """sbatch accepts the job, then the submitting process is SIGKILLed (no handler can run): the record stays
    "submitting". `resubmit` finds the job in squeue by its name, sends nothing, and writes the job's id into the
    record; cancelled, the job is the run's failed job, whatever squeue still lists."""
    import subprocess
    import sys

    from bench.hpc.grid import REPO
    from test_slurm_trust import node_busy, sbatch_then_signal, submit_args

    env = sbatch_then_signal(tmp_path, "KILL")
    outputs = tmp_path / "out"
    slurm.append(outputs)
    with node_busy():  # the job stays pending while resubmit looks for it
        first = subprocess.run([sys.executable, "-m", "bench", *submit_args(grid, tiny_root, outputs)], cwd=REPO,
                               env=env, capture_output=True, text=True)
        assert first.returncode != 0, first.stdout
        (record,) = records.load_records(outputs, "synthetic")
        assert record["state"] == "submitting" and not record["runs"][0]["job_id"]
        name = record["runs"][0]["job_name"]
        queued = subprocess.run(["squeue", "-h", "-n", name, "-o", "%i"], capture_output=True, text=True,
                                check=True).stdout.split()
        assert len(queued) == 1, queued
        assert "nothing to submit" in cli("resubmit", "--dataset", "synthetic", "--outputs", outputs)
        (record,) = records.load_records(outputs, "synthetic")
        assert record["state"] == "submitted" and record["runs"][0]["job_id"] == queued[0]
        subprocess.run(["scancel", queued[0]], check=True)
    status = cli("status", "--dataset", "synthetic", "--outputs", outputs)
    line = next(x for x in status.splitlines() if record["runs"][0]["run_name"] in x)
    assert line.startswith("failed") and f"job {queued[0]}" in line, status

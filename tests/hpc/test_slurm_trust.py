"""On a real SLURM (issue 32): the outputs tree is not a way in, and paths, clocks and edits break no job silently.

- a job folder others can write (where a pickle could be replaced while its task is pending) is refused before
  anything is submitted; the one used is 0700, and `--jobs-dir` moves it out of a group outputs folder;
- a record naming a traversing profile is refused by `status` and `resubmit`, and its setup never runs;
- a checkout whose path holds a space runs its jobs;
- a record written by a host whose clock runs ahead does not hide the latest job from `status` or `resubmit`;
- a job refused because its dataset changed after submission shows as failed with its reason.

Skipped where `sinfo` cannot reach a controller, unless BENCH_REQUIRE_SLURM=1 (CI).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from bench import results
from bench.cli import main
from bench.hpc import records
from bench.hpc.grid import REPO
from helpers import cancel_recorded_jobs, default_signals, squeue_state, write_grid
from helpers import cli_stdout as bench
from test_slurm import entries, wait_all_complete, wait_until

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


@pytest.fixture(scope="module")
def slurm(require_slurm):
    submitted: list[Path] = []
    yield submitted
    for outputs in submitted:
        cancel_recorded_jobs(outputs, "synthetic")


@pytest.fixture(scope="module")
def grid(tmp_path_factory) -> Path:
    """One run (PatchCore CL), so each test sends one job."""
    return write_grid(tmp_path_factory.mktemp("trust_grid") / "grid.yaml", orderings=["easy_to_hard"],
                      protocols=["cl"], resources={"gpus": 0, "cpus": 1, "mem_gb": 2, "time_min": 10})


def submit_args(grid, root, outputs, *extra):
    return ["submit", "--dataset", "synthetic", "--grid", str(grid), "--root", str(root), "--outputs",
            str(outputs), "--cluster", "slurm", "--profile", "cpu", *map(str, extra)]


def refused(capsys, *argv) -> str:
    """The CLI exits 2 with one error line; returned."""
    code = main([str(a) for a in argv])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and err.startswith("error: "), err
    return err


def sbatch_then_signal(folder, signal_name: str) -> dict:
    """The environment of a `submit` whose `sbatch` is the real one followed by `kill -<signal_name>` of the
    submitting process: what a hang-up or a kill right after SLURM accepted the array does."""
    import shlex

    wrapper = folder / "bin" / "sbatch"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/bash\n{shlex.quote(shutil.which("sbatch"))} "$@" || exit $?\n'
                       f'kill -{signal_name} "$PPID"\n')
    wrapper.chmod(0o755)
    return {**os.environ, "PATH": f"{wrapper.parent}:{os.environ['PATH']}"}


@contextmanager
def node_busy():
    """A job holding every CPU of the node, so the next one stays pending until this ends."""
    cpus = subprocess.run(["sinfo", "-h", "-o", "%c"], capture_output=True, text=True, check=True).stdout.split()[0]
    job = subprocess.run(["sbatch", "--parsable", "-c", cpus, "-o", "/dev/null", "--wrap", "sleep 600"],
                         capture_output=True, text=True, check=True).stdout.strip().split(";")[0]
    try:
        deadline = time.time() + 120
        while squeue_state(job) != "RUNNING":
            assert time.time() < deadline, f"the blocking job {job} did not start"
            time.sleep(0.5)
        yield job
    finally:
        subprocess.run(["scancel", job], capture_output=True)


def test_a_job_folder_others_can_write_is_refused_and_ours_is_private(slurm, grid, tiny_root, tmp_path, capsys):
    """A group-writable outputs folder (the usual shared-cluster layout) would let a group member replace a
    pending task's pickle (submitit unpickles it when the task starts): submit refuses it in one line naming the
    folder and sends nothing; with --jobs-dir elsewhere it submits, the job folder is 0700, and resubmit reuses it."""
    shared = tmp_path / "group"
    shared.mkdir()
    shared.chmod(0o2775)  # rwxrwsr-x: a group project folder
    outputs = shared / "out"
    slurm.append(outputs)
    err = refused(capsys, *submit_args(grid, tiny_root, outputs))
    assert f"{shared}: writable by its group (mode 2775)" in err and "pickled job files" in err
    assert not (outputs / "synthetic" / "submissions").exists() and not (outputs / "synthetic" / "logs").exists()

    jobs = tmp_path / "private jobs"
    out = bench(*submit_args(grid, tiny_root, outputs, "--jobs-dir", jobs))
    assert "1 run submitted" in out
    assert stat.S_IMODE(jobs.stat().st_mode) == 0o700
    first = entries(outputs)["cl"]
    assert Path(first["log_out"]).parent == jobs and list(jobs.glob("*_submitted.pkl"))
    subprocess.run(["scancel", first["job_id"]], check=True)
    wait_until(lambda: squeue_state(first["job_id"]) not in ("PENDING", "RUNNING", "COMPLETING", ""),
               "the cancel", outputs, poll=0.5)
    out = bench("resubmit", "--dataset", "synthetic", "--outputs", outputs)
    assert "1 run submitted" in out and Path(entries(outputs)["cl"]["log_out"]).parent == jobs


def test_a_record_naming_a_traversing_profile_is_refused(slurm, grid, tiny_root, tmp_path, capsys):
    """A record whose profile is `../../…/evil` made `resubmit` run that file's setup lines in every job (and
    copied the name into later records): `status` and `resubmit` refuse it, naming the record; nothing runs."""
    outputs = tmp_path / "out"
    slurm.append(outputs)
    bench(*submit_args(grid, tiny_root, outputs))
    subprocess.run(["scancel", entries(outputs)["cl"]["job_id"]], check=True)
    marker = tmp_path / "planted-code-ran"
    evil = tmp_path / "evil.yaml"
    evil.write_text(json.dumps({"setup": [f"touch {marker}"]}))
    (path,) = records.records_dir(outputs, "synthetic").glob("*.json")
    record = json.loads(path.read_text())
    record["profile"] = os.path.relpath(evil.with_suffix(""), REPO / "jobs" / "profiles")
    assert record["profile"].startswith("..")
    path.write_text(json.dumps(record))
    for command in ("status", "resubmit"):
        err = refused(capsys, command, "--dataset", "synthetic", "--outputs", outputs)
        assert f"{path}: profile {record['profile']!r} is not a plain name" in err
    assert len(records.load_records(outputs, "synthetic")) == 1 and not marker.exists()


def test_a_checkout_path_with_a_space_runs_its_jobs(slurm, grid, tiny_root, tmp_path):
    """The venv python went unquoted into the sbatch line: every job of a checkout under "my checkout/" failed
    (SLURM ran ".../my"). A copy of this checkout there, with its .venv, submits and completes its run."""
    checkout = tmp_path / "my checkout"
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True,
                           text=True, check=True).stdout.splitlines()
    for name in files:
        if (REPO / name).is_file() and not name.startswith("data/raw/"):
            (checkout / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, checkout / name)
    (checkout / ".venv").symlink_to(Path(sys.prefix))  # its python resolves pyvenv.cfg through "my checkout"
    outputs = tmp_path / "out dir"
    slurm.append(outputs)
    python = checkout / ".venv" / "bin" / "python"
    out = subprocess.run([str(python), "-m", "bench", *submit_args(grid, tiny_root, outputs)], cwd=checkout,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    record = records.load_records(outputs, "synthetic")[-1]
    assert record["python"] == f"'{python}'"
    wait_all_complete(outputs)
    attrs = results.read_run(Path(entries(outputs)["cl"]["out"]))["attrs"]
    assert attrs["status"] == "complete"


def test_a_record_from_a_fast_clock_does_not_hide_the_latest_job(slurm, grid, tiny_root, tmp_path):
    """Records were ordered by the submitting host's clock (file names): a submission from a login node whose
    clock runs a year ahead stayed "latest" after a later resubmit from a correct one, so `status` reported the
    new job's run failed and `resubmit` sent it again. They are ordered by their sequence number."""
    outputs = tmp_path / "out"
    slurm.append(outputs)
    bench(*submit_args(grid, tiny_root, outputs))
    first = entries(outputs)["cl"]
    subprocess.run(["scancel", first["job_id"]], check=True)
    wait_until(lambda: squeue_state(first["job_id"]) not in ("PENDING", "RUNNING", "COMPLETING", ""),
               "the cancel", outputs, poll=0.5)
    (path,) = records.records_dir(outputs, "synthetic").glob("*.json")
    record = json.loads(path.read_text())
    ahead = "2099-01-01T00:00:00+00:00"  # what a login node with a fast clock writes
    path.unlink()
    record["created_at"] = ahead
    (path.parent / "20990101T000000000000Z-1.json").write_text(json.dumps(record))  # its name sorts last
    with node_busy():  # the resubmitted job stays pending while status and resubmit look at it
        assert "1 run submitted" in bench("resubmit", "--dataset", "synthetic", "--outputs", outputs)
        second = entries(outputs)["cl"]
        assert second["job_id"] != first["job_id"]
        status = bench("status", "--dataset", "synthetic", "--outputs", outputs)
        line = next(x for x in status.splitlines() if second["run_name"] in x)
        assert line.startswith("pending") and f"job {second['job_id']}" in line, status
        assert "nothing to submit" in bench("resubmit", "--dataset", "synthetic", "--outputs", outputs)
    assert len(records.load_records(outputs, "synthetic")) == 2


def test_a_job_refused_after_a_dataset_edit_shows_failed_with_its_reason(slurm, grid, tmp_path):
    """A job whose dataset changed between submission and start refuses to run (its run key would differ); the
    run showed as "not submitted", with no failure and no log. It is failed, with the job's reason and log, and
    resubmit sends it under its new key."""
    from bench.data.synthetic import generate

    from PIL import Image

    root = generate(tmp_path / "data", preset="tiny", seed=0, n_tasks=2, n_train=8, n_test=8)
    outputs = tmp_path / "out"
    slurm.append(outputs)
    with node_busy():
        bench(*submit_args(grid, root, outputs))
        old = entries(outputs)["cl"]
        path = next(p for p in sorted(root.rglob("train/good/*.png")))
        pixels = np.array(Image.open(path))
        pixels[0, 0] = 255 - pixels[0, 0]
        Image.fromarray(pixels).save(path)  # one training image edited: a new run key
    wait_until(lambda: squeue_state(old["job_id"]) not in ("PENDING", "RUNNING", "COMPLETING", ""),
               "the refused job to end", outputs, poll=0.5)
    status = bench("status", "--dataset", "synthetic", "--outputs", outputs)
    line = next(x for x in status.splitlines() if x.startswith(("failed", "not submitted")))
    assert line.startswith("failed") and f"job {old['job_id']} refused to run" in line, status
    assert "the run key changed since submission" in line and f"log: {old['log_err']}" in status
    out = bench("resubmit", "--dataset", "synthetic", "--outputs", outputs)
    assert "1 run submitted" in out and entries(outputs)["cl"]["run_key"] != old["run_key"]


def test_a_submit_hung_up_after_sbatch_leaves_a_record_status_and_resubmit_use(slurm, grid, tiny_root, tmp_path):
    """Issue 46 §3 on the real SLURM: an ssh disconnect (SIGHUP) the moment sbatch returns left a queued job and no
    record, so `status` said "not submitted" and `resubmit` queued a duplicate. The record holds the job; status
    shows it pending; resubmit sends nothing. (tests/hpc/test_hangup.py covers every signal with a fake sbatch.)"""
    env = sbatch_then_signal(tmp_path, "HUP")
    outputs = tmp_path / "out"
    slurm.append(outputs)
    with node_busy():  # the job stays pending while status and resubmit look at it
        first = subprocess.run([sys.executable, "-m", "bench", *submit_args(grid, tiny_root, outputs)], cwd=REPO,
                               env=env, capture_output=True, text=True, preexec_fn=default_signals)
        assert first.returncode != 0, first.stdout  # the hang-up ended it
        (record,) = records.load_records(outputs, "synthetic")
        job = record["runs"][0]["job_id"]
        assert job and record["state"] == "submitted"
        status = bench("status", "--dataset", "synthetic", "--outputs", outputs)
        line = next(x for x in status.splitlines() if record["runs"][0]["run_name"] in x)
        assert line.startswith("pending") and f"job {job}" in line, status
        assert "nothing to submit" in bench("resubmit", "--dataset", "synthetic", "--outputs", outputs)
    assert len(records.load_records(outputs, "synthetic")) == 1

"""A submission survives a hang-up (issue 46 §3), without a cluster: a fake `sbatch` accepts an array and then
signals the submitting process (SIGTERM, SIGHUP, SIGINT, SIGKILL), a fake `squeue` lists what it accepted.
Whatever the signal, `status` shows the queued runs as queued (not "not submitted") and a second `submit` sends
nothing. On the local cluster, a worker outliving its killed wrapper is still running, and a reused pid is not
the job's."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from bench.hpc import executors, grid as grids, records, status as st
from bench.hpc.grid import REPO
from helpers import default_signals, write_grid

FAKE_SBATCH = r"""#!/bin/bash
# Accepts the script like sbatch: queues its array (or lone job) under its name, prints the id; then, when
# HANGUP is set, sends that signal to the submitting process before returning.
dir="$(dirname "$0")"
file="${@: -1}"
name=$(sed -n 's/^#SBATCH --job-name=//p' "$file")
last=$(sed -n 's/^#SBATCH --array=0-\([0-9]*\).*/\1/p' "$file")
n=$(( $(cat "$dir/next" 2>/dev/null || echo 41) + 1 ))
echo "$n" > "$dir/next"
if [ -n "$last" ]; then
  for i in $(seq 0 "$last"); do echo "${n}_$i|PENDING|Priority|$name" >> "$dir/queue"; done
else
  echo "$n|PENDING|Priority|$name" >> "$dir/queue"
fi
echo "$name" >> "$dir/sbatch.log"
echo "Submitted batch job $n"
[ -z "$HANGUP" ] || kill -"$HANGUP" "$PPID"
"""
FAKE_SQUEUE = '#!/bin/bash\ncat "$(dirname "$0")/queue" 2>/dev/null\n'


@pytest.fixture(scope="module")
def small_root(tmp_path_factory):
    from bench.data.synthetic import generate

    return generate(tmp_path_factory.mktemp("hangup") / "syn", preset="tiny", n_tasks=2, seed=0)


@pytest.fixture
def fake_slurm(tmp_path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("sbatch", FAKE_SBATCH), ("squeue", FAKE_SQUEUE)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return bin_dir


def bench(bin_dir: Path, *argv, preexec_fn=default_signals, **env) -> subprocess.CompletedProcess:
    environ = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", **env}
    return subprocess.run([sys.executable, "-m", "bench", *map(str, argv)], cwd=REPO, env=environ,
                          capture_output=True, text=True, timeout=600, preexec_fn=preexec_fn)


def _ignore_sighup() -> None:
    """What `nohup` does before it runs the command (the ignored disposition survives exec)."""
    default_signals()
    signal.signal(signal.SIGHUP, signal.SIG_IGN)


@pytest.mark.slow(reason="end to end: `bench submit` in a subprocess against a fake sbatch")
@pytest.mark.parametrize("hangup", ["TERM", "HUP", "INT", "KILL"])
def test_a_submit_signalled_after_sbatch_leaves_a_record_status_and_submit_use(hangup, fake_slurm, small_root,
                                                                               tmp_path):
    grid = write_grid(tmp_path / "grid.yaml", orderings=["easy_to_hard"],
                      resources={"gpus": 0, "cpus": 1, "mem_gb": 2, "time_min": 10})
    outputs = tmp_path / "out"
    submit = ("submit", "--dataset", "synthetic", "--grid", grid, "--root", small_root, "--outputs", outputs,
              "--cluster", "slurm", "--profile", "cpu")
    first = bench(fake_slurm, *submit, HANGUP=hangup)
    assert first.returncode != 0, first.stdout  # the signal ended it
    assert len((fake_slurm / "sbatch.log").read_text().splitlines()) == 1

    status = bench(fake_slurm, "status", "--dataset", "synthetic", "--outputs", outputs)
    assert status.returncode == 0, status.stderr
    lines = [x for x in status.stdout.splitlines() if "_cl_" in x or "_ncl_" in x]
    assert len(lines) == 2 and all(x.startswith("pending") for x in lines), status.stdout
    assert {x.split("job ")[1].split()[0] for x in lines} == {"42_0", "42_1"}, status.stdout

    again = bench(fake_slurm, *submit) if hangup != "KILL" else bench(fake_slurm, "resubmit", "--dataset",
                                                                       "synthetic", "--outputs", outputs)
    assert again.returncode == 0 and "nothing to submit" in again.stdout, again.stdout + again.stderr
    assert len((fake_slurm / "sbatch.log").read_text().splitlines()) == 1  # no duplicate jobs


def test_a_hangup_under_nohup_is_ignored_and_every_batch_is_sent(fake_slurm, small_root, tmp_path):
    """Under `nohup` (SIGHUP ignored) a hang-up after the first array must not stop the submission: the other
    arrays are sent too and the record lists every run with its job id. (The ignored SIGHUP used to be caught,
    the loop stopped after the first array and the others were dropped without a word.)"""
    grid = write_grid(tmp_path / "grid.yaml", orderings=["easy_to_hard"],
                      resources={"gpus": 0, "cpus": 1, "mem_gb": 2, "time_min": 10})
    outputs = tmp_path / "out"
    done = bench(fake_slurm, "submit", "--dataset", "synthetic", "--grid", grid, "--root", small_root, "--outputs",
                 outputs, "--cluster", "slurm", "--profile", "cpu", "--max-array-size", "1",
                 preexec_fn=_ignore_sighup, HANGUP="HUP")  # fake sbatch sends SIGHUP after every array
    assert done.returncode == 0, done.stdout + done.stderr
    assert len((fake_slurm / "sbatch.log").read_text().splitlines()) == 2  # both one-run arrays
    [record] = records.load_records(outputs, "synthetic")
    assert record["state"] == "submitted", record
    assert sorted(e["job_id"] for e in record["runs"]) == ["42", "43"], record


def test_finish_sees_only_the_batches_that_were_sent(small_root, tmp_path, monkeypatch, capsys):
    """A signal (handled, not fatal) after the first of two local processes: the second is never sent, and the
    kind's `finish` reports the first only (it used to read the unsent one's job id: IndexError)."""
    from bench.cli import main
    from bench.hpc import submission

    def send_then_signal(executor, planned, resources, workdir, env, lease):
        os.kill(os.getpid(), signal.SIGHUP)  # held until the batch is recorded, then delivered to `got`
        return [executors.Submitted(p, "4242", tmp_path / "o", tmp_path / "e") for p in planned]

    monkeypatch.setattr(submission.executors, "submit_local", send_then_signal)
    got = []
    old = signal.signal(signal.SIGHUP, lambda s, f: got.append(s))
    try:
        grid = write_grid(tmp_path / "grid.yaml", orderings=["easy_to_hard"])
        code = main(["submit", "--dataset", "synthetic", "--grid", str(grid), "--root", str(small_root),
                     "--outputs", str(tmp_path / "out"), "--cluster", "local", "--parallelism", "2"])
    finally:
        signal.signal(signal.SIGHUP, old)
    assert code == 0 and got == [signal.SIGHUP]
    assert "started 1 local process(es) 4242: 1 run" in capsys.readouterr().out
    [record] = records.load_records(tmp_path / "out", "synthetic")
    assert [e["job_id"] for e in record["runs"]] == ["4242"]  # the unsent run left the record


@pytest.mark.slow(reason="end to end: `bench submit` in a subprocess against a fake sbatch")
def test_arrays_of_different_resources_have_names_of_their_own(fake_slurm, small_root, tmp_path):
    """Two resource groups (one array each) in one submission: each array gets its own job name, so after a
    hang-up `status` finds every run at its own job, not both groups' index 0 at the first array."""
    grid = write_grid(tmp_path / "grid.yaml", orderings=["easy_to_hard"], protocols=["cl"],
                      resources={"gpus": 0, "cpus": 1, "mem_gb": 2, "time_min": 10},
                      models={"patchcore": {}, "padim": {"resources": {"mem_gb": 3}}})
    done = bench(fake_slurm, "submit", "--dataset", "synthetic", "--grid", grid, "--root", small_root, "--outputs",
                 tmp_path / "out", "--cluster", "slurm", "--profile", "cpu")
    assert done.returncode == 0, done.stdout + done.stderr
    names = (fake_slurm / "sbatch.log").read_text().split()
    assert len(names) == 2 and len(set(names)) == 2, names
    [record] = records.load_records(tmp_path / "out", "synthetic")
    assert sorted(e["job_name"] for e in record["runs"]) == sorted(names)


def test_local_processes_of_different_resources_hold_leases_of_their_own(planned_one, tmp_path):
    """Two resource groups on the local cluster: two processes, two lease files (a shared one would make the
    second wait for the first and `status` read one's lock as the other's)."""
    from bench.hpc import submission

    other = dataclasses.replace(planned_one, resources=dataclasses.replace(planned_one.resources, mem_gb=7))
    sub = submission.Submission([planned_one, other], "synthetic", (tmp_path, "synthetic"), tmp_path / "logs",
                                "bench-synthetic", "local", grids.load_profile("cpu"), tmp_path, tmp_path, {})
    launch = submission.Launch(sub, "python", {}, slots=1, array_size=1)
    batches = submission.KINDS["local"].batches(launch, executors.group_by_resources(sub.runs), "tag")
    assert len({b.lease for b in batches}) == len(batches) == 2


@pytest.mark.slow(reason="end to end: `bench submit` in a subprocess against a fake sbatch")
def test_a_submission_record_exists_before_sbatch_runs(fake_slurm, small_root, tmp_path):
    """sbatch sees the record already written: nothing it accepts can go unrecorded."""
    grid = write_grid(tmp_path / "grid.yaml", orderings=["easy_to_hard"], protocols=["cl"],
                      resources={"gpus": 0, "cpus": 1, "mem_gb": 2, "time_min": 10})
    outputs = tmp_path / "out"
    folder = records.records_dir(outputs, "synthetic")
    spy = FAKE_SBATCH.replace('echo "Submitted', f'ls {folder} > "$dir/seen"\necho "Submitted')
    (fake_slurm / "sbatch").write_text(spy)
    done = bench(fake_slurm, "submit", "--dataset", "synthetic", "--grid", grid, "--root", small_root, "--outputs",
                 outputs, "--cluster", "slurm", "--profile", "cpu")
    assert done.returncode == 0, done.stderr
    seen = (fake_slurm / "seen").read_text().split()
    assert len(seen) == 1 and seen[0].endswith(".json")
    record = json.loads((folder / seen[0]).read_text())
    assert record["state"] == "submitted" and record["runs"][0]["job_id"] == "42"


# --- the local cluster ---------------------------------------------------------------------------------------


@pytest.fixture
def planned_one(small_root, tmp_path):
    grid = grids.load_grid("synthetic", write_grid(tmp_path / "grid.yaml"))
    sel = grids.Selection(orderings=["easy_to_hard"], protocols=["cl"])
    return grids.expand(grid, grids.load_profile("cpu"), sel, small_root, tmp_path)[0]


def _local_entry(planned, pid: str, started: str, lease: str) -> dict:
    return {**records.intended_entry(planned, lease=lease), "cluster": "local",
            **records.sent_fields(pid, "/nonexistent.out", "/nonexistent.err", started)}


def _dead_pid() -> str:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return str(proc.pid)


def test_a_local_worker_outliving_its_wrapper_is_still_running(planned_one, tmp_path):
    """The wrapper (submitit's shell and controller) is killed, its worker goes on holding the lease: the run is
    queued or running, never failed (which would make `resubmit` start a second copy)."""
    lease = tmp_path / "lease.lock"
    holder = subprocess.Popen([sys.executable, "-c", "import sys; from bench.hpc.executors import hold_lease; "
                               f"hold_lease({str(lease)!r}); print('held', flush=True); sys.stdin.read()"],
                              cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        entry = _local_entry(planned_one, _dead_pid(), "1", str(lease))
        assert st.classify(planned_one, entry, None).state == "pending"
        interrupted = {**entry, **records.sent_fields("", "", "")}  # killed before the pid was recorded
        assert st.classify(planned_one, interrupted, None).state == "pending"
    finally:
        holder.stdin.close()
        holder.wait()
    assert st.classify(planned_one, entry, None).state == "failed"  # the worker ended without a result


def test_a_reused_pid_is_not_the_local_job(planned_one, tmp_path):
    """The wrapper's pid now belongs to another process (this one): without its lease and with another start
    time, the job is gone."""
    me = str(os.getpid())
    mine = executors.process_start(me)
    assert st.classify(planned_one, _local_entry(planned_one, me, mine, ""), None).state == "pending"
    reused = _local_entry(planned_one, me, str(int(mine) - 1), str(tmp_path / "lease.lock"))
    assert st.classify(planned_one, reused, None).state == "failed"


def test_a_process_named_like_stat_fields_is_read_right():
    """/proc/<pid>/stat puts the command name in parentheses, and a name may hold ") Z 1 2": both readers of the
    file (pid_alive, process_start) split after the last ")"."""
    proc = subprocess.Popen([sys.executable, "-c", "import sys; open('/proc/self/comm', 'w').write(') Z 1 2 3');"
                             "print('named', flush=True); sys.stdin.read()"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "named"
        pid = str(proc.pid)
        start = executors.process_start(pid)
        assert start.isdigit() and st.pid_alive(pid, start) and not st.pid_alive(pid, str(int(start) + 1))
    finally:
        proc.stdin.close()
        proc.wait()
    assert executors.process_start(pid) == "" and not st.pid_alive(pid)


def test_a_lease_is_private_and_never_taken_through_a_symlink(tmp_path):
    lease = tmp_path / "lease.lock"
    os.close(executors.hold_lease(str(lease)))
    assert lease.stat().st_mode & 0o777 == 0o600
    (tmp_path / "elsewhere").write_text("")
    (tmp_path / "link.lock").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OSError):
        executors.hold_lease(str(tmp_path / "link.lock"))


def test_the_submission_lock_is_never_taken_through_a_symlink(tmp_path):
    """records_lock opens its file the way every other lock does (bench.io.locked): a symlink planted at
    `submissions.lock` is refused, not followed to a file someone else chose."""
    (tmp_path / "elsewhere").write_text("")
    (tmp_path / "synthetic").mkdir()
    (tmp_path / "synthetic" / "submissions.lock").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OSError), records.records_lock(tmp_path, "synthetic"):
        pass
    with records.records_lock(tmp_path, "other"):
        assert st.lease_held(str(tmp_path / "other" / "submissions.lock"))


def test_a_run_sequence_holds_its_lease_while_it_runs(tmp_path):
    lease = str(tmp_path / "lease.lock")
    seen = []
    executors.RunSequence([lambda: seen.append(st.lease_held(lease))], lease)()
    assert seen == [True] and not st.lease_held(lease)


def test_deferred_signals_arrive_after_the_block(monkeypatch):
    from bench.hpc.submission import deferred_signals

    got = []
    old = signal.signal(signal.SIGHUP, lambda s, f: got.append(("handler", s)))
    try:
        with deferred_signals():
            os.kill(os.getpid(), signal.SIGHUP)
            got.append("block ran to its end")
        assert got == ["block ran to its end", ("handler", signal.SIGHUP)]
    finally:
        signal.signal(signal.SIGHUP, old)


def test_deferred_signals_leave_an_ignored_signal_ignored():
    from bench.hpc.submission import deferred_signals

    old = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with deferred_signals() as caught:
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGHUP)
        assert caught == []
    finally:
        signal.signal(signal.SIGHUP, old)


@pytest.mark.slow(reason="a local job runs a real (tiny) run to the end")
def test_a_killed_local_wrapper_neither_fails_the_run_nor_starts_a_second_copy(small_root, tmp_path, monkeypatch,
                                                                               capsys):
    """submitit's wrapper process (the job id `status` knew) is killed while its worker goes on: the run stayed
    "failed" and `resubmit` started a second copy beside the first. The worker is held at its lease until the
    wrapper is dead, so the order is certain."""
    from bench.cli import main
    from bench.hpc import submission

    monkeypatch.setattr(submission.secrets, "token_hex", lambda n: "fixed")
    grid = write_grid(tmp_path / "grid.yaml", orderings=["easy_to_hard"], protocols=["ncl"])
    outputs = tmp_path / "out"
    logs = outputs / "synthetic" / "logs"
    logs.mkdir(parents=True, mode=0o700)
    gate = executors.hold_lease(str(logs / "lease-fixed-0.lock"))  # the worker waits for this lock
    try:
        assert main(["submit", "--dataset", "synthetic", "--grid", str(grid), "--root", str(small_root),
                     "--outputs", str(outputs), "--cluster", "local"]) == 0
        wrapper = records.load_records(outputs, "synthetic")[-1]["runs"][0]["job_id"]
        gate_path = logs / "lease-fixed-0.lock"
        _wait(lambda: _waiting_on(gate_path))  # the worker is started and waits at its lease
        os.kill(int(wrapper), signal.SIGKILL)
        _wait(lambda: not st.pid_alive(wrapper))  # a zombie until submitit's handle reaps it
    finally:
        os.close(gate)  # the worker takes its lease and runs
    _wait(lambda: not _waiting_on(gate_path))
    capsys.readouterr()
    assert main(["status", "--dataset", "synthetic", "--outputs", str(outputs)]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "_ncl_" in x)
    assert line.split()[0] in ("pending", "running", "complete"), line
    assert main(["resubmit", "--dataset", "synthetic", "--outputs", str(outputs)]) == 0
    assert "nothing to submit" in capsys.readouterr().out
    assert len(records.load_records(outputs, "synthetic")) == 1
    lease = str(gate_path)
    _wait(lambda: not (st.lease_held(lease) or st.lease_held(st.chain_lease(lease))))  # the run ends
    assert st.result_attrs(Path(records.load_records(outputs, "synthetic")[-1]["runs"][0]["out"]))["status"] == \
        "complete"


def _waiting_on(path: Path) -> bool:
    """A process waits for the flock of the file at `path` (/proc/locks lists waiters with `->`)."""
    inode = f":{os.stat(path).st_ino} "
    return any("->" in line and inode in line for line in Path("/proc/locks").read_text().splitlines())


def _wait(predicate, polls: int = 6000) -> None:
    """Poll `predicate` until it holds (a ceiling of 6000 polls, not a timing)."""
    for _ in range(polls):
        if predicate():
            return
        subprocess.run(["sleep", "0.1"])
    pytest.fail("gave up waiting")

"""Where each run of a grid stands: complete / running / pending / failed / not submitted.

Sources, none of which needs SLURM accounting (sacct): the result file's attributes (status, steps_done, error),
the submission records (which job runs which run), and `squeue` (which jobs are still queued or running; finished
ones stay visible for MinJobAge). A job that is gone while its result is not complete has failed.
"""

from __future__ import annotations

import getpass
import json
import os
import re
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import h5py

from bench.hpc.records import sent_fields
from bench.io import lock_held_elsewhere, write_text_atomic

STATES = ("complete", "running", "pending", "failed", "not submitted", "unknown")
RUNNING = {"RUNNING", "COMPLETING", "STAGE_OUT", "SIGNALING"}
PENDING = {"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "SUSPENDED",
           "RESIZING", "STOPPED"}
# Most telling first: a traceback's exception line, SLURM's kill messages (cancelled, time limit, preemption,
# OOM), the kernel's "Killed"; only then any "error:" line (srun's "task 0: Exited with exit code 1").
_ERRORS = (re.compile(r"^[\w.]+(Error|Exception|Interrupt|Exit)\b|^Killed\b|\*\*\*.*(CANCELLED|TIME LIMIT|PREEMPT)"
                      r"|oom-kill|out of memory", re.IGNORECASE),
           re.compile(r"error:", re.IGNORECASE))
_GENERIC = ("Submitted job triggered an exception", "Job not requeued because")
KEY_CHANGED = "the run key changed since submission"  # a job's refusal (executors.RunJob), recognised in its log


@dataclass
class RunStatus:
    name: str
    key: str
    state: str
    detail: str = ""
    job_id: str = ""
    log: str = ""


class QueueJob(NamedTuple):
    state: str
    reason: str
    name: str = ""


def slurm_queue(user: str | None = None) -> dict[str, QueueJob] | None:
    """job id ("123" or "123_4") -> (state, reason, job name) of the user's jobs, finished ones included while
    SLURM keeps them; None when squeue cannot be run."""
    cmd = ["squeue", "-h", "-r", "-u", user or getpass.getuser(), "--states=all", "-o", "%i|%T|%r|%j"]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    queue = {}
    for line in out.stdout.splitlines():
        parts = line.strip().split("|", 3)  # the name last: it may hold a "|"
        if len(parts) == 4:
            queue[parts[0]] = QueueJob(*parts[1:])
    return queue


def pid_alive(pid: str, started: str = "") -> bool:
    """A local job's wrapper process is still there (zombies count as gone); with `started` (its start time as
    recorded), only that process, not a later one given the same pid."""
    fields = _proc_stat(pid)
    return bool(fields) and fields[0] != "Z" and (not started or fields[19] == started)


def process_start(pid: str) -> str:
    """A process's start time (clock ticks since boot, /proc/<pid>/stat field 22): with the pid, it names one
    process; a later process given the same pid starts later. Empty when the process is gone."""
    fields = _proc_stat(pid)
    return fields[19] if fields else ""


def _proc_stat(pid: str) -> list[str]:
    """The fields of /proc/<pid>/stat after the command name (which may hold spaces and ")"), from the state
    (field 3) on; empty when there is no such process."""
    try:
        stat = Path(f"/proc/{int(pid)}/stat").read_text()
    except (OSError, ValueError):
        return []
    return stat.rsplit(")", 1)[-1].split()


def lease_held(path: str) -> bool:
    """Another process holds the lock on a local job's lease file: its worker is alive (executors.RunSequence)."""
    return bool(path) and lock_held_elsewhere(path)


def chain_lease(lease: str) -> str:
    """The lock file a local job's wrapper shell and submitit's controller hold (its worker holds `lease`)."""
    return lease.removesuffix(".lock") + ".chain.lock" if lease else ""


def local_alive(entry: dict) -> bool:
    """A local job lives while its worker holds its lease, its wrapper shell or controller the chain lease
    (executors.chain_lease_lines), or its wrapper process (pid and start time as recorded) runs."""
    lease = entry.get("lease", "")
    return lease_held(lease) or lease_held(chain_lease(lease)) or bool(entry["job_id"]) and pid_alive(entry["job_id"],
                                                                                        entry.get("started", ""))


def found_in_queue(entry: dict, queue: dict | None) -> dict | None:
    """An entry of an interrupted submission (no job id) completed from the queue: the job named as recorded,
    at the run's array index (a lone run is a plain job). None when no such job is queued."""
    from submitit.core.utils import JobPaths

    for job_id, job in (queue or {}).items():
        task = job_id.partition("_")[2]
        if job.name == entry.get("job_name") and (task or "0") == str(entry.get("array_index", 0)):
            paths = JobPaths(Path(entry["logs"]), job_id)
            return {**entry, **sent_fields(job_id, paths.stdout, paths.stderr)}
    return None


def recovered_from_queue(entries: dict, queue: dict | None) -> dict[str, dict]:
    """run key -> its entry completed from the queue, for every SLURM entry of an interrupted submission (no job
    id) whose job the queue lists under the recorded name and array index."""
    out = {}
    for key, entry in entries.items():
        if entry.get("cluster", "slurm") == "slurm" and not entry["job_id"]:
            found = found_in_queue(entry, queue)
            if found is not None:
                out[key] = found
    return out


def record_recovered(recovered: dict[str, dict]) -> list[Path]:
    """Write job ids found in the queue back into the records they were missing from: the queue forgets a job
    MinJobAge after it ends, and a run whose record then still had no id would read "never queued" (a finished,
    failed job losing its log, a resubmitted run its history). A record whose every run now has its id is
    "submitted". Only under `records.records_lock` (submit and resubmit hold it): an unlocked write could land
    after a live submission's own and undo it. Returns the records rewritten."""
    by_record: dict[str, dict[str, dict]] = {}
    for key, entry in recovered.items():
        by_record.setdefault(entry["record"], {})[key] = entry
    written = []
    for path, found in by_record.items():
        record = json.loads(Path(path).read_text())
        for run in record["runs"]:
            entry = found.get(run["run_key"])
            if entry is not None and not run["job_id"]:
                run.update(sent_fields(entry["job_id"], entry["log_out"], entry["log_err"]))
        if all(run["job_id"] for run in record["runs"]):
            record["state"] = "submitted"
        write_text_atomic(Path(path), json.dumps(record, indent=1) + "\n")
        written.append(Path(path))
    return written


def result_attrs(path: Path) -> dict:
    try:
        with h5py.File(path, "r", locking=False) as f:
            return {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f.attrs.items()}
    except (OSError, KeyError):
        return {}


def last_error(*logs) -> str:
    """The last line of a job's logs that looks like an error (exception, SLURM kill message)."""
    texts = []
    for log in logs:
        try:
            with open(log, "rb") as f:
                f.seek(max(0, os.path.getsize(log) - 65536))
                texts.append(f.read().decode(errors="replace").splitlines())
        except OSError:
            continue
    for pattern in _ERRORS:
        for lines in texts:
            for line in reversed(lines):
                text = line.strip()
                if pattern.search(text) and not any(g in text for g in _GENERIC):
                    return text[:300]
    return ""


def classify(planned, entry: dict | None, queue: dict | None) -> RunStatus:
    """The state of one planned run from its result file, its latest submission and the queue."""
    attrs = result_attrs(planned.run.out)
    status = RunStatus(planned.name, planned.key, "not submitted")
    progress = f"{attrs.get('steps_done', 0)}/{attrs.get('n_tasks', '?')} steps" if attrs else ""
    if attrs.get("status") == "complete" and attrs.get("run_key") == planned.key:
        status.state, status.detail = "complete", progress
        return status
    if entry is None:
        if attrs:
            status.detail = f"a result file exists ({attrs.get('status')}, {progress}): run outside `make submit`?"
        return status
    cluster = entry.get("cluster", "slurm")
    if cluster == "slurm" and queue is None:
        status.state, status.detail = "unknown", "squeue unavailable: cannot tell queued from lost jobs"
        return status
    if not entry["job_id"]:
        entry = found_in_queue(entry, queue) if cluster == "slurm" else entry
        if entry is None or not (entry["job_id"] or local_alive(entry)):
            status.detail = "its submission was interrupted before the job was queued"
            return status
    status.job_id, status.log = entry["job_id"], entry["log_err"]
    job_state, reason = "", ""
    if cluster == "slurm":
        job = queue.get(entry["job_id"], QueueJob("", ""))
        job_state, reason = job.state, job.reason
        if job_state in RUNNING:
            status.state, status.detail = "running", progress or "starting"
            return status
        if job_state in PENDING:
            status.state = "pending"
            status.detail = ", ".join(x for x in (reason if reason != "None" else "", progress and
                                                  f"{progress} done, will resume") if x)
            return status
    elif cluster == "local" and local_alive(entry):
        started = attrs.get("status") == "running"
        status.state = "running" if started else "pending"
        status.detail = progress if started else f"queued behind other runs of local job {entry['job_id']}"
        return status
    status.state = "failed"
    error = attrs.get("error") if attrs.get("status") == "failed" else ""
    error = error or last_error(entry["log_err"], entry["log_out"]) or "no error in the log"
    gone = f"SLURM state {job_state}" if job_state else "job no longer queued"
    status.detail = f"{gone}; {progress + '; ' if progress else ''}{error}"
    return status


def collect(planned: list, entries: dict, queue: dict | None) -> list[RunStatus]:
    earlier = _by_slot(entries)
    out = []
    for p in planned:
        status = classify(p, entries.get(p.key), queue)
        old = earlier.get(_slot(p.name))
        if status.state == "not submitted" and old is not None and old["run_key"] != p.key:
            status = _refused(status, old)
        out.append(status)
    return out


def _slot(run_name: str) -> str:
    """A run's name without its key: the same grid cell under another key (the data changed since)."""
    return run_name.rsplit("_", 1)[0]


def _by_slot(entries: dict) -> dict[str, dict]:
    """name without key -> the latest submitted entry of that grid cell (entries carry their record's `seq`)."""
    out: dict = {}
    for entry in sorted(entries.values(), key=lambda e: e.get("seq", 0)):
        out[_slot(entry["run_name"])] = entry
    return out


def _refused(status: RunStatus, old: dict) -> RunStatus:
    """A run never submitted under its current key whose cell was submitted under another one: when that job
    refused to run because the key changed (its dataset or weights were edited after submission), the run is
    failed, with the job's own reason and log, so `resubmit` sends it again; any other earlier job (a finished
    run of other settings) leaves it "not submitted"."""
    error = last_error(old["log_err"], old["log_out"])
    if KEY_CHANGED not in error:
        return status
    return RunStatus(status.name, status.key, "failed", f"job {old['job_id']} refused to run: {error}",
                     old["job_id"], old["log_err"])


def needs_queue(planned: list, entries: dict) -> bool:
    return any(entries.get(p.key, {}).get("cluster") == "slurm" for p in planned)


def format_status(statuses: list[RunStatus]) -> str:
    width = max([len(s.name) for s in statuses] + [3])
    lines = []
    for s in statuses:
        job = f"job {s.job_id}" if s.job_id else ""
        line = f"{s.state:<13} {s.name:<{width}}  {job:<14} {s.detail}".rstrip()
        if s.state == "failed" and s.log:
            line += f"\n{'':<13} {'':<{width}}  log: {s.log}"
        lines.append(line)
    counts = Counter(s.state for s in statuses)
    totals = ", ".join(f"{counts[state]} {state}" for state in STATES if counts[state] or state != "unknown")
    lines.append(f"total {len(statuses)} runs: {totals}")
    return "\n".join(lines)

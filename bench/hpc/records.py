"""Submission records: which job runs which run, so status and resubmit work without SLURM accounting.

One JSON file per `submit`/`resubmit` under outputs/<dataset>/submissions/, written before anything is sent
(state "submitting") and completed as job ids arrive (`Journal`). Records are ordered by their `seq`,
one more than the largest before it (written under the submission lock), not by the submitting host's clock: a
login node whose clock runs ahead would otherwise make its old record the latest, and `status` would report a
running job as failed. Records of earlier versions (no `seq`) come first, in file-name (time) order. The latest
entry of a run key wins.
"""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path

from bench.errors import BenchError
from bench.io import locked, write_text_atomic


def records_dir(outputs: Path, dataset: str) -> Path:
    return Path(outputs) / dataset / "submissions"


@contextmanager
def records_lock(outputs: Path, dataset: str):
    """Hold the dataset's submission lock (`<dataset>/submissions.lock`, flock, waiting for it) while a submit plans,
    skips complete and queued runs, submits and records: a second submit started meanwhile then plans from the
    first one's record instead of sending every run again. Beside the records folder, not in it: a refused submit
    leaves no records folder. flock excludes on local disks and most cluster file systems (see
    guards.output_lock for the NFSv3 caveat)."""
    with locked(records_dir(outputs, dataset).with_name("submissions.lock")):
        yield


def intended_entry(planned, *, job_name: str = "", array_index: int = 0, lease: str = "",
                   logs: Path | None = None) -> dict:
    """A run's entry before its job is sent: no job id yet, but what finds the job again if the id never
    arrives (the SLURM job name and array index, or the local lease file)."""
    return {"run_key": planned.key, "run_name": planned.name, "out": str(planned.run.out.resolve()),
            "job_id": "", "array_job_id": "", "array_task_id": "", "log_out": "", "log_err": "",
            "resources": asdict(planned.resources), "job_name": job_name, "array_index": array_index,
            "lease": lease, "logs": str(logs) if logs else ""}


class Journal:
    """The record of one submission, written before anything is sent (state "submitting", every run's entry
    without a job id) and rewritten, atomically, as each batch's job ids arrive; `close` marks it "submitted".
    A process killed in between leaves a record whose runs `status` resolves by job name or lease."""

    def __init__(self, path: Path, record: dict):
        self.path, self.record = path, record

    @classmethod
    def open(cls, outputs: Path, dataset: str, meta: dict, entries: list[dict]) -> Journal:
        stamp = datetime.now(timezone.utc)
        seq = max((r.get("seq", 0) for r in load_records(outputs, dataset)), default=0) + 1
        record = {**meta, "seq": seq, "created_at": stamp.isoformat(timespec="seconds"), "state": "submitting",
                  "runs": entries}
        journal = cls(records_dir(outputs, dataset) / f"{seq:06d}-{stamp:%Y%m%dT%H%M%S%fZ}-{os.getpid()}.json",
                      record)
        journal._write()
        return journal

    def sent(self, submitted: list) -> None:
        """Fill in the job ids and logs of sent runs (executors.Submitted) and rewrite the record."""
        by_key = {s.planned.key: s for s in submitted}
        for entry in self.record["runs"]:
            s = by_key.get(entry["run_key"])
            if s is not None:
                entry.update(sent_fields(s.job_id, s.log_out, s.log_err, s.started))
        self._write()

    def close(self) -> Path | None:
        """Mark the record complete; entries never sent leave it (a record left with none is removed)."""
        self.record["runs"] = [e for e in self.record["runs"] if e["job_id"]]
        if not self.record["runs"]:
            self.path.unlink(missing_ok=True)
            return None
        self.record["state"] = "submitted"
        self._write()
        return self.path

    def _write(self) -> None:
        write_text_atomic(self.path, json.dumps(self.record, indent=1) + "\n")


def sent_fields(job_id: str, log_out, log_err, started: str = "") -> dict:
    """The entry fields a sent job fills in (`started`: a local job's process start time)."""
    array_id, _, task_id = job_id.partition("_")
    return {"job_id": job_id, "array_job_id": array_id if task_id else "", "array_task_id": task_id,
            "log_out": str(log_out), "log_err": str(log_err), "started": started}


def load_records(outputs: Path, dataset: str) -> list[dict]:
    """All submission records of a dataset, oldest first."""
    out = []
    for path in sorted(records_dir(outputs, dataset).glob("*.json")):
        try:
            record = json.loads(path.read_text())
            if not isinstance(record, dict) or not isinstance(record.get("runs"), list):
                raise ValueError("no 'runs' list")
            seq = record.get("seq", 0)
            if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
                raise ValueError(f"seq {seq!r} is not a count")
        except (OSError, ValueError) as e:
            raise BenchError(f"{path}: not a submission record ({e}); move it away to continue") from None
        record["path"] = str(path)
        out.append(record)
    return sorted(out, key=lambda r: r.get("seq", 0))  # stable: records without seq keep their time order


def latest_entries(records: list[dict]) -> dict[str, dict]:
    """run key -> its latest entry, with the submission's cluster, record path and position (`seq`) attached."""
    latest = {}
    for seq, record in enumerate(records):
        for entry in record["runs"]:
            latest[entry["run_key"]] = {**entry, "cluster": record.get("cluster", "slurm"),
                                        "record": record["path"], "seq": seq}
    return latest

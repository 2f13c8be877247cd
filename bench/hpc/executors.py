"""submitit executors: what a job runs, the sbatch parameters it asks for, and how runs become job arrays.

A job runs one run through `runner.prepare` + `runner.execute`, the code path of `python -m bench run`. It is a
`submitit.helpers.Checkpointable`: on timeout or preemption submitit requeues it and the runner resumes from
`<out>.ckpt` at the next task.
"""

from __future__ import annotations

import functools
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import submitit

from bench.config import RunConfig
from bench.errors import BenchError
from bench.hpc import assembly_grid
from bench.hpc.grid import REPO, PlannedRun, Profile, Resources
from bench.hpc.status import KEY_CHANGED, chain_lease, process_start
from bench.io import hold_lock

DEFAULT_MAX_ARRAY_SIZE = 1000
# Set in every job before Python starts: HDF5 locks fail on NFS/Lustre; the hub is never contacted. (Jobs also
# get OMP_NUM_THREADS = their CPUs, so torch does not spread over every core of a shared node.)
JOB_ENV = {"HDF5_USE_FILE_LOCKING": "FALSE", "HF_HUB_OFFLINE": "1"}


class RunJob(submitit.helpers.Checkpointable):
    """One run, as an array task. Requeued after a timeout/preemption, it resumes from the run's checkpoint."""

    def __init__(self, config_json: str, out: str, run_key: str, workdir: str):
        self.config_json, self.out, self.run_key, self.workdir = config_json, out, run_key, workdir

    def __call__(self) -> str:
        from bench.continual.runner import execute, prepare

        os.chdir(self.workdir)
        run = prepare(RunConfig.from_json(self.config_json), out=Path(self.out))
        if run.run_key != self.run_key:
            raise BenchError(f"{run.out}: {KEY_CHANGED} ({self.run_key[:12]} -> "
                             f"{run.run_key[:12]}): the dataset or weights were modified; submit again")
        slurm = os.environ.get("SLURM_ARRAY_JOB_ID", os.environ.get("SLURM_JOB_ID", ""))
        task = os.environ.get("SLURM_ARRAY_TASK_ID")
        where = f"SLURM job {slurm}" + (f"_{task}" if task else "") if slurm else "no SLURM"
        print(f"run {run.out.stem} (key {run.run_key[:12]}) on {socket.gethostname()}, {where}", flush=True)
        execute(run, progress=False, log=lambda msg: print(msg, flush=True))  # on the job's allocation's threads
        return str(run.out)


class RunSequence(submitit.helpers.Checkpointable):
    """Several runs one after the other in one process (the local executor has no queue to throttle it). While it
    lives it holds an exclusive lock on its `lease` file: `status` asks the lock, not a pid, whether the worker is
    alive, so a killed wrapper process (the worker goes on) or a reused pid cannot mislead it."""

    def __init__(self, jobs: list[RunJob], lease: str = ""):
        self.jobs, self.lease = jobs, lease

    def __call__(self) -> list[str]:
        fd = hold_lease(self.lease) if self.lease else None
        try:
            return [job() for job in self.jobs]  # complete runs return at once, so a requeue skips them
        finally:
            if fd is not None:
                os.close(fd)  # releases the lease (the kernel does too when the process dies)


def hold_lease(path: str) -> int:
    """An fd holding the exclusive lock on a local job's lease file (created 0600: it lies in the private job
    folder, and only the job's own processes need it)."""
    return hold_lock(path, mode=0o600)


def default_python() -> str:
    """The repo's .venv interpreter (jobs must import the same bench and submitit as the submitter)."""
    venv = REPO / ".venv" / "bin" / "python"
    return str(venv) if venv.is_file() else sys.executable


def max_array_size() -> int:
    """SLURM's MaxArraySize (`scontrol show config`), or 1000 where it cannot be read."""
    return _max_array_size(shutil.which("scontrol"))


@functools.cache  # asked once per process: with the controller down, scontrol waits ~9 s before it gives up
def _max_array_size(scontrol: str | None) -> int:
    if scontrol is None:
        return DEFAULT_MAX_ARRAY_SIZE
    try:
        out = subprocess.run([scontrol, "show", "config"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return DEFAULT_MAX_ARRAY_SIZE
    match = re.search(r"^MaxArraySize\s*=\s*(\d+)", out, re.MULTILINE)
    return int(match.group(1)) if match else DEFAULT_MAX_ARRAY_SIZE


def group_by_resources(planned: list[PlannedRun]) -> dict[Resources, list[PlannedRun]]:
    """One array per resource configuration (sbatch options are per array), in grid order."""
    groups: dict = {}
    for p in planned:
        groups.setdefault(p.resources, []).append(p)
    return groups


def chunks(items: list, size: int) -> list[list]:
    """Array indices run 0..n-1 and must stay below MaxArraySize, so an array holds at most `size` runs."""
    return [items[i:i + size] for i in range(0, len(items), size)]


def setup_lines(profile: Profile, env: dict, threads: str = "${SLURM_CPUS_PER_TASK:-1}") -> list[str]:
    """Shell lines run before the job's Python: the job environment, then the profile's own lines."""
    exports = {**JOB_ENV, **env}
    lines = [f"export {k}={shlex.quote(str(v))}" for k, v in exports.items()]
    lines.append(f'export OMP_NUM_THREADS="{threads}"')
    return lines + list(profile.setup)


def slurm_parameters(resources: Resources, profile: Profile, *, name: str, parallelism: int, env: dict) -> dict:
    """submitit SlurmExecutor parameters (the names of submitit's sbatch template) for one resource group."""
    params = {"job_name": name, "time": resources.time_min, "cpus_per_task": resources.cpus,
              "mem": f"{int(resources.mem_gb * 1024)}MB", "array_parallelism": parallelism,
              "setup": setup_lines(profile, env), "signal_delay_s": 120}
    for key in ("partition", "account", "qos", "constraint"):
        if getattr(profile, key):
            params[key] = getattr(profile, key)
    if resources.gpus:
        if profile.gres:
            params["gres"] = profile.gres.format(gpus=resources.gpus)
        else:
            params["gpus_per_node"] = resources.gpus
    if profile.sbatch:
        params["additional_parameters"] = dict(profile.sbatch)
    return params


def sbatch_flags(params: dict, n_runs: int) -> list[str]:
    """The `#SBATCH` options an array of `n_runs` gets (printed by --dry-run)."""
    flags = {k: v for k, v in params.items() if k not in ("setup", "array_parallelism", "additional_parameters",
                                                          "signal_delay_s")}
    flags["array"] = f"0-{n_runs - 1}%{min(n_runs, params['array_parallelism'])}"
    flags["signal"] = f"USR2@{params['signal_delay_s']}"
    flags.update(params.get("additional_parameters") or {})
    return [f"--{k.replace('_', '-')}={v}" for k, v in sorted(flags.items())]


@dataclass
class Submitted:
    planned: PlannedRun
    job_id: str
    log_out: Path
    log_err: Path
    started: str = ""  # a local job's process start time (process_start), telling its pid from a reused one


def make_executor(cluster: str, folder: Path, python: str):
    if cluster == "slurm" and shutil.which("sbatch") is None:
        raise BenchError("sbatch not found: this machine is not a SLURM login node (use CLUSTER=local, "
                         "CLUSTER=debug, or start a single-node SLURM with `make slurm-up`)")
    return submitit.AutoExecutor(folder=folder, cluster=cluster, slurm_python=python, local_python=python,
                                 slurm_max_num_timeout=3)


def job_for(planned: PlannedRun, workdir: Path) -> RunJob:
    if assembly_grid.is_assembly_run(planned):  # a stream-assembly run is not a continual one: its own job
        return assembly_grid.job_for(planned, workdir)
    run = planned.run
    return RunJob(run.config.to_json(), str(run.out.resolve()), run.run_key, str(workdir))


def submit_array(executor, planned: list[PlannedRun], params: dict, workdir: Path) -> list[Submitted]:
    """One SLURM job array (one task per run); returns at once."""
    executor.update_parameters(**{f"slurm_{k}": v for k, v in params.items()})
    with submitit.helpers.clean_env(), executor.batch():
        jobs = [executor.submit(job_for(p, workdir)) for p in planned]
    return [Submitted(p, j.job_id, j.paths.stdout, j.paths.stderr) for p, j in zip(planned, jobs)]


def submit_local(executor, planned: list[PlannedRun], resources: Resources, workdir: Path, env: dict,
                 lease: str) -> list[Submitted]:
    """One background process on this machine running `planned` in sequence, holding `lease` while it lives."""
    executor.update_parameters(timeout_min=resources.time_min * max(1, len(planned)),
                               local_setup=[*setup_lines(Profile("local"), env, threads=str(resources.cpus)),
                                            *chain_lease_lines(lease)])
    job = executor.submit(RunSequence([job_for(p, workdir) for p in planned], lease))
    start = process_start(job.job_id)
    return [Submitted(p, job.job_id, job.paths.stdout, job.paths.stderr, start) for p in planned]


def chain_lease_lines(lease: str) -> list[str]:
    """Setup lines that make the wrapper shell hold `chain_lease(lease)` on fd 9, which submitit's controller
    inherits: the job counts as alive from its first moment until the controller ends, whichever of the wrapper,
    the controller or the worker is killed. Without the `flock` tool (util-linux) the job runs unguarded: only
    the worker's own lease and the wrapper's pid then tell."""
    path = shlex.quote(chain_lease(lease))
    return [f"exec 9>>{path}", "{ command -v flock >/dev/null && flock -n 9 || true; }"]

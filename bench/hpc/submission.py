"""A submission as data (`Submission`), one table from cluster kind to the code that sends it (`KINDS`), and the
order that makes a submission survive a hang-up: its record is written *before* anything is sent (state
"submitting", each run with the job name or lease it will have), every sent batch fills in its job ids at once,
and SIGTERM, SIGHUP and SIGINT wait while a batch is sent and recorded. A record left "submitting" (SIGKILL, a
power cut) is resolved by `status`: a SLURM run by its job name and array index in the queue (`submit` and
`resubmit` write the ids so found back into the record), a local run by its lease (a lock its worker holds while it
lives).
"""

from __future__ import annotations

import secrets
import shlex
import signal
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from bench.errors import BenchError, ConfigError, choice_error
from bench.hpc import containers, executors, records as recs, trust
from bench.hpc.grid import REPO, PlannedRun, Profile, Resources


@dataclass(frozen=True)
class Submission:
    """What to send and where it is recorded. `records_at` = (outputs, key): the record goes to
    `records.records_dir(*records_at)`, the key keeping different run sets (a dataset's grid, its STE runs) apart;
    `meta` is stored in the record, with the profile, cluster, container and python used."""
    runs: list[PlannedRun]
    dataset: str
    records_at: tuple[Path, str]
    logs: Path
    name: str
    cluster: str
    profile: Profile
    root: Path
    outputs: Path
    meta: dict
    container: str | None = None
    container_runtime: str | None = None
    python: str | None = None
    parallelism: int | None = None
    max_array_size: int | None = None


@dataclass(frozen=True)
class Launch:
    """What every job of one submission shares, resolved once: the interpreter line, the job environment, the
    array slots and size, and the container (None: run on the host)."""
    sub: Submission
    python: str
    env: dict
    slots: int
    array_size: int
    box: containers.Container | None = None


@dataclass
class Batch:
    """Runs sent together: one SLURM array (`job_name` unique to it; a run's array index is its position) or one
    local process (`lease`: the lock file its worker holds), or one debug job."""
    resources: Resources
    runs: list[PlannedRun]
    job_name: str = ""
    lease: str = ""
    sent: list = field(default_factory=list)  # executors.Submitted, once sent
    job: object = None  # the debug executor's job, run after the record is written


class Kind:
    """How one cluster kind sends a submission: what it checks first, how it cuts runs into batches, how it sends
    one, what a dry run prints, and what it does once everything is recorded."""
    verb = "submitted"

    def check(self, sub: Submission, dry_run: bool) -> None:
        pass

    def array_size(self, sub: Submission) -> int:
        return 0

    def batches(self, launch: Launch, groups: dict[Resources, list], tag: str) -> list[Batch]:
        """The batches of every resource group, numbered across the submission (the number names the batch)."""
        raise NotImplementedError

    def send(self, launch: Launch, batch: Batch) -> list:
        raise NotImplementedError

    def plan(self, launch: Launch, batches: list[Batch]) -> None:
        for resources, runs in executors.group_by_resources(launch.sub.runs).items():
            print(f"{runs_text(len(runs))} ({resources.label()}) on the {launch.sub.cluster} executor:")
            for p in runs:
                print(f"    {p.name}")

    def finish(self, batches: list[Batch]) -> None:
        pass


class Slurm(Kind):
    """Job arrays, chunked below MaxArraySize, each under a name of its own."""

    def check(self, sub: Submission, dry_run: bool) -> None:
        if sub.profile.placeholders() and not dry_run:  # before scontrol, which may wait seconds
            raise ConfigError(f"{sub.profile.path}: replace the placeholder(s) {', '.join(sub.profile.placeholders())}"
                              f" with your site's values (see docs/cluster.md, Profiles)")

    def array_size(self, sub: Submission) -> int:
        return sub.max_array_size or executors.max_array_size()

    def batches(self, launch: Launch, groups: dict[Resources, list], tag: str) -> list[Batch]:
        arrays = [(r, chunk) for r, runs in groups.items() for chunk in executors.chunks(runs, launch.array_size)]
        return [Batch(r, chunk, job_name=f"{launch.sub.name}-{tag}-{i}") for i, (r, chunk) in enumerate(arrays)]

    def send(self, launch: Launch, batch: Batch) -> list:
        executor = executors.make_executor("slurm", launch.sub.logs, launch.python)  # fresh: no parameter leaks
        params = self.parameters(launch, batch.resources, batch.job_name)
        try:
            done = executors.submit_array(executor, batch.runs, params, REPO)
        except Exception as e:  # sbatch's refusal (bad partition, too much memory...) as one line
            lines = [x.strip() for x in str(e).splitlines() if "sbatch: error" in x] or str(e).strip().splitlines()
            raise BenchError(f"sbatch refused an array of {runs_text(len(batch.runs))} ({batch.resources.label()}): "
                             f"{lines[-1] if lines else type(e).__name__}") from None
        kind = "array" if "_" in done[0].job_id else "job"  # submitit sends a lone run as a plain job
        print(f"submitted {kind} {done[0].job_id.split('_')[0]}: {runs_text(len(done))} "
              f"({batch.resources.label()})")
        return done

    def parameters(self, launch: Launch, resources: Resources, job_name: str) -> dict:
        return executors.slurm_parameters(resources, launch.sub.profile, name=job_name, parallelism=launch.slots,
                                          env=launch.env)

    def plan(self, launch: Launch, batches: list[Batch]) -> None:
        for i, batch in enumerate(batches):  # under the names a real submission would send them
            params = self.parameters(launch, batch.resources, batch.job_name)
            print(f"array {i + 1} ({batch.resources.label()}, {runs_text(len(batch.runs))}):")
            print("  sbatch " + " ".join(executors.sbatch_flags(params, len(batch.runs))))
            for line in params["setup"]:
                print(f"  setup: {line}")
            for p in batch.runs:
                print(f"    {p.name}")


class Local(Kind):
    """Background processes on this machine, each running its share of the runs one after the other."""

    def batches(self, launch: Launch, groups: dict[Resources, list], tag: str) -> list[Batch]:
        slots = launch.sub.parallelism or 1
        shares = [(r, runs[i::slots]) for r, runs in groups.items() for i in range(min(slots, len(runs)))]
        return [Batch(r, share, lease=str(launch.sub.logs / f"lease-{tag}-{i}.lock"))
                for i, (r, share) in enumerate(shares)]

    def send(self, launch: Launch, batch: Batch) -> list:
        executor = executors.make_executor("local", launch.sub.logs, launch.python)
        return executors.submit_local(executor, batch.runs, batch.resources, REPO, launch.env, batch.lease)

    def finish(self, batches: list[Batch]) -> None:
        pids = [b.sent[0].job_id for b in batches]
        print(f"started {len(pids)} local process(es) {', '.join(pids)}: "
              f"{runs_text(sum(len(b.sent) for b in batches))}")


class Debug(Kind):
    """In this process, one run after the other, to the end, after the record is written."""
    verb = "ran"

    def batches(self, launch: Launch, groups: dict[Resources, list], tag: str) -> list[Batch]:
        return [Batch(r, [p]) for r, runs in groups.items() for p in runs]

    def send(self, launch: Launch, batch: Batch) -> list:
        executor = executors.make_executor("debug", launch.sub.logs, launch.python)
        job = executor.submit(executors.job_for(batch.runs[0], REPO))
        batch.job = job
        return [executors.Submitted(batch.runs[0], job.job_id, job.paths.stdout, job.paths.stderr)]

    def finish(self, batches: list[Batch]) -> None:
        for batch in batches:
            print(f"running {batch.runs[0].name} in this process (debug executor)")
            batch.job.result()


KINDS: dict[str, Kind] = {"slurm": Slurm(), "local": Local(), "debug": Debug()}  # the --cluster choices


def kind_of(cluster: str) -> Kind:
    """The kind of a cluster name (a record's, reused by resubmit, is not checked by argparse)."""
    if cluster not in KINDS:
        raise choice_error("cluster", cluster, KINDS)
    return KINDS[cluster]


def launch_for(sub: Submission, kind: Kind, dry_run: bool) -> Launch:
    """Resolve the interpreter line, the job environment and the array limits of a submission."""
    from bench.features import weights_dir
    from bench.results import provenance

    box = containers.resolve(str(sub.container), sub.container_runtime, REPO) if sub.container else None
    binds = [REPO, sub.root, weights_dir(), sub.outputs, *data_roots(sub.dataset, sub.root)]
    # submitit puts `python` into a shell line as it is (the container prefix comes quoted): quote a plain path,
    # so a checkout under "my projects/" does not run "my"
    python = (box.python(binds, REPO, executors.JOB_ENV) if box
              else shlex.quote(sub.python or executors.default_python()))
    # Absolute weights dir: jobs start in the repo root; the commit and dirty flag: a container has no git to ask.
    prov = provenance()
    env = {"BENCH_WEIGHTS_DIR": str(weights_dir().resolve()), "BENCH_GIT_COMMIT": prov["git_commit"],
           "BENCH_GIT_DIRTY": str(prov["git_dirty"]), **(box.env() if box else {})}
    kind.check(sub, dry_run)
    return Launch(sub, python, env, sub.parallelism or sub.profile.array_parallelism, kind.array_size(sub), box)


def submit_runs(sub: Submission, dry_run: bool = False) -> tuple[list, Path | None] | None:
    """Submit planned runs the way `make submit` does: one job array per resource group on SLURM (chunked below
    MaxArraySize), background processes (local) or this process (debug, run to the end here). Returns
    (submitted, record path), or None for a dry run (which prints the sbatch parameters and the runs)."""
    kind = kind_of(sub.cluster)
    launch = launch_for(sub, kind, dry_run)
    tag = secrets.token_hex(4)  # this submission's job names and leases: found again after a hang-up
    batches = kind.batches(launch, executors.group_by_resources(sub.runs), tag)
    if dry_run:
        print(f"dry run: cluster {sub.cluster}, profile {sub.profile.name}, python: {launch.python}")
        kind.plan(launch, batches)
        return None
    trust.private_folder(sub.logs, "pickled job files")  # a job unpickles its file there when it starts
    journal = recs.Journal.open(*sub.records_at, _meta(launch), [e for b in batches for e in _intent(b, sub)])
    # a hang-up waits until what sbatch accepted is recorded and the record closed, and stops further batches
    with deferred_signals() as caught:
        try:
            for batch in batches:
                if caught:
                    break
                batch.sent = kind.send(launch, batch)
                journal.sent(batch.sent)
        finally:  # a batch refused, or one not reached when a signal came, was not sent
            record = journal.close()
    sent = [b for b in batches if b.sent]  # a signal may have stopped the loop before the last batch
    submitted = [s for b in sent for s in b.sent]
    kind.finish(sent)
    print(f"{runs_text(len(submitted))} {kind.verb}; logs: {sub.logs}/; record: {record}")
    return submitted, record


def _meta(launch: Launch) -> dict:
    sub, box = launch.sub, launch.box
    return {**sub.meta, "profile": sub.profile.name, "cluster": sub.cluster, "container": box.image if box else None,
            "container_runtime": box.runtime if box else None, "container_digest": box.digest if box else None,
            "python": launch.python}


def _intent(batch: Batch, sub: Submission) -> list[dict]:
    """The record entries of a batch before it is sent: what finds its jobs again if the ids never arrive."""
    return [recs.intended_entry(p, job_name=batch.job_name, array_index=i, lease=batch.lease, logs=sub.logs)
            for i, p in enumerate(batch.runs)]


@contextmanager
def deferred_signals(signals=(signal.SIGTERM, signal.SIGHUP, signal.SIGINT)):
    """Hold SIGTERM, SIGHUP (an ssh disconnect) and SIGINT while the block runs, then deliver them: a job that
    sbatch accepted is recorded before the process goes. Yields the signals caught so far (the block may stop
    early on one). A signal ignored when the block starts (SIG_IGN, as under `nohup`) is left ignored. Only the main thread can set handlers; elsewhere the block runs unguarded (the "submitting"
    record still lets status find the jobs)."""
    caught: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield caught
        return
    # a signal set to be ignored (`nohup` ignores SIGHUP) stays ignored: the user asked the submission to go on
    held = [s for s in signals if signal.getsignal(s) is not signal.SIG_IGN]
    old = {s: signal.signal(s, lambda signum, frame: caught.append(signum)) for s in held}
    try:
        yield caught
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
        for s in dict.fromkeys(caught):
            signal.raise_signal(s)


def runs_text(n: int) -> str:
    return f"{n} run{'s' if n != 1 else ''}"


def data_roots(dataset: str, root: Path) -> list[Path]:
    """Directories a container must see besides `root`: the member datasets' roots of the multi stream."""
    from bench.data.multi import split_roots

    roots = split_roots(dataset, root)
    return list(roots.values()) if isinstance(roots, dict) else []

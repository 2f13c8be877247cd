"""`python -m bench submit | status | resubmit` (the Makefile's submit, status and resubmit targets)."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from bench.errors import BenchError, ConfigError
from bench.hpc import containers, grid as grids, records as recs, status as st, trust
from bench.hpc.submission import KINDS, Submission, submit_runs
from bench.hpc.memory import check_memory_requests

DEFAULT_PROFILE, DEFAULT_CLUSTER, DEFAULT_OUTPUTS = "cpu", "slurm", "outputs"
TODO = ("failed", "not submitted")  # what submit and resubmit send; complete, queued and running runs are skipped


def _csv(text: str) -> list:
    return [t.strip() for t in text.split(",") if t.strip()]


def _add_common(p: argparse.ArgumentParser) -> None:
    from bench.assembly.commands import result_sets as assembly_sets
    from bench.datasets import result_sets

    p.add_argument("--dataset", required=True, choices=result_sets(plugins_too=True) + assembly_sets())
    p.add_argument("--grid", type=Path, help="grid file (default jobs/<dataset>.yaml)")
    p.add_argument("--root", type=Path, help="dataset root (default: $BENCH_ROOT_<DATASET> or data/raw/<dataset>)")
    p.add_argument("--outputs", type=Path, default=Path(DEFAULT_OUTPUTS),
                   help="results, logs and submission records go under OUTPUTS/<dataset>/ (default outputs)")
    for axis in grids.AXES:
        p.add_argument(f"--{axis}", type=_csv, help=f"comma-separated subset of the grid's {axis}")


def _add_submit(p: argparse.ArgumentParser, resubmit: bool) -> None:
    _add_common(p)
    again = " (default: that of the latest submission)" if resubmit else ""
    p.add_argument("--profile", default=None if resubmit else DEFAULT_PROFILE,
                   help=f"jobs/profiles/<name>.yaml: h100 | l40 | cpu{again or ' (default cpu)'}")
    p.add_argument("--cluster", choices=tuple(KINDS), default=None if resubmit else DEFAULT_CLUSTER,
                   help=f"slurm (job arrays), local (background processes here), debug (in this process){again}")
    p.add_argument("--container", help=f"run every job inside this image: an Apptainer .sif, or a podman/docker "
                                        f"image of `make image`{again}")
    p.add_argument("--container-runtime", choices=containers.RUNTIMES,
                   help=f"default: apptainer for a .sif, else podman (docker where podman is absent){again}")
    p.add_argument("--parallelism", type=int,
                   help="array tasks running at once (SLURM %%N; local: processes); default: the profile's")
    p.add_argument("--max-array-size", type=int, help="largest array (default: SLURM's MaxArraySize, or 1000)")
    p.add_argument("--python", help="interpreter the jobs run (default: the repo's .venv/bin/python)")
    p.add_argument("--jobs-dir", help=f"submitit's job files and the job logs, a folder only you can write "
                                      f"(default OUTPUTS/<dataset>/logs){again}")
    p.add_argument("--dry-run", action="store_true", help="print the sbatch parameters and the runs; submit nothing")


def register(sub) -> None:
    p = sub.add_parser("submit", help="submit a dataset's grid as job arrays (skips complete and queued runs)")
    _add_submit(p, resubmit=False)
    p.set_defaults(func=cmd_submit)
    p = sub.add_parser("resubmit", help="resubmit the failed and missing runs, with the latest submission's settings")
    _add_submit(p, resubmit=True)
    p.set_defaults(func=cmd_resubmit)
    p = sub.add_parser("status", help="one line per run: complete / running / pending / failed / not submitted")
    _add_common(p)
    p.set_defaults(func=cmd_status)


def _selection(args, records: list[dict]) -> grids.Selection:
    """Command-line filters; an axis not given covers what earlier submissions covered (the whole axis when
    one of them did, or when nothing was submitted yet)."""
    chosen = {}
    for axis in grids.AXES:
        value = getattr(args, axis)
        if value is None and records:
            seen = [r.get("selection", {}).get(axis) for r in records]
            value = None if any(v is None for v in seen) else sorted({str(x) for v in seen for x in v})
        if axis == "seeds" and value is not None:
            try:
                value = [int(v) for v in value]
            except ValueError:
                raise ConfigError(f"--seeds expects integers, got {value}") from None
        chosen[axis] = value
    return grids.Selection(**chosen)


def _plan(args, records: list[dict], profile_name: str, reuse: bool, write_back: bool = False):
    """Expand the grid and classify every run. `reuse`: grid, root and filters not given on the command line
    come from the earlier submissions (status, resubmit) instead of the defaults (submit); `write_back`: record
    the job ids of interrupted submissions found in the queue (plan_status; the caller holds the lock)."""
    from bench.data.multi import default_root

    last = records[-1] if records and reuse else {}
    grid = grids.load_grid(args.dataset, args.grid or (_recorded(last, "grid") if last else None))
    profile = grids.load_profile(profile_name)
    root = Path(args.root or last.get("root") or default_root(args.dataset)).resolve()
    selection = _selection(args, records if reuse else [])
    try:
        planned = grids.expand(grid, profile, selection, root, args.outputs.resolve())
    except ConfigError as e:
        raise ConfigError(_as_grid_value(str(e), grid.path)) from None
    return grid, profile, root, selection, planned, plan_status(planned, records, write_back)


def _as_grid_value(message: str, grid_path: Path) -> str:
    """A run setting refused while the grid expands names its command-line flag (`--seed -5 is not allowed`),
    which a `submit` user never gave: name the grid file and its key instead (`seeds: -5 is not allowed`)."""
    flag = re.match(r"--([a-z][a-z0-9-]*)\b", message)
    if flag is None:
        return message
    key = flag.group(1).replace("-", "_")
    key = f"{key}s" if f"{key}s" in grids.AXES else key
    return f"{grid_path}: {key}: {message[flag.end():].lstrip(' :')}"


def _recorded(record: dict, key: str):
    """A setting of a submission record as `resubmit` and `status` reuse it. Records lie in outputs/, which
    others may write: a profile is a plain name in jobs/profiles/ (its `setup` lines run in every job), a grid a
    path string; a record naming `../../elsewhere/evil` is refused in one line naming the record."""
    value = record.get(key)
    if key == "profile" and value is not None:
        trust.plain_name(value, "profile", record["path"])
    if key in ("grid", "jobs_dir") and value is not None and not isinstance(value, str):
        raise ConfigError(f"{record['path']}: {key} {value!r} is not a path")
    return value


def cmd_status(args) -> int:
    records = recs.load_records(args.outputs, args.dataset)
    if not records and args.root is None and args.grid is None:  # nothing to report, no dataset to blame
        raise BenchError(f"{recs.records_dir(args.outputs, args.dataset)}: no submission records; run `make submit "
                         f"DATASET={args.dataset}` first (or give --root/--grid to list the runs a submit would send)")
    profile = (_recorded(records[-1], "profile") if records else None) or DEFAULT_PROFILE
    *_, statuses = _plan(args, records, profile, reuse=True)
    print(st.format_status(statuses))
    return 0


def cmd_submit(args) -> int:
    if args.dry_run:  # submits and records nothing: no lock to wait for
        return _submit(args, recs.load_records(args.outputs, args.dataset), resubmit=False)
    with recs.records_lock(args.outputs, args.dataset):  # the records read here are current until ours is written
        return _submit(args, recs.load_records(args.outputs, args.dataset), resubmit=False)


def cmd_resubmit(args) -> int:
    if args.dry_run:
        return _resubmit(args)
    with recs.records_lock(args.outputs, args.dataset):
        return _resubmit(args)


def _resubmit(args) -> int:
    records = recs.load_records(args.outputs, args.dataset)
    if not records:
        raise BenchError(f"{recs.records_dir(args.outputs, args.dataset)}: no submission records; "
                         f"run `make submit DATASET={args.dataset}` first")
    last = records[-1]
    for key in ("profile", "cluster", "container", "container_runtime", "parallelism", "jobs_dir"):
        if getattr(args, key) is None:
            setattr(args, key, _recorded(last, key))
    return _submit(args, records, resubmit=True)


def _check_counts(args) -> None:
    """--parallelism and --max-array-size are integers >= 1 (also a record's parallelism, reused by resubmit):
    0 is not "the default", a negative one never reaches sbatch, -1 does not submit nothing."""
    for option in ("parallelism", "max_array_size"):
        value = getattr(args, option)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise ConfigError(f"--{option.replace('_', '-')} must be an integer >= 1, got {value!r}")


def _submit(args, records: list[dict], resubmit: bool) -> int:
    _check_counts(args)
    profile_name = trust.plain_name(args.profile, "profile", "--profile") if args.profile else DEFAULT_PROFILE
    cluster = args.cluster or DEFAULT_CLUSTER
    grid, profile, root, selection, planned, statuses = _plan(args, records, profile_name, reuse=resubmit,
                                                                write_back=not args.dry_run)
    check_memory_requests(planned, grid)
    outputs = args.outputs.resolve()
    todo = triage(planned, statuses, str(grid.path), list_failed=resubmit)
    if not todo:
        print("nothing to submit")
        return 0

    jobs_dir = Path(args.jobs_dir).resolve() if args.jobs_dir else outputs / grid.dataset / "logs"
    meta = {"command": "resubmit" if resubmit else "submit", "dataset": grid.dataset, "grid": str(grid.path),
            "parallelism": args.parallelism, "root": str(root), "outputs": str(outputs),
            "jobs_dir": str(jobs_dir) if args.jobs_dir else None,
            "selection": selection.as_dict(), "argv": sys.argv}
    sub = Submission(todo, dataset=grid.dataset, records_at=(outputs, grid.dataset), logs=jobs_dir,
                     name=f"bench-{grid.dataset}", cluster=cluster, profile=profile, root=root, outputs=outputs,
                     meta=meta, container=args.container, container_runtime=args.container_runtime,
                     python=args.python, parallelism=args.parallelism, max_array_size=args.max_array_size)
    if submit_runs(sub, dry_run=args.dry_run) is not None and cluster != "debug":
        print(f"follow with `make status DATASET={grid.dataset}`; failed runs: `make resubmit DATASET={grid.dataset}`")
    return 0


def triage(planned: list, statuses: list, title: str, list_failed: bool = True) -> list:
    """Print the state counts (and the failed runs), return the runs to submit: failed and never submitted ones;
    complete, queued and running ones are left alone."""
    print(f"{title}: {len(planned)} runs; " + _counts(statuses))
    if list_failed:
        for s in statuses:
            if s.state == "failed":
                print(f"  failed: {s.name}  job {s.job_id}: {s.detail}")
    if any(s.state == "unknown" for s in statuses):
        print("warning: squeue unavailable, runs of earlier submissions were not resubmitted", file=sys.stderr)
    return [p for p, s in zip(planned, statuses) if s.state in TODO]


def plan_status(planned: list, records: list[dict], write_back: bool = False) -> list:
    """The state of every planned run (complete / queued / failed / not submitted) from its result file, the
    submission records and, when a run went to SLURM, the queue. An interrupted submission's jobs are found in
    the queue by name; `write_back` (only under the submission lock) records their ids, so later commands know
    the jobs once the queue has forgotten them."""
    entries = recs.latest_entries(records)
    queue = st.slurm_queue() if st.needs_queue(planned, entries) else None
    recovered = st.recovered_from_queue(entries, queue)
    if recovered and write_back:
        for path in st.record_recovered(recovered):
            print(f"{path}: recorded the job ids of an interrupted submission, found in the queue by job name")
    return st.collect(planned, {**entries, **recovered}, queue)


def _counts(statuses) -> str:
    n = {state: sum(s.state == state for s in statuses) for state in st.STATES}
    return (f"{n['complete']} complete, {n['running'] + n['pending']} queued or running (skipped); "
            f"{n['failed']} failed, {n['not submitted']} not submitted (to submit)")

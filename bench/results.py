"""The HDF5 result schema: one file per run, written atomically; `load` turns files into a DataFrame.
(docs/results.md holds the schema as a table, one row per attribute and dataset.)

Schema (bench.config.SCHEMA_VERSION, 3), everything a table needs to be traced back to the run that made it:
  attrs     schema_version, run_key, run_name, status (running|complete|failed), steps_done, n_tasks,
            config (JSON), config_sha256, index_sha256 (+ synthetic.json for the synthetic benchmark),
            weights_id, seed, git_commit, git_dirty, packages (JSON), python, host, device, slurm_job_id,
            slurm_array_job_id, slurm_array_task_id, container_image, container_runtime, container_digest (the
            image id or the .sif's SHA-256; all three empty outside a container), started_at, finished_at
            (ISO 8601 UTC), error (failed runs),
            backbone_forward_images (images the frozen backbone processed in the last process of the run),
            track (image|tabular), levels (JSON list: ["image", "pixel"] or ["record"]), evaluation
            (continual|cross: cross evaluates every task after each step, upper triangle too)
  Schema-1 files (no track/levels/evaluation) are image runs and read as such; schema 3 nests the track's
  inputs in the config JSON (schema 1 and 2 configs are flat: RunConfig.from_json reads all three).
  tasks               [N] task names in stream order
  R/image, R/pixel    [N, N] ROC-AUC after learning task i (row) on the test set of task j (column);
                      NaN above the diagonal, for steps not yet run, and for one-class test sets
  R/image_npr_auc     [N, N] normalised PR-AUC (AP − p)/(1 − p); `tasks_info/prevalence` [N] holds p
  tasks_info/n_train, tasks_info/n_test, tasks_info/prevalence    [N]
  timing/train_s, timing/eval_s   [N] wall seconds per step (CUDA synchronised)
  memory/state_bytes  [N] bytes of the protocol's state after each step
  timing/cpu_threads  [N] torch's CPU threads while each step ran (0: not recorded; the attribute cpu_threads is
                      the last execution's)
  routing/counts      [N, N, N] (task-bank protocols) images of test task j routed to bank k after step i
  routing/own_fraction [N, N] share of task j's test images routed to its own bank after step i
  scores/step, scores/task, scores/label, scores/value   per-image image scores of every evaluation
  Tabular track, level record: R/record (ROC-AUC), R/record_ap, R/record_npr_auc, R/record_prevalence,
                      R/record_expected_ap (AP of a random ranking of that test set) [N, N]; scores/record: each
                      score's row in the record index (index.csv); scores/order (int64, only where the index
                      has every test record's timestamp): the record's rank in timestamp order within its test set
                      (ties by record id), the stream order of the block bootstrap. Files without it stay readable
                      (their reports use the stratified bootstrap)
Files are opened with locking=False (NFS/Lustre) and replaced atomically (write an exclusive
`<name>.tmp.<random>` beside it, close, os.replace: bench.io.atomic_path).
"""

from __future__ import annotations

import json
import os
import platform
import socket
import subprocess
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

import h5py
import numpy as np
import pandas as pd

from bench.config import SCHEMA_VERSION, RunConfig
from bench.errors import BenchError, DatasetError
from bench.io import atomic_path
from bench.metrics import summarize

PACKAGES = ("numpy", "pandas", "scikit-learn", "pyod", "torch", "torchvision", "timm", "submitit", "h5py")
REPO = Path(__file__).resolve().parents[1]




def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def provenance() -> dict:
    """Where and with what a run was made (recorded once per run)."""
    # A job in a container has no git: the submitter passes the commit and dirty flag of the checkout it binds.
    commit = _git("rev-parse", "HEAD") or os.environ.get("BENCH_GIT_COMMIT", "unknown")
    dirty = _git("status", "--porcelain", "--untracked-files=no")
    git_dirty = int(bool(dirty)) if dirty is not None else int(os.environ.get("BENCH_GIT_DIRTY", "-1"))
    packages = {}
    for name in PACKAGES:
        try:
            packages[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            packages[name] = "missing"
    return {
        "git_commit": commit,
        "git_dirty": git_dirty,  # -1: not a git checkout
        "packages": json.dumps(packages, sort_keys=True),
        "python": platform.python_version(),
        "host": socket.gethostname(),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID", ""),
        "slurm_array_job_id": os.environ.get("SLURM_ARRAY_JOB_ID", ""),
        "slurm_array_task_id": os.environ.get("SLURM_ARRAY_TASK_ID", ""),
        # Set by the job launcher (bench.hpc.containers); empty outside a container.
        "container_image": os.environ.get("BENCH_CONTAINER_IMAGE", ""),
        "container_runtime": os.environ.get("BENCH_CONTAINER_RUNTIME", ""),
        "container_digest": os.environ.get("BENCH_CONTAINER_DIGEST", ""),
    }




def write_run(path: Path, attrs: dict, arrays: dict[str, np.ndarray], tasks: list[str]) -> None:
    """Write one run file atomically: readers see the old file or the new one, never half of one."""
    with atomic_path(Path(path)) as tmp, h5py.File(tmp, "w", locking=False) as f:
        f.attrs["schema_version"] = SCHEMA_VERSION
        for key, value in attrs.items():
            f.attrs[key] = value
        f.create_dataset("tasks", data=np.array(tasks, dtype=h5py.string_dtype()))
        for name, arr in arrays.items():
            f.create_dataset(name, data=arr)




def file_run_key(path: Path, fmt: str | None = None) -> str | None:
    """The run key recorded in a result file, or None when `path` is not a readable result file (or, with `fmt`,
    not one whose `format` attribute is `fmt`: the assembly run files)."""
    try:
        with h5py.File(path, "r", locking=False) as f:
            if fmt is not None and plain(f.attrs.get("format")) != fmt:
                return None
            key = f.attrs.get("run_key")
    except (OSError, KeyError):
        return None
    return plain(key) if key is not None else None


# A dataset may declare more bytes than the file stores only by compression (this suite's writer never
# compresses); beyond this ratio the shape is a lie (a crafted file declaring 10^11 scores in 20 KB) and reading it
# would try to allocate it all
MAX_EXPANSION = 1000


def read_run(path: Path) -> dict:
    """{'attrs': {...}, 'tasks': [...], '<group/name>': array, ...} of one run file. Every dataset's declared
    shape is checked against what the file holds and against its task count before anything is read."""
    try:
        with h5py.File(path, "r", locking=False) as f:
            datasets = sized_datasets(path, f)
            _check_shapes(path, datasets)
            out = {"attrs": {k: plain(v) for k, v in f.attrs.items()},
                   "tasks": [t.decode() if isinstance(t, bytes) else str(t) for t in f["tasks"][()]]}
            out.update((name, obj[()]) for name, obj in datasets.items() if name != "tasks")
    except (OSError, KeyError, TypeError, ValueError) as e:
        raise BenchError(f"{path}: not a readable result file ({type(e).__name__}: {e})") from None
    return out


def sized_datasets(path: Path, group: h5py.Group) -> dict[str, h5py.Dataset]:
    """{name: dataset} of every dataset under `group` (an open file), none read yet; DatasetError naming the file
    for one that declares more than MAX_EXPANSION times the bytes the file stores of it (reading it would allocate
    what it declares). Every reader of result and assembly run files lists its datasets through here."""
    datasets = {}
    group.visititems(lambda name, obj: datasets.__setitem__(name, obj) if isinstance(obj, h5py.Dataset) else None)
    for name, obj in datasets.items():
        declared = obj.size * obj.dtype.itemsize
        if declared > max(obj.id.get_storage_size(), 1) * MAX_EXPANSION:
            raise DatasetError(f"{path}: dataset {name} declares shape {obj.shape} ({declared:,} bytes) but the "
                               f"file stores {obj.id.get_storage_size():,} bytes of it: crafted or corrupt")
    return datasets


def _check_shapes(path: Path, datasets: dict) -> None:
    """BenchError for a dataset whose shape does not fit the file's task count (one row per task; the per-score
    arrays share one length). check_file checks R's [N, N]."""
    if "tasks" not in datasets or datasets["tasks"].ndim != 1:
        raise BenchError(f"{path}: not a readable result file (no one-dimensional tasks dataset)")
    n = datasets["tasks"].shape[0]
    lengths = {obj.shape for name, obj in datasets.items() if name.startswith("scores/")}
    if len(lengths) > 1 or any(len(s) != 1 for s in lengths):
        raise BenchError(f"{path}: the scores/ datasets differ in shape ({', '.join(map(str, sorted(lengths)))}); "
                         "expected one length")
    for name, obj in datasets.items():
        if name != "tasks" and not name.startswith("scores/") and (not obj.shape or obj.shape[0] != n):
            raise BenchError(f"{path}: dataset {name} has shape {obj.shape}, expected one row per task (the "
                             f"file's {n} tasks)")


def plain(value):
    """An HDF5 attribute as a plain Python value (numpy scalars unwrapped, bytes decoded)."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, bytes):
        return value.decode()
    return value


def run_files(path_or_dir) -> list[Path]:
    p = Path(path_or_dir)
    if p.is_dir():
        return sorted(p.rglob("*.h5"))
    if p.is_file():
        return [p]
    raise BenchError(f"{p}: no such result file or directory")


def track(run: dict) -> str:
    """The run's track; schema-1 files are image runs."""
    return run["attrs"].get("track", "image")


def levels(run: dict) -> list[str]:
    """The run's metric levels (R/<level> matrices); schema-1 files have image and pixel."""
    text = run["attrs"].get("levels")
    return json.loads(text) if text else ["image", "pixel"]


def run_config(run: dict) -> RunConfig:
    """The run's configuration, whatever schema wrote it (RunConfig.from_json reads the flat configs of 1 and 2)."""
    return RunConfig.from_json(run["attrs"]["config"])


def summary_row(run: dict, path: Path | None = None) -> dict:
    """One tidy row: identity, status, the continual metrics of every level, times, provenance. Tabular runs
    have no backbone, weights or image size (empty / NaN in those columns)."""
    a = run["attrs"]
    config = run_config(run)
    inputs = config.inputs.summary()
    done = int(a["steps_done"])
    row = {
        "path": str(path) if path else "", "run_name": a["run_name"], "run_key": a["run_key"],
        "status": a["status"], "track": config.track, "evaluation": config.evaluation,
        "dataset": config.name, "reader": config.dataset, "model": config.model, "backbone": inputs["backbone"],
        "weights": inputs["weights"], "protocol": config.protocol, "ordering": config.ordering,
        "seed": config.seed, "image_size": inputs["image_size"],
        "n_tasks": int(a["n_tasks"]), "steps_done": done,
    }
    for level in levels(run):
        s = summarize(run[f"R/{level}"][:done, :done]) if done else {}
        row.update({f"{level}_{k}": v for k, v in s.items()})
    if "routing/own_fraction" in run and done:
        # routing accuracy: over all evaluations so far, the share of test images routed to their own bank
        counts = run["routing/counts"][:done]
        row["routing_accuracy"] = float(np.trace(counts, axis1=1, axis2=2).sum() / counts.sum())
    row["tied_cells"] = tied_cells(run)[0]  # cells with most scores tied (bench.metrics.MOSTLY_TIED)
    if config.track == "tabular":  # only the tabular released preset replaces scores; any other run stops instead
        row["scores_replaced"] = replaced_scores(run)
    row["train_s"] = float(np.sum(run["timing/train_s"][:done]))
    row["eval_s"] = float(np.sum(run["timing/eval_s"][:done]))
    row["step_threads"] = step_threads(run, done)
    for key in ("config_sha256", "index_sha256", "weights_id", "git_commit", "git_dirty", "host", "device",
                "cpu_threads", "load_avg_start", "load_avg_end", "slurm_job_id", "slurm_array_job_id", "slurm_array_task_id", "container_image", "container_runtime",
                "container_digest", "started_at", "finished_at"):
        row[key] = a.get(key, "")  # "" for files older than the attribute
    return row


def step_threads(run: dict, done: int) -> str:
    """The CPU thread counts the steps ran with, "1" or "1,2" (a run resumed under another count); "" where the
    file predates per-step recording."""
    steps = np.asarray(run.get("timing/cpu_threads", np.zeros(0, np.int64)))
    if steps.dtype.kind not in "iu":  # a crafted file's text or floats: not a record of thread counts
        return ""
    counts = sorted({int(c) for c in steps[:done] if c > 0})
    return ",".join(map(str, counts))


def load(path_or_dir) -> pd.DataFrame:
    """One row per run file under `path_or_dir` (a file or a directory searched recursively)."""
    rows = [summary_row(read_run(p), p) for p in run_files(path_or_dir)]
    return pd.DataFrame(rows)


def is_complete(path: Path, run_key: str | None = None, fmt: str | None = None) -> bool:
    """A complete file (with the expected key; with `fmt`, of that `format`) means the run is done: submit and run
    skip it."""
    if not Path(path).is_file():
        return False
    try:
        with h5py.File(path, "r", locking=False) as f:
            a = {k: plain(f.attrs.get(k)) for k in ("format", "status", "run_key")}
    except (OSError, KeyError):
        return False
    return bool((fmt is None or a["format"] == fmt) and a["status"] == "complete"
                and (run_key is None or a["run_key"] == run_key))


def tied_cells(run: dict) -> tuple[int, int]:
    """(cells whose test scores are mostly one value, cells with scores) of a run (bench.metrics.mostly_tied):
    counted in the summaries beside the NaN cells; (0, 0) for a file without per-score records."""
    from bench.metrics import mostly_tied

    if "scores/value" not in run:
        return 0, 0
    cell = run["scores/step"].astype(np.int64) * (1 << 16) + run["scores/task"]
    order = np.argsort(cell, kind="stable")
    groups = np.split(run["scores/value"][order], np.flatnonzero(np.diff(cell[order])) + 1)
    return sum(mostly_tied(g) for g in groups if len(g)), sum(1 for g in groups if len(g))


def replaced_scores(run: dict) -> int:
    """Non-finite record scores the tabular `released` preset replaced before scoring, over the steps done
    (`nonfinite/record`, bench.tabular.track); 0 where the file has no count (every other preset stops on one)."""
    counts = run.get("nonfinite/record")
    if counts is None:
        return 0
    return int(np.asarray(counts)[:int(run["attrs"]["steps_done"])].sum())


def _replaced_line(run: dict) -> list[str]:
    n = replaced_scores(run)
    if not n:
        return []
    cells = int((np.asarray(run["nonfinite/record"]) > 0).sum())
    return [f"       {n} non-finite record score(s) replaced in {cells} cell(s) before scoring (the released "
            "preset's policy: the metrics above rest on substituted scores)"]


def summary_lines(path: Path) -> list[str]:
    """What `bench run` / `bench tabular run` print at the end: per level ROC-AUC_CL, BWT and both forgetting
    measures, and for records nPR-AUC_CL beside the test sets' prevalence p (the normalisation depends on it)."""
    from bench.metrics import continual_roc_auc

    run = read_run(path)
    lines = []
    tied, cells = tied_cells(run)
    for i, level in enumerate(levels(run)):
        s = summarize(run[f"R/{level}"])
        nan = f"  ({s['nan_cells']}/{s['n_cells']} cells NaN)" if s["nan_cells"] else ""
        if tied and i == 0:  # the per-score records are the first level's (image, record)
            nan += f"  ({tied}/{cells} cells with most scores tied)"
        if len(run[f"R/{level}"]) == 1:  # Eq. 2 and both forgetting measures compare a later step: none here
            lines.append(f"{level:>5}: ROC-AUC_CL {s['roc_auc_cl']:.4f}  BWT n/a (one task)  FM n/a (one task){nan}")
        else:
            lines.append(f"{level:>5}: ROC-AUC_CL {s['roc_auc_cl']:.4f}  BWT {s['bwt']:+.4f}  FM "
                         f"{s['forgetting']:.4f} (Chaudhry, last step)  FM {s['forgetting_released']:.4f} (CAD "
                         f"675a9c9 formula){nan}")
        if level == "record":
            p = np.diag(run["R/record_prevalence"])  # a test set's prevalence: the same at every step
            p = p[np.isfinite(p)]
            spread = f", per task {p.min():.3f}-{p.max():.3f}" if len(p) > 1 else ""
            lines.append(f"       nPR-AUC_CL {continual_roc_auc(run['R/record_npr_auc']):.4f}  (prevalence p "
                         f"{p.mean() if len(p) else float('nan'):.3f}{spread})")
            lines += _replaced_line(run)
    return lines

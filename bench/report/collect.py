"""Gather the run files a report rests on, enforcing provenance (stream-assembly-and-provenance §9).

A published number must come from a complete run file that records where, from what and with which code it was
made. So collecting refuses (BenchError, exit 2) a file with no provenance, an unknown schema version, a config
or run key that does not match its recorded hash, two complete files with the same run key and different
results, or a complete file whose R/image differs (beyond 1e-9) from the ROC-AUC of the per-image scores stored
in the same file — an edited R; likewise R/image_npr_auc, and a tabular file's R/record_ap, R/record_npr_auc,
R/record_prevalence and R/record_expected_ap. R/pixel cannot be recomputed (pixel maps are not stored): it is not
verifiable from the file, and the image tables say so. Each input records whether its scores were so checked
(`scores_checked`; false only for files that store no scores). A folder under runs/ that cannot be listed is
refused, not skipped: a table from the files that could be read would look complete.
Both tracks and both schemas: a file's levels (`results.levels`: image and pixel, or record) name its matrices;
the first level is the one recomputed from the scores (R/record of a tabular run, every cell of a cross-evaluation).
Incomplete and failed runs are never averaged in: they are returned as `missing`.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from bench import results
from bench.config import READABLE_SCHEMAS, RunConfig
from bench.errors import BenchError
from bench.io import file_sha256
from bench.metrics import normalized_pr_auc, roc_auc
from bench.report.render import MULTI, sort_frame

# Attributes without which a run cannot be traced back to its code, inputs and environment.
PROVENANCE_ATTRS = ("run_key", "run_name", "status", "steps_done", "n_tasks", "config", "config_sha256",
                    "index_sha256", "weights_id", "seed", "git_commit", "git_dirty", "packages", "python", "host",
                    "started_at")
REQUIRED_ARRAYS = ("timing/train_s", "timing/eval_s")  # and R/<level> of each of the file's levels
SCORE_ARRAYS = ("scores/step", "scores/task", "scores/label", "scores/value")
R_TOLERANCE = 1e-9  # the ROC-AUC is exact (rank counts); only float summation order may differ


class ProvenanceError(BenchError):
    """A result file cannot be published: no provenance, unknown schema, or conflicting duplicates."""


@dataclass
class Collection:
    dataset: str  # a dataset name, or "all"
    runs: pd.DataFrame  # one row per complete run used (duplicates collapsed)
    details: dict  # run_key -> results.read_run(...) of the file used
    missing: pd.DataFrame  # incomplete or failed runs with no complete file of the same key
    inputs: list[dict]  # every file read: path (relative to outputs), sha256, run_key, status, role, scope
    reference: pd.DataFrame = field(default_factory=pd.DataFrame)  # single-dataset runs (MultiDataset selection)


def result_dirs(outputs: Path, dataset: str) -> dict[str, Path]:
    """{dataset: outputs/<dataset>/runs} of every dataset with results; `dataset` picks one or "all"."""
    found = {p.parent.name: p for p in sorted(Path(outputs).glob("*/runs")) if p.is_dir()}
    if dataset == "all":
        if not found:
            raise BenchError(f"{outputs}: no results (expected {outputs}/<dataset>/runs/*.h5)")
        return found
    if dataset not in found:
        runs = Path(outputs) / dataset / "runs"
        if runs.exists() and not runs.is_dir():
            raise BenchError(f"{runs}: not a folder (expected a folder of run files, {runs}/*.h5)")
        raise BenchError(f"{outputs}/{dataset}/runs: no such directory (datasets with results: "
                         f"{', '.join(found) or 'none'}; or DATASET=all)")
    return {dataset: found[dataset]}


def check_file(run: dict, path: Path, dataset: str) -> None:
    """Refuse a file that cannot be traced to its code and inputs, or whose identity does not add up."""
    a = run["attrs"]
    version = a.get("schema_version")
    if version not in READABLE_SCHEMAS:
        raise ProvenanceError(f"{path}: unknown schema version {version!r} (this suite reads "
                              f"{', '.join(map(str, READABLE_SCHEMAS))})")
    absent = [k for k in PROVENANCE_ATTRS if k not in a or (isinstance(a[k], str) and not a[k])]
    if absent:
        raise ProvenanceError(f"{path}: no provenance: attributes {', '.join(absent)} missing or empty")
    if a["git_commit"] == "unknown":
        raise ProvenanceError(f"{path}: no provenance: git commit unknown (run from a git checkout, or set "
                              "BENCH_GIT_COMMIT in containers)")
    if hashlib.sha256(a["config"].encode()).hexdigest() != a["config_sha256"]:
        raise ProvenanceError(f"{path}: config does not match its recorded config_sha256")
    try:
        config = RunConfig.from_json(a["config"])
    except (BenchError, TypeError, json.JSONDecodeError) as e:
        raise ProvenanceError(f"{path}: unreadable config ({e})") from None
    if config.run_key(a["index_sha256"], a["weights_id"]) != a["run_key"]:
        raise ProvenanceError(f"{path}: run_key does not match its config, index and weights")
    if config.result_set != dataset:
        raise ProvenanceError(f"{path}: holds a {config.result_set!r} run but lies under {dataset}/runs")
    matrices = [f"R/{level}" for level in results.levels(run)]
    missing = [k for k in (*matrices, *REQUIRED_ARRAYS) if k not in run]
    if missing:
        raise ProvenanceError(f"{path}: datasets {', '.join(missing)} missing (schema {version} requires them)")
    n = int(a["n_tasks"])
    if len(run["tasks"]) != n or any(run[k].shape != (n, n) for k in matrices):
        raise ProvenanceError(f"{path}: tasks and R matrices disagree with n_tasks={n}")
    if a["status"] == "complete" and int(a["steps_done"]) != n:
        raise ProvenanceError(f"{path}: status complete but steps_done={a['steps_done']} of {n}")


def result_arrays(run: dict) -> list[str]:
    """What "the same results" means for two files with one run key (timings may differ, results may not)."""
    return [k for k in run if k.startswith("R/")]


def check_scores(run: dict, path: Path) -> bool:
    """Recompute every evaluated cell of R/<first level> (R/image, R/record) from the stored per-sample scores;
    refuse a file where they disagree. False when the file stores no scores (nothing to check against)."""
    present = [k for k in SCORE_ARRAYS if k in run]
    if not present:
        return False
    if len(present) != len(SCORE_ARRAYS):
        absent = ", ".join(sorted(set(SCORE_ARRAYS) - set(present)))
        raise ProvenanceError(f"{path}: per-image scores incomplete ({absent} missing)")
    step, task = run["scores/step"].astype(np.int64), run["scores/task"].astype(np.int64)
    label, value = run["scores/label"], run["scores/value"]
    name = f"R/{results.levels(run)[0]}"
    R = run[name]
    cross = run["attrs"].get("evaluation") == "cross"
    cells = {(int(i), int(j)): None for i, j in zip(step, task)}
    done = int(run["attrs"]["steps_done"])
    for i in range(done):
        for j in range(len(R) if cross else i + 1):
            if (i, j) not in cells:
                raise ProvenanceError(f"{path}: {name}[{i},{j}] has no stored per-sample scores")
    order = np.lexsort((task, step))
    bounds = np.flatnonzero(np.diff(step[order]) | np.diff(task[order])) + 1
    for group in np.split(order, bounds):
        i, j = int(step[group[0]]), int(task[group[0]])
        if not (0 <= i < done and 0 <= j < len(R) and (cross or j <= i)):
            raise ProvenanceError(f"{path}: per-sample scores for {name}[{i},{j}], a cell this run did not evaluate")
        with warnings.catch_warnings():  # one-class test sets: NaN both ways, warned about when the run was made
            warnings.simplefilter("ignore")
            recomputed = {name: roc_auc(label[group], value[group])}
            if name == "R/record":
                recomputed.update(record_pr_metrics(label[group], value[group]))
            elif name == "R/image":
                recomputed["R/image_npr_auc"] = normalized_pr_auc(label[group], value[group])[0]
        for matrix, again in recomputed.items():
            if matrix not in run:
                continue  # a file from before the matrix existed
            stored = float(run[matrix][i, j])
            if (np.isnan(stored) != np.isnan(again)) or abs(stored - again) > R_TOLERANCE:
                raise ProvenanceError(f"{path}: {matrix}[{i},{j}] = {stored!r} but the file's per-sample scores "
                                      f"give {again!r}; the matrix was edited or the file is corrupt")
    return True


def record_pr_metrics(labels: np.ndarray, scores: np.ndarray) -> dict:
    """The precision-recall matrices of a tabular cell, as the tabular track computes them from the same scores."""
    from bench.metrics import expected_random_ap

    npr, p = normalized_pr_auc(labels, scores)
    k = int(np.sum(labels))
    return {"R/record_npr_auc": npr, "R/record_prevalence": p,
            "R/record_ap": npr * (1 - p) + p if np.isfinite(npr) else np.nan,
            "R/record_expected_ap": float(expected_random_ap(len(labels), k)) if k else np.nan}


def _same_results(a: dict, b: dict) -> str | None:
    """None when two runs hold the same results, else the first difference."""
    for key in sorted(set(result_arrays(a)) | set(result_arrays(b))):
        if (key in a) != (key in b):
            return f"{key} present in one file only"
        if key in a and not np.array_equal(a[key], b[key], equal_nan=True):
            i, j = np.argwhere(~((a[key] == b[key]) | (np.isnan(a[key]) & np.isnan(b[key]))))[0]
            return f"{key}[{i},{j}] = {float(a[key][i, j])!r} vs {float(b[key][i, j])!r}"
    return None


def run_paths(runs_dir: Path) -> list[Path]:
    """Every *.h5 under runs_dir; a folder that cannot be listed is a ProvenanceError naming it (Path.rglob would
    skip it without a word)."""
    def refuse(e: OSError):
        raise ProvenanceError(f"{e.filename}: cannot list this folder under {runs_dir} ({e.strerror}); fix its "
                              f"permissions or move it away: a table from the other folders would look complete")

    found = []
    for folder, dirs, files in os.walk(runs_dir, onerror=refuse):
        dirs.sort()
        found += [Path(folder) / f for f in files if f.endswith(".h5")]
        odd = [d for d in dirs if d.endswith(".h5")]
        if odd:
            raise ProvenanceError(f"{Path(folder) / odd[0]}: a folder, not a result file; move it out of {runs_dir}")
    return sorted(found)


def _read_dir(dataset: str, runs_dir: Path):
    for path in run_paths(runs_dir):
        run = results.read_run(path)
        check_file(run, path, dataset)
        yield path, run


def _gather(outputs: Path, dirs: dict[str, Path], scope: str):
    """(rows, details, missing rows, inputs) of the runs under `dirs`, duplicates checked and collapsed.

    Each input gets a role: used, duplicate (same key and results as a used file), superseded (incomplete, but
    its key finished in another file) or missing; and a scope: tables, or selection (MultiDataset reference)."""
    complete: dict[str, tuple[Path, dict]] = {}
    rows, missing, inputs, pending = [], [], [], []
    for dataset, runs_dir in dirs.items():
        for path, run in _read_dir(dataset, runs_dir):
            a = run["attrs"]
            entry = {"path": path.relative_to(outputs).as_posix(), "sha256": file_sha256(path),
                     "run_key": a["run_key"], "status": a["status"], "role": "used", "scope": scope}
            inputs.append(entry)
            if a["status"] != "complete":
                pending.append((entry, run))
                continue
            entry["scores_checked"] = check_scores(run, path)
            key = a["run_key"]
            if key in complete:
                other = complete[key][0]
                diff = _same_results(complete[key][1], run)
                if diff:
                    raise ProvenanceError(f"{other} and {path}: same run key {key[:12]} but different results "
                                          f"({diff}); delete the wrong one")
                entry["role"] = "duplicate"
                continue
            complete[key] = (path, run)
            row = results.summary_row(run, path.relative_to(outputs))
            row["file_sha256"] = entry["sha256"]
            rows.append(row)
    for entry, run in pending:
        if entry["run_key"] in complete:
            entry["role"] = "superseded"  # a stale partial copy of a run that has finished elsewhere
            continue
        entry["role"] = "missing"
        a = run["attrs"]
        config = results.run_config(run)
        missing.append({"path": entry["path"], "run_name": a["run_name"], "run_key": a["run_key"],
                        "status": a["status"], "steps_done": int(a["steps_done"]), "n_tasks": int(a["n_tasks"]),
                        **{k: getattr(config, k) for k in ("dataset", "model", "protocol", "ordering", "seed")},
                        "backbone": config.inputs.summary()["backbone"],
                        "error": a.get("error", "")})
    details = {key: run for key, (_, run) in complete.items()}
    return rows, details, missing, inputs


RUN_ORDER = ["dataset", "ordering", "model", "backbone", "weights", "protocol", "seed", "run_key"]


def collect(outputs: Path, dataset: str) -> Collection:
    """Every run under outputs/<dataset>/runs (or every dataset's, for "all"), checked; see the module doc.

    For DATASET=multi the other datasets' complete runs come along as `reference`: InCLAD picks the methods the
    MultiDataset rows average over from single-dataset results.
    """
    outputs = Path(outputs)
    dirs = result_dirs(outputs, dataset)
    rows, details, missing, inputs = _gather(outputs, dirs, "tables")
    if not rows:
        raise BenchError(f"{outputs}/{dataset}/runs: no complete runs ({len(missing)} incomplete or failed)")
    reference = pd.DataFrame()
    if dataset == MULTI:
        others = {d: p for d, p in result_dirs(outputs, "all").items() if d != MULTI}
        ref_rows, _, _, ref_inputs = _gather(outputs, others, "selection")
        inputs += ref_inputs
        reference = sort_frame(pd.DataFrame(ref_rows), RUN_ORDER) if ref_rows else pd.DataFrame()
    runs = sort_frame(pd.DataFrame(rows), RUN_ORDER)
    missing_frame = pd.DataFrame(missing, columns=["path", "run_name", "run_key", "status", "steps_done", "n_tasks",
                                                   "dataset", "model", "backbone", "protocol", "ordering", "seed",
                                                   "error"])
    return Collection(dataset, runs, details, missing_frame, sorted(inputs, key=lambda e: e["path"]),
                      reference)

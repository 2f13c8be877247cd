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
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from bench import results
from bench.datasets import is_assembly_set
from bench.config import READABLE_SCHEMAS, RunConfig
from bench.errors import BenchError, ProvenanceError
from bench.io import file_sha256
from bench.metrics import normalized_pr_auc, normalized_pr_auc_rows, roc_auc, roc_auc_rows
from bench.report import specs
from bench.report.render import MULTI, sort_frame

# Attributes without which a run cannot be traced back to its code, inputs and environment.
PROVENANCE_ATTRS = ("run_key", "run_name", "status", "steps_done", "n_tasks", "config", "config_sha256",
                    "index_sha256", "weights_id", "seed", "git_commit", "git_dirty", "packages", "python", "host",
                    "started_at")
REQUIRED_ARRAYS = ("timing/train_s", "timing/eval_s")  # and R/<level> of each of the file's levels
SCORE_ARRAYS = ("scores/step", "scores/task", "scores/label", "scores/value")
R_TOLERANCE = 1e-9  # the ROC-AUC is exact (rank counts); only float summation order may differ
# The type of every attribute aggregate reads with a meaning; SHOWN_ATTRS are copied into runs.csv as they are
ATTR_TYPES = {**dict.fromkeys(("run_key", "run_name", "status", "config", "config_sha256", "index_sha256",
                               "weights_id", "git_commit", "packages", "python", "host", "started_at", "track",
                               "levels", "evaluation", "error"), str),
              **dict.fromkeys(("steps_done", "n_tasks", "seed", "git_dirty", "cpu_threads"), int)}
SHOWN_ATTRS = ("device", "finished_at", "slurm_job_id", "slurm_array_job_id", "slurm_array_task_id",
               "container_image", "container_runtime", "container_digest")
STATUSES = ("running", "complete", "failed")
MAX_TASKS = 10_000


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
    found = {p.parent.name: p for p in sorted(Path(outputs).glob("*/runs"))
             if p.is_dir() and not is_assembly_set(p.parent.name)}  # those have a report of their own
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
    if not _is(version, int) or version not in READABLE_SCHEMAS:
        raise ProvenanceError(f"{path}: unknown schema version {_shown(version)} (this suite reads "
                              f"{', '.join(map(str, READABLE_SCHEMAS))})")
    absent = [k for k in PROVENANCE_ATTRS if k not in a or (isinstance(a[k], str) and not a[k])]
    if absent:
        raise ProvenanceError(f"{path}: no provenance: attributes {', '.join(absent)} missing or empty")
    _check_attr_types(a, path)
    if a["git_commit"] == "unknown":
        raise ProvenanceError(f"{path}: no provenance: git commit unknown (run from a git checkout, or set "
                              "BENCH_GIT_COMMIT in containers)")
    if hashlib.sha256(a["config"].encode()).hexdigest() != a["config_sha256"]:
        raise ProvenanceError(f"{path}: config does not match its recorded config_sha256")
    config = _read_config(run, path)
    if config.run_key(a["index_sha256"], a["weights_id"]) != a["run_key"]:
        raise ProvenanceError(f"{path}: run_key does not match its config, index and weights")
    if config.result_set != dataset:
        raise ProvenanceError(f"{path}: holds a {config.result_set!r} run but lies under {dataset}/runs")
    for name, recorded, configured in (("seed", a["seed"], config.seed), ("track", results.track(run), config.track),
                                       ("evaluation", a.get("evaluation", "continual"), config.evaluation)):
        if recorded != configured:
            raise ProvenanceError(f"{path}: attribute {name}={_shown(recorded)} but its config says "
                                  f"{_shown(configured)}")
    matrices = [f"R/{level}" for level in _levels(run, path)]
    missing = [k for k in (*matrices, *REQUIRED_ARRAYS) if k not in run]
    if missing:
        raise ProvenanceError(f"{path}: datasets {', '.join(missing)} missing (schema {version} requires them)")
    n = a["n_tasks"]
    if len(run["tasks"]) != n or any(run[k].shape != (n, n) for k in matrices):
        raise ProvenanceError(f"{path}: tasks and R matrices disagree with n_tasks={n}")
    if run["tasks"] != config.tasks:
        raise ProvenanceError(f"{path}: its tasks dataset does not list its config's tasks in order")
    if a["status"] == "complete" and a["steps_done"] != n:
        raise ProvenanceError(f"{path}: status complete but steps_done={a['steps_done']} of {n}")


def _is(value, kind: type) -> bool:
    return isinstance(value, kind) and not isinstance(value, bool)


def _shown(value) -> str:
    """A value for a message: short, and for arrays only their type and shape (a crafted file may hold anything)."""
    if isinstance(value, np.ndarray):
        return f"an array of shape {value.shape}"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_attr_types(a: dict, path: Path) -> None:
    """Every attribute aggregate reads has its type and range (a crafted file or a broken writer: one line)."""
    for name, value in a.items():
        kind = ATTR_TYPES.get(name)
        if kind is not None and not _is(value, kind):
            raise ProvenanceError(f"{path}: attribute {name} is {_shown(value)}, expected "
                                  f"{'a string' if kind is str else 'an integer'}")
        if kind is None and name in SHOWN_ATTRS and not isinstance(value, (str, int, float)):
            raise ProvenanceError(f"{path}: attribute {name} is {_shown(value)}, expected a string or a number")
    if a["status"] not in STATUSES:
        raise ProvenanceError(f"{path}: status {_shown(a['status'])} (expected {', '.join(STATUSES)})")
    if a["git_dirty"] not in (-1, 0, 1):
        raise ProvenanceError(f"{path}: git_dirty={a['git_dirty']} (expected 0, 1, or -1 outside a git checkout)")
    if not (1 <= a["n_tasks"] <= MAX_TASKS and 0 <= a["steps_done"] <= a["n_tasks"]):
        raise ProvenanceError(f"{path}: n_tasks={a['n_tasks']}, steps_done={a['steps_done']} (expected 1 to "
                              f"{MAX_TASKS} tasks and at most that many steps done)")


def _read_config(run: dict, path: Path) -> RunConfig:
    """The file's config, with the types the tables read from it."""
    try:
        config = RunConfig.from_json(run["attrs"]["config"])
    except RecursionError:
        raise ProvenanceError(f"{path}: unreadable config (nested too deeply to be a run's config)") from None
    except (BenchError, TypeError, ValueError) as e:
        raise ProvenanceError(f"{path}: unreadable config ({type(e).__name__}: {e})"[:300]) from None
    inputs = config.inputs.summary()
    texts = {"dataset": config.dataset, "model": config.model, "ordering": config.ordering,
             "protocol": config.protocol, "evaluation": config.evaluation, "backbone": inputs["backbone"],
             "weights": inputs["weights"]}
    wrong = [k for k, v in texts.items() if not isinstance(v, str)]
    if not _is(config.seed, int):
        wrong.append("seed")
    if not isinstance(config.hparams, dict):
        wrong.append("hparams")
    if not (isinstance(config.tasks, list) and all(isinstance(t, str) for t in config.tasks)):
        wrong.append("tasks")
    if not (_is(inputs["image_size"], int) or (config.track == "tabular")):
        wrong.append("image_size")
    if wrong:
        raise ProvenanceError(f"{path}: config fields {', '.join(wrong)} have the wrong type")
    return config


def _levels(run: dict, path: Path) -> list[str]:
    try:
        levels = results.levels(run)
    except RecursionError:
        raise ProvenanceError(f"{path}: attribute levels is nested too deeply (expected a JSON list)") from None
    except ValueError as e:  # JSONDecodeError
        raise ProvenanceError(f"{path}: attribute levels is not JSON ({e})") from None
    if not (isinstance(levels, list) and levels and all(isinstance(v, str) and v for v in levels)
            and len(set(levels)) == len(levels)):
        raise ProvenanceError(f"{path}: attribute levels is {_shown(levels)}, expected a list of level names")
    return levels


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
    groups = np.split(order, bounds)
    for group in groups:
        i, j = int(step[group[0]]), int(task[group[0]])
        if not (0 <= i < done and 0 <= j < len(R) and (cross or j <= i)):
            raise ProvenanceError(f"{path}: per-sample scores for {name}[{i},{j}], a cell this run did not evaluate")
    for (i, j), recomputed in _recompute(name, groups, step, task, label, value).items():
        for matrix, again in recomputed.items():
            if matrix not in run:
                continue  # a file from before the matrix existed
            stored = float(run[matrix][i, j])
            if (np.isnan(stored) != np.isnan(again)) or abs(stored - again) > R_TOLERANCE:
                raise ProvenanceError(f"{path}: {matrix}[{i},{j}] = {stored!r} but the file's per-sample scores "
                                      f"give {again!r}; the matrix was edited or the file is corrupt")
    return True


def _recompute(name: str, groups: list, step, task, label, value) -> dict:
    """{(i, j): {matrix: value}} of each cell's metrics from its scores. The image cells of one test set (the same
    labels at every step) are computed together, as rows (a campaign's aggregate checks ~50,000 cells); one-class,
    non-finite and tabular cells one by one, as the runs computed them."""
    out, batches = {}, {}
    batchable = name == "R/image" and value.dtype.kind in "fiu" and label.dtype.kind in "biu"
    for group in groups:
        y = label[group]
        if (batchable and np.isin(y, (0, 1)).all() and 0 < int(y.sum()) < y.size
                and np.isfinite(value[group]).all()):
            batches.setdefault(y.tobytes(), []).append(group)
            continue
        with warnings.catch_warnings():  # one-class test sets: NaN both ways, warned about when the run was made
            warnings.simplefilter("ignore")
            cell = {name: roc_auc(y, value[group])}
            if name == "R/record":
                cell.update(record_pr_metrics(y, value[group]))
            elif name == "R/image":
                cell["R/image_npr_auc"] = normalized_pr_auc(y, value[group])[0]
        out[int(step[group[0]]), int(task[group[0]])] = cell
    for members in batches.values():
        rows = np.stack(members)
        y, scores = label[rows[0]].astype(bool), value[rows]
        for group, auc, npr in zip(members, roc_auc_rows(y, scores), normalized_pr_auc_rows(y, scores)):
            out[int(step[group[0]]), int(task[group[0]])] = {name: float(auc), "R/image_npr_auc": float(npr)}
    return out


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


# Where two files of one run key may differ without either being wrong: what the run key leaves out because the
# same computation gives the same numbers anywhere, except in float summation order (docs/cluster.md, "Threads")
MACHINE_ATTRS = ("cpu_threads", "device", "packages", "git_commit", "host")


def _conflict(key: str, first: Path, second: Path, diff: str, run_a: dict, run_b: dict) -> ProvenanceError:
    """Two complete files of one run key with different results: say what else differs between them."""
    a, b = run_a["attrs"], run_b["attrs"]
    made = [f"{k} {_shown(a.get(k, ''))} vs {_shown(b.get(k, ''))}" for k in MACHINE_ATTRS
            if a.get(k, "") != b.get(k, "")]
    threads = [results.step_threads(r, r["attrs"]["steps_done"]) for r in (run_a, run_b)]
    if threads[0] != threads[1]:  # the last execution's count may agree while a resumed step ran with another
        made.append(f"steps' CPU threads {threads[0] or 'not recorded'} vs {threads[1] or 'not recorded'}")
    if made:
        advice = (f"they were made differently ({'; '.join(made)}), so neither need be wrong; keep the one made "
                  "like the rest of this result set and move the other out of runs/")
    else:
        advice = "nothing recorded tells them apart; delete the wrong one"
    return ProvenanceError(f"{first} and {second}: same run key {key[:12]} but different results ({diff}); "
                           + advice)


def run_paths(runs_dir: Path) -> list[Path]:
    """Every *.h5 under runs_dir, linked folders followed; a folder that cannot be listed, or a link to a folder
    already listed (a loop), is a ProvenanceError naming it (Path.rglob would skip either without a word)."""
    def refuse(e: OSError):
        raise ProvenanceError(f"{e.filename}: cannot list this folder under {runs_dir} ({e.strerror}); fix its "
                              f"permissions or move it away: a table from the other folders would look complete")

    found, seen = [], set()
    for folder, dirs, files in os.walk(runs_dir, onerror=refuse, followlinks=True):
        real = os.path.realpath(folder)
        if real in seen:
            raise ProvenanceError(f"{folder}: a link to a folder already listed under {runs_dir} ({real}); "
                                  "remove the link: its files would be read twice, or forever")
        seen.add(real)
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


# The columns that make a table row: its runs differ only in their seed, which the row averages over
ROW = ("track", "dataset", "ordering", "model", "backbone", "weights", "protocol", "evaluation")


def settings(run: dict) -> dict:
    """Everything that changes a run's numbers but its seed: the run key's preimage without the seed."""
    a = run["attrs"]
    identity = results.run_config(run).identity(a["index_sha256"], a["weights_id"])
    identity.pop("seed")
    return identity


def _differences(a: dict, b: dict, prefix: str = "") -> list[str]:
    out, absent = [], object()
    for k in sorted(set(a) | set(b)):
        x, y = a.get(k, absent), b.get(k, absent)
        if isinstance(x, dict) and isinstance(y, dict):
            out += _differences(x, y, f"{prefix}{k}.")
        elif x != y:
            x, y = ("(not recorded)" if v is absent else _shown(v) for v in (x, y))
            out.append(f"{prefix}{k} {x} vs {y}")
    return out


def check_rows(used: list[tuple[Path, dict, dict]]) -> None:
    """Refuse runs that would share a table row (ROW) but differ in anything but the seed: a row's value is the
    mean of its seeds, and averaging two settings (or keeping one of them) would publish a number nobody ran."""
    first: dict[tuple, tuple[Path, dict]] = {}
    for path, run, row in used:
        where = tuple(str(row[k]) for k in ROW)
        mine = settings(run)
        if where not in first:
            first[where] = (path, mine)
            continue
        other, theirs = first[where]
        diff = _differences(theirs, mine)
        if diff:
            raise ProvenanceError(
                f"{other} and {path}: one table row ({', '.join(w for w in where[1:] if w)}) but their settings "
                f"differ in more than the seed ({'; '.join(diff)}); a row averages seeds only: aggregate them "
                "under separate --outputs, or remove one")


def _pick(key: str, held: tuple[Path, dict], path: Path, run: dict) -> tuple[Path, dict]:
    """Of two files of one run key and the same results, the one whose row is used: the named ordering over
    `custom` (the same task list asked for by --tasks), whatever the file order; two names are refused."""
    names = [results.run_config(r).ordering for r in (held[1], run)]
    if names[0] == names[1]:
        return held
    if "custom" in names:
        return held if names[1] == "custom" else (path, run)
    raise ProvenanceError(f"{held[0]} and {path}: one run (key {key[:12]}) filed under two orderings "
                          f"({names[0]}, {names[1]}) that name the same task list; remove one")


def _gather(outputs: Path, dirs: dict[str, Path], scope: str, derive: Callable[[dict, str], None] | None = None):
    """(rows, details, missing rows, inputs) of the runs under `dirs`, duplicates checked and collapsed.

    Each input gets a role: used, duplicate (same key and results as a used file), superseded (incomplete, but
    its key finished in another file) or missing; and a scope: tables, or selection (MultiDataset reference).
    With `derive` (see `collect`), an image run's score arrays are dropped as soon as its row and derived
    numbers are made, so at campaign scale only one file's scores are held at a time."""
    complete: dict[str, tuple[Path, dict]] = {}
    entries: dict[Path, dict] = {}
    rows: dict[Path, dict] = {}
    missing, inputs, pending = [], [], []
    for dataset, runs_dir in dirs.items():
        for path, run in _read_dir(dataset, runs_dir):
            a = run["attrs"]
            entry = {"path": path.relative_to(outputs).as_posix(), "sha256": file_sha256(path),
                     "run_key": a["run_key"], "status": a["status"], "role": "used", "scope": scope}
            inputs.append(entry)
            entries[path] = entry
            if a["status"] != "complete":
                pending.append((entry, run))
                continue
            entry["scores_checked"] = check_scores(run, path)
            rows[path] = results.summary_row(run, path.relative_to(outputs))  # reads the scores (tied cells)
            if derive is not None:
                derive(run, entry["sha256"])
                if results.track(run) == "image":  # the tabular tables resample the scores themselves
                    for name in SCORE_ARRAYS:
                        run.pop(name, None)
            key = a["run_key"]
            if key in complete:
                held = complete[key]
                diff = _same_results(held[1], run)
                if diff:
                    raise _conflict(key, held[0], path, diff, held[1], run)
                complete[key] = _pick(key, held, path, run)
                entries[complete[key][0]]["role"] = "used"
                entries[path if complete[key][0] == held[0] else held[0]]["role"] = "duplicate"
                continue
            complete[key] = (path, run)
    used = []
    for path, run in complete.values():
        row = rows[path]
        row["file_sha256"] = entries[path]["sha256"]
        used.append((path, run, row))
    check_rows(used)
    for entry, run in pending:
        if entry["run_key"] in complete:
            entry["role"] = "superseded"  # a stale partial copy of a run that has finished elsewhere
            continue
        entry["role"] = "missing"
        a = run["attrs"]
        config = results.run_config(run)
        missing.append({"path": entry["path"], "run_name": a["run_name"], "run_key": a["run_key"],
                        "status": a["status"], "steps_done": a["steps_done"], "n_tasks": a["n_tasks"],
                        **{k: getattr(config, k) for k in ("dataset", "model", "protocol", "ordering", "seed")},
                        "backbone": config.inputs.summary()["backbone"],
                        "error": a.get("error", "")})
    details = {key: run for key, (_, run) in complete.items()}
    return [row for _, _, row in used], details, missing, inputs


RUN_ORDER = ["dataset", "ordering", "model", "backbone", "weights", "protocol", "seed", "run_key"]


def collect(outputs: Path, dataset: str, derive: Callable[[dict, str], None] | None = None) -> Collection:
    """Every run under outputs/<dataset>/runs (or every dataset's, for "all"), checked; see the module doc.

    For DATASET=multi the other datasets' complete runs come along as `reference`: InCLAD picks the methods the
    MultiDataset rows average over from single-dataset results.
    `derive(run, file_sha256)`: called on each complete file once it is checked, to store in the run dict what
    the tables need of its per-image scores (bench.report.aggregate: the bootstrap intervals); the image runs'
    scores/* arrays are then dropped from `details` (memory: one run's scores at a time, not every run's).
    Without it every array is kept.
    """
    outputs = Path(outputs)
    dirs = result_dirs(outputs, dataset)
    rows, details, missing, inputs = _gather(outputs, dirs, "tables", derive)
    if not rows:
        raise BenchError(f"{outputs}/{dataset}/runs: no complete runs ({len(missing)} incomplete or failed)")
    reference = pd.DataFrame()
    if dataset == MULTI:
        others = {d: p for d, p in result_dirs(outputs, "all").items() if d != MULTI}
        # only their rows are used: nothing to derive, and their scores go as soon as each row is made
        ref_rows, _, _, ref_inputs = _gather(outputs, others, "selection", derive and (lambda run, sha: None))
        inputs += ref_inputs
        reference = sort_frame(pd.DataFrame(ref_rows), RUN_ORDER) if ref_rows else pd.DataFrame()
    runs = sort_frame(pd.DataFrame(rows), RUN_ORDER)
    missing_frame = pd.DataFrame(missing, columns=[c.name for c in specs.MISSING.columns])
    return Collection(dataset, runs, details, missing_frame, sorted(inputs, key=lambda e: e["path"]),
                      reference)

"""Scenario manifests: data/scenarios/<dataset>.json, versioned in git (InCLAD App. D.1).

A manifest is what a user needs to rebuild the benchmark's task streams from their own copy of the raw data:

  schema       1
  dataset      dataset name (`multi` for the multi-dataset stream)
  tasks        concept names as the readers discover them (`<dataset>/<concept>` in the multi stream)
  orderings    {name: {"tasks": [...], "seed": int}}: each a permutation of `tasks`; `random` records its seed.
               In `multi`, an ordering may take a subset (the released InCLAD-MD stream and the suite's
               ROC-AUC-selected one share 23 of their 27 tasks): then `tasks` is the union of the orderings
  source       {"kind": "publication" | "ste" | "manifests", ...}: where the orderings come from
  difficulty   optional [{"task", "avg_roc_auc", "avg_rank", "roc_auc": {method: value}}], hardest first
  selection    optional (multi stream): the selection rule and each task's role
  files        optional {task: {"train"|"test": {"n", "anomalous", "sha256", "list": [[image, label, mask]]}}}:
               paths relative to the (member) dataset's root; `sha256` is `list_sha256` of the list

This module is a leaf (json, hashing, validation) so that bench.data.stream can read manifests.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

from bench.errors import ConfigError, DatasetError
from bench.io import write_text_atomic

SCHEMA_VERSION = 1
DEFAULT_DIR = Path(__file__).resolve().parents[2] / "data" / "scenarios"
SOURCE_KINDS = ("publication", "ste", "manifests")
MULTI = "multi"
KEYS = {"schema", "dataset", "tasks", "orderings", "source", "difficulty", "selection", "files"}
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_ORDERING = re.compile(r"^[a-z0-9_]+$")
_SHA = re.compile(r"^[0-9a-f]{64}$")


def scenarios_dir() -> Path:
    """$BENCH_SCENARIOS_DIR, else the repository's data/scenarios (tests point the variable elsewhere)."""
    return Path(os.environ.get("BENCH_SCENARIOS_DIR") or DEFAULT_DIR)


def manifest_path(dataset: str) -> Path:
    return scenarios_dir() / f"{dataset}.json"


def load(dataset: str) -> dict | None:
    """The validated manifest of `dataset`, or None when it has none."""
    path = manifest_path(dataset)
    return read(path) if path.is_file() else None


def read(path) -> dict:
    path = Path(path)
    try:
        manifest = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read scenario manifest ({exc})") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno}); expected a scenario "
                          f"manifest (see docs/scenarios.md)") from None
    return validate(manifest, str(path))


def write(manifest: dict, path=None) -> Path:
    """Validate, then replace the file atomically; returns its path."""
    path = Path(path) if path is not None else manifest_path(manifest.get("dataset", ""))
    validate(manifest, str(path))
    write_text_atomic(path, dumps(manifest) + "\n")  # a failed write (full disk) leaves no temp file
    return path


def validate(m, where: str) -> dict:
    """Check the schema; every problem is one ConfigError naming the file and what was expected."""
    def fail(msg: str):
        raise ConfigError(f"{where}: {msg}")

    if not isinstance(m, dict):
        fail("expected a JSON object (scenario manifest)")
    if set(m) - KEYS:
        fail(f"unknown keys {sorted(set(m) - KEYS)} (expected {sorted(KEYS)})")
    for key in ("schema", "dataset", "tasks", "orderings", "source"):
        if key not in m:
            fail(f"missing key {key!r}")
    if m["schema"] != SCHEMA_VERSION:
        fail(f"schema {m['schema']!r} is not {SCHEMA_VERSION}")
    dataset = m["dataset"]
    if not isinstance(dataset, str) or not _NAME.match(dataset):
        fail(f"dataset {dataset!r} is not a plain name")
    tasks = m["tasks"]
    if not isinstance(tasks, list) or not tasks:
        fail("tasks must be a non-empty list")
    for task in tasks:
        if not _valid_task(dataset, task):
            form = "<dataset>/<concept>" if dataset == MULTI else "a plain concept name (letters, digits, _ . -)"
            fail(f"task {task!r} is not {form}")
    if len(set(tasks)) != len(tasks):
        fail(f"tasks repeat a name: {tasks}")
    _validate_orderings(m["orderings"], tasks, fail, subsets=dataset == MULTI)
    source = m["source"]
    if not isinstance(source, dict) or source.get("kind") not in SOURCE_KINDS:
        fail(f"source must be an object with kind one of {SOURCE_KINDS}")
    if "difficulty" in m:
        _validate_difficulty(m["difficulty"], tasks, fail)
    if "files" in m:
        _validate_files(m["files"], tasks, fail)
    return m


def _valid_task(dataset: str, task) -> bool:
    if not isinstance(task, str):
        return False
    parts = task.split("/")
    if dataset == MULTI:
        return len(parts) == 2 and all(_NAME.match(p) for p in parts) and parts[0] != MULTI
    return len(parts) == 1 and bool(_NAME.match(task))


def _validate_orderings(orderings, tasks, fail, subsets: bool = False) -> None:
    if not isinstance(orderings, dict) or not orderings:
        fail("orderings must be a non-empty object {name: {\"tasks\": [...]}}")
    for name, value in orderings.items():
        if not _ORDERING.match(name) or name == "alphabetical":  # `alphabetical` is built in (stream.py)
            fail(f"ordering name {name!r} must be lower-case letters, digits, _ and not 'alphabetical'")
        if not isinstance(value, dict) or not isinstance(value.get("tasks"), list):
            fail(f"orderings.{name} must be an object with a tasks list")
        if set(value) - {"tasks", "seed"}:
            fail(f"orderings.{name}: unknown keys {sorted(set(value) - {'tasks', 'seed'})} (expected tasks, seed)")
        order = value["tasks"]
        if "seed" in value and (not isinstance(value["seed"], int) or isinstance(value["seed"], bool)):
            fail(f"orderings.{name}.seed must be an integer")
        if (subsets and order and all(isinstance(t, str) for t in order) and len(set(order)) == len(order)
                and set(order) <= set(tasks)):
            continue  # a multi-dataset stream: its own selection of the tasks (their union is checked below)
        if sorted(order) != sorted(tasks):
            missing, extra = sorted(set(tasks) - set(order)), sorted(set(order) - set(tasks))
            fail(f"orderings.{name}.tasks is not a permutation of tasks (missing {missing}, extra {extra}, "
                 f"or repeated names)")
    unused = sorted(set(tasks) - {t for value in orderings.values() for t in value["tasks"]})
    if unused:
        fail(f"tasks {unused} are in no ordering")
    if "random" in orderings and "seed" not in orderings["random"]:
        fail("orderings.random must record the seed it was drawn with")


def _validate_difficulty(rows, tasks, fail) -> None:
    if not isinstance(rows, list):
        fail("difficulty must be a list of {task, avg_roc_auc, avg_rank, roc_auc}")
    for row in rows:
        if not isinstance(row, dict) or row.get("task") not in tasks:
            fail(f"difficulty entry {row!r} does not name a task of this manifest")
        for key in ("avg_roc_auc", "avg_rank"):
            if not _number(row.get(key)):
                fail(f"difficulty entry for {row['task']!r}: {key} must be a number")
        if not isinstance(row.get("roc_auc"), dict) or not all(_number(v) for v in row["roc_auc"].values()):
            fail(f"difficulty entry for {row['task']!r}: roc_auc must map method -> number")
    if len({r["task"] for r in rows}) != len(rows):
        fail("difficulty lists a task twice")


def _validate_files(files, tasks, fail) -> None:
    if not isinstance(files, dict):
        fail("files must be an object {task: {train: ..., test: ...}}")
    for task, splits in files.items():
        if task not in tasks:
            fail(f"files.{task}: not a task of this manifest")
        if not isinstance(splits, dict) or set(splits) != {"train", "test"}:
            fail(f"files.{task} must have exactly the splits train and test")
        for split, entry in splits.items():
            where = f"files.{task}.{split}"
            if not isinstance(entry, dict) or set(entry) != {"n", "anomalous", "sha256", "list"}:
                fail(f"{where} must have exactly n, anomalous, sha256, list")
            rows = entry["list"]
            if not isinstance(rows, list):
                fail(f"{where}.list must be a list of [image, label, mask]")
            for row in rows:
                if (not isinstance(row, list) or len(row) != 3 or not isinstance(row[0], str)
                        or row[1] not in (0, 1) or isinstance(row[1], bool) or not isinstance(row[2], str)):
                    fail(f"{where}: entry {row!r} is not [image path, 0|1, mask path or \"\"]")
                for path in row[0::2]:
                    if path and not safe_relative(path):
                        fail(f"{where}: path {path!r} escapes the dataset root (expected a relative path "
                             f"without '..', '.', empty parts, backslashes or a drive)")
                if not row[0]:
                    fail(f"{where}: entry with an empty image path")
            if split == "train" and any(r[1] for r in rows):
                fail(f"{where}: anomalous images in a training split (training is on normal images only)")
            if entry["n"] != len(rows) or entry["anomalous"] != sum(r[1] for r in rows):
                fail(f"{where}: n/anomalous ({entry['n']}/{entry['anomalous']}) do not match the list")
            if not isinstance(entry["sha256"], str) or not _SHA.match(entry["sha256"]):
                fail(f"{where}.sha256 is not a hex SHA-256")
            if entry["sha256"] != list_sha256(rows):
                fail(f"{where}.sha256 does not match its list (the file was edited by hand?)")


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def safe_relative(path: str) -> bool:
    """A forward-slash path that stays inside the root it is relative to."""
    if "\\" in path or path.startswith("/") or re.match(r"^[A-Za-z]:", path):
        return False
    return all(part not in ("", ".", "..") for part in path.split("/"))


def list_sha256(rows) -> str:
    """SHA-256 of the canonical text of a file list: one `image<TAB>label<TAB>mask` line per image, sorted by
    image path, each line ending in a newline."""
    lines = sorted(f"{image}\t{label}\t{mask}\n" for image, label, mask in rows)
    return hashlib.sha256("".join(lines).encode()).hexdigest()


def file_lists(index) -> dict:
    """The `files` section for every task of a sample index (bench.data.index contract)."""
    out: dict = {}
    for task, g in index.groupby("task", sort=True):
        out[task] = {}
        for split in ("train", "test"):
            s = g[g["split"] == split]
            if s.empty:
                raise DatasetError(f"task {task} has no {split} images")
            rows = sorted([img, int(lab), mask] for img, lab, mask in
                          zip(s["image_path"], s["label"], s["mask_path"]))
            out[task][split] = {"n": len(rows), "anomalous": sum(r[1] for r in rows),
                                "sha256": list_sha256(rows), "list": rows}
    return out


def compare_files(expected: dict, found: dict) -> list[dict]:
    """Per task and split of `expected`: the counts of missing, extra and changed (label or mask) images."""
    report = []
    for task, splits in expected.items():
        for split, entry in splits.items():
            have = found.get(task, {}).get(split)
            want = {r[0]: (r[1], r[2]) for r in entry["list"]}
            got = {r[0]: (r[1], r[2]) for r in have["list"]} if have else {}
            missing = sorted(set(want) - set(got))
            extra = sorted(set(got) - set(want))
            changed = sorted(p for p in set(want) & set(got) if want[p] != got[p])
            report.append({"task": task, "split": split, "n": entry["n"], "found": len(got),
                           "ok": have is not None and have["sha256"] == entry["sha256"],
                           "missing": missing, "extra": extra, "changed": changed})
    return report


def dumps(obj, indent: int = 0) -> str:
    """JSON with each short list or object on one line (file-list entries, difficulty rows), so diffs stay local."""
    flat = json.dumps(obj, ensure_ascii=False)
    if not isinstance(obj, (dict, list)) or not obj or (indent and len(flat) + indent <= 140):
        return flat
    pad, inner = " " * indent, " " * (indent + 2)
    if isinstance(obj, dict):
        items = [f"{inner}{json.dumps(k, ensure_ascii=False)}: {dumps(v, indent + 2)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + f"\n{pad}}}"
    return "[\n" + ",\n".join(f"{inner}{dumps(v, indent + 2)}" for v in obj) + f"\n{pad}]"

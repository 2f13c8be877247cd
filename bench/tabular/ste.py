"""Single-task experts and STE matrices: a tabular run in cross-evaluation mode.

For each task i of the candidate (in the given order) a fresh detector learns task i's training records; it is
then evaluated on the test set of EVERY task j (upper triangle too): M[i, j] = ROC-AUC. The run writes the image
track's HDF5 schema through `bench.results.write_run` (track="tabular", levels=["record"], evaluation="cross"),
so aggregation and the hpc machinery see an ordinary run file. It is meant to be folded into the continual runner
as its cross-evaluation mode; until then this function is that mode.

Resuming: after every task the file is rewritten (atomically) with status "running" and the rows done; a rerun
with the same run key continues at the next task and ends with the same matrix (every expert starts from the same
seed, so rows do not depend on which process computed them). A complete file is never recomputed.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import numpy as np

from bench.errors import ConfigError
from bench.metrics import normalized_pr_auc, roc_auc
from bench.tabular.preprocess import load_index

LEVEL = "record"


def run_key(meta: dict, tasks: list[str], model: str, version: int, hparams: dict, seed: int) -> str:
    blob = json.dumps({"index_sha256": meta["index_sha256"], "tasks": tasks, "model": model, "version": version,
                       "hparams": hparams, "seed": seed, "evaluation": "cross"}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def _existing(path: Path, key: str) -> dict | None:
    from bench.results import read_run

    if not path.is_file():
        return None
    run = read_run(path)
    return run if run["attrs"].get("run_key") == key else None


def ste_run(index_dir, model: str, out: Path, *, seed: int = 0, hparams: dict | None = None,
            tasks: list[str] | None = None, max_steps: int | None = None, log=print) -> Path:
    """Compute (or resume, or reuse) the STE matrix of `model` on the record index in `index_dir`."""
    from bench import results
    from bench.models.registry import get

    spec = get(model, "tabular")
    hp = spec.resolve(hparams)
    index, X, meta = load_index(index_dir)
    available = sorted(index["task"].unique())
    tasks = list(tasks or available)
    unknown = sorted(set(tasks) - set(available))
    if unknown or len(set(tasks)) != len(tasks):
        raise ConfigError(f"tasks {unknown or tasks} not (uniquely) in the record index (available: "
                          f"{', '.join(available)})")
    key = run_key(meta, tasks, model, spec.version, hp, seed)
    out = Path(out)
    K = len(tasks)
    task_of, split, labels = index["task"].to_numpy(), index["split"].to_numpy(), index["label"].to_numpy()
    test_rows = [np.flatnonzero((task_of == t) & (split == "test")) for t in tasks]
    train_rows = [np.flatnonzero((task_of == t) & (split == "train")) for t in tasks]
    all_test = np.concatenate(test_rows)
    prev = _existing(out, key)
    if prev is not None and prev["attrs"]["status"] == "complete":
        log(f"{out.name}: complete, not recomputed")
        return out
    n_test = len(all_test)
    arrays = {"R/record": np.full((K, K), np.nan), "R/record_npr_auc": np.full((K, K), np.nan),
              "timing/train_s": np.full(K, np.nan), "timing/eval_s": np.full(K, np.nan),
              "scores/value": np.full(K * n_test, np.nan, dtype=np.float32)}
    done, started = 0, results.now()
    if prev is not None:
        done, started = int(prev["attrs"]["steps_done"]), prev["attrs"]["started_at"]
        for name in arrays:
            arrays[name] = np.asarray(prev[name], dtype=arrays[name].dtype)
        log(f"resuming {out.name} after task {done}/{K}")
    config = {"track": "tabular", "dataset": meta["dataset"], "model": model, "protocol": "ste",
              "ordering": "candidate", "tasks": tasks, "seed": seed, "hparams": hp, "evaluation": "cross",
              "index": str(index_dir), "preprocessing": meta["settings"]}
    config_json = json.dumps(config, sort_keys=True)
    attrs = {"run_key": key, "run_name": f"{meta['dataset']}_{model}_ste_s{seed}_{key[:8]}", "n_tasks": K,
             "config": config_json, "config_sha256": hashlib.sha256(config_json.encode()).hexdigest(),
             "index_sha256": meta["index_sha256"], "seed": seed, "track": "tabular",
             "levels": json.dumps([LEVEL]), "evaluation": "cross", "device": "cpu", "weights_id": "",
             "backbone_forward_images": 0, **results.provenance()}
    test_task = np.concatenate([np.full(len(r), j) for j, r in enumerate(test_rows)])
    # Scores in the image track's flat layout (one entry per step × test record), plus the record's row in the
    # record index (index.csv), so intervals and restrictions can be recomputed per record.
    fixed = {"tasks_info/n_train": np.array([len(r) for r in train_rows]),
             "tasks_info/n_test": np.array([len(r) for r in test_rows]),
             "tasks_info/prevalence": np.array([labels[r].mean() if len(r) else np.nan for r in test_rows]),
             "scores/step": np.repeat(np.arange(K, dtype=np.int16), n_test),
             "scores/task": np.tile(test_task.astype(np.int16), K),
             "scores/label": np.tile(labels[all_test].astype(np.int8), K),
             "scores/record": np.tile(all_test.astype(np.int32), K)}
    stop = K if max_steps is None else min(K, done + max_steps)

    def write(status: str, steps: int):
        finished = results.now() if status == "complete" else ""
        results.write_run(out, {**attrs, "status": status, "steps_done": steps, "started_at": started,
                                "finished_at": finished}, {**arrays, **fixed}, tasks)

    for i in range(done, stop):
        t0 = time.perf_counter()
        det = spec.factory(**hp).fit(X[train_rows[i]], seed=seed)
        t1 = time.perf_counter()
        scores = det.score(X[all_test])
        for j, rows in enumerate(test_rows):
            s = scores[test_task == j]
            arrays["R/record"][i, j] = roc_auc(labels[rows], s)
            arrays["R/record_npr_auc"][i, j] = normalized_pr_auc(labels[rows], s)[0]
        arrays["scores/value"][i * n_test:(i + 1) * n_test] = scores
        arrays["timing/train_s"][i], arrays["timing/eval_s"][i] = t1 - t0, time.perf_counter() - t1
        log(f"{model} expert {i + 1}/{K} ({tasks[i]}): train {t1 - t0:.1f}s, AUC row "
            + " ".join(f"{v:.3f}" for v in arrays["R/record"][i]))
        write("complete" if i + 1 == K else "running", i + 1)
    return out


def read_matrix(path) -> tuple[list[str], np.ndarray, dict]:
    """(tasks, M, attrs) of a complete STE run file."""
    from bench.results import read_run

    run = read_run(path)
    a = run["attrs"]
    if a.get("evaluation") != "cross" or a.get("status") != "complete":
        raise ConfigError(f"{path}: not a complete STE (cross-evaluation) run file (status {a.get('status')})")
    return run["tasks"], np.asarray(run["R/record"], dtype=np.float64), a

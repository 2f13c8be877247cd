"""Schema 2 (track, levels, evaluation attributes) keeps schema-1 image files readable and their run keys stable."""

from __future__ import annotations

import hashlib
import json

import h5py
import numpy as np

from bench import results
from bench.config import LATER_FIELDS, SCHEMA_VERSION, RunConfig
from bench.metrics import roc_auc
from bench.report.collect import check_file, check_scores, collect

# Computed with bench/config.py as it was before schema 2 (commit bfeb232) for the config below, as a schema-1
# file's config reads back (no algorithm version, pixel evaluation mode or feature dtype recorded).
IMAGE_KEY = "3b51d2e0f6e878e201e52b194951a511637fa1a3493d1f42a870d21e15d57fde"


def image_config() -> RunConfig:
    return RunConfig(dataset="mvtec", root="/data/mvtec", model="patchcore", tasks=["bottle", "cable", "capsule"],
                     ordering="custom", backbone="wide_resnet50_2", weights="imagenet", protocol="cl", seed=3,
                     image_size=256, batch_size=16, hparams={"coreset_ratio": 0.01},
                     **{name: None for name in LATER_FIELDS})


def test_image_run_keys_are_unchanged_by_schema_2():
    assert SCHEMA_VERSION == 2
    assert image_config().run_key("ab" * 32, "tv-imagenet1k-v1") == IMAGE_KEY
    new = image_config()
    new.model_version, new.pixel_eval, new.feature_dtype = 2, "resized", "float16"  # what a run today records
    assert new.run_key("ab" * 32, "tv-imagenet1k-v1") != IMAGE_KEY
    tabular = image_config()
    tabular.track = "tabular"  # the same core on the other track is another run
    tabular.model = "iforest"
    assert tabular.run_key("ab" * 32, "none") != image_config().run_key("ab" * 32, "none")


def write_schema_1(path, n=3):
    """An image run file as schema 1 wrote it: no track/levels/evaluation attributes, a config without them."""
    cfg = image_config()
    old = {k: v for k, v in json.loads(cfg.to_json()).items() if k not in ("track", "evaluation", *LATER_FIELDS)}
    config = json.dumps(old, sort_keys=True, separators=(",", ":"))
    key = cfg.run_key("ab" * 32, "tv-imagenet1k-v1")
    rng = np.random.default_rng(0)
    R = np.where(np.tri(n, dtype=bool), rng.uniform(0.6, 1.0, (n, n)), np.nan)
    labels = np.r_[np.zeros(6), np.ones(4)].astype(np.int8)
    steps, tasks, values = [], [], []
    for i in range(n):
        for j in range(i + 1):
            s = rng.normal(size=10) + labels
            R[i, j] = roc_auc(labels, s)
            steps.append(np.full(10, i)), tasks.append(np.full(10, j)), values.append(s)
    attrs = {"schema_version": 1, "run_key": key, "run_name": f"old_{key[:12]}", "status": "complete",
             "steps_done": n, "n_tasks": n, "config": config,
             "config_sha256": hashlib.sha256(config.encode()).hexdigest(), "index_sha256": "ab" * 32,
             "weights_id": "tv-imagenet1k-v1", "seed": 3, "git_commit": "abc", "git_dirty": 0,
             "packages": "{}", "python": "3.11", "host": "h", "started_at": "2026-01-01T00:00:00+00:00",
             "finished_at": "2026-01-01T01:00:00+00:00", "device": "cpu"}
    path.parent.mkdir(parents=True, exist_ok=True)
    with h5py.File(path, "w") as f:
        f.attrs.update(attrs)
        f.create_dataset("tasks", data=np.array(["bottle", "cable", "capsule"], dtype=h5py.string_dtype()))
        for name, arr in {"R/image": R, "R/pixel": R - 0.01, "R/image_npr_auc": R - 0.5,
                          "timing/train_s": np.ones(n), "timing/eval_s": np.ones(n),
                          "scores/step": np.concatenate(steps).astype(np.int16),
                          "scores/task": np.concatenate(tasks).astype(np.int16),
                          "scores/label": np.tile(labels, len(steps)), "scores/value": np.concatenate(values)}.items():
            f.create_dataset(name, data=arr)
    return path


def test_schema_1_image_files_stay_readable(tmp_path):
    path = write_schema_1(tmp_path / "mvtec" / "runs" / "old.h5")
    run = results.read_run(path)
    assert results.track(run) == "image" and results.levels(run) == ["image", "pixel"]
    row = results.load(path).iloc[0]
    assert (row["track"], row["backbone"], row["evaluation"]) == ("image", "wide_resnet50_2", "continual")
    assert np.isfinite(row["image_roc_auc_cl"]) and np.isfinite(row["pixel_roc_auc_cl"])
    check_file(run, path, "mvtec")  # provenance, run key recomputed from the old config: still consistent
    assert check_scores(run, path)
    c = collect(tmp_path, "mvtec")
    assert list(c.runs["run_key"]) == [IMAGE_KEY]

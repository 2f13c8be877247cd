"""Schema 3 (the config nests the track's inputs) and schema 2 (track, levels, evaluation attributes) keep the files
of earlier schemas readable and their run keys stable."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace

import h5py
import numpy as np
import pytest

from bench import results
from bench.config import LATER_FIELDS, SCHEMA_VERSION, ImageInputs, RunConfig, TabularInputs
from bench.errors import ConfigError
from bench.metrics import normalized_pr_auc, roc_auc
from bench.report.collect import check_file, check_scores, collect

# Computed with bench/config.py as it was before schema 2 (commit bfeb232) for the config below, as a schema-1
# file's config reads back (no algorithm version, pixel evaluation mode or feature dtype recorded).
IMAGE_KEY = "3b51d2e0f6e878e201e52b194951a511637fa1a3493d1f42a870d21e15d57fde"
# Computed with bench/config.py of schema 2 (commit 5266b86), whose config was one flat object on both tracks:
# a run of today (model version, pixel mode and dtype recorded) and a tabular run, with the flat configs it wrote.
IMAGE_KEY_2 = "1b4bd29f9868ed89c59c8b119986ed4329112c3da2de839569564e3ee23501f8"
IMAGE_JSON_2 = ('{"backbone":"wide_resnet50_2","batch_size":16,"cache_budget":"","dataset":"mvtec","device":"auto",'
                '"evaluation":"continual","feature_dtype":"float16","hparams":{"coreset_ratio":0.01},'
                '"image_size":256,"model":"patchcore","model_version":2,"ordering":"custom","pixel_eval":"resized",'
                '"protocol":"cl","root":"/data/mvtec","seed":3,"tasks":["bottle","cable","capsule"],'
                '"track":"image","weights":"imagenet","workers":0}')
TABULAR_KEY_2 = "f16ce2bf694397470f6545120bfc2653343aa4e7c1cee22ed8ec65d530dac6cb"
TABULAR_JSON_2 = ('{"backbone":"resnet18","batch_size":32,"cache_budget":"","dataset":"synthetic","device":"auto",'
                  '"evaluation":"continual","feature_dtype":"float16","hparams":{"n_estimators":50},'
                  '"image_size":224,"model":"iforest","model_version":1,"ordering":"smooth","pixel_eval":"resized",'
                  '"protocol":"cl","root":"/idx","seed":2,"tasks":["Monday","Tuesday"],"track":"tabular",'
                  '"weights":"imagenet","workers":0}')


def image_config() -> RunConfig:
    return RunConfig(dataset="mvtec", root="/data/mvtec", model="patchcore", tasks=["bottle", "cable", "capsule"],
                     ordering="custom", protocol="cl", seed=3, hparams={"coreset_ratio": 0.01},
                     inputs=ImageInputs(backbone="wide_resnet50_2", weights="imagenet", image_size=256, batch_size=16,
                                        pixel_eval=None, feature_dtype=None, mask_threshold=None))


def tabular_config() -> RunConfig:
    return RunConfig(dataset="synthetic", root="/idx", model="iforest", tasks=["Monday", "Tuesday"],
                     ordering="smooth", protocol="cl", seed=2, hparams={"n_estimators": 50}, model_version=1,
                     inputs=TabularInputs())


def flat_json(cfg: RunConfig, drop=()) -> str:
    """`cfg` in the flat layout of schemas 1 and 2 (the image fields at the top level, on both tracks)."""
    data = json.loads(cfg.to_json())
    inputs = data.pop("inputs")
    if cfg.track == "image":
        data.update(inputs)
    return json.dumps({k: v for k, v in data.items() if k not in drop}, sort_keys=True, separators=(",", ":"))


def test_image_run_keys_are_unchanged_by_schemas_2_and_3():
    assert SCHEMA_VERSION == 3
    assert image_config().run_key("ab" * 32, "tv-imagenet1k-v1") == IMAGE_KEY
    new = image_config()
    new.model_version, new.image.pixel_eval, new.image.feature_dtype = 2, "resized", "float16"  # a run of today
    assert new.run_key("ab" * 32, "tv-imagenet1k-v1") == IMAGE_KEY_2 != IMAGE_KEY
    tabular = replace(image_config(), model="iforest", inputs=TabularInputs())  # the same core on the other track
    assert tabular.run_key("ab" * 32, "none") != image_config().run_key("ab" * 32, "none")


def test_image_loading_enters_the_run_key_only_where_it_differs_from_before():
    """ImageInputs.normalize/.resize: a run that loads images as every run did before they were recorded
    (ImageNet-normalised, float resize) keeps its key (IMAGE_KEY_2); raw input or the 8-bit resize is a new run."""
    new = image_config()
    new.model_version, new.image.pixel_eval, new.image.feature_dtype = 2, "resized", "float16"
    new.image.normalize, new.image.resize = True, "float"
    assert new.run_key("ab" * 32, "tv-imagenet1k-v1") == IMAGE_KEY_2
    keys = {IMAGE_KEY_2}
    for normalize, resize in ((False, "float"), (True, "8bit"), (False, "8bit")):
        new.image.normalize, new.image.resize = normalize, resize
        keys.add(new.run_key("ab" * 32, "tv-imagenet1k-v1"))
    assert len(keys) == 4
    read = RunConfig.from_json(new.to_json())  # recorded in the config and read back
    assert (read.image.normalize, read.image.resize) == (False, "8bit")
    with pytest.raises(ConfigError, match="resize"):
        replace(new, inputs=replace(new.image, resize="nearest")).validate()
    with pytest.raises(ConfigError, match="normalize"):
        replace(new, inputs=replace(new.image, normalize="yes")).validate()


def test_schema_2_flat_configs_read_back_as_core_and_inputs_with_their_keys():
    image = RunConfig.from_json(IMAGE_JSON_2)
    assert image.track == "image" and image.image == ImageInputs(backbone="wide_resnet50_2", image_size=256,
                                                                 batch_size=16, mask_threshold=None, workers=0,
                                                                 feature_dtype="float16")
    assert image.run_key("ab" * 32, "tv-imagenet1k-v1") == IMAGE_KEY_2
    tabular = RunConfig.from_json(TABULAR_JSON_2)  # its image fields were never used: they are dropped
    assert tabular.track == "tabular" and tabular.inputs == TabularInputs()
    assert tabular.run_key("cd" * 32, "none") == TABULAR_KEY_2 == tabular_config().run_key("cd" * 32, "none")
    with pytest.raises(ConfigError, match="a tabular run has no image inputs"):
        tabular.image
    assert flat_json(tabular_config()) != TABULAR_JSON_2  # the flat tabular layout carried unused image fields


def test_schema_3_config_round_trips_and_refuses_fields_of_the_other_track():
    for cfg in (image_config(), tabular_config()):
        text = cfg.to_json()
        assert "inputs" in json.loads(text) and RunConfig.from_json(text) == cfg
        assert RunConfig.from_json(text).run_key("ab" * 32, "w") == cfg.run_key("ab" * 32, "w")
    bad = json.loads(tabular_config().to_json())
    bad["inputs"]["backbone"] = "resnet18"
    with pytest.raises(ConfigError, match=r"unknown tabular input fields \['backbone'\]"):
        RunConfig.from_json(json.dumps(bad))
    with pytest.raises(ConfigError, match="unknown config fields"):
        RunConfig.from_json(json.dumps({**json.loads(image_config().to_json()), "image_size": 64}))
    with pytest.raises(ConfigError, match="inputs=\\[1\\]: expected an object of image input fields"):
        RunConfig.from_json(json.dumps({**json.loads(image_config().to_json()), "inputs": [1]}))
    with pytest.raises(ConfigError, match="unknown track"):
        RunConfig.from_json(json.dumps({**json.loads(image_config().to_json()), "track": "audio"}))


def write_old(path, schema: int, n=3):
    """An image run file as schema 1 wrote it (no track/levels/evaluation attributes, a flat config without them)
    or as schema 2 did (those attributes, the flat config of IMAGE_JSON_2)."""
    config = flat_json(image_config(), drop=("track", "evaluation", *LATER_FIELDS)) if schema == 1 else IMAGE_JSON_2
    key = IMAGE_KEY if schema == 1 else IMAGE_KEY_2
    rng = np.random.default_rng(0)
    R = np.where(np.tri(n, dtype=bool), rng.uniform(0.6, 1.0, (n, n)), np.nan)
    labels = np.r_[np.zeros(6), np.ones(4)].astype(np.int8)
    steps, tasks, values = [], [], []
    npr = np.full((n, n), np.nan)
    for i in range(n):
        for j in range(i + 1):
            s = rng.normal(size=10) + labels
            R[i, j] = roc_auc(labels, s)
            npr[i, j] = normalized_pr_auc(labels, s)[0]  # checked against the scores like R/image
            steps.append(np.full(10, i)), tasks.append(np.full(10, j)), values.append(s)
    attrs = {"schema_version": schema, "run_key": key, "run_name": f"old_{key[:12]}", "status": "complete",
             "steps_done": n, "n_tasks": n, "config": config,
             "config_sha256": hashlib.sha256(config.encode()).hexdigest(), "index_sha256": "ab" * 32,
             "weights_id": "tv-imagenet1k-v1", "seed": 3, "git_commit": "abc", "git_dirty": 0,
             "packages": "{}", "python": "3.11", "host": "h", "started_at": "2026-01-01T00:00:00+00:00",
             "finished_at": "2026-01-01T01:00:00+00:00", "device": "cpu",
             **({} if schema == 1 else {"track": "image", "levels": '["image", "pixel"]', "evaluation": "continual"})}
    path.parent.mkdir(parents=True, exist_ok=True)
    with h5py.File(path, "w") as f:
        f.attrs.update(attrs)
        f.create_dataset("tasks", data=np.array(["bottle", "cable", "capsule"], dtype=h5py.string_dtype()))
        for name, arr in {"R/image": R, "R/pixel": R - 0.01, "R/image_npr_auc": npr,
                          "timing/train_s": np.ones(n), "timing/eval_s": np.ones(n),
                          "scores/step": np.concatenate(steps).astype(np.int16),
                          "scores/task": np.concatenate(tasks).astype(np.int16),
                          "scores/label": np.tile(labels, len(steps)), "scores/value": np.concatenate(values)}.items():
            f.create_dataset(name, data=arr)
    return path


@pytest.mark.parametrize("schema", [1, 2])
def test_image_files_of_earlier_schemas_stay_readable(tmp_path, schema):
    path = write_old(tmp_path / "mvtec" / "runs" / "old.h5", schema)
    run = results.read_run(path)
    assert results.track(run) == "image" and results.levels(run) == ["image", "pixel"]
    row = results.load(path).iloc[0]
    assert (row["track"], row["backbone"], row["evaluation"]) == ("image", "wide_resnet50_2", "continual")
    assert np.isfinite(row["image_roc_auc_cl"]) and np.isfinite(row["pixel_roc_auc_cl"])
    check_file(run, path, "mvtec")  # provenance, run key recomputed from the old config: still consistent
    assert check_scores(run, path)
    c = collect(tmp_path, "mvtec")
    assert list(c.runs["run_key"]) == [IMAGE_KEY if schema == 1 else IMAGE_KEY_2]

"""The built-in synthetic benchmark: deterministic, in the MVTec AD layout, with distinct tasks and masked defects."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from PIL import Image

from bench.data import read_index
from bench.data import synthetic
from bench.data.images import load_mask
from bench.data.synthetic import DEFECT_KINDS, PRESETS, TASKS, generate
from bench.errors import ConfigError, DatasetError

SMALL = {"n_train": 3, "n_test": 4}  # enough for the byte-level and layout checks, fast


def _files(root):
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_same_seed_gives_byte_identical_files_and_another_seed_differs(tmp_path):
    a = _files(generate(tmp_path / "a", "tiny", seed=3, **SMALL))
    b = _files(generate(tmp_path / "b", "tiny", seed=3, **SMALL))
    c = _files(generate(tmp_path / "c", "tiny", seed=4, **SMALL))
    assert a == b
    assert a.keys() == c.keys()
    pngs = [k for k in a if k.endswith(".png") and "_mask" not in k]
    assert all(a[k] != c[k] for k in pngs)


def test_tiny_preset_loads_as_mvtec_layout_with_masked_defects(tiny_root):
    df = read_index("synthetic", tiny_root)
    tasks = sorted(df["task"].unique())
    assert len(tasks) == PRESETS["tiny"]["n_tasks"] >= 5
    assert all(t.islower() and t.isidentifier() for t in tasks)
    counts = df.groupby(["task", "split", "label"]).size()
    for task in tasks:
        assert counts[(task, "train", 0)] == 16 and counts[(task, "test", 0)] == 8 and counts[(task, "test", 1)] == 8
    anomalous = df[df["label"] == 1]
    kinds = {p.split("/")[2] for p in anomalous["image_path"]}
    assert kinds == set(DEFECT_KINDS) and len(kinds) >= 3
    assert (anomalous["mask_path"] != "").all()
    for image, mask in zip(anomalous["image_path"], anomalous["mask_path"]):
        assert Image.open(tiny_root / image).size == Image.open(tiny_root / mask).size == (64, 64)
        # >= ~2% of the image, so the defect is clearly there
        assert load_mask(tiny_root / mask, 64, tiny_root / image).mean() >= 0.015


def test_metadata_records_parameters_and_designed_contrast(tiny_root):
    meta = json.loads((tiny_root / "synthetic.json").read_text())
    assert meta["params"]["preset"] == "tiny" and meta["params"]["seed"] == 0
    assert [t["name"] for t in meta["tasks"]] == [t[0] for t in TASKS[:5]]
    for task in meta["tasks"]:
        assert task["defect_contrast"]["min"] > 0.3  # RGB distance in [0, sqrt(3)]
        assert task["defect_area_fraction"]["min"] >= 0.015
        assert sum(task["defects"].values()) == task["n_test_anomalous"]


def _descriptor(path):
    """Mean and spread of each channel plus horizontal and vertical edge energy."""
    a = np.asarray(Image.open(path), dtype=np.float32) / 255
    edges = [np.abs(np.diff(a, axis=1)).mean(), np.abs(np.diff(a, axis=0)).mean()]
    return np.concatenate([a.mean(axis=(0, 1)), a.std(axis=(0, 1)), edges])


def test_normal_images_of_different_tasks_differ_materially(tmp_path):
    root = generate(tmp_path / "all", "tiny", seed=0, n_tasks=len(TASKS), n_train=6, n_test=2)
    train = read_index("synthetic", root).query("split == 'train'")
    per_task = {t: np.stack([_descriptor(root / p) for p in g["image_path"]]) for t, g in train.groupby("task")}
    assert len(per_task) == 12
    centre = {t: d.mean(axis=0) for t, d in per_task.items()}
    within = max(np.linalg.norm(d - centre[t], axis=1).mean() for t, d in per_task.items())
    between = min(np.linalg.norm(centre[a] - centre[b]) for a, b in itertools.combinations(centre, 2))
    assert between > 3 * within
    assert all(within_task.std(axis=0).max() > 0 for within_task in per_task.values())  # no two normals alike


def test_an_identical_generation_is_kept_and_a_changed_one_is_swapped_in(tmp_path):
    root = generate(tmp_path / "syn", "tiny", seed=0, **SMALL)
    marker = root / "stripes" / "train" / "good" / "000.png"
    stamp = marker.stat().st_mtime_ns
    assert generate(root, "tiny", seed=0, **SMALL) == root and marker.stat().st_mtime_ns == stamp
    generate(root, "tiny", seed=0, n_train=2, n_test=4)
    assert len(list((root / "stripes" / "train" / "good").iterdir())) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["syn"]  # no temp or old trees left behind


def test_a_killed_generation_leaves_the_previous_tree_intact(tmp_path, monkeypatch):
    root = generate(tmp_path / "syn", "tiny", seed=0, **SMALL)
    before = _files(root)
    calls = []

    def dying_save(array, path):
        calls.append(path)
        if len(calls) > 5:
            raise KeyboardInterrupt
        original(array, path)

    original = synthetic._save
    monkeypatch.setattr(synthetic, "_save", dying_save)
    with pytest.raises(KeyboardInterrupt):
        generate(root, "tiny", seed=1, **SMALL)
    assert _files(root) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["syn"]


def test_a_sigkilled_generations_temp_tree_is_removed_by_the_next_one(tmp_path):
    """SIGKILL skips generate's cleanup; the next generation on the same host removes the orphan, but never the
    temp tree of a live process or of another host (shared file systems)."""
    import subprocess
    import sys

    killed = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    killed.kill()
    killed.wait()
    host = synthetic._owner().rsplit("-", 1)[0]
    orphan = tmp_path / f".syn.tmp-{host}-{killed.pid}-0badc0de"
    live = tmp_path / f".syn.tmp-{synthetic._owner()}-0123abcd"
    elsewhere = tmp_path / f".syn.tmp-other_node-{killed.pid}-00ff00ff"
    for path in (orphan, live, elsewhere):
        (path / "stripes").mkdir(parents=True)
    generate(tmp_path / "syn", "tiny", seed=0, **SMALL)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["syn", live.name, elsewhere.name])


def test_refuses_to_overwrite_a_folder_that_is_not_a_generation(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "thesis.tex").write_text("precious")
    with pytest.raises(DatasetError, match="refusing to overwrite"):
        generate(tmp_path / "mine", "tiny", **SMALL)
    assert (tmp_path / "mine" / "thesis.tex").read_text() == "precious"


@pytest.mark.parametrize("kwargs, message", [
    ({"preset": "huge"}, "unknown preset 'huge'"),
    ({"n_epochs": 3}, "unknown synthetic override 'n_epochs'"),
    ({"n_tasks": 13}, "n_tasks must be in 1..12"),
    ({"seed": -1}, "non-negative"),
])
def test_bad_parameters_are_config_errors(tmp_path, kwargs, message):
    with pytest.raises(ConfigError, match=message):
        generate(tmp_path / "x", **kwargs)


def test_presets_sizes():
    assert {name: (p["n_tasks"], p["image_size"]) for name, p in PRESETS.items()} == {
        "tiny": (5, 64), "demo": (6, 96), "visa-scale": (12, 224)}
    visa = PRESETS["visa-scale"]
    train, test = visa["n_tasks"] * visa["n_train"], visa["n_tasks"] * visa["n_test"]
    assert abs(train - 8659) < 50 and abs(test - 2162) < 50  # VisA's split sizes
    assert len({t[0] for t in TASKS}) == len(TASKS) == 12

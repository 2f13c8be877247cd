"""The bounded feature cache: under a small memory budget features spill to a scratch file and are read back, so a
stream gives the same R as an unbounded run with still one backbone pass per image; NCL drops a past task's
training features; float16 storage rounds cached and fresh features alike."""

from __future__ import annotations

import os

import h5py
import numpy as np
import pytest
import torch

from bench.continual.runner import execute, prepare
from bench.errors import ConfigError
from bench.features import FeatureCache, cache_budget, parse_bytes
from bench.registry import get
from helpers import model_extractor, task_split_pair

TASKS = ["chip", "stripes", "disc"]


def _run(tmp_path, make_config, root, name, **kw):
    run = prepare(make_config(root, TASKS, **kw), out=tmp_path / f"{name}.h5")
    path = execute(run, progress=False, log=lambda *_: None)
    with h5py.File(path, "r", locking=False) as f:
        return {k: f[k][()] for k in ("R/image", "R/pixel", "tasks_info/n_train", "tasks_info/n_test")} | dict(f.attrs)


def _bytes_per_image(model, root):
    """Cached bytes of one image at the runs' default storage (float32: the inclad presets' feature_dtype)."""
    train, _ = task_split_pair(root, TASKS[0], 64)
    extractor = model_extractor(get(model).layers(get(model).resolve()))
    stored = FeatureCache(dtype="float32").stored
    return sum(stored(f[0]).nbytes for f in extractor(train, np.arange(1)))


@pytest.mark.parametrize("model", ["patchcore", "cfa"])
def test_small_budget_gives_the_same_r_as_unbounded(model, tiny_root, tmp_path, make_config, monkeypatch):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    quick = {"epochs": 2} if model == "cfa" else {}
    free = _run(tmp_path, make_config, tiny_root, "free", model=model, hparams=quick, cache_budget="")
    budget = 10 * _bytes_per_image(model, tiny_root)  # room for 10 images of the stream's 96
    small = _run(tmp_path, make_config, tiny_root, "small", model=model, hparams=quick, cache_budget=str(budget))
    n_images = int(small["tasks_info/n_train"].sum() + small["tasks_info/n_test"].sum())
    # at least every cached test image beyond the first 10 spilled (PatchCore caches no training image, CFA all)
    assert free["cache_spilled_images"] == 0 and small["cache_spilled_images"] >= small["tasks_info/n_test"].sum() - 10
    np.testing.assert_array_equal(small["R/image"], free["R/image"])
    np.testing.assert_array_equal(small["R/pixel"], free["R/pixel"])
    assert small["backbone_forward_images"] == free["backbone_forward_images"] <= n_images  # ≤ 1 pass per image
    assert list(scratch.iterdir()) == []  # the spill file is gone


def test_ncl_drops_past_training_features(tiny_root, tmp_path, make_config):
    # CFA caches its training features (it revisits them every epoch). At its peak an NCL run holds one training
    # split and every test split: 16 + 3×16 images; keeping the past training splits too would be 96.
    per_image = _bytes_per_image("cfa", tiny_root)
    hp = {"epochs": 1}
    ncl = _run(tmp_path, make_config, tiny_root, "ncl", model="cfa", protocol="ncl", hparams=hp,
               cache_budget=str(70 * per_image))
    assert ncl["cache_spilled_images"] == 0
    cl = _run(tmp_path, make_config, tiny_root, "cl", model="cfa", protocol="cl", hparams=hp,
              cache_budget=str(70 * per_image))
    assert cl["cache_spilled_images"] > 0  # CL replays past training images: they stay, so the budget is hit


def test_spilled_entries_read_back_exactly_and_float16_rounds_alike(tmp_path):
    rng = np.random.default_rng(0)
    tensors = [tuple(torch.from_numpy(rng.normal(size=s).astype(np.float32)) for s in ((4, 3, 3), (8, 2, 2)))
               for _ in range(5)]
    size = sum(t.nbytes for t in tensors[0])
    cache = FeatureCache(budget=2 * size, folder=tmp_path)
    for i, entry in enumerate(tensors):
        cache.put(str(i), entry)
    assert cache.memory_bytes == 2 * size and cache.spilled_images == 3 and len(cache) == 5
    assert list(tmp_path.iterdir()) == []  # unlinked on creation
    for i, entry in enumerate(tensors):
        for a, b in zip(cache.get(str(i)), entry):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
    cache.drop("0")
    assert "0" not in cache and cache.memory_bytes == size
    cache.close()
    half = FeatureCache(dtype="float16")
    big = torch.tensor([1e5, 1.0])
    assert half.stored(tensors[0][0]).dtype == torch.float16
    assert half.stored(big).dtype == torch.float32  # beyond float16's range: kept exact


def test_budget_settings(monkeypatch):
    assert parse_bytes("8G") == 8 * 2**30 and parse_bytes("512MiB") == 512 * 2**20 and parse_bytes("100") == 100
    for bad in ("lots", "-1G", "G"):
        with pytest.raises(ConfigError, match="--cache-budget"):
            parse_bytes(bad)
    for name in ("BENCH_CACHE_BUDGET", "SLURM_MEM_PER_NODE", "SLURM_MEM_PER_CPU", "SLURM_CPUS_PER_TASK"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SLURM_MEM_PER_CPU", "4000")
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "4")
    assert cache_budget() == 8000 * 2**20  # half of 4 × 4000 MB
    monkeypatch.setenv("SLURM_MEM_PER_NODE", "64000")
    assert cache_budget() == 32000 * 2**20
    monkeypatch.setenv("BENCH_CACHE_BUDGET", "2G")
    assert cache_budget() == 2 * 2**30 and cache_budget("1G") == 2**30
    assert os.environ["BENCH_CACHE_BUDGET"] == "2G"


def test_submit_refuses_a_memory_request_below_the_estimate(tiny_root, tmp_path, capsys):
    from bench.cli import main
    from helpers import one_error_line, write_grid

    small = write_grid(tmp_path / "small.yaml", resources={"gpus": 1, "cpus": 1, "mem_gb": 1, "time_min": 10})
    argv = ["submit", "--dataset", "synthetic", "--root", str(tiny_root), "--outputs", str(tmp_path), "--dry-run"]
    assert main([*argv, "--grid", str(small)]) == 2
    err = one_error_line(capsys)
    assert "small.yaml" in err and "patchcore" in err and "mem_gb request 1" in err
    enough = write_grid(tmp_path / "enough.yaml", resources={"gpus": 1, "cpus": 1, "mem_gb": 2, "time_min": 10})
    assert main([*argv, "--grid", str(enough)]) == 0


def test_estimate_follows_image_counts_backbone_and_protocol(tmp_path):
    # VisA's image counts (12 tasks, 722 train / 180 test each) as the planner sees them, without any files
    from types import SimpleNamespace

    from bench.config import ImageInputs, RunConfig
    from bench.hpc.memory import GIB, estimate_memory

    def est(model, backbone="wide_resnet50_2", protocol="cl", feature_dtype="float32", preset=None):
        tasks = [f"t{i}" for i in range(12)]
        cfg = RunConfig(dataset="visa", root=".", model=model, tasks=tasks, protocol=protocol,
                        hparams=get(model).resolve(preset=preset), inputs=ImageInputs(backbone=backbone, feature_dtype=feature_dtype))
        return estimate_memory(SimpleNamespace(config=cfg, splits={t: SimpleNamespace(train=[0] * 722,
                                                                                        test=[0] * 180)
                                                                   for t in tasks}))

    cfa = est("cfa", preset="original")
    # 5.6 MB per image (layers 1-3 of wide_resnet50_2 at 224 px, float32) × every image of the stream
    assert cfa.cache == 10824 * 4 * (256 * 56**2 + 512 * 28**2 + 1024 * 14**2)
    assert est("cfa").cache == 10824 * 4 * (512 * 28**2 + 1024 * 14**2)  # inclad's layers 2 + 3
    assert 55 * GIB < cfa.cache < 60 * GIB
    assert cfa.peak(32 * GIB) <= 32 * GIB < cfa.fixed + cfa.cache  # 32 GB suffice only thanks to the budget
    assert est("cfa", protocol="ncl", preset="original").cache == (722 + 2160) * cfa.cache // 10824
    assert est("cfa", feature_dtype="float16", preset="original").cache * 2 == cfa.cache
    assert est("cfa", backbone="resnet18", preset="original").cache < cfa.cache / 3
    assert est("patchcore").cache < cfa.cache / 4  # PatchCore caches test images only


def test_the_grid_estimate_of_a_raw_image_detector_is_its_own(tmp_path):
    """GANomaly at 1024 px trains on the images themselves: the frozen-backbone rule (~6 GB) passed it under a
    16 GB request although it needs tens of GB; the grid now asks the detector's spec."""
    from types import SimpleNamespace

    from bench.config import ImageInputs, RunConfig
    from bench.hpc.memory import GIB, estimate_memory
    from bench.registry import get

    def est(model, size):
        tasks = ["a", "b"]
        cfg = RunConfig(dataset="visa", root=".", model=model, tasks=tasks, protocol="cl",
                        hparams=get(model).resolve(), inputs=ImageInputs(backbone="none", image_size=size))
        return estimate_memory(SimpleNamespace(config=cfg, splits={t: SimpleNamespace(train=[0] * 100,
                                                                                        test=[0] * 50)
                                                                   for t in tasks}))

    big = est("ganomaly", 1024)
    assert big.peak(16 * GIB) > 16 * GIB  # refused under a 16 GB request
    assert big.fixed > get("ganomaly").memory_bytes(1024, 32, get("ganomaly").resolve())

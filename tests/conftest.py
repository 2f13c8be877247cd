"""Shared fixtures: the synthetic benchmark generated once per test session, on CPU, weights=none."""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("HDF5_USE_FILE_LOCKING", "FALSE")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch.set_num_threads(min(2, torch.get_num_threads()))


@pytest.fixture(scope="session")
def tiny_root(tmp_path_factory):
    """5 tasks, 64 px, 16 train / 16 test images per task."""
    from bench.data.synthetic import generate

    return generate(tmp_path_factory.mktemp("synthetic") / "tiny", preset="tiny", seed=0)


@pytest.fixture(scope="session")
def demo_root(tmp_path_factory):
    """The demo preset (6 tasks, 96 px, 40 train / 30 test)."""
    from bench.data.synthetic import generate

    return generate(tmp_path_factory.mktemp("synthetic") / "demo", preset="demo", seed=0)


@pytest.fixture
def make_config():
    """RunConfig factory for synthetic runs on CPU with a random-init resnet18."""
    return _make_config


def _make_config(root, tasks, protocol="cl", image_size=64, **kw):
    from bench.config import RunConfig

    return RunConfig(dataset="synthetic", root=str(root), model=kw.pop("model", "patchcore"), tasks=list(tasks),
                     ordering=kw.pop("ordering", "custom"), backbone="resnet18", weights="none",
                     protocol=protocol, seed=kw.pop("seed", 0), image_size=image_size, batch_size=kw.pop("batch_size", 8),
                     device="cpu", **kw)

"""Shared fixtures: the synthetic benchmark generated once per test session, on CPU, weights=none."""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import tempfile

import pytest
import torch

from helpers import make_run_config

os.environ.setdefault("HDF5_USE_FILE_LOCKING", "FALSE")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# file digests (bench/data/digests.py) are cached per test session, not in the user's ~/.cache
if "BENCH_CACHE_DIR" not in os.environ:
    os.environ["BENCH_CACHE_DIR"] = tempfile.mkdtemp(prefix="bench-test-cache-")
    atexit.register(shutil.rmtree, os.environ["BENCH_CACHE_DIR"], True)
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
def plugin_on_path(monkeypatch):
    """Puts a hand-installed plugin's folder on this process's sys.path, with both registries' remembered plugin
    failures and the warnings already given reset, and no plugin module left imported afterwards: a broken plugin
    tested in-process, where a subprocess would spend seconds importing torch before it reaches the plugin."""
    import sys

    from bench import datasets, plugins, registry

    registry._discover_built_ins()  # before the copy: the copy is what the test changes
    monkeypatch.setattr(registry, "_SPECS", dict(registry._SPECS))
    monkeypatch.setattr(registry, "_PLUGIN_ERRORS", {})
    monkeypatch.setattr(datasets, "_SPECS", dict(datasets._SPECS))
    monkeypatch.setattr(datasets, "_PLUGIN_ERRORS", {})
    monkeypatch.setattr(plugins, "_WARNED", set())
    before = set(sys.modules)
    yield lambda site: monkeypatch.syspath_prepend(str(site))
    for name in set(sys.modules) - before:
        if name.startswith("broken"):
            del sys.modules[name]


@pytest.fixture
def make_config():
    """RunConfig factory for synthetic runs on CPU with a random-init resnet18."""
    return make_run_config


def _slurm_unreachable() -> str | None:
    """Why no SLURM job could run here, or None when a controller answers and a node can run jobs."""
    if shutil.which("sinfo") is None or shutil.which("sbatch") is None:
        return "sinfo/sbatch not found"
    try:
        out = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        return "sinfo timed out"
    if out.returncode != 0:
        return f"sinfo failed: {out.stderr.strip() or out.returncode}"
    states = set(out.stdout.split())
    if not states & {"idle", "mixed", "allocated", "completing"}:
        return f"no node can run jobs (node states: {', '.join(sorted(states)) or 'none'})"
    return None


@pytest.fixture(scope="session")
def require_slurm():
    """Skip a test that needs a real SLURM where none is reachable; with BENCH_REQUIRE_SLURM=1 (as CI sets after
    starting jobs/slurm/local-cluster.sh) that is a failure instead, so CI cannot pass by skipping."""
    reason = _slurm_unreachable()
    if reason:
        message = f"no reachable SLURM ({reason}); start one with `bash jobs/slurm/local-cluster.sh start`"
        if os.environ.get("BENCH_REQUIRE_SLURM") == "1":
            pytest.fail(f"BENCH_REQUIRE_SLURM=1 but {message}")
        pytest.skip(message)


@pytest.fixture
def scen_dir(tmp_path, monkeypatch):
    """A private scenarios folder, so no test writes into the repository's data/scenarios."""
    path = tmp_path / "scenarios"
    path.mkdir()
    monkeypatch.setenv("BENCH_SCENARIOS_DIR", str(path))
    return path

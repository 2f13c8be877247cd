"""Shared fixtures: the synthetic benchmark generated once per test session, on CPU, weights=none."""

from __future__ import annotations

import atexit
import contextlib
import io
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
import torch

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
def make_config():
    """RunConfig factory for synthetic runs on CPU with a random-init resnet18."""
    return _make_config


def _make_config(root, tasks, protocol="cl", image_size=64, **kw):
    """Core settings as keywords; image inputs (batch_size, pixel_eval, …) too, routed into ImageInputs."""
    from dataclasses import fields

    from bench.config import ImageInputs, RunConfig

    image = {f.name: kw.pop(f.name) for f in fields(ImageInputs) if f.name in kw}
    inputs = ImageInputs(**{"backbone": "resnet18", "weights": "none", "batch_size": 8, **image},
                         image_size=image_size)
    return RunConfig(dataset="synthetic", root=str(root), model=kw.pop("model", "patchcore"), tasks=list(tasks),
                     ordering=kw.pop("ordering", "custom"), protocol=protocol, seed=kw.pop("seed", 0), device="cpu",
                     inputs=inputs, **kw)


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


def cli_stdout(*argv) -> str:
    """`python -m bench ...` in this process; returns its stdout, fails the test on a non-zero exit."""
    from bench.cli import main

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        code = main([str(a) for a in argv])
    assert code == 0, buffer.getvalue()
    return buffer.getvalue()


@pytest.fixture
def scen_dir(tmp_path, monkeypatch):
    """A private scenarios folder, so no test writes into the repository's data/scenarios."""
    path = tmp_path / "scenarios"
    path.mkdir()
    monkeypatch.setenv("BENCH_SCENARIOS_DIR", str(path))
    return path


def _one_error_line(capsys) -> str:
    """The CLI's stderr: a single `error: ...` line, no traceback; returned for the test to inspect."""
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err, err
    return err


MODEL_LAYERS = ("layer1", "layer2", "layer3")


def model_extractor(layers=MODEL_LAYERS, batch_size: int | None = 8):
    """A FeatureExtractor on CPU with a random-init resnet18 and no progress bar; batch_size=None keeps
    FeatureExtractor's own default."""
    from bench.features import FeatureExtractor

    kw = {} if batch_size is None else {"batch_size": batch_size}
    return FeatureExtractor("resnet18", "none", layers, torch.device("cpu"), progress=False, **kw)


def task_split_pair(root, task, size=64):
    """(train, test) splits of one task of a synthetic benchmark at `root`."""
    from bench.data import read_index
    from bench.data.tasks import task_splits

    return task_splits(read_index("synthetic", root), root, task, size)


def write_grid(path: Path, **overrides) -> Path:
    """A small synthetic submission grid (patchcore, resnet18, two orderings, NCL and CL); `overrides` replace
    top-level keys in place, so the key order stays the same."""
    data = {"dataset": "synthetic", "weights": "none", "image_size": 64, "batch_size": 16, "workers": 0,
            "backbones": ["resnet18"], "orderings": ["easy_to_hard", "hard_to_easy"], "protocols": ["ncl", "cl"],
            "seeds": [0], "resources": {"gpus": 1, "cpus": 1, "mem_gb": 2, "time_min": 10},
            "models": {"patchcore": {}}}
    data.update(overrides)
    path.write_text(json.dumps(data))  # JSON is YAML
    return path


def cancel_recorded_jobs(outputs: Path, dataset: str) -> None:
    """scancel every job in the submission records of `dataset` under `outputs` (cleanup; errors ignored)."""
    from bench.hpc import records

    jobs = {e["job_id"].split("_")[0] for r in records.load_records(outputs, dataset) for e in r["runs"]}
    if jobs:
        subprocess.run(["scancel", *sorted(jobs)], capture_output=True)


def squeue_state(job_id: str) -> str:
    """A job's SLURM state as squeue prints it (%T), including finished states; empty once SLURM forgot it."""
    out = subprocess.run(["squeue", "-h", "-r", "--states=all", "-j", job_id, "-o", "%T"], capture_output=True,
                         text=True)
    return out.stdout.strip()


class Killed(BaseException):
    """Stands in for SIGKILL or preemption: the process dies here, nothing after this point may reach the disk (not
    an Exception, so nothing swallows it)."""


def kill_at(monkeypatch, boundary: str):
    """Make the next write at `boundary` ("checkpoint write", "result write", "checkpoint removal") die; once dead,
    every later replace or unlink dies too. Patches os.replace and Path.unlink: the runner's atomic writes."""
    dead = []
    real_replace, real_unlink = os.replace, Path.unlink

    def replace(src, dst):
        if dead or (boundary == "checkpoint write" and str(dst).endswith(".ckpt")) or (
                boundary == "result write" and str(dst).endswith(".h5")):
            dead.append(dst)
            raise Killed(boundary)
        return real_replace(src, dst)

    def unlink(self, missing_ok=False):
        if dead or (boundary == "checkpoint removal" and self.name.endswith(".ckpt")):
            dead.append(self)
            raise Killed(boundary)
        return real_unlink(self, missing_ok=missing_ok)

    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(Path, "unlink", unlink)

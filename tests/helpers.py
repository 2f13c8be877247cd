"""Helpers the test files share (fixtures are in conftest.py): run configs, the CLI in-process, extractors and
splits of the synthetic benchmark, grids, SLURM queries, and simulated kills."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import torch


def make_run_config(root, tasks, protocol="cl", image_size=64, **kw):
    """Core settings as keywords; image inputs (batch_size, pixel_eval, …) too, routed into ImageInputs."""
    from dataclasses import fields

    from bench.config import ImageInputs, RunConfig

    image = {f.name: kw.pop(f.name) for f in fields(ImageInputs) if f.name in kw}
    inputs = ImageInputs(**{"backbone": "resnet18", "weights": "none", "batch_size": 8, **image},
                         image_size=image_size)
    return RunConfig(dataset="synthetic", root=str(root), model=kw.pop("model", "patchcore"), tasks=list(tasks),
                     ordering=kw.pop("ordering", "custom"), protocol=protocol, seed=kw.pop("seed", 0), device="cpu",
                     inputs=inputs, **kw)


def cli_stdout(*argv) -> str:
    """`python -m bench ...` in this process; returns its stdout, fails the test on a non-zero exit."""
    from bench.cli import main

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        code = main([str(a) for a in argv])
    assert code == 0, buffer.getvalue()
    return buffer.getvalue()


def one_error_line(capsys) -> str:
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


def create(name: str, extractor, image_size: int, **overrides):
    """Detector `name` built by its registry spec: the spec's defaults with `overrides` type- and range-checked,
    as a run resolves them (no preset: the model's default)."""
    from bench.registry import get

    spec = get(name)
    return spec.factory(extractor, image_size=image_size, **spec.resolve(overrides))


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


REPO = Path(__file__).resolve().parents[1]


def hand_installed_plugin(site: Path, module: str, source: str, *, group: str, name: str,
                          entry_points: str | None = None) -> Path:
    """A plugin's module plus the .dist-info pip would write for it (METADATA, entry_points.txt, RECORD), in
    `site`: enough for importlib.metadata to list entry point `name = module` of `group`, with no build. Its
    distribution is the module's name with dashes. Returns `site`."""
    dist = site / f"{module}-0.1.dist-info"
    dist.mkdir(parents=True)
    (site / f"{module}.py").write_text(source)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module.replace('_', '-')}\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(entry_points or f"[{group}]\n{name} = {module}\n")
    (dist / "RECORD").write_text(f"{module}.py,,\n{dist.name}/METADATA,,\n{dist.name}/entry_points.txt,,\n"
                                 f"{dist.name}/RECORD,,\n")
    return site


def plugin_env(site: Path | None) -> dict:
    """The environment of a process that sees the plugins installed in `site` (and this checkout's bench)."""
    path = [str(site)] if site else []
    return {**os.environ, "PYTHONPATH": os.pathsep.join([*path, str(REPO)]), "OMP_NUM_THREADS": "1"}


def bench_process(site: Path | None, *argv, code: str | None = None) -> subprocess.CompletedProcess:
    """`python -m bench *argv` (or `python -c code`) in a fresh interpreter that sees the plugins in `site`."""
    cmd = [sys.executable, "-c", code] if code else [sys.executable, "-m", "bench", *map(str, argv)]
    return subprocess.run(cmd, env=plugin_env(site), cwd=REPO, capture_output=True, text=True, timeout=600)


def small_tabular_index(base: Path) -> Path:
    """A small synthetic tabular benchmark (seed 1, 120 normal and 30 anomalous records per regime) generated under
    base/raw and indexed at base/index as `bench tabular index` does, with the default discovery settings."""
    from bench.tabular import discovery, preprocess, scenario
    from bench.tabular.synthetic import generate

    root = generate(base / "raw", seed=1, n_normal=120, n_anomal=30)
    cand = discovery.DiscoverySettings()
    preprocess.build_index("synthetic", scenario.raw_table("synthetic", root), lambda df: discovery.discover(df, cand),
                           preprocess.PrepSettings(), base / "index", cand.to_dict())
    return base / "index"


def default_signals() -> None:
    """A child's preexec_fn: the hang-up, interrupt and terminate signals at their default action, as in a login
    shell. A test run under `nohup` or as a background job of a non-interactive shell (SIGINT ignored) would
    otherwise pass the ignored dispositions on through exec, and a signal the test sends would be ignored."""
    for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)


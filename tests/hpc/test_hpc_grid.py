"""Cluster submission without a cluster: grids and profiles parse and validate, expand to the run keys `bench run`
would compute, group into arrays below MaxArraySize, the container files install exactly the lock, status tells
complete / running / pending / failed / not submitted apart from the records and the result files, and the
local and debug executors run a grid end to end."""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from bench import results
from bench.cli import DATASETS, main
from bench.continual.runner import prepare
from bench.errors import BenchError, ConfigError
from bench.hpc import containers, executors, grid as grids, records, status as st
from bench.hpc.grid import REPO, Resources
from helpers import write_grid

PROFILES = ("h100", "l40", "cpu")
TASKS = 3  # the debug/local runs learn the first three tasks of an ordering only


@pytest.fixture(scope="module")
def small_root(tmp_path_factory):
    """Three tiny tasks: enough for orderings, fast enough to run through an executor here."""
    from bench.data.synthetic import generate

    return generate(tmp_path_factory.mktemp("hpc") / "syn3", preset="tiny", n_tasks=TASKS, seed=0)


@pytest.fixture
def grid_file(tmp_path):
    return write_grid(tmp_path / "grid.yaml")


def write_record(outputs: Path, dataset: str, meta: dict, submitted: list) -> Path:
    """The complete record of one submission (executors.Submitted of every run) written at once, as a submit that
    sent everything leaves it; returns its path."""
    journal = records.Journal.open(outputs, dataset, meta, [records.intended_entry(s.planned) for s in submitted])
    journal.sent(submitted)
    return journal.close()


def cli(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


# --- the shipped grids and profiles ------------------------------------------------------------------------------


def _image_grids() -> list[str]:
    """The datasets with a shipped image grid, jobs/<dataset>.yaml (a grid is optional: a dataset without one is
    valid, it cannot be submitted)."""
    import yaml

    return sorted(p.stem for p in grids.JOBS_DIR.glob("*.yaml")
                  if (yaml.safe_load(p.read_text()) or {}).get("track", "image") == "image")


def test_the_published_image_datasets_ship_a_grid():
    assert set(_image_grids()) >= {"synthetic", "mvtec", "visa", "btad", "mpdd", "dagm", "multi"}
    assert set(_image_grids()) <= set(DATASETS)


@pytest.mark.parametrize("dataset", _image_grids())
def test_every_shipped_grid_is_valid(dataset):
    grid = grids.load_grid(dataset)
    assert grid.dataset == dataset and grid.models
    for model in grid.models:
        res = grid.model_resources(model)
        assert res.cpus >= 1 and res.mem_gb > 0 and res.time_min >= 1
        assert set(grid.axis(model, "protocols")) <= {"ncl", "cl"}
    if dataset != "synthetic":  # real datasets run on GPUs with ImageNet weights, per InCLAD
        assert grid.weights == "imagenet"
        assert all(grid.model_resources(m).gpus >= 1 for m in grid.models)


@pytest.mark.parametrize("name", PROFILES)
def test_profiles_load_and_only_gpu_profiles_ask_for_gpus(name):
    profile = grids.load_profile(name)
    params = executors.slurm_parameters(Resources(gpus=1, cpus=4, mem_gb=16, time_min=90), profile,
                                        name="x", parallelism=8, env={})
    if name == "cpu":
        assert not profile.use_gpus and profile.device == "cpu" and "gres" not in params
    else:
        assert params["gres"] == f"gpu:{name}:1" and profile.device == "cuda"
        assert profile.placeholders() == ["partition=<gpu-partition>"]  # documented, refused at submit


def test_unknown_profile_lists_the_valid_ones():
    with pytest.raises(ConfigError, match=r"no such profile \(valid: cpu, h100, l40\)"):
        grids.load_profile("a100")


# --- grid validation ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("overrides, message", [
    ({"dataset": "visa"}, "declares dataset 'visa', expected 'synthetic'"),
    ({"colour": "red"}, r"unknown key\(s\) \['colour'\] in the grid"),
    ({"models": {"patchcore": {"epochs": 3}}}, r"unknown key\(s\) \['epochs'\] in model 'patchcore'"),
    ({"backbones": ["vit"]}, "unknown backbone 'vit'"),
    ({"protocols": ["replay"]}, "unknown protocol 'replay'"),
    ({"seeds": ["zero"]}, "seeds must be a non-empty list of int"),
    ({"resources": {"cpus": 0}}, "resources of the grid need"),
    ({"resources": {"ram": 3}}, r"unknown key\(s\) \['ram'\] in resources"),
    ({"models": []}, "'models' must be a non-empty list"),
    ({"image_size": "large"}, "image_size must be an integer >= 1"),
    ({"models": {"patchcore": {"batch_size": 0}}}, "batch_size of model 'patchcore' must be an integer >= 1"),
])
def test_bad_grids_name_the_file_and_what_was_expected(tmp_path, overrides, message):
    path = write_grid(tmp_path / "bad.yaml", **overrides)
    with pytest.raises(ConfigError, match=message) as info:
        grids.load_grid("synthetic", path)
    assert str(path) in str(info.value)


def test_grid_that_is_not_yaml_is_a_one_line_error(tmp_path, capsys):
    path = tmp_path / "grid.yaml"
    path.write_text("models: [patchcore\n")
    code, _, err = cli(capsys, "submit", "--dataset", "synthetic", "--grid", path, "--dry-run")
    assert code == 2 and err.startswith(f"error: {path}: not valid YAML") and err.count("\n") == 1


# --- expansion ---------------------------------------------------------------------------------------------------


def test_expansion_gives_the_run_keys_and_paths_of_bench_run(grid_file, small_root, tmp_path):
    from bench.cli import build_parser, config_from_args

    grid = grids.load_grid("synthetic", grid_file)
    planned = grids.expand(grid, grids.load_profile("cpu"), grids.Selection(), small_root, tmp_path)
    assert len(planned) == 1 * 1 * 2 * 2 * 1
    for p in planned:
        cfg = p.run.config
        args = build_parser().parse_args([
            "run", "--dataset", "synthetic", "--root", str(small_root), "--model", cfg.model, "--backbone",
            cfg.image.backbone, "--weights", "none", "--protocol", cfg.protocol, "--ordering", cfg.ordering,
            "--seed", str(cfg.seed), "--image-size", "64", "--batch-size", "16", "--device", "cpu"])
        local = prepare(config_from_args(args), out_dir=tmp_path / "synthetic" / "runs")
        assert (p.key, p.run.out) == (local.run_key, local.out)
        assert p.resources == Resources(gpus=0, cpus=1, mem_gb=2, time_min=10)  # cpu profile drops the GPU


def test_detectors_without_a_backbone_run_once_per_ordering_and_protocol(small_root, tmp_path):
    """InCLAD Table 7's "—": EfficientAD and GANomaly read raw images, so a grid with two backbones plans them once
    per ordering × protocol, recorded with backbone "none" (also under a backbone filter)."""
    path = write_grid(tmp_path / "grid.yaml", backbones=["resnet18", "wide_resnet50_2"],
                      models={"patchcore": {}, "ganomaly": {"image_size": 32}})
    grid = grids.load_grid("synthetic", path)
    planned = grids.expand(grid, grids.load_profile("cpu"), grids.Selection(), small_root, tmp_path)
    by_model = {m: sorted((p.run.config.image.backbone, p.run.config.ordering, p.run.config.protocol) for p in planned
                          if p.run.config.model == m) for m in ("patchcore", "ganomaly")}
    assert len(by_model["patchcore"]) == 2 * 2 * 2
    assert by_model["ganomaly"] == sorted(("none", o, p) for o in ("easy_to_hard", "hard_to_easy") for p in ("ncl", "cl"))
    assert all("_ganomaly_none_" in p.run.out.name for p in planned if p.run.config.model == "ganomaly")
    only = grids.expand(grid, grids.load_profile("cpu"), grids.Selection(backbones=["wide_resnet50_2"]), small_root,
                        tmp_path)
    assert {p.key for p in only if p.run.config.model == "ganomaly"} == {
        p.key for p in planned if p.run.config.model == "ganomaly"}


def test_synthetic_grid_is_the_demo(demo_root, tmp_path):
    """`make submit DATASET=synthetic` after `make demo-all` finds every run done (same run keys, same files); the
    grid covers all nine detectors, `make demo`'s subset among them."""
    from bench.tools.demo import demo_configs, demo_models
    from bench.registry import specs

    grid = grids.load_grid("synthetic")
    assert set(grid.models) == set(specs())
    planned = grids.expand(grid, grids.load_profile("cpu"), grids.Selection(), demo_root, tmp_path)
    runs_dir = tmp_path / "synthetic" / "runs"
    demo_all = [prepare(cfg, out_dir=runs_dir) for cfg in demo_configs(demo_root, everything=True)]
    assert len(demo_all) == len(specs()) * 3 * 2
    assert sorted((p.key, p.run.out) for p in planned) == sorted((r.run_key, r.out) for r in demo_all)
    demo = {r.run_key for r in demo_all if r.config.model in demo_models()}
    assert len(demo) == len(demo_models()) * 3 * 2 and demo <= {p.key for p in planned}


def test_expansion_reads_the_index_once_and_each_file_header_once(grid_file, small_root, tmp_path, monkeypatch):
    import bench.data as data
    import bench.data.tasks as tasks

    reads, headers = [], []
    real_reader, real_header = data._READERS["synthetic"], tasks.header_size
    monkeypatch.setitem(data._READERS, "synthetic", lambda root: reads.append(root) or real_reader(root))
    monkeypatch.setattr(tasks, "header_size", lambda path, what: headers.append(path) or real_header(path, what))
    grid = grids.load_grid("synthetic", grid_file)
    planned = grids.expand(grid, grids.load_profile("cpu"), grids.Selection(), small_root, tmp_path)
    assert len(planned) == 4 and len(reads) == 1
    index = data.read_index("synthetic", small_root)
    assert len(reads) == 2  # outside an expansion nothing is remembered: a changed dataset is read afresh
    n_files = len(index) + int((index["mask_path"] != "").sum())
    assert len(headers) == len(set(headers)) == n_files


def test_a_bad_file_still_fails_the_expansion(grid_file, tmp_path):
    from bench.data.synthetic import generate

    root = generate(tmp_path / "syn", preset="tiny", n_tasks=TASKS, seed=0)
    victim = sorted(root.rglob("*.png"))[0]
    victim.write_bytes(b"not a png")
    with pytest.raises(BenchError, match=re.escape(victim.name)):
        grids.expand(grids.load_grid("synthetic", grid_file), grids.load_profile("cpu"), grids.Selection(), root,
                     tmp_path / "out")


def test_filters_select_a_subset_and_reject_values_outside_the_grid(grid_file, small_root, tmp_path):
    grid = grids.load_grid("synthetic", grid_file)
    cpu = grids.load_profile("cpu")
    picked = grids.expand(grid, cpu, grids.Selection(orderings=["hard_to_easy"], protocols=["cl"]), small_root,
                          tmp_path)
    assert [(p.run.config.ordering, p.run.config.protocol) for p in picked] == [("hard_to_easy", "cl")]
    with pytest.raises(ConfigError, match=r"orderings \['random'\] not in the grid"):
        grids.expand(grid, cpu, grids.Selection(orderings=["random"]), small_root, tmp_path)


def test_per_model_overrides_change_the_run(tmp_path, small_root):
    path = write_grid(tmp_path / "grid.yaml", models={"patchcore": {
        "image_size": 32, "protocols": ["cl"], "hparams": {"coreset_ratio": 0.5},
        "resources": {"time_min": 5, "mem_gb": 3}}})
    grid = grids.load_grid("synthetic", path)
    planned = grids.expand(grid, grids.load_profile("h100"), grids.Selection(), small_root, tmp_path)
    assert {p.run.config.protocol for p in planned} == {"cl"}
    assert {p.run.config.image.image_size for p in planned} == {32}
    assert {p.run.config.hparams["coreset_ratio"] for p in planned} == {0.5}
    assert {p.resources for p in planned} == {Resources(gpus=1, cpus=1, mem_gb=3, time_min=5)}
    assert {p.run.config.device for p in planned} == {"cuda"}


# --- arrays, sbatch parameters, containers -----------------------------------------------------------------------


def test_runs_group_by_resources_and_chunk_below_max_array_size():
    small, big = Resources(cpus=1), Resources(cpus=8)
    planned = [grids.PlannedRun(run=None, resources=r) for r in [small] * 5 + [big] * 2 + [small]]
    groups = executors.group_by_resources(planned)
    assert [len(v) for v in groups.values()] == [6, 2] and list(groups) == [small, big]
    assert [len(c) for c in executors.chunks(groups[small], 4)] == [4, 2]


def fake_command(bin_dir: Path, name: str, script: str) -> None:
    bin_dir.mkdir(exist_ok=True)
    path = bin_dir / name
    path.write_text(script if script.startswith("#!") else f"#!/bin/sh\n{script}\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def test_max_array_size_is_read_from_scontrol_with_a_default(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert executors.max_array_size() == 1000  # no scontrol here
    fake_command(tmp_path / "bin", "scontrol", "echo 'MaxArraySize            = 7'; echo 'MaxJobCount = 10000'")
    assert executors.max_array_size() == 7


def test_dry_run_prints_sbatch_parameters_and_runs(grid_file, small_root, tmp_path, capsys):
    code, out, _ = cli(capsys, "submit", "--dataset", "synthetic", "--grid", grid_file, "--root", small_root,
                       "--outputs", tmp_path, "--profile", "h100", "--max-array-size", "3", "--parallelism", "2",
                       "--dry-run")
    assert code == 0
    arrays = re.findall(r"^  sbatch (.*)$", out, re.MULTILINE)
    assert len(arrays) == 2  # 4 runs, arrays of at most 3
    assert "--array=0-2%2" in arrays[0] and "--array=0-0%1" in arrays[1]
    for flag in ("--gres=gpu:h100:1", "--partition=<gpu-partition>", "--time=10", "--cpus-per-task=1",
                 "--mem=2048MB", "--signal=USR2@120"):
        assert flag in arrays[0]
    assert "export HDF5_USE_FILE_LOCKING=FALSE" in out and "export HF_HUB_OFFLINE=1" in out
    assert len(re.findall(r"^    synthetic_patchcore_resnet18_", out, re.MULTILINE)) == 4
    assert not (tmp_path / "synthetic").exists()  # nothing submitted, nothing recorded


def test_dry_run_shows_the_job_names_a_submission_sends(grid_file, small_root, tmp_path, capsys, monkeypatch):
    """The dry run names each array as the real send does (`<name>-<tag>-<n>`, n across the submission), not by
    the bare submission name."""
    from bench.hpc import submission

    monkeypatch.setattr(submission.secrets, "token_hex", lambda n: "cafe0123")
    code, out, _ = cli(capsys, "submit", "--dataset", "synthetic", "--grid", grid_file, "--root", small_root,
                       "--outputs", tmp_path, "--profile", "h100", "--max-array-size", "3", "--dry-run")
    assert code == 0
    names = re.findall(r"--job-name=(\S+)", out)
    assert names == ["bench-synthetic-cafe0123-0", "bench-synthetic-cafe0123-1"], out


def test_an_unknown_cluster_is_one_line_listing_the_valid_ones():
    """A record's cluster (resubmit reuses it) is not checked by argparse: the one check names the choices."""
    from bench.hpc import submission

    with pytest.raises(ConfigError, match=r"unknown cluster 'pbs' \(valid: debug, local, slurm\)"):
        submission.kind_of("pbs")


@pytest.mark.parametrize("option", [("--max-array-size", "-1"), ("--max-array-size", "0"), ("--parallelism", "0"),
                                    ("--parallelism", "-3")])
def test_submit_count_options_out_of_range_are_one_line(grid_file, small_root, tmp_path, capsys, option):
    """Issue 32: `--max-array-size -1` submitted nothing with rc 0 (no chunk), `--parallelism 0` silently meant the
    profile's default and `--parallelism -3` reached sbatch. Each is one line and exit 2, before SLURM is asked."""
    code, out, err = cli(capsys, *_submit_args(grid_file, small_root, tmp_path, "--cluster", "slurm", *option))
    assert code == 2 and err.strip() == f"error: {option[0]} must be an integer >= 1, got {int(option[1])}", out + err
    assert not (tmp_path / "synthetic" / "submissions").exists() and not (tmp_path / "synthetic" / "logs").exists()


def test_a_resubmit_refuses_a_record_parallelism_out_of_range(planned_one, tmp_path, capsys):
    """The parallelism resubmit reuses comes from a record others may edit: range-checked like the option."""
    log = Path("x.err")
    path = write_record(tmp_path, "synthetic", {"cluster": "slurm", "parallelism": -3},
                                [executors.Submitted(planned_one, "5_0", log, log)])
    code, _, err = cli(capsys, "resubmit", "--dataset", "synthetic", "--outputs", tmp_path)
    assert code == 2 and "--parallelism must be an integer >= 1, got -3" in err
    assert records.load_records(tmp_path, "synthetic")[-1]["path"] == str(path)


@pytest.mark.parametrize("mem", [".inf", "-.inf", ".nan"])
def test_a_grid_memory_request_must_be_finite(tmp_path, mem):
    """Issue 32: a grid's `mem_gb: .inf` passed the check (inf > 0) and tracebacks at submit (int(inf))."""
    path = tmp_path / "grid.yaml"
    path.write_text(write_grid(tmp_path / "base.yaml").read_text().replace('"mem_gb": 2', f'"mem_gb": {mem}'))
    with pytest.raises(ConfigError, match=r"grid\.yaml: resources of the grid need .*finite mem_gb > 0"):
        grids.load_grid("synthetic", path)


def test_records_are_ordered_by_sequence_not_by_the_clock(planned_one, tmp_path):
    """A record named by a fast clock (file name sorting last) is still older than one written after it; records
    of earlier versions (no seq) come first, in name order."""
    log = Path("x.err")
    folder = records.records_dir(tmp_path, "synthetic")
    folder.mkdir(parents=True)
    legacy = {"cluster": "slurm", "runs": [{"run_key": planned_one.key, "run_name": planned_one.name,
                                            "job_id": "1", "log_err": "a", "log_out": "a"}]}
    (folder / "20250101T000000000000Z-1.json").write_text(json.dumps(legacy))
    ahead = write_record(tmp_path, "synthetic", {"cluster": "slurm"},
                                 [executors.Submitted(planned_one, "2", log, log)])
    ahead.rename(folder / "20990101T000000000000Z-2.json")
    write_record(tmp_path, "synthetic", {"cluster": "slurm"}, [executors.Submitted(planned_one, "3", log, log)])
    loaded = records.load_records(tmp_path, "synthetic")
    assert [r["runs"][0]["job_id"] for r in loaded] == ["1", "2", "3"] and [r.get("seq") for r in loaded] == [
        None, 1, 2]
    assert records.latest_entries(loaded)[planned_one.key]["job_id"] == "3"


def test_a_record_profile_or_grid_that_is_not_a_plain_name_is_refused(planned_one, tmp_path, capsys):
    """Without SLURM: `status` refuses a record whose profile traverses out of jobs/profiles/ or whose grid is not
    a path string, naming the record (the SLURM test runs `resubmit` too)."""
    log = Path("x.err")
    cases = ((("profile", "../../tmp/evil"), "profile '../../tmp/evil' is not a plain name"),
             (("profile", "/abs/evil"), "profile '/abs/evil' is not a plain name"),
             (("grid", ["x"]), "grid ['x'] is not a path"))
    for i, ((key, value), expected) in enumerate(cases):
        path = write_record(tmp_path / f"case{i}", "synthetic", {"cluster": "slurm", key: value},
                                    [executors.Submitted(planned_one, "5_0", log, log)])
        code, _, err = cli(capsys, "status", "--dataset", "synthetic", "--outputs", tmp_path / f"case{i}")
        assert code == 2 and f"{path}: {expected}" in err, err


def test_the_job_folder_must_be_private(tmp_path):
    """The pickled job files' folder is created 0700; one others can write, or under a folder others can write
    (they could rename it away and plant their own), is refused before anything is created."""
    from bench.hpc import trust

    made = trust.private_folder(tmp_path / "a" / "logs", "pickled job files")
    assert stat.S_IMODE(made.stat().st_mode) == 0o700
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(ConfigError, match=re.escape(f"{shared}: writable by its group and every user (mode 0777)")):
        trust.private_folder(shared / "out" / "logs", "pickled job files")
    assert not (shared / "out").exists()
    shared.chmod(0o1777)  # sticky, as /tmp: nobody renames another's entries
    assert trust.private_folder(shared / "out" / "logs", "pickled job files").is_dir()
    assert trust.private_folder(shared / "new", "pickled job files").is_dir()  # created 0700 in the sticky folder
    made.chmod(0o770)
    with pytest.raises(ConfigError, match="writable by its group"):
        trust.private_folder(made, "pickled job files")


@pytest.mark.parametrize("mode", [0o1777, 0o1770, 0o3775, 0o1733])
def test_a_sticky_folder_others_can_write_is_refused_as_the_job_folder(tmp_path, mode, capsys):
    """Sticky protects entries from being renamed, not a name from being taken: in a sticky world- or
    group-writable job folder (--jobs-dir /tmp) another user can create a job's pickle before it is written,
    and the job then loads theirs. Refused, as `submit` says, with nothing submitted."""
    from bench.hpc import trust

    jobs = tmp_path / "jobs"
    jobs.mkdir()
    jobs.chmod(mode)
    with pytest.raises(ConfigError, match=re.escape(f"{jobs}: writable by its group")):
        trust.private_folder(jobs, "pickled job files")
    assert not list(jobs.iterdir())


def test_placeholders_are_refused_before_anything_is_submitted(grid_file, small_root, tmp_path, capsys):
    code, _, err = cli(capsys, "submit", "--dataset", "synthetic", "--grid", grid_file, "--root", small_root,
                       "--outputs", tmp_path, "--profile", "h100", "--cluster", "slurm")
    assert code == 2 and "h100.yaml: replace the placeholder(s) partition=<gpu-partition>" in err
    assert not (tmp_path / "synthetic" / "submissions").exists()


def test_container_python_binds_data_weights_outputs(tmp_path, monkeypatch):
    image = tmp_path / "bench.sif"
    with pytest.raises(ConfigError, match="container image not found"):
        containers.resolve(str(image), None, REPO)
    image.write_bytes(b"sif")
    fake_command(tmp_path / "bin", "apptainer", "exit 0")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    box = containers.resolve(str(image), None, REPO)
    assert (box.runtime, box.digest) == ("apptainer", "sha256:" + hashlib.sha256(b"sif").hexdigest())
    data, outputs = tmp_path / "data", tmp_path / "outputs"
    python = box.python([REPO, data, data / "sub", outputs, REPO / "data/weights"], REPO, executors.JOB_ENV)
    assert python.startswith("apptainer exec --nv -B ") and python.endswith(f"{image} python")
    binds = python.split(" -B ")[1].split()[0].split(",")
    assert sorted(binds) == sorted([str(REPO), str(data), str(outputs)])  # nested paths are covered already
    assert "HDF5_USE_FILE_LOCKING=FALSE" in python and "HF_HUB_OFFLINE=1" in python and f"PYTHONPATH={REPO}" in python


def _lock() -> dict[str, str]:
    pins = {}
    for line in (REPO / "requirements.lock").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[name.lower().replace("_", "-")] = version
    return pins


@pytest.mark.parametrize("path, base_re", [("docker/Dockerfile", r"^ARG BASE=(\S+)\nFROM \$\{BASE\}$"),
                                           ("apptainer/bench.def", r"^From:\s*(\S+)")])
def test_container_definitions_install_exactly_the_lock(path, base_re):
    text = (REPO / path).read_text()
    lock = _lock()
    base = re.search(base_re, text, re.MULTILINE).group(1)
    tag = re.fullmatch(r"(?:docker\.io/)?pytorch/pytorch:(\d+\.\d+\.\d+)-cuda(\d+\.\d+)-cudnn\d+-runtime", base)
    assert tag, f"{path}: base {base} is not a pinned pytorch/pytorch CUDA runtime tag"
    assert tag.group(1) == lock["torch"]  # the base's torch is the locked one
    assert lock["cuda-toolkit"].startswith(tag.group(2) + ".")
    installs = [line for line in text.splitlines() if "pip install" in line]
    assert installs and all("--no-deps" in line and "-r /opt/bench/requirements.lock" in line for line in installs)
    assert "requirements.lock /opt/bench/requirements.lock" in text
    for name, version in re.findall(r"([A-Za-z0-9_.-]+)==([\w.+-]+)", text):  # any explicit pin matches the lock
        assert lock.get(name.lower().replace("_", "-")) == version
    assert "3, 11" in text and "# Exact pins for the suite's environment (Python 3.11" in \
        (REPO / "requirements.lock").read_text()


# --- status ------------------------------------------------------------------------------------------------------


@pytest.fixture
def planned_one(grid_file, small_root, tmp_path):
    grid = grids.load_grid("synthetic", grid_file)
    sel = grids.Selection(orderings=["easy_to_hard"], protocols=["cl"])
    return grids.expand(grid, grids.load_profile("cpu"), sel, small_root, tmp_path)[0]


def _entry(planned, job_id, cluster="slurm", log: Path | None = None) -> dict:
    log = str(log or "/nonexistent.err")
    return {"run_key": planned.key, "job_id": job_id, "cluster": cluster, "log_err": log, "log_out": log}


def _result(planned, status, steps=1, **attrs):
    n = len(planned.run.config.tasks)
    results.write_run(planned.run.out, {"run_key": planned.key, "status": status, "steps_done": steps,
                                        "n_tasks": n, **attrs}, {"R/image": np.full((n, n), np.nan)},
                      planned.run.config.tasks)


def test_status_from_queue_records_and_result_files(planned_one, tmp_path):
    p = planned_one
    assert st.classify(p, None, {}).state == "not submitted"
    assert st.classify(p, _entry(p, "7_1"), {"7_1": st.QueueJob("PENDING", "Priority")}).state == "pending"
    assert st.classify(p, _entry(p, "7_1"), None).state == "unknown"  # no squeue: never guessed
    log = tmp_path / "7_1_0_log.err"
    log.write_text("Traceback (most recent call last):\n  File x\nValueError: bad pixels\n"
                   "submitit ERROR (x) - Submitted job triggered an exception\n"
                   "srun: error: vm: task 0: Exited with exit code 1\n")
    gone = st.classify(p, _entry(p, "7_1", log=log), {})
    assert (gone.state, gone.log) == ("failed", str(log)) and gone.detail.endswith("ValueError: bad pixels")
    _result(p, "running", steps=2)
    running = st.classify(p, _entry(p, "7_1"), {"7_1": st.QueueJob("RUNNING", "None")})
    assert (running.state, running.detail) == ("running", f"2/{TASKS} steps")
    requeued = st.classify(p, _entry(p, "7_1"), {"7_1": st.QueueJob("PENDING", "BeginTime")})
    assert requeued.state == "pending" and "will resume" in requeued.detail
    cancelled = st.classify(p, _entry(p, "7_1"), {"7_1": st.QueueJob("CANCELLED", "None")})
    assert cancelled.state == "failed" and "SLURM state CANCELLED" in cancelled.detail
    _result(p, "failed", steps=2, error="RuntimeError: CUDA out of memory")
    assert st.classify(p, _entry(p, "7_1"), {}).detail.endswith("RuntimeError: CUDA out of memory")
    assert st.classify(p, _entry(p, str(os.getpid()), cluster="local"), None).state == "pending"
    _result(p, "complete", steps=TASKS)
    assert st.classify(p, _entry(p, "7_1"), {"7_1": st.QueueJob("FAILED", "None")}).state == "complete"
    lines = st.format_status([st.classify(p, None, {}), st.classify(p, _entry(p, "7_1"), {})])
    assert lines.splitlines()[-1] == "total 2 runs: 2 complete, 0 running, 0 pending, 0 failed, 0 not submitted"


def test_slurm_queue_parses_squeue_and_survives_its_absence(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert st.slurm_queue("me") is None
    fake_command(tmp_path / "bin", "squeue", "echo '12_0|RUNNING|None|bench-a'; echo '12_1|PENDING|Resources|b|c'")
    assert st.slurm_queue("me") == {"12_0": ("RUNNING", "None", "bench-a"), "12_1": ("PENDING", "Resources", "b|c")}


def test_latest_submission_of_a_run_wins(planned_one, tmp_path):
    p = planned_one
    log = Path("x.err")
    for job in ("5_0", "9"):
        write_record(tmp_path, "synthetic", {"cluster": "slurm"},
                             [executors.Submitted(p, job, log, log)])
    loaded = records.load_records(tmp_path, "synthetic")
    assert [r["runs"][0]["job_id"] for r in loaded] == ["5_0", "9"]
    assert loaded[0]["runs"][0]["array_job_id"] == "5" and loaded[1]["runs"][0]["array_job_id"] == ""
    assert records.latest_entries(loaded)[p.key]["job_id"] == "9"
    (records.records_dir(tmp_path, "synthetic") / "zz.json").write_text("{")
    with pytest.raises(BenchError, match="zz.json: not a submission record"):
        records.load_records(tmp_path, "synthetic")


def test_resubmit_without_records_says_what_to_do(tmp_path, capsys):
    code, _, err = cli(capsys, "resubmit", "--dataset", "synthetic", "--outputs", tmp_path)
    assert code == 2 and "no submission records; run `make submit DATASET=synthetic` first" in err


def test_job_refuses_a_run_whose_data_changed_since_submission(planned_one):
    job = executors.job_for(planned_one, REPO)
    job.run_key = "0" * 64
    with pytest.raises(BenchError, match="the run key changed since submission"):
        job()


# --- executors end to end ----------------------------------------------------------------------------------------


def _submit_args(grid_file, root, outputs, *extra):
    return ["submit", "--dataset", "synthetic", "--grid", grid_file, "--root", root, "--outputs", outputs,
            "--orderings", "easy_to_hard", *extra]


@pytest.mark.slow
def test_debug_executor_runs_here_then_submit_and_resubmit_are_no_ops(grid_file, small_root, tmp_path, capsys):
    code, out, _ = cli(capsys, *_submit_args(grid_file, small_root, tmp_path, "--protocols", "cl",
                                             "--cluster", "debug"))
    assert code == 0 and "1 run ran" in out
    run = results.read_run(next((tmp_path / "synthetic" / "runs").glob("*.h5")))
    assert run["attrs"]["status"] == "complete" and np.isfinite(run["R/image"]).sum() == 6
    code, out, _ = cli(capsys, "status", "--dataset", "synthetic", "--outputs", tmp_path)  # filters from the record
    assert out.splitlines()[-1] == "total 1 runs: 1 complete, 0 running, 0 pending, 0 failed, 0 not submitted"
    code, out, _ = cli(capsys, *_submit_args(grid_file, small_root, tmp_path, "--protocols", "cl",
                                             "--cluster", "debug"))
    assert "nothing to submit" in out
    code, out, _ = cli(capsys, "resubmit", "--dataset", "synthetic", "--outputs", tmp_path)
    assert code == 0 and "nothing to submit" in out


FAKE_APPTAINER = """#!/bin/bash
# Stands in for `apptainer exec`: logs the call, applies --pwd/--env, runs the command after the image here.
echo "$*" >> "$(dirname "$0")/calls.log"
shift
while [ $# -gt 0 ]; do
  case "$1" in
    --nv) shift ;;
    -B) shift 2 ;;
    --pwd) cd "$2" && shift 2 ;;
    --env) IFS=, read -ra pairs <<< "$2"; for p in "${pairs[@]}"; do export "$p"; done; shift 2 ;;
    *.sif) shift; break ;;
    *) echo "fake apptainer: unexpected argument $1" >&2; exit 64 ;;
  esac
done
[ "$1" = python ] || exit 65
shift
exec PYTHON "$@"
"""


@pytest.mark.slow
def test_local_executor_runs_in_the_background_inside_the_container(grid_file, small_root, tmp_path, capsys,
                                                                    monkeypatch):
    fake_command(tmp_path / "bin", "apptainer", FAKE_APPTAINER.replace("PYTHON", sys.executable))
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    image = tmp_path / "bench.sif"
    image.write_bytes(b"sif")
    code, out, _ = cli(capsys, *_submit_args(grid_file, small_root, tmp_path, "--cluster", "local",
                                             "--container", image))
    assert code == 0 and "started 1 local process(es)" in out
    pid = re.search(r"process\(es\) (\d+)", out).group(1)
    code, out, _ = cli(capsys, "status", "--dataset", "synthetic", "--outputs", tmp_path)
    assert re.search(r"total 2 runs: \d complete, \d running, \d pending, 0 failed", out), out
    deadline = time.time() + 240
    while st.pid_alive(pid) and time.time() < deadline:
        time.sleep(1)
    code, out, _ = cli(capsys, "status", "--dataset", "synthetic", "--outputs", tmp_path)
    assert out.splitlines()[-1] == "total 2 runs: 2 complete, 0 running, 0 pending, 0 failed, 0 not submitted", out
    log = (tmp_path / "synthetic" / "logs" / f"{pid}_0_log.out").read_text()
    assert log.count("[step 3/3]") == 2  # both runs, one after the other, in the one local process
    call = (tmp_path / "bin" / "calls.log").read_text()
    assert call.startswith("exec --nv -B ") and f"{image} python -u -m submitit.core._submit" in call


# --- Makefile and the local cluster script ------------------------------------------------------------------------


def test_make_targets_map_to_the_cli():
    out = subprocess.run(["make", "-n", "-o", ".venv/.installed", "submit", "DATASET=visa", "PROFILE=h100",
                          "MODELS=patchcore,padim", "ORDERINGS=random", "DRY_RUN=1", "CONTAINER=img.sif",
                          "CONTAINER_RUNTIME=apptainer"],
                         cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert re.search(r"-m bench submit --dataset visa --profile h100 --cluster slurm --models patchcore,padim "
                     r'+--orderings random .*--outputs "outputs" +--container "img.sif" '
                     r'+--container-runtime apptainer +--dry-run',
                     out), out
    out = subprocess.run(["make", "-n", "-o", ".venv/.installed", "resubmit", "DATASET=visa"], cwd=REPO,
                         capture_output=True, text=True, check=True).stdout
    assert "--profile" not in out and "--cluster" not in out  # taken from the latest submission
    helped = subprocess.run(["grep", "-hE", r"^(submit|status|resubmit|slurm-up|slurm-down):.*## ",
                             "make/hpc.mk"], cwd=REPO, capture_output=True, text=True).stdout
    assert len(helped.splitlines()) == 5


def test_local_cluster_script_is_valid_bash_with_usage():
    script = REPO / "jobs/slurm/local-cluster.sh"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    out = subprocess.run(["bash", str(script), "restart"], capture_output=True, text=True)
    assert out.returncode == 2 and "start|stop|status" in out.stderr


def test_submit_help_lists_the_clusters(capsys):
    with pytest.raises(SystemExit) as info:
        main(["submit", "--help"])
    out = capsys.readouterr().out
    assert info.value.code == 0 and "{slurm,local,debug}" in out and "--dry-run" in out


@pytest.mark.parametrize("dataset", ["synthetic", "cicids2017", "cicids2018", "cicunsw", "multi"])
def test_every_tabular_dataset_has_a_valid_grid_and_a_scenarios_target(dataset):
    from bench.config import TABULAR_DATASETS, RunConfig, TabularInputs

    assert dataset in TABULAR_DATASETS
    name = RunConfig(dataset=dataset, root="", model="", tasks=[], inputs=TabularInputs()).result_set
    grid = grids.load_grid(name)
    assert (grid.track, grid.data, grid.dataset) == ("tabular", dataset, name) and grid.models
    make = ["make", "-n", "-o", ".venv/.installed", "scenarios", f"DATASET={name}"]
    extra = ["MULTI=cicids2017=/d/2017,synthetic="] if dataset == "multi" else []
    out = subprocess.run(make + extra, cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    data = "--multi cicids2017=/d/2017,synthetic=" if dataset == "multi" else f"--dataset {dataset}"
    command = out.stdout.replace("\\\n", "")
    assert re.search(rf"-m bench tabular scenarios {data} .*--out outputs/{dataset}/tabular", command), out.stdout
    if dataset == "multi":
        refused = subprocess.run(make, cwd=REPO, capture_output=True, text=True)
        assert refused.returncode != 0 and "needs MULTI=" in refused.stderr

"""The job image and jobs inside it (docs/cluster.md, Containers).

Cheap checks first (no image built): the image tag's lock hash, runtime choice, the one-line refusals before
anything is submitted, what docker/job-exec.sh forwards into a podman/docker job, and the container provenance.
Then, on the real local SLURM with the podman runtime: a small grid runs inside the image `make image` built, its
results record the image id and the checkout's commit, and their R matrices equal the same runs made outside.
Those are skipped where podman, the image or SLURM is missing, unless BENCH_REQUIRE_CONTAINER=1 (CI, after
`make image`), which makes a missing image a failure.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import tarfile
import time
from pathlib import Path

import numpy as np
import pytest

from bench import results
from bench.cli import main
from bench.hpc import containers, executors, records
from bench.hpc.grid import REPO
from helpers import cancel_recorded_jobs, write_grid
from helpers import cli_stdout as bench

IMAGE_SH = REPO / "docker" / "image.sh"
PODMAN_ENV = {"CONTAINERS_CONF": str(REPO / "docker/podman/containers.conf"),
              "CONTAINERS_STORAGE_CONF": str(REPO / "docker/podman/storage.conf")}


def cli(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def fake_command(bin_dir: Path, name: str, script: str) -> None:
    bin_dir.mkdir(exist_ok=True)
    path = bin_dir / name
    path.write_text(f"#!/bin/bash\n{script}\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def tools_only(bin_dir: Path, *names: str) -> str:
    """A PATH of `bin_dir` holding only the named host tools: no podman, docker or apt-get unless faked there."""
    bin_dir.mkdir(exist_ok=True)
    for name in names:
        (bin_dir / name).symlink_to(shutil.which(name))
    return str(bin_dir)


def podman(*argv: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(["podman", *argv], capture_output=True, text=True, env={**os.environ, **PODMAN_ENV}, **kw)


def submit_args(grid, root, outputs, *extra):
    return ("submit", "--dataset", "synthetic", "--grid", grid, "--root", root, "--outputs", outputs,
            "--cluster", "slurm", "--profile", "cpu", *extra)


# --- the image's name and the runtime ----------------------------------------------------------------------------


def test_image_tag_is_the_hash_of_the_lock_and_the_dockerfile():
    tag = subprocess.run(["bash", IMAGE_SH, "tag"], capture_output=True, text=True, check=True).stdout.strip()
    assert tag == f"bench:lock-{containers.lock_hash(REPO)}"
    assert re.fullmatch(r"bench:lock-[0-9a-f]{12}", tag)


def test_lock_hash_follows_the_lock_and_the_dockerfile(tmp_path):
    (tmp_path / "docker").mkdir()
    (tmp_path / "requirements.lock").write_text("torch==1\n")
    (tmp_path / "docker/Dockerfile").write_text("FROM x\n")
    before = containers.lock_hash(tmp_path)
    (tmp_path / "docker/Dockerfile").write_text("FROM y\n")
    assert containers.lock_hash(tmp_path) != before


def test_make_targets_call_the_image_script():
    def dry(*argv):
        # CI exports BASE; under `make container-check` the outer make's variables would reach this one
        env = {k: v for k, v in os.environ.items() if k not in ("BASE", "MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
        return subprocess.run(["make", "-n", "--no-print-directory", "-o", ".venv/.installed", *argv], cwd=REPO,
                              capture_output=True, text=True, check=True, env=env).stdout
    assert dry("image").strip() == "bash docker/image.sh build"
    assert dry("image", "BASE=localhost/b:1").strip() == "BASE=localhost/b:1 bash docker/image.sh build"
    assert dry("image-base").strip() == "bash docker/image.sh base"
    assert dry("sif", "SIF=x.sif").strip().splitlines()[-1] == "bash docker/image.sh sif x.sif"
    check = dry("container-check").strip().splitlines()
    assert check[0] == "bash docker/image.sh build" and check[1] == "bash docker/check.sh"
    assert "BENCH_REQUIRE_CONTAINER=1" in check[2] and check[2].endswith("tests/hpc/test_container.py")


def test_runtime_defaults_to_apptainer_for_a_sif_else_podman_else_docker(monkeypatch):
    assert containers.default_runtime("x/bench.sif") == "apptainer"
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/bin/{name}" if name in ("podman", "docker") else None)
    assert containers.default_runtime("bench:lock-0") == "podman"
    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/docker" if name == "docker" else None)
    assert containers.default_runtime("bench:lock-0") == "docker"
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(containers.ConfigError, match="no container engine here"):
        containers.default_runtime("bench:lock-0")


def test_image_script_wants_a_working_engine_not_a_binary(tmp_path):
    """A docker client with no daemon is no engine; with no podman and nothing to install it with: exit 2."""
    path = tools_only(tmp_path / "bin", "cat", "sha256sum", "cut", "dirname", "id")
    fake_command(tmp_path / "bin", "docker", 'echo "Cannot connect to the Docker daemon" >&2; exit 1')
    out = subprocess.run([shutil.which("bash"), IMAGE_SH, "engine"], capture_output=True, text=True,
                         env={"PATH": path, "HOME": str(tmp_path)})
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip().splitlines() == ["no container engine: neither podman nor a running docker daemon; "
                                               "install podman (apt-get install podman runc)"]
    fake_command(tmp_path / "bin", "docker", "exit 0")  # a daemon answers `docker info`
    out = subprocess.run([shutil.which("bash"), IMAGE_SH, "engine"], capture_output=True, text=True,
                         env={"PATH": path, "HOME": str(tmp_path)})
    assert (out.returncode, out.stdout) == (0, "docker\n")


def test_pip_settings_of_the_host_reach_the_build_with_the_paths_they_name(tmp_path):
    """docker/pip_config.py: the PIP_* variables become settings; a local index is mounted from its parent."""
    index = tmp_path / "mirror" / "simple"
    index.mkdir(parents=True)
    out = subprocess.run(["python3", REPO / "docker/pip_config.py", tmp_path / "pip.conf"], capture_output=True,
                         text=True, check=True, env={"PATH": os.environ["PATH"], "HOME": str(tmp_path),
                                                     "PIP_INDEX_URL": f"file://{index}", "PIP_NO_CACHE_DIR": "1"})
    conf = (tmp_path / "pip.conf").read_text()
    assert f"index-url = file://{index}" in conf and "no-cache-dir" not in conf
    assert str(tmp_path / "mirror") in out.stdout.splitlines() and str(index) not in out.stdout.splitlines()


# --- refusals before anything is submitted -----------------------------------------------------------------------


@pytest.fixture
def small_grid(tmp_path):
    return write_grid(tmp_path / "grid.yaml", orderings=["easy_to_hard"], protocols=["ncl", "cl"], image_size=32,
                      resources={"gpus": 0, "cpus": 1, "mem_gb": 2, "time_min": 10})


@pytest.fixture
def refused(capsys, tmp_path, small_grid, tiny_root):
    """Submit the small grid with these options: it must exit 2 with one line and submit nothing."""
    def check(*extra) -> str:
        code, out, err = cli(capsys, *submit_args(small_grid, tiny_root, tmp_path / "out", *extra))
        assert code == 2 and not (tmp_path / "out" / "synthetic" / "submissions").exists(), out + err
        assert len(err.strip().splitlines()) == 1
        return err
    return check


def test_a_sif_that_does_not_exist_is_refused(refused, tmp_path):
    err = refused("--container", tmp_path / "nope.sif")
    assert "nope.sif: container image not found" in err and "make sif" in err


def test_a_missing_engine_is_refused(refused, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", tools_only(tmp_path / "bin", "cat"))
    err = refused("--container", "bench:lock-0", "--container-runtime", "podman")
    assert "CONTAINER_RUNTIME=podman: podman is not installed" in err
    fake_command(tmp_path / "bin", "docker", "exit 1")  # a client without a daemon
    err = refused("--container", "bench:lock-0", "--container-runtime", "docker")
    assert "no docker daemon answers" in err


needs_podman = pytest.mark.skipif(shutil.which("podman") is None, reason="podman is not installed (`make image` "
                                                                         "installs it)")


@pytest.fixture
def empty_image():
    """An image of an empty file system (no Python), labelled for a lock that is not this checkout's."""
    name = f"localhost/bench-test-empty:{os.getpid()}"
    tar = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench-test-empty-{os.getpid()}.tar"
    with tarfile.open(tar, "w"):
        pass
    try:
        out = podman("import", "--change", "LABEL bench.lock=000000000000", str(tar), name)
        assert out.returncode == 0, out.stderr
        yield name
    finally:
        tar.unlink(missing_ok=True)
        podman("rmi", "-f", name)


@needs_podman
def test_a_missing_image_is_refused(refused):
    err = refused("--container", "localhost/bench-no-such-image:0")
    assert "no such podman image: build it with `make image`" in err


@needs_podman
def test_an_image_of_another_lock_is_refused(refused, empty_image):
    err = refused("--container", empty_image)
    assert f"built for lock 000000000000, this checkout's is {containers.lock_hash(REPO)}" in err
    assert "make image" in err


@needs_podman
def test_a_base_without_python_3_11_is_refused_before_building(empty_image):
    out = subprocess.run(["bash", IMAGE_SH, "build"], capture_output=True, text=True,
                         env={**os.environ, "BASE": empty_image, "ENGINE": "podman"})
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stderr.strip().splitlines()[-1] == (f"BASE={empty_image} has no Python 3.11 (the lock's) as `python`: "
                                                   "choose a base that has it (`make image-base` makes one)")


def test_a_folder_given_as_the_container_is_named_as_a_folder(refused, tmp_path, monkeypatch):
    """Issue 31 §6: a folder as CONTAINER was reported as "no docker daemon" (the engine check came first)."""
    fake_command(tmp_path / "bin", "docker", "exit 1")  # a client without a daemon: what the old message blamed
    monkeypatch.setenv("PATH", tools_only(tmp_path / "bin", "cat"))
    for folder in (tmp_path / "images", tmp_path / "images.sif"):
        folder.mkdir()
        err = refused("--container", folder)
        assert f"CONTAINER={folder}: is a folder, not a container image" in err and "daemon" not in err


def test_image_script_with_engine_docker_and_no_daemon_says_so(tmp_path):
    """Issue 31 §6: ENGINE=docker with a client but no daemon was reported later as a missing image."""
    path = tools_only(tmp_path / "bin", "cat", "sha256sum", "cut", "dirname", "id")
    fake_command(tmp_path / "bin", "docker", 'echo "Cannot connect to the Docker daemon" >&2; exit 1')
    out = subprocess.run([shutil.which("bash"), IMAGE_SH, "sif"], capture_output=True, text=True,
                         env={"PATH": path, "HOME": str(tmp_path), "ENGINE": "docker"})
    assert out.returncode == 2 and out.stderr.strip().splitlines() == [
        "ENGINE=docker: no docker daemon answers (`docker info` fails): start it, or use ENGINE=podman"]


@pytest.mark.parametrize("runtime", ["apptainer", "podman"])
@pytest.mark.parametrize("char", [",", ":"])
def test_a_bound_path_with_a_list_separator_is_refused(tmp_path, runtime, char):
    """Issue 31 §6: a dataset root with a comma went unescaped into apptainer's -B list and job-exec.sh's split
    (the job silently lost its data); ':' separates podman's -v src:dst. Refused, naming the path."""
    root = tmp_path / f"data{char}set"
    root.mkdir()
    box = containers.Container(str(tmp_path / "bench.sif") if runtime == "apptainer" else "bench:lock-0", runtime,
                               "sha256:0")
    with pytest.raises(containers.ConfigError, match=re.escape(f"{root}: a container cannot bind a path")):
        box.python([REPO, root], REPO, executors.JOB_ENV)


def test_a_container_path_with_a_space_is_one_argument(tmp_path, capsys, small_grid, tiny_root, monkeypatch):
    """Issue 31 §6: `make submit CONTAINER='a dir/bench.sif'` broke on the space: make passes it quoted, and the
    job's python prefix holds it as one shell word."""
    import shlex

    make = subprocess.run(["make", "-n", "-o", ".venv/.installed", "submit", "DATASET=synthetic",
                           "CONTAINER=a dir/bench.sif", "JOBS_DIR=my jobs"], cwd=REPO, capture_output=True,
                          text=True, check=True).stdout
    assert '--container "a dir/bench.sif"' in make and '--jobs-dir "my jobs"' in make
    fake_command(tmp_path / "bin", "apptainer", "exit 0")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    image = tmp_path / "a dir" / "bench.sif"
    image.parent.mkdir()
    image.write_bytes(b"sif")
    code, out, err = cli(capsys, *submit_args(small_grid, tiny_root, tmp_path / "out", "--container", image,
                                              "--dry-run"))
    assert code == 0, err
    python = re.search(r"python: (.*)", out).group(1)
    words = shlex.split(python)
    assert words[0:2] == ["apptainer", "exec"] and str(image) in words and words[-1] == "python"


# --- what a job gets ---------------------------------------------------------------------------------------------


def test_podman_jobs_go_through_job_exec_with_the_image_id_and_the_binds(tmp_path):
    box = containers.Container("bench:lock-0", "podman", "sha256:abc")
    data = tmp_path / "data"
    python = box.python([REPO, data, data / "sub", REPO / "data/weights"], REPO, executors.JOB_ENV)
    assert python == f"bash {REPO}/docker/job-exec.sh podman sha256:abc {REPO} {REPO},{data}"
    assert box.env() == {"BENCH_CONTAINER_IMAGE": "bench:lock-0", "BENCH_CONTAINER_RUNTIME": "podman",
                         "BENCH_CONTAINER_DIGEST": "sha256:abc"}


def test_job_exec_forwards_the_job_variables_and_nothing_else(tmp_path):
    fake_command(tmp_path / "bin", "podman", 'printf "%s\\n" "$@"')
    env = {"PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}", "SLURM_ARRAY_TASK_ID": "3",
           "SUBMITIT_FOLDER": "/x", "BENCH_GIT_COMMIT": "abc", "BENCH_GIT_DIRTY": "0", "OMP_NUM_THREADS": "1",
           "UNRELATED": "y"}
    out = subprocess.run(["bash", REPO / "docker/job-exec.sh", "podman", "sha256:abc", "/repo", "/repo,/data",
                          "-u", "-m", "submitit.core._submit", "/logs"], capture_output=True, text=True, env=env,
                         check=True).stdout.splitlines()
    assert out[:2] == ["run", "--rm"] and out[-6:] == ["sha256:abc", "python", "-u", "-m", "submitit.core._submit",
                                                        "/logs"]
    forwarded = {out[i + 1] for i, arg in enumerate(out) if arg == "-e"}
    assert forwarded == {"PYTHONPATH=/repo", "SLURM_ARRAY_TASK_ID", "SUBMITIT_FOLDER", "BENCH_GIT_COMMIT",
                         "BENCH_GIT_DIRTY", "OMP_NUM_THREADS"}
    assert {out[i + 1] for i, arg in enumerate(out) if arg == "-v"} == {"/repo:/repo", "/data:/data"}
    assert "--gpus" not in out and "--device" not in out  # a CPU job gets no GPU


def test_provenance_records_the_container_and_the_passed_commit(monkeypatch):
    monkeypatch.setattr(results, "_git", lambda *args: None)  # inside an image: no git
    for key in ("BENCH_CONTAINER_IMAGE", "BENCH_CONTAINER_RUNTIME", "BENCH_CONTAINER_DIGEST", "BENCH_GIT_COMMIT",
                "BENCH_GIT_DIRTY"):
        monkeypatch.delenv(key, raising=False)
    bare = results.provenance()
    assert (bare["container_image"], bare["container_runtime"], bare["container_digest"]) == ("", "", "")
    assert (bare["git_commit"], bare["git_dirty"]) == ("unknown", -1)
    monkeypatch.setenv("BENCH_CONTAINER_IMAGE", "bench:lock-0")
    monkeypatch.setenv("BENCH_CONTAINER_RUNTIME", "podman")
    monkeypatch.setenv("BENCH_CONTAINER_DIGEST", "sha256:abc")
    monkeypatch.setenv("BENCH_GIT_COMMIT", "f" * 40)
    monkeypatch.setenv("BENCH_GIT_DIRTY", "1")
    inside = results.provenance()
    assert (inside["container_image"], inside["container_runtime"], inside["container_digest"]) == (
        "bench:lock-0", "podman", "sha256:abc")
    assert (inside["git_commit"], inside["git_dirty"]) == ("f" * 40, 1)


# --- a grid inside the image, on the real local SLURM ------------------------------------------------------------


@pytest.fixture(scope="module")
def job_image() -> tuple[str, str]:
    """(tag, image id) of this checkout's image in podman; skipped (failed under BENCH_REQUIRE_CONTAINER=1) when
    there is none."""
    tag = f"bench:lock-{containers.lock_hash(REPO)}"
    reason = None
    if shutil.which("podman") is None:
        reason = "podman is not installed"
    else:
        out = podman("image", "inspect", "--format", "{{.Id}}", tag)
        if out.returncode != 0:
            reason = f"no image {tag} in podman"
    if reason:
        message = f"{reason}: build it with `make image` (`make image-base` + BASE= where Docker Hub is unreachable)"
        if os.environ.get("BENCH_REQUIRE_CONTAINER") == "1":
            pytest.fail(f"BENCH_REQUIRE_CONTAINER=1 but {message}")
        pytest.skip(message)
    return tag, "sha256:" + out.stdout.strip().removeprefix("sha256:")


def wait_complete(outputs: Path, timeout: float = 600) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        out = bench("status", "--dataset", "synthetic", "--outputs", outputs)
        total, complete, failed = map(int, re.search(
            r"total (\d+) runs: (\d+) complete, \d+ running, \d+ pending, (\d+) failed", out).groups())
        assert not failed, f"a job failed:\n{out}"
        if complete == total:
            return
        time.sleep(2)
    pytest.fail(f"timed out after {timeout}s:\n" + bench("status", "--dataset", "synthetic", "--outputs", outputs))


@pytest.mark.slurm
@pytest.mark.slow
def test_a_grid_runs_inside_the_image_on_slurm_like_outside(require_slurm, job_image, small_grid, tiny_root,
                                                            tmp_path):
    tag, image_id = job_image
    inside, outside = tmp_path / "inside", tmp_path / "outside"
    try:
        out = bench(*submit_args(small_grid, tiny_root, inside, "--container", tag, "--container-runtime", "podman"))
        assert "submitted array" in out
        wait_complete(inside)
    finally:
        cancel_recorded_jobs(inside, "synthetic")
    record = records.load_records(inside, "synthetic")[-1]
    assert (record["container"], record["container_runtime"], record["container_digest"]) == (tag, "podman",
                                                                                              image_id)
    bench(*submit_args(small_grid, tiny_root, outside)[:-4], "--cluster", "debug")  # the same runs, here

    head = subprocess.run(["git", "-C", REPO, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    table = results.load(inside / "synthetic")  # the rows of runs.csv
    assert len(table) == 2 and set(table["container_runtime"]) == {"podman"}
    assert set(table["container_image"]) == {tag} and set(table["container_digest"]) == {image_id}
    assert set(table["git_commit"]) == {head} and set(table["git_dirty"]) == {int(bool(dirty))}
    assert set(results.load(outside / "synthetic")["container_image"]) == {""}
    for path in sorted((inside / "synthetic" / "runs").glob("*.h5")):
        run, ref = results.read_run(path), results.read_run(outside / "synthetic" / "runs" / path.name)
        assert run["attrs"]["python"].startswith("3.11.")
        # Inside and outside share the lock but not the CPU kernels' thread split: float32 scores agree to rounding,
        # and two pixels whose scores differ by a rounding step may swap order (measured: one pixel cell moved by
        # 1.5e-6). 1e-4 still fails any real difference in what ran (another model, preset or input moves R by far more).
        for level in ("image", "pixel"):
            np.testing.assert_allclose(run[f"R/{level}"], ref[f"R/{level}"], rtol=0, atol=1e-4, equal_nan=True,
                                       err_msg=f"{path.name}: R/{level} inside the image differs from outside")

"""The container a job runs in: which runtime, which image, and the command prefix that runs the job's Python there.

`make submit CONTAINER=<image> [CONTAINER_RUNTIME=apptainer|podman|docker]`: a `.sif` path runs with Apptainer;
any other name is an image of podman (or docker, where podman is absent and a docker daemon answers), built by
`make image`. Everything is checked before a job is submitted: the runtime works, the image exists, and a podman/
docker image was built from this checkout's lock (its `bench.lock` label). Every job gets the image, its digest and
the runtime as BENCH_CONTAINER_* variables, which the result files record (bench.results.provenance).
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from bench.errors import ConfigError
from bench.hpc.grid import REPO

RUNTIMES = ("apptainer", "podman", "docker")
# Also in docker/image.sh (the image tag and label): sha256 of requirements.lock then docker/Dockerfile.
LOCK_FILES = ("requirements.lock", "docker/Dockerfile")
JOB_EXEC = "docker/job-exec.sh"


def lock_hash(repo: Path) -> str:
    h = hashlib.sha256()
    for name in LOCK_FILES:
        h.update((Path(repo) / name).read_bytes())
    return h.hexdigest()[:12]


@dataclass(frozen=True)
class Container:
    image: str     # the .sif path, or the image name as given (bench:lock-...)
    runtime: str   # apptainer | podman | docker
    digest: str    # sha256 of the .sif file, or the engine's image id (what the jobs run)

    def env(self) -> dict[str, str]:
        return {"BENCH_CONTAINER_IMAGE": self.image, "BENCH_CONTAINER_RUNTIME": self.runtime,
                "BENCH_CONTAINER_DIGEST": self.digest}

    def python(self, binds: list[Path], workdir: Path, job_env: dict[str, str]) -> str:
        """The command prefix submitit puts before `-u -m submitit.core._submit <folder>`."""
        paths = ",".join(map(str, bind_paths(binds)))
        if self.runtime == "apptainer":  # apptainer passes the job's environment through; set what must differ
            env = ",".join([f"PYTHONPATH={workdir}", *(f"{k}={v}" for k, v in job_env.items())])
            return (f"apptainer exec --nv -B {shlex.quote(paths)} --pwd {shlex.quote(str(workdir))} "
                    f"--env {shlex.quote(env)} {shlex.quote(self.image)} python")
        # podman/docker pass nothing through: docker/job-exec.sh forwards the job's variables when the job starts
        return " ".join(map(shlex.quote, ["bash", str(Path(workdir) / JOB_EXEC), self.runtime, self.digest,
                                          str(workdir), paths]))


def bind_paths(binds: list[Path]) -> list[Path]:
    """`covering(binds)`, refusing a path with a ',' or ':' in one line: apptainer's `-B a,b` list and podman's
    `-v src:dst` have no escape for them (the job would silently lose that folder, or bind a wrong one)."""
    kept = covering(binds)
    for path in kept:
        bad = sorted(set(",:") & set(str(path)))
        if bad:
            raise ConfigError(f"{path}: a container cannot bind a path containing {' or '.join(map(repr, bad))} "
                              f"(apptainer -B / podman -v separators): rename the folder (a symlink to it is "
                              f"resolved, so it does not help)")
    return kept


def covering(binds: list[Path]) -> list[Path]:
    """The bind paths, absolute, without those a parent's bind already covers."""
    kept: list[Path] = []
    for path in sorted({Path(b).resolve() for b in binds}, key=lambda p: len(p.parts)):
        if not any(path == k or k in path.parents for k in kept):
            kept.append(path)
    return kept


def resolve(image: str, runtime: str | None, repo: Path) -> Container:
    """Check the image and its runtime (ConfigError, one line, naming what to run) and return the container."""
    if Path(image).is_dir():  # not "no docker daemon" or "no such image": the name is a folder here
        raise ConfigError(f"CONTAINER={image}: is a folder, not a container image (expected an Apptainer .sif file, "
                          f"or a podman/docker image name such as $(docker/image.sh tag))")
    runtime = runtime or default_runtime(image)
    if runtime not in RUNTIMES:
        raise ConfigError(f"CONTAINER_RUNTIME={runtime}: unknown runtime (valid: {', '.join(RUNTIMES)})")
    if runtime == "apptainer":
        return _sif(image)
    _check_engine(runtime)
    image_id, lock = _inspect(runtime, image)
    if lock != lock_hash(repo):
        raise ConfigError(f"CONTAINER={image}: built for lock {lock or '(no bench.lock label)'}, this checkout's is "
                          f"{lock_hash(repo)}: build its image with `make image`, then submit with "
                          f"CONTAINER=$(docker/image.sh tag)")
    return Container(image, runtime, image_id)


def default_runtime(image: str) -> str:
    """A .sif runs with apptainer; an image name with podman, else a working docker."""
    if image.endswith(".sif"):
        return "apptainer"
    if shutil.which("podman"):
        return "podman"
    if shutil.which("docker"):
        return "docker"
    raise ConfigError(f"CONTAINER={image}: no container engine here (podman or docker) to run it: install podman "
                      f"(apt-get install podman runc), or give an Apptainer .sif (`make sif`)")


def _sif(image: str) -> Container:
    path = Path(image).resolve()
    if path.suffix != ".sif" or not path.is_file():
        raise ConfigError(f"CONTAINER={image}: container image not found (expected a .sif: `make sif` writes one)")
    if shutil.which("apptainer") is None:
        raise ConfigError(f"CONTAINER={image}: apptainer is not installed here (`module load apptainer` on the "
                          f"cluster, or CONTAINER_RUNTIME=podman with an image of `make image`)")
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return Container(str(path), "apptainer", "sha256:" + h.hexdigest())


def _check_engine(runtime: str) -> None:
    if shutil.which(runtime) is None:
        raise ConfigError(f"CONTAINER_RUNTIME={runtime}: {runtime} is not installed (apt-get install podman runc, "
                          f"or `make image`, which installs podman)")
    if runtime == "docker" and _run("docker", "info").returncode != 0:  # the client alone runs nothing
        raise ConfigError("CONTAINER_RUNTIME=docker: no docker daemon answers (`docker info` fails): start it, or "
                          "use CONTAINER_RUNTIME=podman")


def _inspect(runtime: str, image: str) -> tuple[str, str]:
    """The image's id and its bench.lock label."""
    out = _run(runtime, "image", "inspect", "--format", '{{.Id}} {{index .Labels "bench.lock"}}', image)
    if out.returncode != 0:
        raise ConfigError(f"CONTAINER={image}: no such {runtime} image: build it with `make image` "
                          f"(CONTAINER=$(docker/image.sh tag) names it)")
    image_id, _, lock = out.stdout.strip().partition(" ")
    lock = "" if lock == "<no value>" else lock  # the template's text for a missing label
    return image_id if image_id.startswith("sha256:") else "sha256:" + image_id, lock


def _run(*argv: str) -> subprocess.CompletedProcess:
    """podman/docker with this repo's podman configuration (docker ignores it), as docker/image.sh runs them."""
    env = dict(os.environ)
    env.setdefault("CONTAINERS_CONF", str(REPO / "docker/podman/containers.conf"))
    env.setdefault("CONTAINERS_STORAGE_CONF", str(REPO / "docker/podman/storage.conf"))
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)

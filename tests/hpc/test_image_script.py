"""docker/image.sh's control flow, with a stand-in engine on PATH: a real build takes minutes and a container
engine, but the script's own shell logic (traps, `set -u`, what it asks the engine) needs neither."""

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# Answers like podman would on a machine that has the base but not yet the job image; logs every call.
FAKE_PODMAN = """#!/usr/bin/env bash
echo "$*" >> "$FAKE_LOG"
case "$1 $2" in
  "image inspect")
    if [[ "$3" == --format ]]; then echo "$BASE"; exit 0; fi
    [[ "$3" == bench:lock-* && -z "${FAKE_HAVE_IMAGE:-}" ]] && exit 1; exit 0 ;;
esac
exit 0
"""


def _run(tmp_path: Path, *args: str, **extra: str) -> tuple[subprocess.CompletedProcess, str]:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "podman"
    fake.write_text(FAKE_PODMAN)
    fake.chmod(0o755)
    log = tmp_path / "calls.log"
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "ENGINE": "podman", "FAKE_LOG": str(log),
           "BASE": "localhost/bench-base:bookworm-py3.11", "TMPDIR": str(tmp_path), **extra}
    proc = subprocess.run(["bash", str(REPO / "docker/image.sh"), *args], env=env, capture_output=True, text=True,
                          timeout=60)
    return proc, log.read_text() if log.exists() else ""


def test_a_build_that_runs_returns_cleanly_and_removes_its_pip_config(tmp_path):
    proc, calls = _run(tmp_path, "build")
    assert proc.returncode == 0, proc.stderr  # a RETURN trap left behind made main's return fail under `set -u`
    assert "unbound variable" not in proc.stderr
    assert any(line.startswith("build ") for line in calls.splitlines()), calls
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("tmp")], "the pip config was left behind"


def test_an_up_to_date_image_is_not_rebuilt(tmp_path):
    proc, calls = _run(tmp_path, "build", FAKE_HAVE_IMAGE="1")
    assert proc.returncode == 0, proc.stderr
    assert "up to date" in proc.stdout
    assert not any(line.startswith("build ") for line in calls.splitlines()), calls

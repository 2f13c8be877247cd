"""Detectors from outside: the example package of docs/models.md ("Your own detector"), installed with pip into a
temporary folder (offline, the shared environment untouched), runs through `bench run` and the result reader; a
broken plugin stops the CLI with one line naming its entry point."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
GROUP = "bench.detectors"


def _example_files() -> dict[str, str]:
    """{file name: content} of the fenced blocks under a bold file name in docs/models.md's plugin section."""
    text = (REPO / "docs" / "models.md").read_text()
    section = text[text.index("\n# Your own detector"):]
    return dict(re.findall(r"^\*\*(\S+)\*\*\n\n```\w*\n(.*?)^```", section, flags=re.M | re.S))


def _env(site: Path) -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO)]), "OMP_NUM_THREADS": "1"}


def _bench(site: Path, *argv, code: str | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-c", code] if code else [sys.executable, "-m", "bench", *map(str, argv)]
    return subprocess.run(cmd, env=_env(site), cwd=REPO, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory) -> Path:
    """The docs' example package, built and installed by pip into a folder of its own (no network, no build
    isolation: the environment's setuptools builds it; nothing is installed into the environment)."""
    files = _example_files()
    assert set(files) == {"pyproject.toml", "meandist_bench.py"}, "docs/models.md's example lost a file"
    base = tmp_path_factory.mktemp("plugin")
    package, site = base / "meandist", base / "site"
    package.mkdir()
    for name, content in files.items():
        (package / name).write_text(content)
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--no-index", "--disable-pip-version-check", "--target", str(site), str(package)],
                   check=True, capture_output=True, timeout=600)
    assert any((site / d / "entry_points.txt").is_file() for d in os.listdir(site) if d.endswith(".dist-info"))
    return site


@pytest.mark.slow
def test_the_docs_plugin_runs_through_bench_run_and_the_reader(plugin_site, tiny_root, tmp_path):
    from bench.results import is_complete, load

    out = tmp_path / "meandist.h5"
    run = _bench(plugin_site, "run", "--dataset", "synthetic", "--root", tiny_root, "--model", "meandist",
                 "--protocol", "ncl", "--preset", "sharp", "--weights", "none", "--image-size", "32",
                 "--device", "cpu", "--batch-size", "8", "--workers", "0", "--tasks", "chip,disc",
                 "--out", out)
    assert run.returncode == 0, run.stderr
    assert is_complete(out)
    row = load(tmp_path).iloc[0]
    assert (row["model"], row["protocol"], row["steps_done"], row["n_tasks"]) == ("meandist", "ncl", 2, 2)
    assert np.isfinite(row["image_roc_auc_cl"])


def test_the_cli_lists_the_plugin_without_importing_it_or_torch(plugin_site):
    probe = _bench(plugin_site, code=(
        "import sys; from bench.registry import names; print(','.join(names())); "
        "print(sorted(m for m in ('torch', 'meandist_bench') if m in sys.modules))"))
    assert probe.returncode == 0, probe.stderr
    listed, imported = probe.stdout.splitlines()
    assert listed.split(",")[-1] == "meandist" and "patchcore" in listed.split(",")
    assert imported == "[]"
    assert "meandist" in _bench(plugin_site, "run", "--help").stdout


def _hand_installed_plugin(site: Path, module: str, source: str) -> None:
    """A plugin's module plus the .dist-info pip would write for it (METADATA, entry_points.txt, RECORD): enough
    for importlib.metadata to list its entry point; no build needed for a plugin that is meant to fail."""
    dist = site / "broken_plugin-0.1.dist-info"
    dist.mkdir(parents=True)
    (site / f"{module}.py").write_text(source)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(f"[{GROUP}]\nbroken = {module}\n")
    (dist / "RECORD").write_text(f"{module}.py,,\n{dist.name}/METADATA,,\n{dist.name}/entry_points.txt,,\n"
                                 f"{dist.name}/RECORD,,\n")


@pytest.mark.parametrize("source,expected", [
    ("raise ImportError('needs a package that is not installed')",
     "failed to load: ImportError: needs a package that is not installed"),
    ("X = 1  # registers nothing", "registered no detector named 'broken'"),
])
def test_a_broken_plugin_is_one_line_naming_its_entry_point(tiny_root, tmp_path, source, expected):
    site = tmp_path / "site"
    _hand_installed_plugin(site, "broken_plugin", source)
    run = _bench(site, "run", "--dataset", "synthetic", "--root", tiny_root, "--model", "patchcore",
                 "--weights", "none", "--image-size", "32", "--device", "cpu", "--tasks", "chip",
                 "--out", tmp_path / "out.h5")
    err = run.stderr.strip()
    assert run.returncode == 2 and "\n" not in err and "Traceback" not in err, err
    assert err.startswith(f"error: detector plugin 'broken' (entry point {GROUP}: broken = broken_plugin)")
    assert expected in err
    assert not (tmp_path / "out.h5").exists()

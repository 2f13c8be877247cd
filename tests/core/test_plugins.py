"""Detectors from outside: the example package of docs/extending.md ("Your own detector"), installed with pip into a
temporary folder (offline, the shared environment untouched), runs through `bench run` and the result reader; a
broken plugin is one line naming its distribution and entry point for the command that asks for it, and never
stops one that does not; a plugin's spec is checked at registration and cannot replace a built-in's."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from helpers import bench_process, hand_installed_plugin

REPO = Path(__file__).resolve().parents[2]
GROUP = "bench.detectors"


def _example_files() -> dict[str, str]:
    """{file name: content} of the fenced blocks under a bold file name in docs/extending.md's detector section."""
    text = (REPO / "docs" / "extending.md").read_text()
    section = text[text.index("\n## Your own detector"):]
    section = section[:section.index("\n## ", 1)]  # up to the next section (datasets)
    return dict(re.findall(r"^\*\*(\S+)\*\*\n\n```\w*\n(.*?)^```", section, flags=re.M | re.S))


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory) -> Path:
    """The docs' example package, built and installed by pip into a folder of its own (no network, no build
    isolation: the environment's setuptools builds it; nothing is installed into the environment)."""
    files = _example_files()
    assert set(files) == {"pyproject.toml", "meandist_bench.py"}, "docs/extending.md's example lost a file"
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
    run = bench_process(plugin_site, "run", "--dataset", "synthetic", "--root", tiny_root, "--model", "meandist",
                 "--protocol", "ncl", "--preset", "sharp", "--weights", "none", "--image-size", "32",
                 "--device", "cpu", "--batch-size", "8", "--workers", "0", "--tasks", "chip,disc",
                 "--out", out)
    assert run.returncode == 0, run.stderr
    assert is_complete(out)
    row = load(tmp_path).iloc[0]
    assert (row["model"], row["protocol"], row["steps_done"], row["n_tasks"]) == ("meandist", "ncl", 2, 2)
    assert np.isfinite(row["image_roc_auc_cl"])


def test_the_cli_lists_the_plugin_without_importing_it_or_torch(plugin_site):
    probe = bench_process(plugin_site, code=(
        "import sys; from bench.registry import names; print(','.join(names())); "
        "print(sorted(m for m in ('torch', 'meandist_bench') if m in sys.modules))"))
    assert probe.returncode == 0, probe.stderr
    listed, imported = probe.stdout.splitlines()
    assert listed.split(",")[-1] == "meandist" and "patchcore" in listed.split(",")
    assert imported == "[]"
    assert "meandist" in bench_process(plugin_site, "run", "--help").stdout


def _hand_installed_plugin(site: Path, module: str, source: str, entry_points: str | None = None) -> Path:
    """A detector plugin named `broken`, installed by hand (helpers.hand_installed_plugin)."""
    return hand_installed_plugin(site, module, source, group=GROUP, name="broken", entry_points=entry_points)


REREGISTER = ("import dataclasses\nfrom bench.registry import Int, get, register\nspec = get('patchcore')\n"
              "register(dataclasses.replace(spec, params={**spec.params, 'n_starts': Int(9, 1)}))\n")


@pytest.mark.parametrize("source,expected", [
    ("raise ImportError('needs a package that is not installed')",
     "failed to load: ImportError: needs a package that is not installed"),
    ("import sys\nsys.exit(0)", "failed to load: SystemExit: 0"),
    ("raise KeyboardInterrupt", "failed to load: KeyboardInterrupt"),
    ("X = 1  # registers nothing", "registered no detector named 'broken'"),
    (REREGISTER, "detector 'patchcore' registered twice (it is a built-in detector's name)"),
])
def test_a_broken_plugin_is_one_line_naming_its_distribution_where_it_is_asked_for(plugin_on_path, tiny_root,
                                                                                   tmp_path, capsys, source,
                                                                                   expected):
    """Issue 31 §6: a plugin that raises, exits (sys.exit(0) made every command exit 0 with no output), is
    interrupted (reported as a resumable SIGINT), registers nothing, or re-registers a built-in is one line
    naming its distribution and entry point, for the command that asks for it. In this process: an exit or
    interrupt that escaped would end the test (or the session), not pass it."""
    from bench.cli import main

    plugin_on_path(_hand_installed_plugin(tmp_path / "site", "broken_plugin", source))
    code = main(["run", "--dataset", "synthetic", "--root", str(tiny_root), "--model", "broken", "--weights", "none",
                 "--image-size", "32", "--device", "cpu", "--tasks", "chip", "--out", str(tmp_path / "out.h5")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and "Traceback" not in err, err
    assert err.startswith(f"error: detector plugin 'broken' (distribution broken-plugin, entry point {GROUP}: "
                          "broken = broken_plugin)"), err
    assert expected in err
    assert not (tmp_path / "out.h5").exists()


@pytest.mark.slow(reason="a fresh `python -m bench` imports torch before it reaches the plugin (~5 s idle); the "
                         "same failures in this process are the fast lane's")
def test_a_broken_plugin_asked_for_ends_the_process_with_exit_2_and_one_line(tiny_root, tmp_path):
    """The same through `python -m bench`, for the plugin that exits 0 at import (the process must not)."""
    site = _hand_installed_plugin(tmp_path / "site", "broken_plugin", "import sys\nsys.exit(0)")
    run = bench_process(site, "run", "--dataset", "synthetic", "--root", tiny_root, "--model", "broken",
                 "--weights", "none", "--image-size", "32", "--device", "cpu", "--tasks", "chip",
                 "--out", tmp_path / "out.h5")
    assert run.returncode == 2 and run.stderr.strip().splitlines() == [
        f"error: detector plugin 'broken' (distribution broken-plugin, entry point {GROUP}: broken = broken_plugin) "
        "failed to load: SystemExit: 0"], run.stderr


def test_commands_that_do_not_use_a_broken_plugin_run(plugin_on_path, tiny_root, tmp_path, capsys):
    """With a plugin installed that calls sys.exit(0) at import, `bench run` of a built-in detector ran nothing
    and exited 0; now it runs (the plugin is never imported), and listing every spec warns about the plugin in
    one line and leaves it out."""
    import warnings

    from bench.cli import main
    from bench.registry import specs

    plugin_on_path(_hand_installed_plugin(tmp_path / "site", "broken_plugin", "import sys\nsys.exit(0)"))
    code = main(["run", "--dataset", "synthetic", "--root", str(tiny_root), "--model", "padim", "--weights", "none",
                 "--image-size", "32", "--device", "cpu", "--tasks", "chip", "--workers", "0", "--no-progress",
                 "--out", str(tmp_path / "out.h5")])
    assert code == 0 and (tmp_path / "out.h5").is_file(), capsys.readouterr().err
    assert "broken_plugin" not in sys.modules
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        listed = specs()
    assert "broken" not in listed and "padim" in listed
    (warning,) = [str(w.message) for w in caught if "broken" in str(w.message)]
    assert "detector plugin 'broken' (distribution broken-plugin" in warning and "left out" in warning


def test_a_malformed_entry_points_file_is_one_warning_not_the_end_of_help(tmp_path):
    """A line without `=` in a plugin's entry_points.txt made importlib raise in every command, `run --help`
    included; now it is one warning naming the distribution."""
    site = tmp_path / "site"
    _hand_installed_plugin(site, "broken_plugin", "X = 1", entry_points=f"[{GROUP}]\nbroken\n")
    run = bench_process(site, "run", "--help")
    assert run.returncode == 0 and "--model" in run.stdout, run.stderr
    assert "distribution 'broken-plugin': its entry_points.txt cannot be read" in run.stderr


class _Entry:
    """What importlib.metadata gives for an entry point: a name, a value, a distribution, load()."""

    def __init__(self, name, load):
        self.name, self.value, self.dist, self.load = name, f"{name}_plugin", None, load


def test_an_entry_point_named_like_a_built_in_is_refused_not_checked_on_the_built_in(monkeypatch):
    """An entry point called `patchcore` whose module registers something else passed the check on the
    built-in PatchCore spec."""
    from bench import registry
    from bench.errors import BenchError

    registry.get("patchcore")
    monkeypatch.setattr(registry, "_PLUGIN_ERRORS", {})
    with pytest.raises(BenchError, match="registered no detector named 'patchcore'.*it is a built-in detector's name"):
        registry._load_plugin(_Entry("patchcore", lambda: None))


@pytest.mark.parametrize("change, message", [
    ({"params": "n_features"}, "zz_plugin hyperparameter n_features=0 is not allowed"),
    ({"inputs": "pixels"}, "unknown zz_plugin: inputs 'pixels' (valid: features, images)"),
])
def test_a_plugin_spec_is_checked_at_registration(monkeypatch, change, message):
    """A default outside its own range and an unknown `inputs` kind passed registration and failed later, inside
    a run. The name stays unregistered."""
    import dataclasses

    from bench import registry
    from bench.errors import ConfigError

    spec = dataclasses.replace(registry.get("padim"), name="zz_plugin")
    if "params" in change:
        change = {"params": {**spec.params, "n_features": registry.Int(0, 1)}}
    with pytest.raises(ConfigError, match=re.escape(message)):
        registry.register(dataclasses.replace(spec, **change))
    assert "zz_plugin" not in registry._SPECS


def test_a_built_in_spec_cannot_be_replaced_even_with_its_own_factory():
    """Re-registering `patchcore` with the same factory and another default passed, and moved every PatchCore
    run (and the comparison's `inclad` reference) with it."""
    import dataclasses

    from bench import registry

    spec = registry.get("patchcore")
    changed = dataclasses.replace(spec, params={**spec.params, "n_starts": registry.Int(9, 1)})
    with pytest.raises(RuntimeError, match="'patchcore' registered twice"):
        registry.register(changed)
    assert registry.get("patchcore") is spec
    registry.register(spec)  # the same spec again (a module imported twice) is harmless


def test_entry_points_are_scanned_once_per_environment_and_again_when_a_plugin_comes_or_goes(tmp_path, monkeypatch):
    """The report asks for the plugins once per label (every result file): each call scanned every installed
    distribution's metadata (271 of 309 s of an aggregation of 250 files). They are cached, but a plugin put on
    sys.path, or installed into a folder already on it, and then removed, is still seen each time."""
    import shutil

    from bench import plugins, registry

    scans = []
    real = plugins._scan_entry_points
    monkeypatch.setattr(plugins, "_scan_entry_points", lambda: scans.append(1) or real())
    monkeypatch.setattr(plugins, "_ENTRY_POINTS_CACHE", {})
    assert "broken" not in registry._entry_points()
    registry.names(), registry._entry_points()
    assert len(scans) == 1  # unchanged environment: one scan

    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    assert "broken" not in registry._entry_points()  # a new folder on sys.path: scanned again, nothing there yet
    _hand_installed_plugin(site, "broken_plugin", "X = 1")  # installed into a folder already on sys.path
    assert "broken" in registry._entry_points() and "broken" in registry.names()
    n = len(scans)
    registry._entry_points()["other"] = None  # a caller changing what it got does not change the cache
    assert "other" not in registry._entry_points() and len(scans) == n
    shutil.rmtree(site / "broken_plugin-0.1.dist-info")
    assert "broken" not in registry._entry_points()


@pytest.fixture(scope="module")
def tabular_index(tmp_path_factory) -> Path:
    from bench.tabular.synthetic import generate

    base = tmp_path_factory.mktemp("tabular-plugin")
    root = generate(base / "raw", seed=0, n_normal=120, n_anomal=30)
    run = bench_process(base, "tabular", "index", "--root", root, "--out", base / "index", "--min-normal", 50)
    assert run.returncode == 0, run.stderr
    return base / "index"


@pytest.mark.slow
@pytest.mark.parametrize("source", ["raise ImportError('needs a package that is not installed')",
                                    "import sys\nsys.exit(0)", "raise KeyboardInterrupt"])
def test_a_broken_image_plugin_stops_neither_tabular_runs_nor_aggregate(tabular_index, tmp_path, source):
    """Issue 31 §6: with one broken image plugin installed, `bench tabular run` and `bench aggregate` exited 2
    (or 0 with no output, for sys.exit). They never ask for it: both run, and what lists every detector (the
    tables' labels) warns in one line and leaves the plugin out."""
    site = tmp_path / "site"
    _hand_installed_plugin(site, "broken_plugin", source)
    outputs = tmp_path / "outputs"
    out = outputs / "tabular-synthetic" / "runs" / "iforest.h5"
    run = bench_process(site, "tabular", "run", "--index", tabular_index, "--model", "iforest", "--quick",
                 "--protocol", "ncl", "--out", out)
    assert run.returncode == 0 and out.is_file(), run.stderr
    agg = bench_process(site, "aggregate", "--dataset", "tabular-synthetic", "--outputs", outputs)
    assert agg.returncode == 0, agg.stderr
    assert (outputs / "tabular-synthetic" / "tables").is_dir()
    assert "Traceback" not in run.stderr + agg.stderr
    assert "interrupted" not in run.stderr + agg.stderr  # a plugin's KeyboardInterrupt is not the user's SIGINT
    assert "detector plugin 'broken' (distribution broken-plugin" in agg.stderr and "left out" in agg.stderr

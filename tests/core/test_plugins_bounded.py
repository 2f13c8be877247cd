"""A plugin cannot end, stall or break commands that do not need it (issue 46 §4): a command imports only the
plugin it runs; where every plugin must be imported (a listing of every detector, the report's labels) each
import runs first in a child process with a time limit, so one that calls os._exit(0) or never returns is one
warning and left out; a factory that cannot take its declared parameters is refused at registration."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import REPO, hand_installed_plugin, plugin_env

GROUP = "bench.detectors"
EXITS = "import os\nos._exit(0)"
HANGS = "import time\ntime.sleep(3600)"
# What a listing and a tabular run's option parsing do: every image detector's spec (the report's labels), then
# `tabular run --model iforest` parsed as the CLI does.
LIST_AND_PARSE = ("import warnings\nwarnings.simplefilter('always')\nfrom bench.registry import specs\n"
                  "print('listed', sorted(specs('image')))\nfrom bench.cli import build_parser\n"
                  "a = build_parser().parse_args(['tabular', 'run', '--index', 'x', '--model', 'iforest'])\n"
                  "print('parsed', a.model)\n")


def _run(site: Path, code: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], env={**plugin_env(site), **env}, cwd=REPO,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("source,why", [(EXITS, "its import ended the process (exit status 0)"),
                                        (HANGS, "its import did not return within 3 s")])
def test_a_plugin_that_exits_or_hangs_at_import_is_left_out_of_a_listing(tmp_path, source, why):
    site = hand_installed_plugin(tmp_path / "site", "broken_plugin", source, group=GROUP, name="broken")
    run = _run(site, LIST_AND_PARSE, BENCH_PLUGIN_IMPORT_TIMEOUT="3")
    assert run.returncode == 0, run.stderr
    listed = re.search(r"^listed (.*)$", run.stdout, re.M)
    assert listed and "'patchcore'" in listed.group(1) and "'broken'" not in listed.group(1), run.stdout
    assert "parsed iforest" in run.stdout
    warning = [x for x in run.stderr.splitlines() if "broken" in x]
    assert len(warning) == 1 and "detector plugin 'broken' (distribution broken-plugin" in warning[0]
    assert why in warning[0] and "left out" in warning[0]


def test_a_tabular_run_parses_without_importing_any_plugin(tmp_path):
    """`tabular run --model iforest` checked its choice against every spec, importing every plugin."""
    site = hand_installed_plugin(tmp_path / "site", "marker_plugin", "import sys\nsys.stderr.write('IMPORTED')",
                                 group=GROUP, name="marker")
    run = _run(site, "from bench.cli import build_parser\nimport sys\n"
                     "build_parser().parse_args(['tabular', 'run', '--index', 'x', '--model', 'iforest'])\n"
                     "print('marker_plugin' in sys.modules)")
    assert run.returncode == 0 and run.stdout.strip() == "False" and "IMPORTED" not in run.stderr, run.stderr


def test_the_command_that_asks_for_an_exiting_plugin_exits_2_with_one_line(tmp_path, monkeypatch):
    """In this process: the probe, not the plugin, decides; without it the os._exit would end the test session."""
    from bench import registry
    from bench.errors import BenchError

    site = hand_installed_plugin(tmp_path / "site", "broken_plugin", EXITS, group=GROUP, name="broken")
    monkeypatch.setattr(registry, "_PLUGIN_ERRORS", {})
    monkeypatch.syspath_prepend(str(site))
    with pytest.raises(BenchError, match=r"detector plugin 'broken' .* its import ended the process"):
        registry.get("broken")
    assert "broken_plugin" not in sys.modules


@pytest.mark.slow(reason="two fresh processes that import torch and run a tabular detector")
def test_an_exiting_plugin_stops_neither_a_tabular_iforest_run_nor_aggregate(tmp_path):
    from bench.tabular.synthetic import generate

    from helpers import bench_process

    site = hand_installed_plugin(tmp_path / "site", "broken_plugin", EXITS, group=GROUP, name="broken")
    root = generate(tmp_path / "raw", seed=0, n_normal=120, n_anomal=30)
    assert bench_process(None, "tabular", "index", "--root", root, "--out", tmp_path / "index", "--min-normal",
                         50).returncode == 0
    outputs = tmp_path / "outputs"
    out = outputs / "tabular-synthetic" / "runs" / "iforest.h5"
    run = bench_process(site, "tabular", "run", "--index", tmp_path / "index", "--model", "iforest", "--quick",
                        "--protocol", "ncl", "--out", out)
    assert run.returncode == 0 and out.is_file() and "results:" in run.stdout, run.stderr
    agg = bench_process(site, "aggregate", "--dataset", "tabular-synthetic", "--outputs", outputs)
    assert agg.returncode == 0 and (outputs / "tabular-synthetic" / "tables").is_dir(), agg.stderr
    assert "its import ended the process" in agg.stderr


def _image_factory(extractor, image_size, sigma=1.0):
    return None


@pytest.mark.parametrize("track,factory,expected", [
    ("image", lambda extractor, sigma=1.0: None, "unexpected keyword argument 'image_size'"),
    ("image", lambda extractor, image_size: None, "unexpected keyword argument 'sigma'"),
    ("image", lambda image_size, sigma=1.0: None, "multiple values for argument 'image_size'"),
    ("tabular", lambda extractor, sigma=1.0: None, "missing a required argument: 'extractor'"),
    ("tabular", lambda: None, "unexpected keyword argument 'sigma'"),
])
def test_a_factory_that_cannot_take_its_declared_parameters_is_refused_at_registration(track, factory, expected):
    from bench import registry
    from bench.errors import ConfigError

    spec = registry.ModelSpec(name="zz_signed", label="ZZ", factory=factory,
                              params={"sigma": registry.Float(1.0, 0, 9)},
                              track=track, inputs=registry.INPUTS[track][0])
    with pytest.raises(ConfigError, match=re.escape(expected)):
        registry.register(spec)
    assert "zz_signed" not in registry._SPECS
    fine = dataclasses.replace(spec, factory=_image_factory if track == "image" else (lambda **hparams: None))
    registry.register(fine)
    registry._SPECS.pop("zz_signed")

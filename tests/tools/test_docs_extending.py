"""docs/extending.md's detector example, as a new user meets it: the documented shell commands, run verbatim in a
folder that holds only the example package (no generated data, no staged weights, the shared environment
untouched: the plugin goes into a folder of its own on PYTHONPATH)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _detector_section() -> str:
    text = (REPO / "docs" / "extending.md").read_text()
    section = text[text.index("\n## Your own detector"):]
    return section[:section.index("\n## ", 1)]


def _example_files(section: str) -> dict[str, str]:
    return dict(re.findall(r"^\*\*(\S+)\*\*\n\n```\w*\n(.*?)^```", section, flags=re.M | re.S))


def _shell_block(section: str) -> str:
    """The one fenced block of shell commands: it starts with the install command."""
    commands = re.findall(r"^```\n(pip install .*?)^```", section, flags=re.M | re.S)
    assert len(commands) == 1, "docs/extending.md should show one block of commands that starts with `pip install`"
    return commands[0]


@pytest.mark.slow(reason="installs a package with pip and runs a two-task stream in a fresh `python -m bench` "
                         "(torch import, resnet18 at the paper's input size): about 30 s")
def test_the_documented_commands_run_verbatim_from_a_fresh_folder(tmp_path):
    section = _detector_section()
    package = tmp_path / "meandist"
    package.mkdir()
    for name, content in _example_files(section).items():
        (package / name).write_text(content)
    script = _shell_block(section)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "BENCH_WEIGHTS_DIR")}
    # `python` and `pip` are the environment's, as after `source .venv/bin/activate`; nothing is installed into it
    env.update(HOME=str(tmp_path), PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
               PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path, env=env, text=True,
                          capture_output=True, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    results = list((tmp_path / "outputs").rglob("*.h5"))
    assert len(results) == 1 and "meandist" in results[0].name, results
    assert not (Path(sysconfig.get_paths()["purelib"]) / "meandist_bench.py").exists(), "installed into the shared env"
    assert "ROC-AUC_CL" in done.stdout or "ROC-AUC_CL" in done.stderr


def test_another_input_size_for_a_plugin_names_its_registration_not_inclad(monkeypatch):
    """A detector InCLAD has no row for (the docs' plugin) gets no note about InCLAD's tables."""
    import dataclasses

    import bench.registry as registry
    from bench.cli import paper_image_size

    real_get = registry.get
    plugin = dataclasses.replace(real_get("padim"), name="meandist", label="MeanDist")
    monkeypatch.setattr(registry, "get", lambda name: plugin if name == "meandist" else real_get(name))
    notes: list[str] = []
    assert paper_image_size("meandist", 64, notes.append) == 64
    assert notes == ["note: --image-size 64 differs from MeanDist's registered input size 224"]
    notes.clear()
    assert paper_image_size("padim", 64, notes.append) == 64 and "InCLAD Tables 6-7" in notes[0]

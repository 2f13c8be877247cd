"""`aggregate` removes only what it wrote and publishes one aggregation at a time (issue 46 §2).

A user's files in outputs/<d>/report/ (notes, an older page) and the contents of a folder the report links to are
not the suite's to remove; two aggregations of one dataset with different options must leave the tables, the
manifest and the page of one of them, never a mix."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.cli import main
from bench.io import file_sha256
from helpers import one_error_line
from test_report import write

REPO = Path(__file__).resolve().parents[2]


def _aggregate(outputs, *extra) -> int:
    return main(["aggregate", "--dataset", "synthetic", "--outputs", str(outputs), "--bootstrap", "0",
                 "--figures", "none", *extra])


@pytest.fixture
def outputs(tmp_path):
    out = tmp_path / "outputs"
    for model in ("patchcore", "padim"):
        for protocol in ("cl", "ncl"):
            write(out, model=model, protocol=protocol)
    return out


def test_files_the_suite_did_not_write_survive_aggregate_and_its_own_stale_ones_go(outputs, tmp_path):
    assert _aggregate(outputs) == 0
    report = outputs / "synthetic" / "report"
    notes, older = report / "notes.md", report / "figures" / "poster_2025.png"
    notes.write_text("my notes")
    older.write_bytes(b"an older figure")
    owned = json.loads((report / ".bench-owned.json").read_text())["files"]
    assert "index.html" in owned and "notes.md" not in owned
    # a figure the suite drew last time and no longer makes is recorded as its own: it goes
    (report / "figures" / "curve_gone.png").write_bytes(b"stale")
    outside = tmp_path / "outside.txt"
    outside.write_text("keep")
    record = {"files": [*owned, "figures/curve_gone.png", "../../../outside.txt", str(outside)]}
    (report / ".bench-owned.json").write_text(json.dumps(record))
    # a crafted publication manifest naming a file outside the result set is not followed either
    manifest = outputs / "synthetic" / "tables" / "manifest.json"
    data = json.loads(manifest.read_text())
    data["outputs"]["../../outside.txt"] = "0" * 64
    manifest.write_text(json.dumps(data))
    assert _aggregate(outputs) == 0
    assert notes.read_text() == "my notes" and older.read_bytes() == b"an older figure"
    assert not (report / "figures" / "curve_gone.png").exists()
    assert outside.read_text() == "keep" and (report / "index.html").is_file()


@pytest.mark.parametrize("linked", ["report", "report/figures", "report/tables"])
def test_a_symlinked_report_folder_is_refused_in_one_line_and_its_files_kept(outputs, tmp_path, capsys, linked):
    web = tmp_path / "www"
    web.mkdir()
    (web / "index.html").write_text("the web site's own page")
    (web / "photo.png").write_bytes(b"png")
    folder = outputs / "synthetic" / linked
    folder.parent.mkdir(parents=True, exist_ok=True)
    folder.symlink_to(web, target_is_directory=True)
    assert _aggregate(outputs) == 2
    err = one_error_line(capsys)
    assert "is a symlink" in err and linked in err
    assert sorted(p.name for p in web.iterdir()) == ["index.html", "photo.png"]
    assert (web / "index.html").read_text() == "the web site's own page"
    assert not (outputs / "synthetic" / "tables" / "manifest.json").exists()  # refused before anything is written


# --- two aggregations at once -----------------------------------------------------------------------------------

# `first` stops just before writing its manifest until `go` exists; `second` creates `go` when it finds the
# publication lock taken (then waits for it), or when it exits: without a lock it publishes everything in between,
# with one it publishes after. No timing decides the outcome.
DRIVER = r"""
import atexit, fcntl, sys, time
from pathlib import Path
import bench.report.aggregate as agg
from bench.cli import main

role, outputs, signals, bootstrap = sys.argv[1:5]
go = Path(signals) / "go"
if role == "first":
    real = agg.write_text_atomic
    def pausing(path, text):
        if Path(path).name == "manifest.json":
            (Path(signals) / "paused").touch()
            deadline = time.monotonic() + 300
            while not go.exists():
                if time.monotonic() > deadline:
                    sys.exit("never released")
                time.sleep(0.02)
        real(path, text)
    agg.write_text_atomic = pausing
else:
    atexit.register(go.touch)
    real_flock = fcntl.flock
    def flock(fd, op):
        try:
            real_flock(fd, op | fcntl.LOCK_NB)
        except BlockingIOError:
            go.touch()
            real_flock(fd, op)
    fcntl.flock = flock  # the module bench.io locks through
sys.exit(main(["aggregate", "--dataset", "synthetic", "--outputs", outputs, "--bootstrap", bootstrap,
               "--figures", "none"]))
"""


def _start(role: str, outputs: Path, signals: Path, bootstrap: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", DRIVER, role, str(outputs), str(signals), str(bootstrap)],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow("two fresh interpreters run aggregate")
def test_two_concurrent_aggregates_leave_one_consistent_publication(outputs, tmp_path):
    signals = tmp_path / "signals"
    signals.mkdir()
    first = _start("first", outputs, signals, 0)
    deadline = time.monotonic() + 300
    while not (signals / "paused").exists():
        assert first.poll() is None, first.communicate()
        assert time.monotonic() < deadline, "the first aggregate never reached its manifest"
        time.sleep(0.05)
    second = _start("second", outputs, signals, 20)
    for p in (first, second):
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
    out = outputs / "synthetic"
    manifest = json.loads((out / "tables" / "manifest.json").read_text())
    differing = [n for n, sha in manifest["outputs"].items() if file_sha256(out / n) != sha]
    assert differing == []  # every published file is the one the manifest records
    assert manifest["options"]["bootstrap"] == 20  # the later publication is the one standing
    assert "image_roc_auc_cl_ci_low" in (out / "tables" / "runs.csv").read_text().splitlines()[0]

"""No traceback and no half-written file from `aggregate`, whatever the results hold (issue 46 §4): methods that
tie in every block, task names matplotlib would read as mathtext, a disk that fills while a figure is written."""

from __future__ import annotations

import errno
import io
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from bench.cli import main
from helpers import one_error_line
from test_report import TASKS, write

MODELS = ("patchcore", "padim", "cfa")
ORDERINGS = ("easy_to_hard", "hard_to_easy", "random")  # three blocks: enough for a Friedman test of 3 methods


def _grid(outputs: Path, tasks=TASKS, image=None) -> None:
    for model in MODELS:
        for ordering in ORDERINGS:
            for protocol in ("ncl", "cl"):
                write(outputs, model=model, ordering=ordering, protocol=protocol, tasks=tasks, image=image,
                      pixel=image)


def _aggregate(outputs, *extra) -> int:
    return main(["aggregate", "--dataset", "synthetic", "--outputs", str(outputs), "--bootstrap", "0", *extra])


@pytest.fixture(autouse=True)
def one_process(monkeypatch):
    monkeypatch.setenv("BENCH_REPORT_PROCESSES", "1")  # figures drawn here, where the test patches the writer


@pytest.mark.parametrize("value", [1.0, 0.5])
def test_methods_equal_in_every_block_say_so_and_draw_no_cd_diagram(tmp_path, capsys, value):
    outputs = tmp_path / "outputs"
    n = len(TASKS)
    _grid(outputs, image=np.where(np.tril(np.ones((n, n))) > 0, value, np.nan))
    assert _aggregate(outputs, "--figures", "none") == 0, capsys.readouterr().err
    out = outputs / "synthetic"
    friedman = pd.read_csv(out / "tables/friedman.csv")
    assert len(friedman) == 4 and friedman["p"].isna().all() and friedman["critical_difference"].isna().all()
    assert friedman["note"].str.startswith("no differences to test").all()
    assert not list((out / "report/figures").glob("cd_*"))
    page = (out / "report/index.html").read_text()
    assert "no differences to test" in page and "No critical-difference diagram" in page


def test_methods_that_differ_still_get_their_test_and_diagram(tmp_path, capsys):
    outputs = tmp_path / "outputs"
    _grid(outputs)
    assert _aggregate(outputs, "--figures", "none") == 0, capsys.readouterr().err
    friedman = pd.read_csv(outputs / "synthetic/tables/friedman.csv")
    assert friedman["p"].notna().all()
    assert len(list((outputs / "synthetic/report/figures").glob("cd_*.pdf"))) == 4


MATHTEXT = ("$\\frac{$", "a$b$c", "$x_$", "cost $5 or $6", "\\$ok$")


def test_task_names_with_mathtext_are_drawn_as_plain_text(tmp_path, capsys, monkeypatch):
    drawn = []
    real = Figure.savefig

    def recording(self, target, **kw):
        real(self, target, **kw)
        drawn.append({t.get_text() for t in self.findobj(lambda a: hasattr(a, "get_text"))})

    monkeypatch.setattr(Figure, "savefig", recording)
    outputs = tmp_path / "outputs"
    _grid(outputs, tasks=MATHTEXT[:4])
    assert _aggregate(outputs, "--figures", "png,pdf", "--paper-figures") == 0, capsys.readouterr().err
    out = outputs / "synthetic"
    assert list((out / "figures").glob("heatmap_*.pdf")) and list((out / "report/figures").glob("curve_*.png"))
    labels = set().union(*drawn)
    # the tick labels carry each name escaped: matplotlib shows it as written, dollar signs and all
    assert {t.replace("$", "\\$") for t in MATHTEXT[:4]} <= labels


def _full_disk(monkeypatch, kind: str):
    """Figure.savefig into a file (and the CD diagram's byte copy) write half, then fail as a full disk does."""
    real_savefig, real_write = Figure.savefig, Path.write_bytes

    def savefig(self, target, **kw):
        if isinstance(target, io.BytesIO):
            return real_savefig(self, target, **kw)
        if kind in Path(target).name and kw.get("format") in ("pdf", "png"):
            Path(target).open("wb").write(b"%PDF-1.4 half")
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_savefig(self, target, **kw)

    def write_bytes(self, data):
        if kind in self.name:
            real_write(self, data[:10])
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(self, data)

    monkeypatch.setattr(Figure, "savefig", savefig)
    monkeypatch.setattr(Path, "write_bytes", write_bytes)


@pytest.mark.parametrize("kind", ["heatmap_", "cd_", "curve_"])
def test_a_full_disk_while_writing_a_figure_is_one_line_and_leaves_nothing_half_written(tmp_path, capsys,
                                                                                       monkeypatch, kind):
    outputs = tmp_path / "outputs"
    _grid(outputs)
    out = outputs / "synthetic"
    _full_disk(monkeypatch, kind)
    assert _aggregate(outputs, "--figures", "pdf", "--paper-figures") == 2
    err = one_error_line(capsys)
    assert "cannot write the figure (No space left on device)" in err and kind in err and str(out) in err
    files = [p for p in outputs.rglob("*") if p.is_file()]
    assert not [p for p in files if ".tmp." in p.name]
    assert not [p for p in files if p.suffix in (".pdf", ".png") and p.read_bytes().startswith(b"%PDF-1.4 half")]

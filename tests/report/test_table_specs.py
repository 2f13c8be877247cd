"""Every published table is read off one declared spec (bench/report/specs.py): a metric or column added there
shows in the CSV, the markdown, the LaTeX and the page under one label; Table 2's published layout is its own and
pinned here; yes/no flags are booleans in the frames and text only in the CSV."""

from __future__ import annotations

import dataclasses
import io
import re

import numpy as np
import pandas as pd
import pytest

from bench.report import paper, specs
from bench.report.aggregate import Options, aggregate
from bench.report.collect import collect
from bench.report.table2 import select_methods
from test_report import TASKS, lower, write

QUIET = {"log": lambda *a: None}


@pytest.fixture
def outputs(tmp_path):
    """Two methods × one ordering × both protocols, one seed each: every table has rows, nothing is drawn."""
    out, rng = tmp_path / "outputs", np.random.default_rng(3)
    for model in ("patchcore", "padim"):
        for protocol in ("ncl", "cl"):
            write(out, model=model, protocol=protocol, image=lower(rng, len(TASKS), 0.4),
                  pixel=lower(rng, len(TASKS), 0.4), rng=rng)
    return out


def _published(outputs, name: str) -> str:
    return (outputs / "synthetic" / name).read_text()


def _page(outputs) -> str:
    return _published(outputs, "report/index.html")


def _header_cells(page: str, csv_name: str, title: str = "") -> list[str]:
    """The header of the page's table whose data link is `csv_name` (and whose title starts with `title`)."""
    start = page.index(f'<h3>{title}' if title else f'href="../tables/{csv_name}"')
    start = page.index(f'href="../tables/{csv_name}"', start)
    head = page[start:page.index("</tr>", page.index("<th", start))]
    return re.findall(r"<th>(.*?)</th>", head)


def test_a_metric_added_to_the_per_method_spec_shows_everywhere_under_one_label(outputs, monkeypatch):
    monkeypatch.setattr(specs, "PER_METHOD", dataclasses.replace(
        specs.PER_METHOD, metrics=(*specs.PER_METHOD.metrics, specs.METRIC["forgetting"])))
    aggregate(outputs, "synthetic", Options(bootstrap=0, figure_formats=()), **QUIET)
    pm = pd.read_csv(io.StringIO(_published(outputs, "tables/per_method.csv")))
    fm = pm[pm["metric"] == "forgetting"]
    assert len(fm) == 2 * 4  # two methods × (level, protocol)
    runs = collect(outputs, "synthetic").runs
    ref = runs[(runs["model"] == "padim") & (runs["protocol"] == "cl")]["image_forgetting"].iloc[0]
    got = fm[(fm["model"] == "padim") & (fm["level"] == "image") & (fm["protocol"] == "cl")]["mean"].iloc[0]
    assert got == pytest.approx(ref, abs=1e-12)
    md, tex = _published(outputs, "tables/per_method.md"), _published(outputs, "tables/per_method.tex")
    assert md.count("| FM ↓ |") == 2 and "| forgetting |" not in md
    assert tex.count(r"FM $\downarrow$") == 2
    page = _page(outputs)
    per_method = page[page.index('href="../tables/per_method.csv"'):]
    assert per_method.count("<td>FM ↓</td>") == 8 and "<td>forgetting</td>" not in per_method
    # Table 2 keeps its published metrics: the breakdown's list is its own
    t2 = pd.read_csv(io.StringIO(_published(outputs, "tables/table2.csv")))
    assert tuple(dict.fromkeys(t2["metric"])) == ("roc_auc_cl", "bwt", "bwt_released")
    assert "FM" not in _published(outputs, "tables/table2.md") + _published(outputs, "tables/table2.tex")


def test_a_run_column_added_to_the_spec_is_a_page_column_with_its_label(outputs, monkeypatch):
    monkeypatch.setattr(specs, "RUN_SHOWN", (*specs.RUN_SHOWN,
                                             specs.Column("pixel_forgetting", "pixel FM", kind=specs.Kind.NUMBER)))
    aggregate(outputs, "synthetic", Options(bootstrap=0, figure_formats=()), **QUIET)
    assert _header_cells(_page(outputs), "runs.csv", "Every run")[-2:] == ["pixel BWT", "pixel FM"]


def test_each_published_csv_has_its_specs_columns_in_order(outputs):
    aggregate(outputs, "synthetic", Options(bootstrap=0, figure_formats=()), **QUIET)
    for spec in (specs.TABLE2, specs.PER_METHOD, specs.TIMING, specs.PAPER_COMPARISON, specs.PAPER_TIMING,
                 specs.CL_VS_NCL, specs.FRIEDMAN, specs.FRIEDMAN_RANKS):
        header = _published(outputs, spec.csv).splitlines()[0].split(",")
        assert header == [c.name for c in spec.columns], spec.name
    # the page labels a column as the spec does
    assert _header_cells(_page(outputs), "table2.csv") == [
        "dataset", "ordering", "metric", "level", "protocol", "mean ± std", "runs", "methods"]
    assert _header_cells(_page(outputs), "per_method.csv")[-1] == specs.PER_METHOD.label("n_runs") == "seeds"


def test_table2_published_layout_is_pinned(outputs):
    assert [(m.name, m.label, m.latex) for m in specs.TABLE2.metrics] == [
        ("roc_auc_cl", "ROC-AUC_CL ↑", r"ROC-AUC$_{\mathrm{CL}}$ $\uparrow$"),
        ("bwt", "BWT ↑", r"BWT $\uparrow$"),
        ("bwt_released", "BWT (as released) ↑", r"BWT (as released) $\uparrow$")]
    assert [(c.name, c.label) for c in specs.TABLE2.columns] == [
        ("dataset", "dataset"), ("ordering", "ordering"), ("metric", "metric"), ("level", "level"),
        ("protocol", "protocol"), ("mean", "mean"), ("std", "std"), ("n_runs", "runs"), ("n_methods", "methods"),
        ("n_nan", "NaN runs"), ("r_nan_cells", "undefined R cells")]
    aggregate(outputs, "synthetic", Options(bootstrap=0, figure_formats=()), **QUIET)
    md = _published(outputs, "tables/table2.md").splitlines()
    assert md[0] == "## Table 2: ROC-AUC_CL and BWT"
    assert md[2] == "| dataset | ordering | metric | Image NCL | Image CL | Pixel NCL | Pixel CL |"
    assert [line.split(" | ")[2] for line in md[4:7]] == ["ROC-AUC_CL ↑", "BWT ↑", "BWT (as released) ↑"]
    tex = _published(outputs, "tables/table2.tex")
    assert r"dataset & ordering & metric & \multicolumn{2}{c}{Image-level} & \multicolumn{2}{c}{Pixel-level} \\" in tex


def test_yes_no_flags_are_booleans_in_the_frames_and_yes_no_text_in_the_csv(outputs):
    c = collect(outputs, "synthetic")
    pc = paper.comparison(c.runs, c.details)
    for col in paper.JUDGED:
        assert pc[col].dtype == "boolean"
    assert pc["comparable"].dtype == bool
    assert select_methods(c.runs)["selected"].dtype == bool
    assert paper.timing_comparison(c.runs, c.details)["comparable"].dtype == bool
    frame = pc.head(3).assign(comparable=[True, False, True],
                              in_band=pd.array([True, False, pd.NA], dtype="boolean"))
    written = pd.read_csv(io.StringIO(specs.PAPER_COMPARISON.csv_text(frame)), dtype=str, keep_default_na=False)
    assert list(written["in_band"]) == ["yes", "no", ""] and list(written["comparable"]) == ["True", "False", "True"]


def test_a_computed_column_the_spec_does_not_declare_is_an_error_not_a_dropped_column():
    frame = pd.DataFrame({c.name: [1] for c in specs.TIMING.columns})
    assert specs.TIMING.csv_text(frame).splitlines()[0] == ",".join(c.name for c in specs.TIMING.columns)
    with pytest.raises(ValueError, match=r"timing: declared columns \[\] not computed, computed columns \['extra'\]"):
        specs.TIMING.csv_text(frame.assign(extra=2))
    with pytest.raises(ValueError, match=r"declared columns \['n_runs'\] not computed"):
        specs.TIMING.csv_text(frame.drop(columns="n_runs"))


def test_every_spec_keys_name_a_row_of_its_table():
    keys = specs.csv_keys()
    assert keys["tables/table2.csv"] == ["dataset", "ordering", "metric", "level", "protocol"]
    assert keys["tables/per_method.csv"] == ["dataset", "model", "backbone", "weights", "ordering", "metric",
                                             "level", "protocol"]
    assert len(keys) == len(specs.NAMES)
    with pytest.raises(KeyError, match="table2: no column or metric 'forgetting'"):
        specs.TABLE2.label("forgetting")

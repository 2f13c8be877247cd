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


# ------------------------------------------------------------ every spec: a column added shows in every form

PROBE = specs.Column("probe_value", "Probe value", kind=specs.Kind.NUMBER)
MULTI_TASKS = ("mvtec/a", "btad/b", "mvtec/c")


@dataclasses.dataclass(frozen=True)
class Probed(specs.TableSpec):
    """A spec with PROBE added, and the frame computed with it (what a new column's computation would do)."""

    def frame(self, df: pd.DataFrame) -> pd.DataFrame:
        if not df.columns.empty and PROBE.name not in df.columns:
            df = df.assign(**{PROBE.name: 0.125})
        return super().frame(df)


def _probed(spec: specs.TableSpec) -> Probed:
    fields = {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)}
    return Probed(**{**fields, "values": (*spec.values, PROBE)})


@pytest.fixture(scope="module")
def every_table(tmp_path_factory):
    """Image runs from which every image-track table has rows: three methods × two orderings × both protocols,
    one task-bank run (routing), one failed run (missing), MultiDataset runs (the method selection)."""
    out, rng = tmp_path_factory.mktemp("specs") / "outputs", np.random.default_rng(5)
    for model in ("patchcore", "padim", "cfa"):
        for ordering in ("easy_to_hard", "hard_to_easy"):
            for protocol in ("ncl", "cl"):
                write(out, model=model, protocol=protocol, ordering=ordering, image=lower(rng, len(TASKS), 0.4),
                      pixel=lower(rng, len(TASKS), 0.4), rng=rng)
            write(out, dataset="multi", model=model, ordering=ordering, tasks=MULTI_TASKS, protocol="cl", rng=rng)
    n = len(TASKS)
    counts = np.zeros((n, n, n), dtype=np.int64)
    for i in range(n):
        counts[i, :i + 1, :i + 1] = np.eye(i + 1, dtype=np.int64) * 10
    own = np.where(np.tri(n, dtype=bool), 1.0, np.nan)
    write(out, model="patchcore", ordering="random", protocol="cl",
          extra={"routing/counts": counts, "routing/own_fraction": own})
    write(out, model="padim", protocol="cl", ordering="random", seed=7, status="failed", steps=2,
          attrs={"error": "boom"})
    return out


def _tabular_forms(name: str) -> dict:
    """The tabular tables of one scenario (Naive and MSTE runs with a stream order) as `aggregate` writes them,
    and the page's tabular section."""
    import sys
    from pathlib import Path

    from bench.report import aggregate as ag
    from bench.report import html

    sys.path.insert(0, str(Path(__file__).parents[1] / "tabular"))
    from test_tabular_report import fake_run, strategy, stream

    labels, order = stream(n=300)
    rng = np.random.default_rng(4)
    details = {p: fake_run(strategy(labels, rng, strength=s), labels, order) for p, s in (("ncl", 1.0), ("mste", 2.0))}
    runs = pd.DataFrame([{"track": "tabular", "dataset": "d", "ordering": "o", "model": "m", "backbone": "",
                          "weights": "", "protocol": p, "seed": 0, "run_key": p, "git_commit": "c" * 40,
                          "git_dirty": 0, "config_sha256": "f" * 64} for p in details])
    items = ag._tabular_items(runs, details, Options(bootstrap=20, figure_formats=()), 0)
    texts = {i.name: i.text for i in items if i.text is not None}
    spec = getattr(specs, name)
    section = html.tabular({k: html._read(v) for k, v in texts.items() if k.endswith(".csv")})
    block = next((b for b in section["blocks"] if b.get("csv") == f"{spec.name}.csv"), None) if section else None
    page = "" if block is None else "".join(f"<th>{h}</th>" for h in block["header"])
    md = texts.get(f"tables/{spec.name}.md") or (texts["tables/tabular_table2.md"] if name == "TABULAR_TASKS" else "")
    return {specs.Format.CSV: texts[spec.csv], specs.Format.MARKDOWN: md, specs.Format.HTML: page}


def _image_forms(outputs, name: str) -> dict:
    spec = getattr(specs, name)
    dataset = "multi" if name == "MULTI_SELECTION" else "synthetic"
    aggregate(outputs, dataset, Options(bootstrap=0, figure_formats=()), **QUIET)
    folder = outputs / dataset

    def text(path: str) -> str:
        return (folder / path).read_text() if (folder / path).is_file() else ""

    md = text("tables/paper_comparison.md") if name == "PAPER_TIMING" else text(f"tables/{spec.name}.md")
    return {specs.Format.CSV: text(spec.csv), specs.Format.MARKDOWN: md,
            specs.Format.LATEX: text(f"tables/{spec.name}.tex"), specs.Format.HTML: text("report/index.html")}


def _one_published_time(runs, details, *args) -> pd.DataFrame:
    """A paper_timing row (the synthetic runs have no published time to stand beside)."""
    return pd.DataFrame([{"dataset": "mvtec", "model": "patchcore", "backbone": "wide_resnet50_2",
                          "weights": "imagenet", "phase": "train", "protocol": "ncl", "ours_s": 12.5,
                          "n_orderings": 2, "published": "1m 0s", "published_s": 60.0, "ratio": 0.21,
                          "our_hardware": "cpu", "published_hardware": "A100", "comparable": False,
                          "reason": "other hardware"}])


def _scenario_forms(name: str, outputs) -> dict:
    """The constructed-scenario tables the page publishes itself (report/tables/scenario_*.csv) and their page
    headers, for one released construction of hand-made STE matrices (tests/report/test_html.py)."""
    import json

    from test_html import _candidate

    from bench.report import construction, html
    from bench.tabular.scenario import _finite

    spec, folder = getattr(specs, name), outputs / "d" / "tabular"
    rec = _candidate("natural_day")
    (folder / "candidates/natural_day").mkdir(parents=True)
    (folder / "candidates/natural_day/filtering.json").write_text(json.dumps(_finite(
        {"kept": rec["kept"], "removed": rec["removed"], "passes": rec["passes"]})))
    (folder / "release").mkdir()
    (folder / "release/manifest.json").write_text(json.dumps(_finite(
        {"dataset": "d", "selected_candidate": "natural_day", "tasks": rec["kept"], "candidates": {"natural_day": rec},
         "w_table": {"natural_day": {**rec["family_w"], "mean": rec["mean_w"]}}, "orderings": rec["consensus"]})))
    cons = [{**construction.read(f), "name": construction._name(f, outputs)}
            for f in construction.folders(outputs, "d", pd.DataFrame(columns=["track", "run_key"]), {})]
    own: dict = {}
    section = html.scenario_construction(cons, construction.frames(cons, outputs), own)
    block = next((b for b in section["blocks"] if b.get("csv") == f"{spec.name}.csv"), None)
    page = "" if block is None else "".join(f"<th>{h}</th>" for h in block["header"])
    return {specs.Format.CSV: own[spec.csv], specs.Format.HTML: page}


@pytest.mark.parametrize("name", (*specs.NAMES, *specs.SCENARIO_NAMES))
def test_a_column_added_to_any_spec_shows_in_its_csv_markdown_latex_and_page_under_one_label(
        name, every_table, monkeypatch, tmp_path):
    spec = getattr(specs, name)
    monkeypatch.setattr(specs, name, _probed(spec))
    if name == "RUNS":  # runs.csv's rule: the frame's columns; the page shows those RUN_SHOWN declares
        monkeypatch.setattr(specs, "RUN_SHOWN", (*specs.RUN_SHOWN, PROBE))
    if name == "PAPER_TIMING":
        monkeypatch.setattr(paper, "timing_comparison", _one_published_time)
    tabular = name in ("TABULAR_TABLE2", "VALIDATION", "TABULAR_TASKS", "TABULAR_HEATMAPS")
    forms = (_scenario_forms(name, tmp_path) if name in specs.SCENARIO_NAMES else _tabular_forms(name) if tabular
             else _image_forms(every_table, name))
    header = forms[specs.Format.CSV].splitlines()[0].split(",")
    assert header.count(PROBE.name) == 1, name
    assert set(spec.formats) <= set(forms), name
    for fmt in spec.formats[1:]:  # every rendered form: the label, never the CSV name
        shown = forms[fmt]
        assert PROBE.label in shown, (name, fmt)
        assert PROBE.name not in shown.replace(f"{PROBE.name}.", ""), (name, fmt)
    if specs.Format.HTML in spec.formats:
        assert f"<th>{PROBE.label}</th>" in forms[specs.Format.HTML], name


def test_every_spec_declares_its_columns_once_with_a_label():
    for spec in (*specs.all_specs(), *(getattr(specs, n) for n in specs.SCENARIO_NAMES)):
        names = [c.name for c in spec.columns]
        assert len(names) == len(set(names)) and all(c.label for c in spec.columns), spec.name
        assert spec.variable or len(spec.columns) > len(spec.keys), spec.name  # keys only: runs.csv's rule alone
        assert spec.formats[0] is specs.Format.CSV, spec.name


def test_the_tabular_table2_published_layout_is_pinned():
    from bench.report import tabular as tb

    assert [(c.name, c.label) for c in specs.TABULAR_TABLE2.keys] == [
        ("dataset", "Scenario"), ("ordering", "Ordering"), ("model", "Model"), ("metric", "Metric"),
        ("protocol", "Strategy")]
    assert tb.METRICS == ("roc_auc_cl", "npr_auc_cl", "ap_cl", "random_ap_cl", "fm", "fm_released")
    forms = _tabular_forms("TABULAR_TABLE2")
    md = forms[specs.Format.MARKDOWN].splitlines()
    assert md[0] == "# Tabular Table 2"
    assert md[2] == ("| Scenario | Ordering | Model | Metric | Naive | Cumulative (warm) | Cumulative (fresh) | MSTE "
                     "| Replay |")
    assert [line.split(" | ")[3] for line in md[4:10]] == [
        "ROC-AUC_CL", "nPR-AUC_CL", "AP_CL", "AP_CL of a random ranking", "FM (Chaudhry, last step)",
        "FM (CAD 675a9c9 formula, lower triangle)"]


def test_a_column_added_to_the_assembly_runs_spec_shows_in_its_csv_markdown_and_page(monkeypatch):
    from bench.assembly import page, report
    from bench.assembly import specs as assembly_specs

    row = {c.name: {specs.Kind.TEXT: "x", specs.Kind.NUMBER: 0.5, specs.Kind.COUNT: 3,
                    specs.Kind.FLAG: False}[c.kind] for c in assembly_specs.RUNS.columns}
    probed = _probed(assembly_specs.RUNS)
    for module in (assembly_specs, report, page):
        monkeypatch.setattr(module, "RUNS", probed)
    df = probed.frame(pd.DataFrame([row]))
    assert probed.csv_text(df).splitlines()[0].split(",").count(PROBE.name) == 1
    md = report.run_markdown(df)
    assert md.splitlines()[0] == f"# {assembly_specs.RUNS.title}" and f"| {PROBE.label} |" in md
    assert "| held-out records |" in md and PROBE.name not in md
    header = page.run_section(df)["blocks"][0]["header"]
    assert header[-1] == PROBE.label and header[4] == assembly_specs.RUNS.label("test_records")


def test_a_frame_renders_as_markdown_with_one_missing_mark_and_its_digits():
    """render.frame_markdown: the markdown of the assembly analyses, runs, audit and scenario rankings. Floats to
    the digits asked (per column where given, or significant figures), every missing or non-finite value as the
    one mark render.MISSING, integers, flags and text as they are."""
    from bench.report.render import MISSING, frame_markdown

    df = pd.DataFrame({"name": ["a", "b"], "n": [3, 4], "p": [0.123456, float("nan")],
                       "rank": [1.5, float("inf")], "ok": [True, False]})
    assert frame_markdown(df, column_digits={"rank": 1}) == [
        "| name | n | p | rank | ok |", "|---|---|---|---|---|",
        "| a | 3 | 0.1235 | 1.5 | True |", f"| b | 4 | {MISSING} | {MISSING} | False |"]
    assert frame_markdown(df[["p"]].astype(object).fillna(pd.NA), 2, significant=True)[2:] == ["| 0.12 |",
                                                                                             f"| {MISSING} |"]

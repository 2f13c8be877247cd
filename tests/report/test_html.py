"""The static HTML report (bench/report/html.py): what it shows equals the published CSVs, it lists what is
missing, every image and link resolves, and a real browser (headless Chromium) renders it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bench.metrics import normalized_pr_auc, roc_auc
from bench.report.aggregate import Options, aggregate
from bench.report.bootstrap import run_intervals as _intervals
from test_report import TASKS, write

MODELS = ("patchcore", "padim", "cfa")
ORDERINGS = ("easy_to_hard", "hard_to_easy", "random")
# the heatmaps' PDFs cost time and show nothing new here; the report's paper figures are drawn (`make figures`), so
# the browser test resolves their links too
FAST = Options(bootstrap=200, figure_formats=("png",), paper_figures=True)
ERROR = "Traceback (most recent call last):\n  ...\nRuntimeError: CUDA out of memory"


def _scored(rng, gap: float) -> tuple[dict, np.ndarray, np.ndarray]:
    """Per-image scores of a 4-task run (8 normal, 6 anomalous test images per task) and the R matrices they give."""
    n, labels = len(TASKS), np.r_[np.zeros(8, np.int8), np.ones(6, np.int8)]
    image, npr = np.full((n, n), np.nan), np.full((n, n), np.nan)
    step, task, lab, val = [], [], [], []
    for i in range(n):
        for j in range(i + 1):
            v = rng.normal(size=labels.size) + gap * labels * (1 - 0.1 * (i - j))
            step += [i] * labels.size
            task += [j] * labels.size
            lab.append(labels)
            val.append(v)
            image[i, j], npr[i, j] = roc_auc(labels, v), normalized_pr_auc(labels, v)[0]
    extra = {"scores/step": np.array(step, np.int16), "scores/task": np.array(task, np.int16),
             "scores/label": np.concatenate(lab), "scores/value": np.concatenate(val),
             "R/image_npr_auc": npr, "memory/state_bytes": np.arange(1, n + 1) * 2_000_000}
    return extra, image, npr


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """3 models × 3 orderings × NCL/CL with per-image scores (so every interval is drawn), one failed and one
    running run; aggregated with 200 resamples. Returns (outputs, dataset folder, page)."""
    outputs = tmp_path_factory.mktemp("html") / "outputs"
    rng = np.random.default_rng(11)
    for m, model in enumerate(MODELS):
        for ordering in ORDERINGS:
            for protocol in ("ncl", "cl"):
                extra, image, _ = _scored(rng, 0.8 + 0.4 * m + (0.3 if protocol == "cl" else 0))
                if model == "cfa":
                    extra["train/loss"] = np.sort(rng.uniform(size=(len(TASKS), 3)))[:, ::-1]
                write(outputs, model=model, protocol=protocol, ordering=ordering, image=image, extra=extra, rng=rng)
    write(outputs, model="patchcore", protocol="cl", ordering="random", seed=7, status="failed", steps=2,
          attrs={"error": ERROR})
    write(outputs, model="padim", protocol="ncl", ordering="random", seed=8, status="running", steps=1)
    aggregate(outputs, "synthetic", FAST, log=lambda *_: None)
    out = outputs / "synthetic"
    return outputs, out, out / "report" / "index.html"


class Page(HTMLParser):
    """Tables (the CSV each links, header, rows of (text, data-value)), every src/href, every id."""

    def __init__(self):
        super().__init__()
        self.tables, self.refs, self.ids, self.images = [], [], set(), []
        self._csv, self._row, self._cell = None, None, None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.add(a["id"])
        for key in ("src", "href"):
            if key in a:
                self.refs.append(a[key])
        if tag == "img":
            self.images.append(a["src"])
        if tag == "a" and a.get("class") == "csv":
            self._csv = a["href"]
        elif tag == "table" and "heat" not in (a.get("class") or ""):
            self.tables.append({"csv": self._csv, "header": [], "rows": []})
            self._csv = None
        elif tag == "tr" and self.tables:
            self._row = []
        elif tag in ("td", "th") and self._row is not None:
            self._cell = [tag, "", a.get("data-value")]

    def handle_data(self, data):
        if self._cell is not None:
            self._cell[1] += data

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self._row.append(self._cell)
            self._cell = None
        elif tag == "tr" and self._row is not None:
            t = self.tables[-1]
            if all(c[0] == "th" for c in self._row) and not t["header"]:
                t["header"] = [c[1] for c in self._row]
            else:
                t["rows"].append([(c[1], c[2]) for c in self._row])
            self._row = None


def parse(page: Path) -> Page:
    p = Page()
    p.feed(page.read_text())
    return p


def table_of(page: Page, csv: str, title_start: int = 0) -> dict:
    found = [t for t in page.tables if t["csv"] == f"../tables/{csv}"]
    assert found, f"no table links {csv}"
    return found[title_start]


def test_report_numbers_equal_the_csv_tables(report):
    """Each run's ROC-AUC_CL, BWT (both forms) and FM with their intervals, each Table 2 cell and each test's p
    on the page are the published CSV cells: data-value carries the CSV text digit for digit, the shown text is
    it rounded to three decimals (intervals as [low, high])."""
    _, out, page = report
    p = parse(page)
    runs = pd.read_csv(out / "tables/runs.csv", dtype=str, keep_default_na=False)
    shown = table_of(p, "runs.csv", 2)  # after "what ran" and "provenance": the per-run table
    assert len(shown["rows"]) == len(runs)
    for (col, head) in (("image_roc_auc_cl", "image ROC-AUC_CL [95 % CI]"), ("image_bwt", "image BWT [95 % CI]"),
                        ("image_bwt_released", "image BWT (as released) [95 % CI]"),
                        ("image_forgetting", "image FM [95 % CI]")):
        k = shown["header"].index(head)
        for row, csv_row in zip(shown["rows"], runs.to_dict("records")):
            text, value = row[k]
            assert value == csv_row[col]
            lo, hi = float(csv_row[f"{col}_ci_low"]), float(csv_row[f"{col}_ci_high"])
            assert text == f"{float(value):.3f} [{lo:.3f}, {hi:.3f}]"
            assert lo <= hi
    t2 = pd.read_csv(out / "tables/table2.csv", dtype=str, keep_default_na=False)
    shown = table_of(p, "table2.csv")
    k = shown["header"].index("mean ± std")
    assert [row[k][1] for row in shown["rows"]] == list(t2["mean"])
    for row, r in zip(shown["rows"], t2.to_dict("records")):
        assert row[k][0] == f"{float(r['mean']):.3f} ± {float(r['std']):.3f}"
    fr = pd.read_csv(out / "tables/friedman.csv", dtype=str, keep_default_na=False)
    shown = table_of(p, "friedman.csv")
    assert [row[shown["header"].index("p")][1] for row in shown["rows"]] == list(fr["p"])
    tests = [row[shown["header"].index("test")][0] for row in shown["rows"]]
    assert all("Friedman" in t and "3 blocks" in t and "Nemenyi" in t for t in tests)
    assert all(f"correction: {c}" in t for t, c in zip(tests, fr["correction"])) and len(tests) == len(fr)
    w = table_of(p, "cl_vs_ncl.csv")
    assert all("Wilcoxon" in row[w["header"].index("test")][0] and "Holm" in row[w["header"].index("test")][0]
               for row in w["rows"])
    assert all(row[w["header"].index("note")][0].startswith("too few blocks (3)") for row in w["rows"])


def test_report_lists_missing_and_failed_runs_with_their_last_error_line(report):
    _, out, page = report
    missing = pd.read_csv(out / "tables/missing.csv", dtype=str, keep_default_na=False)
    shown = table_of(parse(page), "missing.csv")
    assert sorted(r[0][0] for r in shown["rows"]) == sorted(missing["path"]) and len(missing) == 2
    by_status = {r[1][0]: r for r in shown["rows"]}
    assert set(by_status) == {"failed", "running"}
    assert by_status["failed"][-1][0] == "RuntimeError: CUDA out of memory"
    assert by_status["failed"][2][0] == "2/4" and by_status["running"][2][0] == "1/4"


def test_every_image_and_link_of_the_report_resolves(report):
    """Relative src/href point at files that exist (CSVs, PNG and PDF figures), #anchors at ids on the page;
    nothing points outside (no http, no CDN)."""
    _, out, page = report
    p = parse(page)
    assert p.images and any("cd_image_cl.png" in s for s in p.images)  # the critical-difference diagram is drawn
    for ref in p.refs:
        assert "://" not in ref and not ref.startswith("//"), ref
        if ref.startswith("#"):
            assert ref[1:] in p.ids, ref
        else:
            assert (page.parent / ref).is_file(), ref
    for fmt in ("png", "pdf"):
        assert (out / f"report/figures/cd_image_cl.{fmt}").stat().st_size > 1000


def _section(html: str, sid: str) -> str:
    start = html.index(f'<section id="{sid}">')
    return html[start:html.index("</section>", start)]


def test_every_published_csv_is_linked_and_each_table_links_its_own(report):
    """Every CSV `aggregate` wrote (tables/*.csv) and every CSV the report wrote (report/tables/*.csv) is linked
    from the page; the heatmap values are linked beside the heatmaps, and the Friedman ranks are a table of their
    own that links friedman_ranks.csv and shows each of its rows."""
    _, out, page = report
    p, html = parse(page), page.read_text()
    refs = set(p.refs)
    for csv in sorted((out / "tables").glob("*.csv")):
        assert f"../tables/{csv.name}" in refs, csv.name
    for csv in sorted((out / "report/tables").glob("*.csv")):
        assert f"tables/{csv.name}" in refs, csv.name
    assert 'href="../tables/heatmaps.csv"' in _section(html, "heatmaps")
    ranks = pd.read_csv(out / "tables/friedman_ranks.csv", dtype=str, keep_default_na=False)
    shown = table_of(p, "friedman_ranks.csv")
    assert len(ranks) and [row[shown["header"].index("mean rank")][1] for row in shown["rows"]] == list(
        ranks["mean_rank"])


def test_regenerating_rewrites_only_what_changed(report, tmp_path, monkeypatch):
    """A second aggregation of the same files rewrites no figure and no report file (and drops a stale one);
    after one more run only the heatmaps of its ordering × protocol are drawn again (aggregate's
    figure_digests), the page is remade, only the new run is bootstrapped (the others' intervals are read back
    from runs.csv), and `make verify`, which recomputes every interval, finds nothing different."""
    import bench.report.aggregate as agg

    calls = []
    monkeypatch.setattr(agg, "run_intervals", lambda *a: calls.append(a) or _intervals(*a))
    outputs, _, _ = report
    copy = tmp_path / "outputs"
    shutil.copytree(outputs, copy)
    out = copy / "synthetic"
    stale = out / "report/figures/cd_old.png"  # one the suite drew and recorded as its own, no longer made
    stale.write_bytes(b"x")
    record = out / "report/.bench-owned.json"
    owned = json.loads(record.read_text())
    record.write_text(json.dumps({"files": [*owned["files"], "figures/cd_old.png"]}))
    mutable = {"report/figures/cd_old.png", "report/.bench-owned.json"}

    def stamps():
        return {f.relative_to(out).as_posix(): f.stat().st_mtime_ns
                for d in ("report", "figures") for f in (out / d).rglob("*") if f.is_file()}

    before = {k: v for k, v in stamps().items() if k not in mutable}
    aggregate(copy, "synthetic", FAST, log=lambda *_: None)
    assert not stale.exists() and {k: v for k, v in stamps().items() if k not in mutable} == before
    assert json.loads(record.read_text()) == owned
    extra, image, _ = _scored(np.random.default_rng(5), 2.0)
    write(copy, model="cfa", protocol="cl", ordering="random", seed=1, image=image, extra=extra)
    aggregate(copy, "synthetic", FAST, log=lambda *_: None)
    assert len(calls) == 1
    monkeypatch.undo()
    assert agg.verify(copy, "synthetic", log=lambda *_: None) == []
    changed = {k for k, v in stamps().items() if before.get(k) != v}
    assert {k for k in changed if k.startswith("figures/")} == {"figures/heatmap_synthetic_random_cl_image.png",
                                                               "figures/heatmap_synthetic_random_cl_pixel.png"}
    assert "report/index.html" in changed


def test_all_writes_an_index_of_every_result_set(report, tmp_path):
    outputs, _, _ = report
    copy = tmp_path / "outputs"
    shutil.copytree(outputs, copy)
    aggregate(copy, "all", Options(bootstrap=0, figure_formats=()), log=lambda *_: None)
    page = copy / "all/report/index.html"
    refs = parse(page).refs
    assert "../../synthetic/report/index.html" in refs
    assert all((page.parent / r).is_file() for r in refs if not r.startswith("#"))


# ------------------------------------------------------------ a real browser

def _chromium() -> str:
    """The headless browser, or skip (fail under BENCH_REQUIRE_CHROMIUM=1, as CI sets after installing it)."""
    found = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
    if found is None:
        message = "headless Chromium not found (Debian: apt-get install chromium)"
        if os.environ.get("BENCH_REQUIRE_CHROMIUM") == "1":
            pytest.fail(f"BENCH_REQUIRE_CHROMIUM=1 but {message}")
        pytest.skip(message)
    return found


def _browser(chromium: str, *args: str) -> subprocess.CompletedProcess:
    flags = ["--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
             "--disable-extensions", "--allow-file-access-from-files", "--virtual-time-budget=10000"]
    return subprocess.run([chromium, *flags, *args], capture_output=True, text=True, timeout=180)


HARNESS = """<!DOCTYPE html><html><body><iframe id="f" src="{url}" width="1400" height="900"></iframe>
<pre id="out">pending</pre><script>
document.getElementById("f").addEventListener("load", function () {{
  var doc = this.contentDocument, bad = [];
  for (var i = 0; i < doc.images.length; i++) {{
    var im = doc.images[i];
    if (!(im.complete && im.naturalWidth > 0)) bad.push(im.getAttribute("src"));
  }}
  document.getElementById("out").textContent = JSON.stringify({{images: doc.images.length, broken: bad,
    title: doc.title, scripts: doc.scripts.length}});
}});</script></body></html>"""


@pytest.mark.slow(reason="starts headless Chromium twice (~10 s idle); the fast lane checks the page by parsing it")
def test_headless_chromium_renders_the_report(report, tmp_path):
    """Chromium loads the page with no console message (the page has no script, so any message is an error),
    decodes every image (checked inside the browser, from a harness page that reads the report's DOM), and the
    screenshot is not blank. The screenshot is kept: under $BENCH_TEST_ARTEFACTS when set (CI), else tmp_path."""
    chromium = _chromium()
    _, _, page = report
    shot = tmp_path / "report.png"
    done = _browser(chromium, "--enable-logging=stderr", "--v=0", "--window-size=1400,2400",
                    f"--screenshot={shot}", page.as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line]
    assert console == [], console
    harness = tmp_path / "harness.html"
    harness.write_text(HARNESS.format(url=page.as_uri()))
    dom = _browser(chromium, "--dump-dom", harness.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    result = json.loads(dom.stdout.split('<pre id="out">', 1)[1].split("</pre>", 1)[0])
    assert result == {"images": len(parse(page).images), "broken": [], "title": "bench report: synthetic",
                      "scripts": 0}
    from PIL import Image

    with Image.open(shot) as im:
        pixels = np.asarray(im.convert("RGB"), dtype=float)
    assert pixels.shape[:2] == (2400, 1400)
    assert pixels.std() > 20 and len(np.unique(pixels.reshape(-1, 3), axis=0)) > 200  # text, tables, colours
    keep = os.environ.get("BENCH_TEST_ARTEFACTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(keep) / "report-screenshot.png")


# ------------------------------------------------------------ the tabular track's scenario construction

def _candidate(name: str) -> dict:
    """A candidate's record as bench.tabular.scenario.evaluate_candidate makes it (FC1–FC5 on hand-made STE
    matrices of two models, orderings, W, Borda), without running the models: task t3 is no better than a random
    ranking on its own test set, so FC1 removes it in pass 1."""
    from bench.tabular.filtering import iterative_filter
    from bench.tabular.orderings import ORDERINGS, concordance, model_orderings

    tasks = ["t0", "t1", "t2", "t3"]
    rng = np.random.default_rng(3)
    M = np.stack([np.clip(0.55 + 0.1 * rng.uniform(size=(4, 4)) + np.diag([0.4, 0.35, 0.3, -0.1]), 0, 1)
                  for _ in range(2)])
    filt = iterative_filter(M, tasks)
    keep, kept = filt["kept_index"], filt["kept"]
    per_model = {m: model_orderings(M[f][np.ix_(keep, keep)]) for f, m in enumerate(("iforest", "autoencoder"))}
    conc = concordance(per_model)
    return {"candidate": name, "tasks": tasks, "kept": kept, "removed": filt["removed"], "passes": filt["passes"],
            "ste": {m: M[f].tolist() for f, m in enumerate(per_model)}, "family_w": conc["family_w"],
            "w": conc["w"], "mean_w": conc["mean_w"],
            "model_orderings": {m: {o: [kept[i] for i in per_model[m][o]] for o in ORDERINGS} for m in per_model},
            "consensus": {o: [kept[i] for i in conc["consensus"][o]] for o in ORDERINGS},
            "borda_points": {o: dict(zip(kept, conc["borda_points"][o])) for o in ORDERINGS}}


def test_report_shows_the_constructed_scenarios_before_and_after_a_release(report, tmp_path):
    """A construction that stopped after filtering (filtering.json only) is shown as such, each task kept or
    removed with the pass and criterion that removed it; once released, W per family and the orderings with
    their Borda points are shown too. Every shown cell is its CSV's (report/tables/scenario_*.csv)."""
    from bench.tabular.scenario import _finite

    outputs, _, _ = report
    copy = tmp_path / "outputs"
    shutil.copytree(outputs, copy)
    folder = copy / "synthetic" / "tabular"
    rec = _candidate("natural_day")
    assert rec["removed"] == ["t3"] and rec["passes"][0]["fc1"][3]  # what the fixture plants
    (folder / "candidates/natural_day").mkdir(parents=True)
    (folder / "candidates/natural_day/filtering.json").write_text(json.dumps(_finite(
        {"kept": rec["kept"], "removed": rec["removed"], "passes": rec["passes"]})))
    quick = Options(bootstrap=0, figure_formats=())
    aggregate(copy, "synthetic", quick, log=lambda *_: None)
    page = copy / "synthetic/report/index.html"
    html = page.read_text()
    assert "synthetic/tabular: no release" in html
    p = parse(page)
    shown = [t for t in p.tables if t["csv"] == "tables/scenario_tasks.csv"][0]
    csv = pd.read_csv(page.parent / "tables/scenario_tasks.csv", dtype=str, keep_default_na=False)
    status = {row[2][0]: row[3] for row in shown["rows"]}
    assert status["t3"][0].startswith("removed in pass 1 by FC1") and status["t3"][1] == "removed"
    assert status["t0"] == ("kept", "kept")
    assert [row[3][1] for row in shown["rows"]] == list(csv["status"])
    assert not any(t["csv"] == "tables/scenario_w.csv" for t in p.tables)  # no W before a release

    manifest = {"dataset": "synthetic", "selected_candidate": "natural_day", "tasks": rec["kept"],
                "w_table": {"natural_day": {**rec["family_w"], "mean": rec["mean_w"]}},
                "candidates": {"natural_day": rec}, "orderings": rec["consensus"]}
    (folder / "release").mkdir()
    (folder / "release/manifest.json").write_text(json.dumps(_finite(manifest)))
    aggregate(copy, "synthetic", quick, log=lambda *_: None)
    p = parse(page)
    assert "no release" not in page.read_text()
    w = [t for t in p.tables if t["csv"] == "tables/scenario_w.csv"][0]
    k = w["header"].index("W mean")
    assert float(w["rows"][0][k][1]) == pytest.approx(rec["mean_w"]) and "(selected)" in w["rows"][0][1][0]
    orders = [t for t in p.tables if t["csv"] == "tables/scenario_orderings.csv"][0]
    borda = {r[2][0]: r for r in orders["rows"] if r[3][0] == "consensus (Borda)"}
    smooth = rec["consensus"]["smooth_drift"]
    assert borda["smooth_drift"][5][0] == " → ".join(smooth)
    points = rec["borda_points"]["smooth_drift"]
    assert borda["smooth_drift"][6][0] == " ".join(f"{t}:{points[t]:g}" for t in smooth)
    for ref in parse(page).refs:
        if not ref.startswith("#"):
            assert (page.parent / ref).is_file(), ref


def test_every_curve_of_the_report_is_also_a_png_and_a_pdf_with_its_values(report):
    """Each inline curve (R[i, j] over steps, memory, training loss) links a PNG, a PDF and the CSV of its values;
    the loss curve's values are the mean training loss of the method's runs."""
    _, out, page = report
    p = parse(page)
    pngs = [r for r in p.refs if r.startswith("figures/curve_") and r.endswith(".png")]
    assert any(r.endswith("_loss.png") for r in pngs) and any(r.endswith("_forgetting.png") for r in pngs)
    assert any(r.endswith("_memory.png") for r in pngs)
    assert page.read_text().count("<svg") == len(pngs)  # one pair of files per drawn curve
    for r in pngs:
        assert (page.parent / r).stat().st_size > 1000 and (page.parent / r[:-4]).with_suffix(".pdf").is_file()
    values = pd.read_csv(page.parent / "tables/curves.csv")
    loss = values[values["figure"].str.contains("_cfa_") & values["figure"].str.endswith("_loss")]
    assert loss["figure"].nunique() == len(ORDERINGS) * 2
    assert len(loss) == len(TASKS) * 3 * loss["figure"].nunique()  # every epoch of every step


def test_timing_ratios_name_both_machines_beside_them():
    """Each ratio of ours / published stands between the two machines it compares: ours (the row's
    our_hardware) and the paper's (bench.report.paper.PAPER_HARDWARE), in the columns next to it."""
    from bench.report import html, paper

    columns = ["dataset", "model", "backbone", "weights", "phase", "protocol", "ours_s", "n_orderings",
               "published", "published_s", "ratio", "our_hardware", "published_hardware", "comparable", "reason"]
    rows = [["mvtec", "patchcore", "wide_resnet50_2", "IMAGENET1K_V1", "train", "ncl", "12.5", "3", "0:25",
             "25.0", "0.5", "NVIDIA H200 (1 host)", paper.PAPER_HARDWARE, "True", ""],
            ["mvtec", "padim", "wide_resnet50_2", "IMAGENET1K_V1", "train", "cl", "90.0", "3", "1:00", "60.0",
             "1.5", "cpu (2 hosts)", paper.PAPER_HARDWARE, "False", "stream: not the published one"]]
    frame = pd.DataFrame(rows, columns=columns)
    section = html.timing({"tables/paper_timing.csv": frame, "tables/timing.csv": frame})
    shown = next(b for b in section["blocks"] if b["kind"] == "table" and b["csv"] == "paper_timing.csv")
    k = shown["header"].index("ratio")
    for row, want in zip(shown["rows"], rows):
        beside = [c["text"] for c in row[k - 1:k + 3]]
        assert row[k]["value"] == want[10]
        assert want[11] in beside and paper.PAPER_HARDWARE in beside, beside


def _comparison_row(**kw) -> dict:
    from bench.report.paper import COMPARISON_COLUMNS

    row = dict.fromkeys(COMPARISON_COLUMNS, "")
    row.update(dataset="mvtec", ordering="easy_to_hard", level="image", protocol="cl", pool="entries",
               n_pooled="16", comparable="True", metric="roc_auc_cl")
    row.update({k: str(v) for k, v in kw.items()})
    return row


def test_every_compared_cell_of_table2_is_coloured_by_its_finding_with_the_reason_on_hover_and_in_text():
    """Inside the band, within one SE, outside, not comparable: the cells of a row that are compared (ours, ours
    as released, published, difference, verdict) all carry the finding's class and its reason as a title, and
    every reason is also a numbered note under the table that the verdict cites. A BWT row is judged as
    released (the form the published BWT was computed in), not by its Eq. 2 columns."""
    from bench.report import html

    rows = [_comparison_row(ours="0.801", published_mean="0.8", published_std="0.02", difference="0.001",
                            in_band="yes", within_se="yes"),
            _comparison_row(ours="0.83", published_mean="0.8", published_std="0.02", difference="0.03",
                            in_band="no", within_se="no", ordering="hard_to_easy"),
            _comparison_row(metric="bwt", ours="-0.2", ours_released="-0.021", published_mean="-0.02",
                            published_std="0.004", difference="-0.18", difference_released="-0.001",
                            in_band="no", in_band_released="yes", within_se="no", within_se_released="yes"),
            _comparison_row(metric="bwt", ours="-0.05", ours_released="-0.025", published_mean="-0.02",
                            published_std="0.008", difference="-0.03", difference_released="-0.005",
                            in_band="no", in_band_released="no", within_se="no", within_se_released="yes",
                            ordering="random"),
            _comparison_row(ours="0.9", comparable="False", reason="stream: not the published one",
                            protocol="ncl")]
    frame = pd.DataFrame(rows)
    section = html.comparison({"tables/paper_comparison.csv": frame})
    shown = next(b for b in section["blocks"] if b["kind"] == "table" and b["csv"] == "paper_comparison.csv")
    compared = [shown["header"].index(h) for h in ("ours", "ours (BWT as released)", "published", "difference",
                                                   "verdict")]
    notes = " ".join(b["text"] for b in section["blocks"] if b["kind"] == "p")
    want = ["inside", "outside", "inside", "within-se", "not-comparable"]
    for row, cls in zip(shown["rows"], want):
        titles = {row[k]["title"] for k in compared}
        assert all(cls in row[k]["cls"].split() for k in compared), (cls, [row[k]["cls"] for k in compared])
        assert len(titles) == 1 and "" not in titles
        reason = titles.pop()
        number = notes.split(reason)[0].rsplit("[", 1)[1].split("]")[0]  # the note "[n] … reason"
        assert f"[{number}]" in row[compared[-1]]["text"]
    assert "stream: not the published one" in notes


def test_each_method_shows_its_own_heatmap_as_png_and_pdf_without_per_method_heatmaps(report):
    """aggregate ran without --per-method-heatmaps (figures/ holds only the means over methods), yet every
    method × ordering × protocol of the page links its own R heatmap as a PNG and a PDF, and the values it was
    drawn from (report/tables/method_heatmaps.csv) are that method's R/image averaged over its runs' files."""
    from bench.report.html import _slug
    from bench.results import read_run

    outputs, out, page = report
    assert not [f for f in (out / "figures").glob("heatmap_*") if "patchcore" in f.name]  # no per-method figure
    runs = pd.read_csv(out / "tables/runs.csv", dtype=str, keep_default_na=False)
    groups = runs.groupby(["model", "backbone", "weights", "ordering", "protocol"])
    refs = set(parse(page).refs)
    values = pd.read_csv(page.parent / "tables/method_heatmaps.csv")
    assert values["figure"].nunique() == groups.ngroups == 18
    for (model, backbone, weights, ordering, protocol), g in groups:
        stem = "heatmap_" + "_".join(_slug(x) for x in ("synthetic", model, backbone, weights, ordering, protocol,
                                                          "image"))
        for fmt in ("png", "pdf"):
            assert f"figures/{stem}.{fmt}" in refs, stem
            assert (page.parent / f"figures/{stem}.{fmt}").stat().st_size > 1000
        R = np.mean([read_run(outputs / p)["R/image"] for p in g["path"]], axis=0)  # paths under outputs/
        mine = values[values["figure"] == stem]
        assert len(mine) == R.shape[0] * (R.shape[0] + 1) // 2
        for r in mine.itertuples():
            assert r.value == pytest.approx(R[r.i, r.j], rel=1e-12) and r.n_runs == len(g)


def test_without_paper_figures_the_page_shows_figures_inline_and_links_only_current_files(report, tmp_path):
    """`make aggregate` (no --paper-figures) draws no per-method PNG or PDF: the page shows every method's heatmap
    and curves inline and says how to draw them. Files drawn before from the same values are kept and linked; after
    one more run, the figures of that method × ordering × protocol changed, so their old files are removed and no
    longer linked (never a stale figure), while the others stay."""
    outputs, _, _ = report
    fresh = tmp_path / "fresh"
    shutil.copytree(outputs, fresh)
    for d in ("report", "figures", "tables"):
        shutil.rmtree(fresh / "synthetic" / d)
    aggregate(fresh, "synthetic", Options(bootstrap=0, figure_formats=()), log=lambda *_: None)
    page = fresh / "synthetic/report/index.html"
    p = parse(page)
    figures = page.parent / "figures"
    assert not list(figures.glob("curve_*.p*")) and not list(figures.glob("heatmap_*"))
    assert not [r for r in p.refs if r.startswith("figures/curve_") or r.startswith("figures/heatmap_")]
    text = page.read_text()
    parts = text.count('<div class="part">')
    assert parts == 18 and text.count("make figures DATASET=synthetic") == parts
    assert text.count("<svg") > parts  # the curves are on the page all the same
    assert pd.read_csv(page.parent / "tables/curves.csv")["figure"].nunique() == text.count("<svg")

    drawn = tmp_path / "drawn"
    shutil.copytree(outputs, drawn)  # the fixture's aggregate drew every paper figure
    out = drawn / "synthetic/report"
    before = {f.name for f in (out / "figures").glob("curve_*.p*")}
    extra, image, _ = _scored(np.random.default_rng(5), 2.0)
    write(drawn, model="cfa", protocol="cl", ordering="random", seed=1, image=image, extra=extra)
    aggregate(drawn, "synthetic", Options(bootstrap=0, figure_formats=()), log=lambda *_: None)
    after = {f.name for f in (out / "figures").glob("curve_*.p*")}
    gone = before - after
    assert gone and all("_cfa_" in f and "_random_cl_" in f for f in gone) and not after - before
    refs = set(parse(out / "index.html").refs)
    assert not any(r.split("/")[-1] in gone for r in refs)
    assert {f"figures/{f}" for f in after} <= refs
    assert not [f for f in (out / "figures").glob("heatmap_*_cfa_*_random_cl_image.*")]
    assert (out / "index.html").read_text().count("make figures DATASET=synthetic") == 1
    for ref in refs:
        if not ref.startswith("#"):
            assert (out / ref).is_file(), ref

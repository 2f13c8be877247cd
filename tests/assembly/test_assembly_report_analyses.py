"""The stream-assembly aggregate runs the analyses (bench.assembly.aggregate_analyses): on the demo-size synthetic
week (K = 1, both arms, BOCPD, ECOD and IForest) it writes each analysis's tables under report/analyses/, one
section each on the page with its figures, the paper's cells beside ours with every reason they are not
comparable, and the scale-free identities; a set with one arm says why the pair analyses are skipped."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bench.assembly import aggregate_analyses as aa, paper, paper_beside, report, runs
from bench.assembly.synthetic import generate

SET = "synthetic-assembly"
TABLES = {
    "heldout": ("heldout_values", "heldout_margins"),
    "shared": ("shared_summary", "shared_values", "shared_history", "shared_margins"),
    "cutsweep": ("cut_values", "cut_orderings", "cut_margins"),
    "batchladder": ("batch_ladder", "batch_span", "batch_composition", "batch_margin_vs_span"),
    "branches": ("branch_values", "branch_margins", "branch_binding"),
    "prevalence": ("prevalence_draws", "prevalence_levels"),
    "crossed": ("crossed_cells", "crossed_history", "crossed_design"),
    "events": ("events",),
    "paper": ("paper_comparability", "paper_cells", "paper_identities"),
}
FIGURES = ("split_membership.png", "cut_sweep.png", "branches.png", "prevalence_sweep.png")


def _run(root, outputs, detectors, arms):
    corpus = runs.CorpusSpec("cicids2017", str(root), scale=0.001, name="synthetic")
    for det in detectors:
        for arm in arms:
            run = runs.prepare(runs.RunSpec(corpus, arm, det, seed=11), outputs / SET / "runs")
            runs.execute(run, log=lambda _: None)


@pytest.fixture(scope="module")
def aggregated(tmp_path_factory):
    base = tmp_path_factory.mktemp("asm-analyses")
    root = generate(base / "week", K=1, seed=7)
    _run(root, base / "outputs", ("bocpd", "ecod", "iforest"), ("timestamp", "day_round_robin"))
    page = report.aggregate(base / "outputs", SET)
    return base, page


def _csv(page: Path, name: str) -> pd.DataFrame:
    return pd.read_csv(page.parent / "analyses" / f"{name}.csv")


def test_every_analysis_writes_its_tables_and_none_is_skipped(aggregated):
    _, page = aggregated
    folder = page.parent / "analyses"
    for key, names in TABLES.items():
        for name in names:
            assert (folder / f"{name}.csv").is_file() and (folder / f"{name}.md").is_file(), name
            assert len(_csv(page, name)) > 0, name
    assert (folder / "skipped.md").read_text().strip().endswith("none")


def test_heldout_intervals_agree_with_the_run_table_and_carry_the_block_flag(aggregated):
    _, page = aggregated
    runs_df = pd.read_csv(page.parent / "runs.csv")
    values = _csv(page, "heldout_values")
    for r in runs_df.to_dict("records"):
        v = values[(values.slice == f"heldout|{r['arm']}") & (values.scorer == r["detector"]) & (values.metric == "ap")]
        assert v.value.iloc[0] == pytest.approx(r["ap"], abs=1e-12)
        assert v.prevalence.iloc[0] == pytest.approx(r["p"], abs=1e-12)  # every AP beside its chance level
    margins = _csv(page, "heldout_margins")
    assert {"changes_with_block", "conclusion"} <= set(margins.columns)
    assert any(c.startswith("lo_b") for c in margins.columns) and (margins.resamples == aa.QUICK_RESAMPLES).all()


def test_the_pair_analyses_use_the_two_arms_and_their_78_shared_records(aggregated):
    _, page = aggregated
    summary = _csv(page, "shared_summary").iloc[0]
    assert (summary.arm_a, summary.arm_b, summary.shared_records) == ("timestamp", "day_round_robin", 78)
    values = _csv(page, "shared_values")
    assert set(values[values.scorer == "ecod"].batch) == {"slice", "shared"}  # ECOD under both batches
    assert set(values[values.scorer == "iforest"].batch) == {"stream"}
    ladder = _csv(page, "batch_span").set_index(["scorer", "model_arm"])
    assert not ladder.loc[("ecod", "timestamp"), "scores_identical"]
    assert ladder.loc[("iforest", "timestamp"), "scores_identical"]
    cuts = _csv(page, "cut_values")
    assert sorted(cuts.cut_pct.unique()) == [60.0, 75.0, 90.0] and set(cuts.arm) == {"timestamp", "day_round_robin"}
    crossed = _csv(page, "crossed_cells")
    assert set(zip(crossed.history, crossed["sample"])) == {(h, s) for h in ("timestamp", "day_round_robin")
                                                            for s in ("timestamp", "day_round_robin")}


def test_the_page_has_one_section_per_analysis_with_its_figures_and_the_design_note(aggregated):
    _, page = aggregated
    html = page.read_text()
    for key in TABLES:
        assert f'id="an-{key}"' in html, key
    for fig in FIGURES:
        assert f'src="figures/{fig}"' in html and (page.parent / "figures" / fig).stat().st_size > 1000, fig
    assert "Down a column the history" in html  # crossed.DESIGN_NOTE
    assert f"{aa.QUICK_RESAMPLES} block-bootstrap resamples per interval" in html and "demo settings" in html


def test_the_paper_cells_are_not_comparable_with_every_reason_and_the_identities_hold(aggregated):
    _, page = aggregated
    cells = _csv(page, "paper_cells")
    assert len(cells) == sum(len(paper.load(n)) for n in paper_beside.TABLES)
    assert cells.comparability.str.startswith("not comparable").all() and cells.difference.isna().all()
    assert cells.comparability.str.contains("scale").all()  # a thousandth of the budgets
    t4 = cells.set_index("cell")
    assert t4.loc["t4.day_round_robin.records", "ours"] == 240 and t4.loc["t4.day_round_robin.attacks", "ours"] == 48
    ids = _csv(page, "paper_identities")
    assert ids.holds.all() and (ids.paper_cell == "id.shared").any()


def test_a_released_corpus_puts_comparable_cells_beside_the_published_ones(aggregated):
    """The same study with a manifest claiming the released corpus: a released-preset scorer's cells are
    'comparable' and carry ours − published; a scorer the set did not run says so."""
    base, page = aggregated
    study = aa.load_studies(sorted((base / "outputs" / SET / "runs").glob("*.h5")))[0]
    released = {**study.manifest, "scale": 1.0, "features": {**study.manifest["features"], "n": 84}}
    study = replace(study, manifest=released)
    tables = {n: _csv(page, n) for names in TABLES.values() for n in names if n.startswith(("heldout", "shared"))}
    cells = paper_beside.cells_frame(study, tables).set_index("cell")
    ecod = cells.loc["t4.timestamp.ecod.ap"]
    assert ecod.comparability == "comparable"
    assert ecod.difference == pytest.approx(ecod.ours - ecod.published)
    assert cells.loc["t4.timestamp.hst.ap", "comparability"] == "not comparable: the set ran no hst"


def test_one_arm_says_why_the_pair_analyses_are_skipped(tmp_path):
    root = generate(tmp_path / "week", K=1, seed=3)
    _run(root, tmp_path / "outputs", ("iforest",), ("timestamp",))
    page = report.aggregate(tmp_path / "outputs", SET)
    skipped = (page.parent / "analyses" / "skipped.md").read_text()
    for key in ("shared", "crossed"):
        assert f"- {key}: skipped: the set has no second arm over the same records (arms: timestamp)" in skipped
    assert "- branches: skipped: no run stores the branches" in skipped
    html = page.read_text()
    assert "Skipped: the set has no second arm over the same records" in html
    assert (page.parent / "analyses" / "cut_values.csv").is_file()  # one arm still has its cut sweep


def test_skip_leaves_analyses_out_and_says_so_and_an_unknown_name_is_one_line(tmp_path, capsys):
    from bench.cli import main

    root = generate(tmp_path / "week", K=1, seed=3)
    _run(root, tmp_path / "outputs", ("iforest",), ("timestamp",))
    args = ["aggregate", "--dataset", SET, "--outputs", str(tmp_path / "outputs")]
    assert main(["assembly", *args, "--skip", "cutsweep,prevalence"]) == 0
    folder = tmp_path / "outputs" / SET / "report" / "analyses"
    assert "- cutsweep: skipped: left out on request (--skip)" in (folder / "skipped.md").read_text()
    assert not (folder / "cut_values.csv").exists() and (folder / "events.csv").is_file()
    capsys.readouterr()
    assert main(["assembly", *args, "--skip", "cutsweep,nonsense"]) == 2
    err = capsys.readouterr().err
    assert "'nonsense' is not an analysis" in err and err.count("\n") == 1


def test_settings_are_released_above_the_demo_size():
    assert aa.settings_for(1_600_000) == aa.Settings()
    quick = aa.settings_for(1_600, resamples=1000)
    assert quick.quick and quick.resamples == aa.QUICK_RESAMPLES and "demo settings" in quick.note()


def _html_helpers():
    """tests/report/test_html.py's headless-Chromium helpers: the same skip rule (and BENCH_REQUIRE_CHROMIUM),
    flags and in-browser image check."""
    here = str(Path(__file__).resolve().parents[1] / "report")
    if here not in sys.path:
        sys.path.insert(0, here)
    import test_html

    return test_html


@pytest.mark.slow(reason="starts headless Chromium twice (~10 s idle)")
def test_headless_chromium_renders_every_figure(aggregated, tmp_path):
    h = _html_helpers()
    chromium = h._chromium()
    _, page = aggregated
    done = h._browser(chromium, "--enable-logging=stderr", "--v=0", "--window-size=1400,2400",
                      f"--screenshot={tmp_path / 'page.png'}", page.as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    assert [line for line in done.stderr.splitlines() if ":CONSOLE" in line] == []
    harness = tmp_path / "harness.html"
    harness.write_text(h.HARNESS.format(url=page.as_uri()))
    dom = h._browser(chromium, "--dump-dom", harness.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    result = json.loads(dom.stdout.split('<pre id="out">', 1)[1].split("</pre>", 1)[0])
    assert result["broken"] == [] and result["images"] == len(FIGURES) and result["scripts"] == 0
    from PIL import Image

    with Image.open(tmp_path / "page.png") as im:
        assert np.asarray(im.convert("RGB"), dtype=float).std() > 20


def test_litnet_capture_arms_and_the_pooled_composite_report_the_pooling_identity_beside_the_paper(tmp_path):
    from bench.assembly.synthetic import generate_litnet, litnet_budgets

    root = generate_litnet(tmp_path / "litnet", K=1, seed=0)
    corpus = runs.CorpusSpec("litnet", str(root), scale=1.0, name="litnet",
                             budgets=tuple(sorted(litnet_budgets(1).items())))
    for arm in ("capture:udp_flood", "pooled"):
        run = runs.prepare(runs.RunSpec(corpus, arm, "iforest", seed=11), tmp_path / "outputs" / "litnet-assembly"
                           / "runs")
        runs.execute(run, log=lambda _: None)
    page = report.aggregate(tmp_path / "outputs", "litnet-assembly")
    skipped = (page.parent / "analyses" / "skipped.md").read_text()
    assert "- shared: skipped: the set has no second arm over the same records" in skipped
    cuts = pd.read_csv(page.parent / "analyses" / "cut_values.csv")
    assert set(cuts.arm) == {"capture:udp_flood", "pooled"}  # each arm swept on its own
    ids = pd.read_csv(page.parent / "analyses" / "paper_identities.csv")
    pooling = ids[ids.paper_cell == "id.litnet_pooled_prevalence"].iloc[0]
    assert bool(pooling.holds) and pooling.ours == pytest.approx(1 / 3)


def test_a_full_disk_while_drawing_an_analysis_figure_is_one_error_and_leaves_no_file(tmp_path, monkeypatch):
    """The page's figures are written as the aggregate's are (bench.report.figfile.write_figure): whole or not
    at all, a full disk one BenchError naming the file, no temp file left."""
    import errno

    from matplotlib.figure import Figure

    from bench.assembly import analysis_figures as af
    from bench.errors import BenchError

    def savefig(self, target, **kw):
        Path(target).write_bytes(b"\x89PNG half")
        raise OSError(errno.ENOSPC, "No space left on device")

    fig = af._plt().figure()
    monkeypatch.setattr(Figure, "savefig", savefig)
    with pytest.raises(BenchError, match=r"prevalence\.png: cannot write the figure \(No space left on device\); "
                                         r"free space there and run aggregate again"):
        af._save(fig, tmp_path / "figures", "prevalence")
    assert list((tmp_path / "figures").iterdir()) == [] and not af._plt().fignum_exists(fig.number)

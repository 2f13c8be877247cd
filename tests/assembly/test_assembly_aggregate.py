"""The stream-assembly report (bench.assembly.report, page): per run, AP beside its chance level p, the random-ranking
AP and (AP − p)/(1 − p), AUC-ROC and the batch record; the assembly audit; CSV, markdown and one HTML page; `make
aggregate` routed to it by bench.cli. Counts at K = 1 are the synthetic week's (docs/assembly.md): held-out 240
records per arm, 200 attacks in the timestamp arm's, 48 in the round robin's, 78 shared."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import average_precision_score, roc_auc_score

from bench.assembly import report, runs, store
from bench.assembly.synthetic import generate, generate_litnet, litnet_budgets
from bench.cli import main
from bench.metrics import expected_random_ap

SET = "synthetic-assembly"


def _run_all(root, outputs, detectors, arms=("timestamp", "day_round_robin"), source="cicids2017", name="synthetic",
             scale=0.001, budgets=None):
    corpus = runs.CorpusSpec(source, str(root), scale=scale, name=name, budgets=budgets)
    for det in detectors:
        for arm in arms:
            run = runs.prepare(runs.RunSpec(corpus, arm, det, seed=11), outputs / f"{name}-assembly" / "runs")
            runs.execute(run, log=lambda _: None)


@pytest.fixture(scope="module")
def aggregated(tmp_path_factory):
    base = tmp_path_factory.mktemp("asm-aggregate")
    root = generate(base / "week", K=1, seed=7)
    _run_all(root, base / "outputs", ("bocpd", "ecod", "iforest"))
    page = report.aggregate(base / "outputs", SET)
    return base, page, pd.read_csv(page.parent / "runs.csv")


def test_every_ap_stands_beside_its_chance_level(aggregated):
    base, _, df = aggregated
    assert len(df) == 6 and not [c for c in df.columns if "diff" in c or "delta" in c]  # no AP difference
    held = {"timestamp": (240, 200), "day_round_robin": (240, 48)}
    for r in df.to_dict("records"):
        s = store.read_run(base / "outputs" / SET / "runs" / r["file"])
        y, score = s.y[s.test()], s.score[s.test()]
        n, k = held[r["arm"]]
        assert (r["test_records"], r["test_attacks"]) == (n, k) and r["p"] == pytest.approx(k / n, abs=0)
        assert r["ap"] == pytest.approx(average_precision_score(y, score), abs=1e-15)
        assert r["auc_roc"] == pytest.approx(roc_auc_score(y, score), abs=1e-15)
        assert r["random_ap"] == pytest.approx(expected_random_ap(n, k), abs=1e-15) and r["random_ap"] != r["p"]
        assert r["ap_normalised"] == pytest.approx((r["ap"] - r["p"]) / (1 - r["p"]), abs=1e-15)


def test_batch_detectors_carry_their_batch_and_ecod_is_flagged(aggregated):
    _, _, df = aggregated
    ecod = df[df.detector == "ecod"]
    assert (ecod.batch_size == 480).all() and ecod.batch_dependent.all()
    assert ecod.batch_ids_sha256.nunique() == 2  # the two arms' batches hold the same count, not the same records
    iforest = df[df.detector == "iforest"]
    assert (iforest.batch_size == 480).all() and not iforest.batch_dependent.any()
    bocpd = df[df.detector == "bocpd"]
    assert bocpd.batch_size.isna().all() and bocpd.batch_ids_sha256.isna().all()


def test_the_audit_is_written_beside_the_runs(aggregated):
    _, page, _ = aggregated
    audit = page.parent / "audit"
    splits = pd.read_csv(audit / "splits.csv")
    test = splits[splits.segment == "test"].set_index("arm")
    assert test.loc["timestamp", "records"] == 240 and test.loc["day_round_robin", "attacks"] == 48
    overlap = pd.read_csv(audit / "overlap.csv").iloc[0]
    assert (overlap.arm_a, overlap.arm_b, overlap.overlap) == ("timestamp", "day_round_robin", 78)
    assert overlap.overlap_share == pytest.approx(0.325) and overlap.b_heldout_attacks_subset_of_a
    trans = pd.read_csv(audit / "transitions.csv")
    rec = trans[(trans.kind == "records") & (trans.segment_in_a == "test")].set_index("segment_in_b")["count"]
    assert rec.to_dict() == {"train": 114, "validation": 48, "test": 78}
    assert (audit / "audit.md").is_file()


def test_one_page_holds_the_runs_and_the_audit(aggregated):
    _, page, df = aggregated
    html = page.read_text()
    for text in ("Runs: the held-out slice", "p (chance)", "random AP", "(AP − p)/(1 − p)", "Assembly audit",
                 "Split transitions", "Held-out overlap", "batch-dependent scores"):
        assert text in html, text
    assert f'data-value="{float(df.p.iloc[0])!r}"' in html  # every number is a CSV cell, carried in full
    md = (page.parent / "runs.md").read_text()
    assert "| synthetic | timestamp | ecod | released | 11 | 240 | 200 | 0.8333 |" in md


def test_make_aggregate_routes_an_assembly_set_here(aggregated, capsys):
    base, page, _ = aggregated
    before = page.read_text()
    assert main(["aggregate", "--dataset", SET, "--outputs", str(base / "outputs")]) == 0
    assert str(page) in capsys.readouterr().out and page.read_text() == before  # the same page from the same runs


def test_the_refitting_analyses_share_one_rescorer_per_batch_scorer(aggregated, monkeypatch):
    """Shared records and the batch ladder take their rescorers from one `rescorers(study)`: the same tables as
    with rescorers of their own, and the model the shared analysis fitted last is not fitted again by the ladder."""
    from bench.assembly import aggregate_analyses as aa
    from bench.assembly.analyses.common import FittedRescore

    base, _, _ = aggregated
    study = aa.load_studies(sorted((base / "outputs" / SET / "runs").glob("*.h5")))[0]
    aa.attach_corpus(study)
    st = aa.settings_for(study.n, 20)
    fits, model = [], FittedRescore.model

    def counting(self, arm, train_end=None):
        end = self.streams[arm].bounds[0] if train_end is None else int(train_end)
        if (arm, end) not in self._models:
            fits.append((self.spec.name, arm, end))
        return model(self, arm, train_end)
    monkeypatch.setattr(FittedRescore, "model", counting)
    own = [aa.shared_analysis(study, st), aa.ladder_analysis(study, st, [])]
    alone = len(fits)
    fits.clear()
    refit = aa.rescorers(study)
    assert sorted(refit) == ["ecod", "iforest"]
    together = [aa.shared_analysis(study, st, refit), aa.ladder_analysis(study, st, [], refit)]
    for a, b in zip(own, together):
        assert a.tables.keys() == b.tables.keys()
        for name in a.tables:
            pd.testing.assert_frame_equal(a.tables[name], b.tables[name])
    assert len(fits) < alone


def test_no_runs_is_one_line_exit_2(tmp_path, capsys):
    assert main(["aggregate", "--dataset", SET, "--outputs", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "no assembly run files" in err and "make demo-assembly" in err and err.count("\n") == 1


def test_runs_without_their_data_still_report_and_say_why_there_is_no_audit(tmp_path):
    root = generate(tmp_path / "week", K=1, seed=2)
    _run_all(root, tmp_path / "outputs", ("iforest",), arms=("timestamp",))
    for f in root.rglob("*.csv"):
        f.unlink()
    page = report.aggregate(tmp_path / "outputs", SET)
    assert "Not computed" in page.read_text() and len(pd.read_csv(page.parent / "runs.csv")) == 1


def test_pooled_litnet_runs_report_the_pooling_identity(tmp_path):
    root = generate_litnet(tmp_path / "litnet", K=1, seed=0)
    captures = ("capture:blaster_worm", "capture:spam", "capture:udp_flood", "pooled")
    _run_all(root, tmp_path / "outputs", ("iforest",), arms=captures, source="litnet", name="litnet", scale=1.0,
             budgets=tuple(sorted(litnet_budgets(1).items())))
    page = report.aggregate(tmp_path / "outputs", "litnet-assembly")
    pooling = pd.read_csv(page.parent / "audit" / "pooling.csv").iloc[0]
    assert bool(pooling.holds) and pooling.pooled_prevalence == "1/3" and pooling.weighted_mean == "1/3"
    df = pd.read_csv(page.parent / "runs.csv").set_index("arm")
    # the per-capture held-out prevalences (1/2, 1/6, 1/3 by construction), each beside its own AP
    assert df.loc["capture:udp_flood", "p"] == 0.5 and df.loc["pooled", "p"] == pytest.approx(1 / 3)
    assert "Pooling identity" in page.read_text()


def test_unequal_budgets_report_the_failed_precondition(tmp_path):
    root = generate_litnet(tmp_path / "litnet", K=1, seed=0)
    budgets = {**litnet_budgets(1), "spam": 150}  # one capture's budget below the others'
    _run_all(root, tmp_path / "outputs", ("iforest",), arms=("pooled",), source="litnet", name="litnet",
             scale=1.0, budgets=tuple(sorted(budgets.items())))
    page = report.aggregate(tmp_path / "outputs", "litnet-assembly")
    pooling = pd.read_csv(page.parent / "audit" / "pooling.csv").iloc[0]
    pre = pd.read_csv(page.parent / "audit" / "pooling_preconditions.csv")
    assert not bool(pooling.holds) and not pre.holds.all()


def test_heldout_metrics_of_one_class_are_nan_not_an_error():
    m = report.heldout_metrics(np.zeros(5, np.int8), np.arange(5.0))
    assert m["p"] == 0 and all(math.isnan(m[k]) for k in ("ap", "random_ap", "ap_normalised", "auc_roc"))


def test_aggregate_of_every_dataset_leaves_the_assembly_sets_to_their_own_report(tmp_path):
    """`aggregate --dataset all` collects the continual tracks' run folders only: an assembly set's run files are
    another format, and reading them as continual runs would refuse the whole aggregate."""
    from bench.assembly.commands import result_sets
    from bench.report.collect import result_dirs

    assert "cicids2018-assembly" in result_sets()  # derived from the registered corpus sources, not a hand list
    for name in ("mvtec", *result_sets()):
        (tmp_path / name / "runs").mkdir(parents=True)
    assert list(result_dirs(tmp_path, "all")) == ["mvtec"]


def test_no_continual_run_may_take_an_assembly_sets_name_as_its_label():
    from bench.assembly.commands import result_sets
    from bench.config import check_label
    from bench.errors import ConfigError

    for name in result_sets():
        with pytest.raises(ConfigError, match="another dataset's result set"):
            check_label(name, "mvtec")

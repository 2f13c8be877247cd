"""Any registered tabular detector as an assembly batch detector (`tabular:<name>`, bench/assembly/detectors/
tabular.py), on the synthetic week: its scores are the tabular detector's own, fitted on the benign training rows;
the analyses refit it per cut; a run writes its file; bad overrides are one line."""

from __future__ import annotations

import numpy as np
import pytest

from bench.assembly import arms, detectors, records, runs, store
from bench.assembly.analyses import cutsweep
from bench.assembly.analyses.common import FittedRescore, benign_training_rows
from bench.assembly.analyses.inmemory import score_arm
from bench.assembly.synthetic import generate
from bench.errors import BenchError


@pytest.fixture(scope="module")
def week(tmp_path_factory):
    root = generate(tmp_path_factory.mktemp("asm-tabular") / "week", K=1, seed=5)
    spec = runs.CorpusSpec("cicids2017", str(root), scale=0.001, name="synthetic")
    corpus, _ = runs.load_corpus(spec)
    return spec, corpus


def test_every_builtin_tabular_detector_is_named_without_importing_it():
    from bench.assembly.detectors.tabular import tabular_names

    names = tabular_names()
    assert "iforest" in names and "autoencoder" in names and "base" not in names
    for name in names:
        spec = detectors.get(f"tabular:{name}")
        assert spec.kind is records.Kind.BATCH and not spec.batch_dependent and spec.seeded


def test_tabular_iforest_scores_are_the_tabular_detectors_own(week):
    from bench.registry import get

    _, corpus = week
    arm = arms.make_arm(corpus, "day_round_robin")
    s = score_arm(corpus, arm, detectors.get("tabular:iforest"), seed=11)
    i_tr, _ = s.bounds
    assert np.isnan(s.score[:i_tr]).all() and np.isfinite(s.score[i_tr:]).all() and s.batch.size == s.n - i_tr
    tab = get("iforest", "tabular")
    direct = tab.factory(**tab.resolve({}, "released")).fit(corpus.X[benign_training_rows(s.rows, s.y, i_tr)], 11)
    assert np.array_equal(s.score[i_tr:], direct.score(corpus.X[arm.rows[i_tr:]]))


def test_the_cut_sweep_refits_a_tabular_detector_at_every_cut(week):
    _, corpus = week
    spec = detectors.get("tabular:iforest")
    streams = {a: score_arm(corpus, arms.make_arm(corpus, a), spec, seed=11) for a in ("timestamp", "day_round_robin")}
    refit = FittedRescore(corpus, spec, streams, seed=11)
    r = cutsweep.sweep({"tabular:iforest": streams, "bocpd": {a: score_arm(corpus, arms.make_arm(corpus, a),
                                                                            detectors.get("bocpd"))
                                                              for a in streams}},
                       refit={"tabular:iforest": refit}, fractions=(0.6, 0.9), intervals=False)
    ends = {c.train_end for c in r.cells if c.scorer == "tabular:iforest"}
    assert ends == {cutsweep.training_end(int(f * corpus.n)) for f in (0.6, 0.9)}
    assert {(a, e) for a, e in refit._models} == {(a, e) for a in streams for e in ends}  # one model per arm and cut


def test_a_run_with_a_tabular_detector_writes_its_file(week, tmp_path):
    spec, _ = week
    run = runs.prepare(runs.RunSpec(spec, "timestamp", "tabular:iforest", seed=11), tmp_path / "runs")
    runs.execute(run, log=lambda _: None)
    s = store.read_run(run.out)
    assert s.detector == "tabular:iforest" and s.batch is not None and np.isfinite(s.score[s.test()]).all()
    assert ":" not in run.out.name and "tabular-iforest" in run.out.name  # no colon in a file name


def test_a_bad_override_is_one_line():
    with pytest.raises(BenchError) as e:
        detectors.get("tabular:iforest").create("released", 0, n_estimators=0)
    assert "n_estimators" in str(e.value) and "\n" not in str(e.value)


def test_the_aggregate_keeps_one_fitted_model_and_scores_as_the_caching_refit_does(week):
    from bench.assembly.aggregate_analyses import LatestModel

    _, corpus = week
    spec = detectors.get("tabular:iforest")
    streams = {a: score_arm(corpus, arms.make_arm(corpus, a), spec, seed=11) for a in ("timestamp", "day_round_robin")}
    latest, caching = LatestModel(corpus, spec, streams, seed=11), FittedRescore(corpus, spec, streams, seed=11)
    rows = streams["timestamp"].rows[-100:]
    for arm, end in (("timestamp", 500), ("day_round_robin", 700), ("timestamp", 600)):
        assert np.array_equal(latest(arm, rows, train_end=end), caching(arm, rows, train_end=end))
        assert list(latest._models) == [(arm, end)]
    assert len(caching._models) == 3

"""§6.3: ECOD's scores of identical records move with the batch; IForest's do not."""

import dataclasses

import numpy as np
import pytest

from bench.assembly import arms as arms_mod
from bench.assembly.analyses import batchladder, bootstrap
from bench.assembly.analyses.common import FittedRescore
from bench.assembly.analyses.inmemory import score_arm
from bench.assembly.detectors import get
from bench.assembly.perf import stand_in


@pytest.fixture(scope="module")
def study():
    c = stand_in(1600)
    c = dataclasses.replace(c, X=c.X[:, :5] + 1.0 * c.y[:, None], feature_names=c.feature_names[:5])
    arms = [arms_mod.make_arm(c, n) for n in ("timestamp", "day_round_robin")]
    streams = {name: {a.name: score_arm(c, a, get(name)) for a in arms} for name in ("ecod", "iforest")}
    return c, streams


def test_ecod_scores_on_identical_records_differ_between_batches_iforest_identical(study):
    c, streams = study
    ecod = batchladder.ladder(FittedRescore(c, get("ecod"), streams["ecod"]), streams["ecod"]["timestamp"])
    forest = batchladder.ladder(FittedRescore(c, get("iforest"), streams["iforest"]),
                                streams["iforest"]["timestamp"])
    s = streams["ecod"]["timestamp"]
    i_tr, i_va = s.bounds
    assert [r.batch.size for r in ecod.rungs] == [s.n - i_va + round(f * (i_va - i_tr)) for f in (0, .25, .5, 1)]
    assert len({r.batch.ids_sha256 for r in ecod.rungs}) == 4
    assert not ecod.scores_identical and max(r.max_abs_change for r in ecod.rungs) > 0
    assert forest.scores_identical and forest.span_ap == 0.0 and forest.span_auc == 0.0
    # the last rung is the released validation + test call: the stored run's scores
    last = FittedRescore(c, get("ecod"), streams["ecod"])("timestamp", s.rows[i_tr:])[i_va - i_tr:]
    np.testing.assert_array_equal(last, s.score[i_va:])


def test_composition_at_equal_size(study):
    c, streams = study
    a, b = streams["ecod"]["timestamp"], streams["ecod"]["day_round_robin"]
    comp = batchladder.composition(FittedRescore(c, get("ecod"), streams["ecod"]), a, b)
    assert comp.batch_size[0] == comp.batch_size[1]
    assert comp.differing == comp.batch_size[0] - int(np.intersect1d(a.rows[a.test()], b.rows[b.test()]).size)
    assert comp.values[0].records == comp.values[1].records
    forest = batchladder.composition(FittedRescore(c, get("iforest"), streams["iforest"]),
                                     streams["iforest"]["timestamp"], streams["iforest"]["day_round_robin"])
    assert forest.delta_ap == 0.0


def test_margin_against_span():
    m = bootstrap.Margin("d", "e", "ap", 0.0268, {100: bootstrap.Interval(0.0211, 0.0327, 1000)}, 100)
    out = batchladder.against_span(0.006966, {"timestamp": m, "plain": -0.005, "big": 0.01})
    assert [(v.exceeds, v.bound_exceeds) for v in out] == [(True, True), (False, False), (True, False)]
    assert out[0].near_bound == 0.0211
    t = batchladder.tables(comparisons=out)
    assert t["batch_margin_vs_span"]["exceeds"].tolist() == [True, False, True]

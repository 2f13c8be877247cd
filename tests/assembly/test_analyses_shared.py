"""§6.1 on a crafted pair of arms whose shared records are known by hand."""

import numpy as np
import pytest

from bench.assembly.analyses import metrics, shared
from bench.assembly.analyses.common import scored_stream
from bench.errors import ConfigError

N = 20
Y = np.zeros(N, np.int8)
Y[[3, 8, 17, 19]] = 1
ROWS_A = np.arange(N)
ROWS_B = np.roll(ROWS_A, -2)  # positions 15..19 of B hold rows 17, 18, 19, 0, 1
BOUNDS = (10, 15)


def _det(rows, arm, by_row):
    return scored_stream(arm, rows, Y[rows], BOUNDS, by_row[rows], detector="det")


def _streams():
    a_scores = np.linspace(0, 1, N)
    a_scores[[17, 18, 19]] = [0.9, 0.5, 0.1]
    b_scores = a_scores.copy()
    b_scores[[17, 18, 19]] = [0.1, 0.5, 0.9]
    return {"det": {"a": _det(ROWS_A, "a", a_scores), "b": _det(ROWS_B, "b", b_scores)},
            "bat": {"a": _det(ROWS_A, "a", np.zeros(N)), "b": _det(ROWS_B, "b", np.zeros(N))}}


def _rescore(arm, rows):
    """Batch-dependent: distance from the batch's median row id (a record's score moves with its batch)."""
    rows = np.asarray(rows, np.float64)
    return np.abs(rows - np.median(rows)) + (0.5 if arm == "b" else 0.0) * rows / N


def test_shared_records_by_hand():
    s = _streams()["det"]
    sh = shared.shared_records(s["a"], s["b"])
    assert sh.rows.tolist() == [17, 18, 19]
    assert sh.positions["a"].tolist() == [17, 18, 19] and sh.positions["b"].tolist() == [15, 16, 17]
    assert sh.y.tolist() == [1, 0, 1]


def test_restricted_ap_equals_a_direct_computation_on_the_shared_records():
    r = shared.analyse(_streams(), rescore={"bat": _rescore}, batch_dependent=frozenset({"bat"}), resamples=20)
    # arm a ranks 17(+) 18(-) 19(+): AP = 0.5 · 1 + 0.5 · 2/3; arm b ranks 19(+) 18(-) 17(+): the same by symmetry
    assert r.cell("det", "a", "stream").value.ap == pytest.approx(0.5 + 0.5 * 2 / 3)
    assert r.cell("det", "b", "stream").value.ap == pytest.approx(0.5 + 0.5 * 2 / 3)
    assert r.cell("det", "a", "stream").value.prevalence == pytest.approx(2 / 3)
    rows = np.array([17, 18, 19])
    for arm in "ab":
        own = metrics.ap(Y[rows], _rescore(arm, rows))
        assert r.cell("bat", arm, "shared").value.ap == pytest.approx(own)
        test_rows = (ROWS_A if arm == "a" else ROWS_B)[15:]
        whole = _rescore(arm, test_rows)
        restricted = whole[np.isin(test_rows, rows)][np.argsort(test_rows[np.isin(test_rows, rows)])]
        assert r.cell("bat", arm, "slice").value.ap == pytest.approx(metrics.ap(Y[rows], restricted))
    assert r.cell("bat", "a", "slice").value.ap != r.cell("bat", "a", "shared").value.ap  # the batch matters here
    assert {b.slice for b in r.intervals} == {"shared|a|slice", "shared|a|shared", "shared|b|slice",
                                              "shared|b|shared"}
    t = shared.tables(r)
    assert t["shared_summary"].loc[0, "shared_records"] == 3 and t["shared_summary"].loc[0, "overlap_share"] == 0.6


def test_a_batch_dependent_scorer_without_a_rescorer_is_refused():
    with pytest.raises(ConfigError, match="batch-dependent"):
        shared.analyse(_streams(), batch_dependent=frozenset({"bat"}), resamples=5)


def test_with_a_fitted_ecod_and_an_online_detector_on_the_synthetic_week():
    import dataclasses

    from bench.assembly import arms as arms_mod
    from bench.assembly.analyses.common import FittedRescore, benign_training_rows
    from bench.assembly.analyses.inmemory import score_arm
    from bench.assembly.detectors import get
    from bench.assembly.perf import stand_in

    c = stand_in(1600)
    c = dataclasses.replace(c, X=c.X[:, :5] + 1.0 * c.y[:, None], feature_names=c.feature_names[:5])
    arms = [arms_mod.make_arm(c, n) for n in ("timestamp", "day_round_robin")]
    streams = {"bocpd": {a.name: score_arm(c, a, get("bocpd"), max_run_length=10) for a in arms},
               "ecod": {a.name: score_arm(c, a, get("ecod")) for a in arms}}
    r = shared.analyse(streams, rescore={"ecod": FittedRescore(c, get("ecod"), streams["ecod"])},
                       batch_dependent=frozenset({"ecod"}), resamples=20)
    assert r.shared.records == 78 and r.held_out == {"timestamp": 240, "day_round_robin": 240}
    ts = streams["ecod"]["timestamp"]
    fresh = get("ecod").create().fit(c.X[benign_training_rows(ts.rows, ts.y, 1120)])
    assert r.cell("ecod", "timestamp", "shared").value.ap == metrics.ap(c.y[r.shared.rows],
                                                                         fresh.score(c.X[r.shared.rows]))
    moves = r.history_moves()
    assert set(moves) == {("bocpd", "stream"), ("ecod", "slice"), ("ecod", "shared")}
    assert len(r.intervals) == 4 and all(len(b.margins) == 2 for b in r.intervals)

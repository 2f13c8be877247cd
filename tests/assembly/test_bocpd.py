"""The paper's truncated BOCPD scorer (bench.assembly.detectors.bocpd): the released implementation's numbers,
its §3.2 property (below the cap P(r = 0) is the hazard for any data), the score composition, the corrected
reset, and the online contract (chunking and checkpoints change nothing)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from bocpd_streams import STREAMS, stream

from bench.assembly.detectors import get
from bench.assembly.detectors.bocpd import TruncatedBocpd
from bench.errors import CheckpointError, ConfigError, DatasetError

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "bocpd_released.json").read_text())
HAZARD, CAP, WARMUP = 0.001, 500, 30


def _run(X, preset="released", **overrides):
    return get("bocpd").create(preset, **overrides).score_learn(X)


@pytest.mark.parametrize("name", STREAMS)
@pytest.mark.parametrize("preset", ["released", "corrected_reset"])
def test_scores_equal_the_released_implementation(name, preset):
    """Reference numbers: the released truncated_bocpd.py run on the same streams (fixture's `source`)."""
    ref = FIXTURE["results"][f"{name}/{preset}"]
    out = _run(stream(name), preset)
    assert len(out.score) == ref["n"]
    np.testing.assert_allclose(out.score[::FIXTURE["score_stride"]], ref["score"], rtol=0, atol=1e-9)
    for branch in ("tail", "short_run", "p_reset"):
        np.testing.assert_allclose(out.branches[branch][::FIXTURE["branch_stride"]], ref[branch], rtol=0, atol=1e-9)
    assert out.score.sum() == pytest.approx(ref["score_sum"], abs=1e-7)


def _unit_streams():
    for seed in (0, 1, 2):
        yield np.random.default_rng(seed).normal(size=(900, 5))
    shifted = np.random.default_rng(3).normal(size=(900, 5))
    shifted[300:] += 6.0
    yield shifted


@pytest.mark.parametrize("X", list(_unit_streams()), ids=["seed0", "seed1", "seed2", "shift6sigma"])
def test_below_the_cap_p_reset_is_the_hazard_whatever_the_data(X):
    p0 = _run(X).branches["p_reset"]
    assert p0[0] == 1.0  # the first record initialises: one run, P(r = 0) = 1
    # records 1..CAP−1: at most CAP runs before the record, so nothing is truncated and the likelihood cancels
    np.testing.assert_allclose(p0[1:CAP - 1], HAZARD, rtol=0, atol=1e-12)
    # from the cap on, truncation drops growth mass before normalising: the identity breaks
    assert np.abs(p0[CAP:] - HAZARD).max() > 1e-6


def test_deployed_score_is_the_clipped_max_of_tail_and_quarter_short_run():
    out = _run(stream("shift8"))
    tail, short = out.branches["tail"], out.branches["short_run"]
    np.testing.assert_array_equal(out.score, np.clip(np.maximum(tail, 0.25 * short), 0.0, 1.0))
    assert (out.score > tail).any() and (out.score == tail).any()  # both branches bind somewhere


def test_warm_up_scores_zero():
    out = _run(stream("shift8"))
    for values in (out.score, out.branches["tail"], out.branches["short_run"]):
        assert not values[:WARMUP].any()
        assert values[WARMUP:].all()


def test_corrected_reset_responds_to_a_6_sigma_shift():
    X = next(_unit_streams())[:600]
    X[300:] += 6.0
    released = _run(X).branches["p_reset"]
    corrected = _run(X, "corrected_reset").branches["p_reset"]
    assert np.abs(released[280:320] - HAZARD).max() < 1e-12
    assert corrected[300:305].max() > 0.5  # a change point: the fresh run explains x far better
    assert corrected[250:299].max() < 0.05


def test_chunked_calls_equal_one_call():
    X = stream("shift84")[:700]
    whole = _run(X)
    det = get("bocpd").create("released")
    parts = [det.score_learn(X[a:b]) for a, b in ((0, 1), (1, 29), (29, 31), (31, 498), (498, 700))]
    np.testing.assert_array_equal(np.concatenate([p.score for p in parts]), whole.score)
    for branch in whole.branches:
        np.testing.assert_array_equal(np.concatenate([p.branches[branch] for p in parts]), whole.branches[branch])


@pytest.mark.parametrize("preset", ["released", "corrected_reset"])
def test_state_dict_round_trip_resumes_identically(preset):
    X = stream("shift8")[:1600]
    whole = _run(X, preset)
    det = get("bocpd").create(preset)
    head = det.score_learn(X[:1000])
    state = det.state_dict()
    assert all(isinstance(v, np.ndarray) for v in state.values())
    resumed = get("bocpd").create(preset).load_state_dict({k: v.copy() for k, v in state.items()})
    tail = resumed.score_learn(X[1000:])
    np.testing.assert_array_equal(np.concatenate([head.score, tail.score]), whole.score)


def test_a_fresh_state_round_trips_and_a_foreign_one_is_refused():
    det = get("bocpd").create("released")
    fresh = get("bocpd").create("released").load_state_dict(det.state_dict())
    np.testing.assert_array_equal(fresh.score_learn(stream("shift8")[:50]).score, _run(stream("shift8")[:50]).score)
    with pytest.raises(CheckpointError, match="prior_predictive_reset"):
        get("bocpd").create("corrected_reset").load_state_dict(det.state_dict())


def test_chi2_cdf_is_scipys():
    from scipy.stats import chi2

    from bench.assembly.detectors.bocpd import chi2_cdf

    stat = np.random.default_rng(0).gamma(2.0, 40.0, size=2000)
    for d in (1, 8, 84):
        np.testing.assert_allclose(chi2_cdf(stat, d), chi2.cdf(stat, df=d), rtol=0, atol=1e-15)
    assert chi2_cdf(np.array([-1.0]), 8)[0] == 0.0  # not computed (warm-up)


def test_bad_input_and_settings_are_one_line_errors():
    det = TruncatedBocpd()
    det.score_learn(np.zeros((3, 4)))
    with pytest.raises(DatasetError, match="4"):
        det.score_learn(np.zeros((2, 5)))
    with pytest.raises(DatasetError, match="non-finite"):
        TruncatedBocpd().score_learn(np.array([[0.0, np.nan]]))
    with pytest.raises(DatasetError, match="overflow"):
        TruncatedBocpd().score_learn(np.array([[0.0, 1e200]]))
    with pytest.raises(ConfigError, match="hazard"):
        TruncatedBocpd(hazard=1.5)
    with pytest.raises(ConfigError, match="preset"):
        get("bocpd").create("nope")
    with pytest.raises(ConfigError, match="parameter 'hazzard'"):
        get("bocpd").create("released", hazzard=0.1)

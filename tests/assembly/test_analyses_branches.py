"""§7 on a planted inverted auxiliary branch: the deployed score ranks worse than its tail term."""

import numpy as np
import pytest

from bench.assembly.analyses import branches
from bench.assembly.analyses.common import scored_stream
from bench.assembly.analyses.perf import runs_stream
from bench.errors import ConfigError


def _planted(m=6000, seed=0):
    rng = np.random.default_rng(seed)
    y = runs_stream(m, seed=seed, mean_run=10, prevalence=0.3)
    tail = np.clip(0.3 + 0.3 * y + rng.normal(0, 0.15, m), 0, 1)  # informative
    short = np.clip(2.4 - 1.6 * y + rng.normal(0, 0.8, m), 0, 4)  # inverted: higher on benign records
    deployed = np.clip(np.maximum(tail, 0.25 * short), 0, 1)
    pad = 2 * m  # the held-out slice: the last m positions
    n = pad + m
    bounds = (m, pad)

    def full(v):
        return np.concatenate([np.zeros(pad), v])

    s = scored_stream("timestamp", np.arange(n), np.concatenate([np.zeros(pad, np.int8), y]), bounds, full(deployed),
                      detector="bocpd", branches={"tail": full(tail), "short_run": full(short)})
    return s, y, tail, short


def test_deployed_ranks_below_its_tail_and_the_binding_share_is_exact():
    s, y, tail, short = _planted()
    r = branches.analyse(s, resamples=100)
    assert r.value("deployed", "auc").point < r.value("tail", "auc").point
    assert r.value("short_run", "auc").point < 0.5
    assert r.separated("tail", "deployed", "auc")
    expected = int((0.25 * short > tail).sum())
    share = {b.branch: b for b in r.binding}
    assert share["short_run"].records == expected and share["tail"].records == len(y) - expected
    assert share["short_run"].share == pytest.approx(expected / len(y))
    t = branches.tables([r])
    assert set(t["branch_margins"]["a"]) == {"tail", "short_run"} and len(t["branch_binding"]) == 2


def test_ties_go_to_the_first_branch_and_unknown_branches_are_refused():
    out = branches.binding_shares({"a": np.array([1.0, 0.5]), "b": np.array([4.0, 1.0])}, {"a": 1.0, "b": 0.25})
    assert [(b.branch, b.records) for b in out] == [("a", 2), ("b", 0)]
    with pytest.raises(ConfigError, match="names branch 'c'"):
        branches.binding_shares({"a": np.zeros(2)}, {"c": 1.0})


def test_any_detector_with_branches_and_its_own_weights():
    s, y, tail, short = _planted(3000, 1)
    s2 = scored_stream("x", s.rows, s.y, s.bounds, s.score, detector="other", branches=s.branches)
    assert branches.analyse(s2, resamples=10).binding == ()
    assert len(branches.analyse(s2, {"tail": 1.0, "short_run": 0.25}, resamples=10).binding) == 2

"""The detector contract (bench.testing), one test per tabular detector and property, over every registered tabular
detector (bench/tabular/detectors): fit returns self; one finite score per record; scores are pointwise; scores
repeat; scoring changes no buffer or state; the state round-trips through a checkpoint (plain arrays); the same seed
gives the same model; a run killed mid-task resumes to the identical R. Then each check on a toy detector broken in
the one way it checks: every check can fail."""

from __future__ import annotations

import numpy as np
import pytest

from bench import testing
from bench import registry
from bench.registry import ModelSpec, specs
from bench.tabular.detectors.base import TabularDetector
from bench.testing import TabularSubject

TABULAR = list(specs("tabular"))
CHECKS = [c for c in testing.CHECKS if c is not testing.check_kill_and_resume]
@pytest.fixture(scope="module")
def record_index(tmp_path_factory):
    return testing.tiny_record_index(tmp_path_factory.mktemp("contract-records"))


@pytest.fixture(scope="module")
def subject():
    """name → its TabularSubject; each detector is fitted once per module."""
    cache = {}

    def get_subject(name):
        if name not in cache:
            cache[name] = TabularSubject(name)
        return cache[name]

    return get_subject


def test_every_built_in_tabular_detector_is_checked():
    assert {"ae1svm", "autoencoder", "iforest", "vae", "deepsvdd", "dagmm", "neutralad"} <= set(TABULAR)


@testing.parametrize_with_checks("tabular", exclude={testing.check_kill_and_resume})
def test_contract(subject, name, check):
    check(subject(name))


@pytest.mark.slow
@pytest.mark.parametrize("name", TABULAR)
def test_a_run_killed_mid_task_resumes_to_the_same_r(record_index, name):
    """Detectors trained by the suite's loop die before the run's last update, inside epoch 2 of the second task;
    the others between the tasks."""
    subject = TabularSubject(name, record_index)
    resumed_inside_a_task = testing.check_kill_and_resume(subject)
    assert resumed_inside_a_task == hasattr(subject.detector_class(), "train_step")


def test_check_detector_finds_the_track_and_runs_every_check(monkeypatch):
    ran = []
    monkeypatch.setattr(testing, "CHECKS", tuple((lambda c: lambda s: ran.append((c, s.track, s.name)))(c.__name__)
                                                 for c in testing.CHECKS))
    testing.check_detector("vae")
    assert ran == [(c.__name__, "tabular", "vae") for c in CHECKS + [testing.check_kill_and_resume]]


def test_parametrize_with_checks_builds_the_detector_by_check_matrix():
    """Every registered detector × every check but the excluded, ids name-check, the `slow` checks marked slow; an
    unknown track is a ConfigError naming the known ones."""
    from bench.errors import ConfigError

    mark = testing.parametrize_with_checks("tabular", exclude={testing.check_kill_and_resume},
                                           slow={testing.check_seed_determinism}).mark
    assert mark.args[0] == "name,check"
    params = mark.args[1]
    assert [p.values for p in params] == [(n, c) for c in CHECKS for n in TABULAR]
    assert params[0].id == f"{TABULAR[0]}-fit_returns_self"
    assert {p.values[1] for p in params if p.marks} == {testing.check_seed_determinism}
    with pytest.raises(ConfigError, match="tabular"):
        testing.parametrize_with_checks("no_such_track")


def test_an_unknown_detector_lists_the_registered_ones():
    from bench.errors import ConfigError

    with pytest.raises(ConfigError, match="iforest"):
        testing.check_detector("no_such_detector")


# --- each check catches the property it checks -------------------------------------------------------------

class Centroid(TabularDetector):
    """Distance to the training mean, shifted by a seeded jitter: a correct, tiny detector the cases below break."""

    def fit(self, X, seed):
        X = np.asarray(X, np.float64)
        self.n_ = getattr(self, "n_", 0) + len(X)  # continues across tasks: the running mean of all records seen
        jitter = 0.01 * np.random.default_rng(seed).normal(size=X.shape[1])
        old = getattr(self, "mean_", np.zeros(X.shape[1]))
        self.mean_ = old + (X.sum(0) + jitter - len(X) * old) / self.n_
        return self

    def score(self, X):
        return np.linalg.norm(np.asarray(X, np.float64) - self.mean_, axis=1)

    def state_dict(self):
        return {"mean": self.mean_.copy(), "n": np.array([self.n_])}

    def load_state_dict(self, state):
        self.mean_, self.n_ = np.asarray(state["mean"]), int(state["n"][0])
        return self


class ReturnsNone(Centroid):
    def fit(self, X, seed):
        super().fit(X, seed)


class OneScoreShort(Centroid):
    def score(self, X):
        return super().score(X)[1:]


class BatchNormalised(Centroid):
    def score(self, X):
        s = super().score(X)
        return (s - s.mean()) / (s.std() + 1e-12)


class Noisy(Centroid):
    def score(self, X):
        return super().score(X) + np.random.default_rng().normal(scale=1e-3, size=len(X))


class Adapting(Centroid):
    def score(self, X):
        s = super().score(X)
        self.mean_ = 0.99 * self.mean_ + 0.01 * np.asarray(X, np.float64).mean(0)  # test-time adaptation
        return s


class ForgetsTheMean(Centroid):
    def state_dict(self):
        return {"mean": np.zeros_like(self.mean_), "n": np.array([self.n_])}


class Unseeded(Centroid):
    def fit(self, X, seed):
        return super().fit(X, int(np.random.default_rng().integers(1 << 30)))


class ForgetsTheCount(Centroid):
    """Saves its mean but not how many records it averages, so a resumed run weighs the next task wrongly."""

    def state_dict(self):
        return {"mean": self.mean_.copy(), "n": np.array([0])}

    def load_state_dict(self, state):
        self.mean_, self.n_ = np.asarray(state["mean"]), 1
        return self


def toy(cls, root=None) -> TabularSubject:
    spec = ModelSpec(name=f"toy_{cls.__name__.lower()}", label=cls.__name__, factory=lambda **h: cls(**h),
                     params={}, track="tabular", inputs="records")
    return TabularSubject(spec, root)


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__.removeprefix("check_"))
def test_the_correct_toy_passes_every_check(check):
    check(toy(Centroid))


@pytest.mark.parametrize("broken,check,message", [
    (ReturnsNone, testing.check_fit_returns_self, "fit returned NoneType"),
    (OneScoreShort, testing.check_scores_shape_and_finite, r"shape \(139,\)"),
    (BatchNormalised, testing.check_pointwise_scores, "depend on the batch"),
    (Noisy, testing.check_repeatable_scores, "scored twice: [0-9]+ of 6 values differ"),
    (Adapting, testing.check_scoring_leaves_buffers_unchanged, "scoring changed 1 buffer/state entries: "
                                                               r"state_dict.mean \(max \|change\|"),
    (ForgetsTheMean, testing.check_state_round_trip, "round trip through a checkpoint: 140 of 140 values differ"),
    (Unseeded, testing.check_seed_determinism, "two fits with seed 0: 140 of 140 values differ"),
], ids=lambda v: getattr(v, "__name__", ""))
def test_each_check_fails_on_a_detector_broken_its_way(broken, check, message):
    with pytest.raises(AssertionError, match=f"^toy_{broken.__name__.lower()}[ :].*{message}"):
        check(toy(broken))


@pytest.mark.slow
def test_the_resume_check_fails_on_a_detector_whose_state_misses_a_part(record_index, monkeypatch):
    for cls in (ForgetsTheCount, Centroid):  # the runner builds them from the registry
        monkeypatch.setitem(registry._SPECS, toy(cls).name, toy(cls).spec)
    with pytest.raises(AssertionError, match="of a run killed mid-task and resumed vs. an uninterrupted run"):
        testing.check_kill_and_resume(toy(ForgetsTheCount, record_index))
    assert testing.check_kill_and_resume(toy(Centroid, record_index)) is False  # between the tasks: no train_step

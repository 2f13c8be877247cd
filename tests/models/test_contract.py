"""The detector contract (bench.testing), one test per image detector and property, over every registered image
detector: fit returns self; one finite score (and map, at the input size) per image; scores are pointwise — an
image alone vs. in a batch, each scored with a FRESH feature extractor; scores repeat; scoring changes no buffer
or state; the state round-trips through a checkpoint; the same seed gives the same model; and a run killed
mid-task (mid-epoch for trained detectors) resumes to the identical R. Tiny images, contract settings (the quick
settings cut to at most two epochs: these checks need a deterministic model, not a good one)."""

from __future__ import annotations

import numpy as np
import pytest

from bench import testing
from bench.registry import get, specs
from bench.testing import POINTWISE_RTOL, ImageSubject, assert_pointwise, pointwise_gap

MODELS = list(specs())


@pytest.fixture(scope="module")
def subject(tiny_root):
    """name → its ImageSubject on the session's tiny benchmark; each detector is fitted once per module."""
    cache = {}

    def get_subject(name):
        if name not in cache:
            cache[name] = ImageSubject(name, tiny_root)
        return cache[name]

    return get_subject


def test_every_built_in_image_detector_is_checked():
    assert {"patchcore", "padim", "cfa", "stfpm", "rd4ad", "efficientad", "paste", "fastflow", "ganomaly"} <= \
        set(MODELS)


# a second fit of every detector: slow beside the other checks, which share one fit per detector
SLOW = {testing.check_seed_determinism}


@testing.parametrize_with_checks("image", exclude={testing.check_kill_and_resume}, slow=SLOW)
def test_contract(subject, name, check):
    check(subject(name))


@pytest.mark.slow
@pytest.mark.parametrize("name", MODELS)
def test_a_run_killed_mid_task_resumes_to_the_same_r(tiny_root, name):
    """Trained detectors die before the run's last update, inside epoch 2 of the second task; the others between
    the tasks."""
    resumed_inside_a_task = testing.check_kill_and_resume(ImageSubject(name, tiny_root))
    assert resumed_inside_a_task == hasattr(get(name).factory, "train_step")


def test_the_pointwise_check_catches_batch_normalised_scores_by_orders_of_magnitude(subject):
    """The negative case: a detector's scores min-max normalised over the scoring batch (what ECOD's batch-wide
    ECDFs and rank normalisations do) fail the check, each probe scored in a pair with one other image."""
    s = subject(MODELS[0])
    det, _ = s.fitted()

    def minmax(idx):
        scores = s.scores(det, idx, fresh=True)[0].astype(np.float64)
        return (scores - scores.min()) / (scores.max() - scores.min())

    batch = minmax(np.arange(s.n_test))
    probe = [1, s.n_test // 2, s.n_test - 1]
    paired = [minmax([0, i])[1] for i in probe]  # image 0 as the only company
    assert pointwise_gap(paired, batch[probe]) > 1000 * POINTWISE_RTOL
    with pytest.raises(AssertionError, match="depend on the batch"):
        assert_pointwise(paired, batch[probe], "min-max normalised scores")
    assert_pointwise(batch[probe], minmax(np.arange(s.n_test))[probe], "the same batch again")

"""The runner's training context (epoch checkpoints, progress, losses) reaches every detector that learns, through
the protocol base's one hand-over, including the fresh experts and models the protocols build mid-stream."""

import numpy as np
import pytest

from bench.tabular.protocols import MSTE, FreshCumulative, RecordSplit
from bench.tabular.ste import Expert


class Recording:
    """A detector that remembers the context it learned under."""

    def __init__(self):
        self.learned_under = None

    def fit(self, X, seed):
        self.learned_under = self.context

    def score(self, X):
        return np.zeros(len(X))

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        return self


@pytest.mark.parametrize("make", [MSTE, FreshCumulative, Expert], ids=["mste", "cumulative_fresh", "ste"])
def test_every_detector_a_protocol_trains_learns_under_that_steps_context(make):
    built = []

    def factory():
        built.append(Recording())
        return built[-1]

    protocol = make(factory, 0)
    contexts = [object(), object(), object()]
    for step, context in enumerate(contexts):
        protocol.hand_over(context)
        protocol.learn(RecordSplit(f"t{step}", np.zeros((4, 2), np.float32)), step)
    trained = [d for d in built if d.learned_under is not None]
    # a new detector per step after the first, each under its own step's context, none under a stale one
    assert len(trained) == 3
    assert [d.learned_under for d in trained] == contexts

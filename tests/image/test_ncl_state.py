"""NCL (naive) for the frozen-feature detectors: the state after step t depends only on task t (and the run's
seed), never on the tasks before it. Two streams that end on the same task at the same step end in the same
state, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bench.image.protocols import make_protocol
from helpers import create, model_extractor, task_split_pair

LAYERS = {"patchcore": ("layer2", "layer3"), "padim": ("layer1", "layer2", "layer3")}


def final_state(root, model, tasks) -> dict:
    protocol = make_protocol("ncl", create(model, model_extractor(LAYERS[model]), 64), seed=0)
    for step, task in enumerate(tasks):
        protocol.learn(task_split_pair(root, task)[0], step)
    return protocol.state_dict()


@pytest.mark.parametrize("model", ["patchcore", "padim"])
def test_state_after_step_t_depends_only_on_task_t(tiny_root, model):
    a = final_state(tiny_root, model, ["disc", "stripes", "chip"])
    b = final_state(tiny_root, model, ["checker", "grain", "chip"])
    other = final_state(tiny_root, model, ["disc", "stripes", "grain"])
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key
    # ...and on task t itself: another last task gives another state
    assert not all(torch.equal(a[k], other[k]) for k in a if a[k].is_floating_point())

"""The detector contract, checked for every registered detector (in the spirit of scikit-learn's estimator
checks and timm's test_models): fit returns self; scores are pointwise — an image alone vs. in a batch, each
scored with a FRESH feature extractor, so a batch-dependent backbone or cache cannot hide; scores repeat; the
state round-trips; the same seed gives the same model; scoring changes no BatchNorm buffer; and a run killed
mid-task (mid-epoch for trained detectors) resumes to the identical R. Tiny images, contract settings
(the quick settings cut to one or two epochs: these checks need a deterministic model, not a good one)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bench import results
from bench.continual.runner import execute, prepare
from bench.features import ImageSource
from bench.models import create
from bench.registry import get, specs
from bench.testing import POINTWISE_RTOL, assert_pointwise, pointwise_gap
from conftest import Killed, model_extractor, task_split_pair

MODELS = list(specs())
SIZE = 64
QUIET = {"progress": False, "log": lambda *_: None}


def contract_settings(name: str) -> dict:
    """The quick settings with at most 2 epochs of batches of at least 16 (two epochs: a kill can land in the
    second, after an epoch checkpoint)."""
    settings, params = dict(get(name).quick), get(name).params
    if "epochs" in params:
        settings["epochs"] = min(settings.get("epochs", 2), 2)
    if "batch_size" in params:
        settings["batch_size"] = max(settings.get("batch_size", params["batch_size"].default), 16)
    return settings


def fresh_extractor(name: str):
    spec = get(name)
    if spec.inputs == "images":  # backbone-less detectors read raw images
        return ImageSource(torch.device("cpu"), batch_size=8, progress=False)
    return model_extractor(spec.layers(spec.resolve(contract_settings(name))))


def build(name: str, extractor=None):
    return create(name, extractor or fresh_extractor(name), SIZE, **contract_settings(name))


@pytest.fixture(scope="module")
def fitted(tiny_root):
    """name → (detector fitted on 'disc', test split); fitted once per module."""
    cache = {}

    def get_fitted(name):
        if name not in cache:
            train, test = task_split_pair(tiny_root, "disc")
            det = build(name)
            assert det.fit(train, seed=0) is det  # fit returns self
            cache[name] = (det, test)
        return cache[name]

    return get_fitted


def _scores(det, test, idx, extractor):
    det.extractor = extractor
    return det.predict(test, np.asarray(idx))


def _buffers(det) -> dict[str, torch.Tensor]:
    """Every buffer (BatchNorm running statistics...) of the detector's modules and its backbone."""
    modules = dict(det.modules()) if hasattr(det, "modules") else {}
    if hasattr(det.extractor, "model"):
        modules["backbone"] = det.extractor.model
    return {f"{m}.{k}": v.clone() for m, module in modules.items() if module is not None
            for k, v in module.state_dict().items() if not isinstance(v, torch.nn.Parameter)}


@pytest.mark.parametrize("name", MODELS)
def test_scores_are_pointwise_with_a_fresh_extractor(fitted, name):
    det, test = fitted(name)
    batch = _scores(det, test, np.arange(len(test)), fresh_extractor(name))
    probe = [0, len(test) // 2, len(test) - 1]
    alone = [_scores(det, test, [i], fresh_extractor(name)) for i in probe]
    assert_pointwise([a.scores[0] for a in alone], batch.scores[probe], f"{name} image scores")
    if batch.maps is not None:
        assert batch.maps.shape[1:] == (SIZE, SIZE)  # maps at the input size
        assert_pointwise(np.stack([a.maps[0] for a in alone]), batch.maps[probe], f"{name} anomaly maps")


def test_the_pointwise_check_catches_batch_normalised_scores_by_orders_of_magnitude(fitted):
    """The negative case: a detector's scores min-max normalised over the scoring batch (what ECOD's batch-wide
    ECDFs and rank normalisations do) fail the check, each probe scored in a pair with one other image."""
    name = MODELS[0]
    det, test = fitted(name)

    def minmax(idx):
        s = _scores(det, test, idx, fresh_extractor(name)).scores.astype(np.float64)
        return (s - s.min()) / (s.max() - s.min())

    batch = minmax(np.arange(len(test)))
    probe = [1, len(test) // 2, len(test) - 1]
    paired = [minmax([0, i])[1] for i in probe]  # image 0 as the only company
    assert pointwise_gap(paired, batch[probe]) > 1000 * POINTWISE_RTOL
    with pytest.raises(AssertionError, match="depend on the batch"):
        assert_pointwise(paired, batch[probe], "min-max normalised scores")
    assert_pointwise(batch[probe], minmax(np.arange(len(test)))[probe], "the same batch again")


@pytest.mark.parametrize("name", MODELS)
def test_scoring_is_repeatable_and_changes_no_buffer(fitted, name):
    det, test = fitted(name)
    idx = np.arange(6)
    before = _buffers(det)
    first = det.predict(test, idx).scores
    np.testing.assert_array_equal(det.predict(test, idx).scores, first)
    after = _buffers(det)
    assert before.keys() == after.keys()
    for key, value in before.items():
        torch.testing.assert_close(after[key], value, rtol=0, atol=0, msg=key)


@pytest.mark.parametrize("name", MODELS)
def test_state_round_trips(fitted, name):
    det, test = fitted(name)
    idx = np.arange(len(test))
    restored = build(name, det.extractor)
    restored.load_state_dict(det.state_dict())
    np.testing.assert_array_equal(restored.predict(test, idx).scores, det.predict(test, idx).scores)


@pytest.mark.parametrize("name", MODELS)
def test_the_same_seed_gives_the_same_model(fitted, tiny_root, name):
    det, test = fitted(name)
    train, _ = task_split_pair(tiny_root, "disc")
    again = build(name).fit(train, seed=0)  # a fresh extractor: nothing shared with the first fit
    idx = np.arange(len(test))
    np.testing.assert_array_equal(again.predict(test, idx).scores, det.predict(test, idx).scores)


@pytest.mark.parametrize("name", MODELS)
def test_a_run_killed_mid_task_resumes_to_the_same_r(tiny_root, tmp_path, make_config, monkeypatch, name):
    """Trained detectors die in the middle of an epoch of the second task; the others between tasks."""
    tasks = ["chip", "disc"]
    cfg = lambda: make_config(tiny_root, tasks, model=name, hparams=contract_settings(name))  # noqa: E731
    whole = execute(prepare(cfg(), out=tmp_path / "whole.h5"), **QUIET)
    run = prepare(cfg(), out=tmp_path / "killed.h5")
    factory = get(name).factory
    if hasattr(factory, "train_step"):
        calls, original = [], factory.train_step
        bs = get(name).resolve(contract_settings(name)).get("batch_size", 8)  # CFA: the run's batch size
        first = -(-16 // bs) * contract_settings(name)["epochs"]  # updates of step 1 (16 images)
        second = -(-(16 + 3) // bs)  # per epoch of step 2: 16 images + round(0.2 × 16) replayed

        def dying(self, batch, optimizers):
            calls.append(1)
            if len(calls) == first + second + min(2, second):  # step 2, inside epoch 2
                raise Killed
            return original(self, batch, optimizers)

        monkeypatch.setattr(factory, "train_step", dying)
        with pytest.raises(Killed):
            execute(run, **QUIET)
        monkeypatch.undo()
        assert run.epoch_checkpoint_path.is_file()  # epoch 1 of step 2 is saved: the rerun resumes inside it
    else:
        execute(run, max_steps=1, **QUIET)
    assert run.checkpoint_path.is_file() and not results.is_complete(run.out)
    execute(run, **QUIET)  # a fresh protocol and extractor: resumes from the checkpoints
    assert not run.epoch_checkpoint_path.exists()
    a, b = results.read_run(whole), results.read_run(run.out)
    for key in ("R/image", "R/pixel", "scores/value", "memory/state_bytes"):
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    if "train/loss" in a:
        np.testing.assert_array_equal(a["train/loss"], b["train/loss"])

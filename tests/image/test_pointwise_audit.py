"""The image track audits pointwise scoring as the tabular track does (issue 31 §6): a detector whose image scores
depend on the other images of their batch fails its run in one line, whatever --batch-size says."""

from __future__ import annotations

import dataclasses

import pytest

from bench import registry
from bench.continual.runner import execute, prepare
from bench.errors import NumericalError
from bench.models.padim import Padim

QUIET = {"progress": False, "log": lambda *_: None}


class BatchCentred(Padim):
    """PaDiM with each batch's mean score subtracted: what a plugin normalising per batch does."""

    def predict(self, split, idx):
        pred = super().predict(split, idx)
        return dataclasses.replace(pred, scores=pred.scores - pred.scores.mean())


@pytest.fixture
def centred(monkeypatch):
    spec = registry.get("padim")
    monkeypatch.setitem(registry._SPECS, "centred", dataclasses.replace(spec, name="centred", factory=BatchCentred))
    return "centred"


def test_a_batch_dependent_image_detector_fails_its_run_in_one_line(tiny_root, tmp_path, make_config, centred):
    """It ran to completion (rc 0) with an R that moved with the batch size."""
    cfg = make_config(tiny_root, ["chip"], protocol="ncl", model=centred, batch_size=4)
    with pytest.raises(NumericalError, match=r"centred: image scores depend on the batch .* relative gap"):
        execute(prepare(cfg, out_dir=tmp_path), **QUIET)


def test_pointwise_detectors_pass_the_audit(tiny_root, tmp_path, make_config):
    """PaDiM itself passes at a batch size that splits the test set."""
    cfg = make_config(tiny_root, ["chip"], protocol="ncl", model="padim", batch_size=4)
    assert execute(prepare(cfg, out_dir=tmp_path), **QUIET).is_file()

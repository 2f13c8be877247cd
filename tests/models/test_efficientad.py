"""EfficientAD-S: the paper's PDN-S layer list and output grid, the hard-feature loss against a reference, the
detector learns each synthetic task alone (quick settings, 48 px), its map quantiles are fitted on held-out
training normals only (never a test image), missing teacher files fail fast naming the command that makes them,
and Replay forgets less than NCL. Pointwise scores and the state round trip: tests/models/test_contract.py."""

from __future__ import annotations

import socket

import numpy as np
import pytest
import torch
from torch import nn

from bench.data import read_index
from bench.errors import BenchError, ConfigError, WeightsError
from bench.features import ImageSource
from bench.metrics import bwt, roc_auc
from bench.registry import get
from bench.models.efficientad.detector import hard_feature_loss, quantile
from bench.models.efficientad.pdn import Autoencoder, pdn_output_size, pdn_small
from helpers import create, task_split_pair

SIZE = 48
QUICK = get("efficientad").quick


class RecordingSource(ImageSource):
    """An ImageSource that remembers the key of every image it hands out."""

    def __init__(self):
        super().__init__(torch.device("cpu"), batch_size=8, progress=False)
        self.seen: list[str] = []

    def __call__(self, split, idx):
        self.seen += [split.keys[i] for i in np.asarray(idx)]
        return super().__call__(split, idx)


# --- the pieces -----------------------------------------------------------------------------------------


def test_pdn_small_is_the_papers_layer_list():
    convs = [m for m in pdn_small(384) if isinstance(m, nn.Conv2d)]
    pools = [m for m in pdn_small(384) if isinstance(m, nn.AvgPool2d)]
    assert [(c.out_channels, c.kernel_size[0], c.padding[0]) for c in convs] == \
        [(128, 4, 3), (256, 4, 3), (256, 3, 1), (384, 4, 0)]
    assert [(p.kernel_size, p.stride, p.padding) for p in pools] == [(2, 2, 1), (2, 2, 1)]
    assert sum(isinstance(m, nn.ReLU) for m in pdn_small(384)) == 3  # none after the last convolution
    assert pdn_small(768)[-1].out_channels == 768  # the student: teacher half + autoencoder half
    assert (pdn_output_size(256, True), pdn_output_size(256, False)) == (64, 56)
    with torch.no_grad():
        for size, padding in ((64, True), (64, False), (96, True)):
            out = pdn_small(8, padding)(torch.zeros(1, 3, size, size))
            ae = Autoencoder(8, size, pdn_output_size(size, padding))(torch.zeros(1, 3, size, size))
            assert out.shape[-1] == ae.shape[-1] == pdn_output_size(size, padding)


def test_hard_feature_loss_equals_reference():
    g = torch.Generator().manual_seed(0)
    t, s = torch.randn(2, 8, 30, 30, generator=g), torch.randn(2, 8, 30, 30, generator=g)
    d = ((t - s) ** 2).double()
    threshold = torch.quantile(d.flatten(), 0.999)
    torch.testing.assert_close(hard_feature_loss(t, s, 0.999).double(), d[d >= threshold].mean(), rtol=1e-5,
                               atol=1e-6)
    for n, q in ((1, 0.5), (7, 0.999), (1000, 0.9), (1001, 0.25)):
        v = torch.randn(n, generator=g)
        torch.testing.assert_close(quantile(v, q), torch.quantile(v, q))


def test_missing_teacher_or_penalty_fails_fast_naming_the_command(tmp_path, monkeypatch):
    def no_network(*_):  # "fast": nothing is fetched or retried (a wall-clock bound fails on a busy machine)
        raise AssertionError("an asset check reached for the network")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    spec = get("efficientad")
    with pytest.raises(WeightsError, match="distill-teacher"):
        spec.asset_ids(spec.resolve({"teacher": str(tmp_path / "missing.safetensors")}))
    with pytest.raises(BenchError, match="penalty image folder not found"):
        spec.asset_ids(spec.resolve({"penalty": str(tmp_path / "nope")}))
    (tmp_path / "bad.safetensors").write_bytes(b"not a teacher")
    with pytest.raises(WeightsError, match="cannot read EfficientAD teacher"):
        spec.asset_ids(spec.resolve({"teacher": str(tmp_path / "bad.safetensors")}))
    assert spec.asset_ids(spec.resolve({})) == {}  # teacher=random names no asset


# --- the detector ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fitted(tiny_root):
    """One quick EfficientAD per synthetic task, fitted through an ImageSource that records what it loads."""
    out = {}
    for task in sorted(read_index("synthetic", tiny_root)["task"].unique()):
        train, test = task_split_pair(tiny_root, task, SIZE)
        source = RecordingSource()
        model = create("efficientad", source, SIZE, **QUICK).fit(train, seed=0)
        out[task] = (model, train, test, list(source.seen))
    return out


@pytest.mark.slow  # the fixture fits five tasks: minutes on 2 busy cores
def test_learns_each_synthetic_task_alone(fitted):
    aucs = {task: roc_auc(test.labels, model.predict(test, np.arange(len(test))).scores)
            for task, (model, _, test, _) in fitted.items()}
    print("EfficientAD image ROC-AUC per task:", {k: round(v, 3) for k, v in aucs.items()})
    assert min(aucs.values()) >= 0.75, aucs


@pytest.mark.slow
def test_map_quantiles_never_see_a_test_image(fitted):
    """Quantiles come from training normals (preset inclad: all of them, as InCLAD's code): no test image is loaded
    while fitting, and refitting on the recorded images alone gives the same values."""
    model, train, test, seen = next(iter(fitted.values()))
    assert not set(seen) & set(test.keys), "a test image was loaded while fitting"
    hold = set(model.holdout_keys_)
    assert hold and hold <= set(train.keys)
    q = {k: model.stats_[k].clone() for k in ("q_st", "q_ae")}
    model.fit_quantiles([(train, i) for i, k in enumerate(train.keys) if k in hold])
    for k in q:
        torch.testing.assert_close(model.stats_[k], q[k])


def test_holdout_fraction_zero_uses_every_training_image_and_the_paper_holds_out_a_slice():
    """inclad (holdout_fraction=0): teacher statistics, training and quantiles on all training images; original
    (0.1): a seeded slice of at least one image is held out of training for the quantiles."""
    samples = [("split", i) for i in range(20)]
    inclad = create("efficientad", ImageSource(torch.device("cpu")), SIZE, **QUICK)
    assert inclad.split_holdout(samples, seed=0) == (samples, samples)
    paper = create("efficientad", ImageSource(torch.device("cpu")), SIZE, **{**QUICK, "holdout_fraction": 0.1})
    train, hold = paper.split_holdout(samples, seed=0)
    assert len(hold) == 2 and sorted(train + hold) == samples and not set(train) & set(hold)


def test_original_preset_names_the_files_it_needs():
    spec = get("efficientad")
    hparams = spec.resolve(preset="original")
    with pytest.raises(ConfigError, match=r"teacher=required: .*set teacher=PATH"):
        spec.asset_ids(hparams)
    with pytest.raises(ConfigError, match=r"penalty=required: .*set penalty=FOLDER"):
        spec.asset_ids({**hparams, "teacher": "random"})
    with pytest.raises(ConfigError, match="teacher=required"):
        create("efficientad", ImageSource(torch.device("cpu")), SIZE, **{**QUICK, "teacher": "required"})


@pytest.mark.slow
def test_replay_forgets_less_than_ncl(tiny_root, make_config, tmp_path):
    """A buffer of 16 images (the rule, 0.2 × 16, would keep 3: too few to measure on 16-image tasks); two tasks
    keep the suite short (measured BWT: NCL −0.375, Replay 0.0)."""
    from bench import results
    from bench.continual.runner import execute, prepare

    tasks = ["disc", "stripes"]
    r = {}
    for protocol in ("ncl", "cl"):
        cfg = make_config(tiny_root, tasks, protocol=protocol, model="efficientad", image_size=SIZE,
                          hparams={**QUICK, "replay_size": 16})
        path = execute(prepare(cfg, out_dir=tmp_path), progress=False, log=lambda *_: None)
        r[protocol] = results.read_run(path)["R/image"]
    b = {p: bwt(m) for p, m in r.items()}
    print("EfficientAD image BWT:", {p: round(v, 3) for p, v in b.items()})
    assert b["cl"] > b["ncl"], r


def test_a_size_the_unpadded_pdn_cannot_take_is_one_line():
    """InCLAD's unpadded PDN shrinks a 32 px input below its last 4×4 kernel: a ConfigError naming the smallest
    size, not a convolution traceback mid-run (perf --quick ran into it)."""
    import torch

    from bench.features import ImageSource
    from helpers import create

    source = ImageSource(torch.device("cpu"), batch_size=4, progress=False)
    with pytest.raises(ConfigError, match=r"--image-size 32: its unpadded PDN needs at least 33 px"):
        create("efficientad", source, 32)
    create("efficientad", source, 32, pdn_padding=True)  # the padded PDN takes it


def test_inclad_image_score_is_the_max_of_the_unpadded_grid():
    """InCLAD-benchmark `src/pyclad/models/efficientad/efficientad.py` `score_data`: the image score is the max of
    `anomaly_map(x, apply_padding=False)`, the normalised map at the PDN's resolution, neither padded nor resized
    (its `score_maps` pads and resizes the pixel map). `original` (anomalib's) scores the padded, upsampled map."""
    g = torch.Generator().manual_seed(0)
    m_st, m_ae = -torch.rand(2, 4, 4, generator=g) - 1, -torch.rand(2, 4, 4, generator=g) - 1  # all below q_low
    assert get("efficientad").resolve(preset="original")["image_score"] == "map"
    scores = {}
    for rule in ("grid", "map"):  # both with the released unpadded PDN, whose map is padded back by 4 px
        det = create("efficientad", None, SIZE, **QUICK, image_score=rule)
        det.stats_ = {"q_st": torch.tensor([0.0, 1.0]), "q_ae": torch.tensor([0.0, 1.0])}
        det.extractor = lambda split, idx: None
        det.raw_maps = lambda images: (m_st, m_ae)
        pred = det.score(None, np.arange(2))
        assert pred.maps.shape == (2, SIZE, SIZE)
        scores[rule] = pred.scores
    grid = 0.5 * 0.1 * m_st + 0.5 * 0.1 * m_ae  # (m − 0) / (1 − 0) · 0.1
    np.testing.assert_allclose(scores["grid"], grid.flatten(1).max(1).values.numpy(), rtol=1e-6)
    np.testing.assert_allclose(scores["map"], 0.0, atol=1e-7)  # the zero padding is the max of this map

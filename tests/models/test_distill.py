"""`python -m bench distill-teacher`: on tiny settings (weights=none, 64 px, 64 channels, a few steps) it writes a
safetensors teacher, the loss goes down, the file loads in EfficientAD's teacher=PATH mode (its SHA-256 in the run
key), and bad input is one line."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bench.cli import main
from bench.models.efficientad.distill import distill_teacher
from bench.features import ImageSource
from bench.io import file_sha256
from bench.registry import get
from bench.models.efficientad.pdn import load_teacher
from helpers import cli_stdout, create, one_error_line, task_split_pair


@pytest.mark.slow
def test_distilled_teacher_loads_in_teacher_path_mode(tiny_root, tmp_path):
    out = tmp_path / "teacher.safetensors"
    text = cli_stdout("distill-teacher", "--images", tiny_root / "grain" / "train", "--out", out, "--weights",
                      "none", "--steps", "2", "--batch-size", "2", "--image-size", "64", "--out-channels", "64",
                      "--device", "cpu")
    assert out.is_file() and not list(tmp_path.glob("*.tmp")) and "teacher=" in text
    spec = get("efficientad")
    hparams = spec.resolve({**spec.quick, "teacher": str(out), "pdn_padding": True})  # distilled padded
    assert spec.asset_ids(hparams) == {"teacher": f"sha256:{file_sha256(out)}"}
    train, test = task_split_pair(tiny_root, "grain")
    model = create("efficientad", ImageSource(torch.device("cpu")), 64, **{**spec.quick, "teacher": str(out),
                                                                           "pdn_padding": True, "epochs": 1})
    model.build(seed=0)
    written = load_teacher(out, 64, True).state_dict()
    for k, v in model.teacher_.state_dict().items():
        torch.testing.assert_close(v, written[k], rtol=0, atol=0)
    assert np.isfinite(model.fit(train, seed=0).predict(test, np.arange(4)).scores).all()


def test_distillation_lowers_the_loss(tiny_root, tmp_path):
    losses = distill_teacher(tiny_root / "disc" / "train", tmp_path / "t.safetensors", weights="none",
                             image_size=32, steps=12, batch_size=4, out_channels=16, lr=1e-3, device="cpu",
                             log=lambda *_: None)
    assert np.mean(losses[-3:]) < np.mean(losses[:3]), losses


@pytest.mark.parametrize("argv, expected", [
    (["--images", "{tmp}/nope"], "distillation image folder not found"),
    (["--images", "{tmp}", "--steps", "0"], "--steps must be ≥ 1"),
])
def test_bad_input_is_one_line(tmp_path, capsys, argv, expected):
    argv = [a.format(tmp=tmp_path) for a in argv]
    code = main(["distill-teacher", *argv, "--out", str(tmp_path / "t.safetensors"), "--weights", "none"])
    assert code == 2 and expected in one_error_line(capsys)


def test_run_key_holds_the_teacher_and_penalty_content(tiny_root, tmp_path, make_config):
    """Same path, other content → another run key; a missing teacher fails in prepare, before any work."""
    from bench.continual.runner import prepare
    from bench.errors import WeightsError
    from bench.models.efficientad.pdn import pdn_small, save_teacher

    teacher, penalty = tmp_path / "t.safetensors", tmp_path / "penalty"
    penalty.mkdir()
    (penalty / "a.png").write_bytes((tiny_root / "grain" / "train" / "good" / "000.png").read_bytes())

    def key(**hparams):
        cfg = make_config(tiny_root, ["disc"], model="efficientad",
                          hparams={"out_channels": 8, "pdn_padding": True, **hparams})  # the teachers are padded
        return prepare(cfg, out_dir=tmp_path).run_key

    random_key = key()
    for seed in (0, 1):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            save_teacher(teacher, pdn_small(8), padding=True)
        if seed == 0:
            first = key(teacher=str(teacher))
    second = key(teacher=str(teacher))
    assert len({random_key, first, second}) == 3
    with_penalty = key(teacher=str(teacher), penalty=str(penalty))
    (penalty / "a.png").write_bytes((tiny_root / "disc" / "train" / "good" / "000.png").read_bytes())
    assert len({second, with_penalty, key(teacher=str(teacher), penalty=str(penalty))}) == 3
    with pytest.raises(WeightsError, match="distill-teacher"):
        key(teacher=str(tmp_path / "missing.safetensors"))

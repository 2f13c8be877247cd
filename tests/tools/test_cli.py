"""The command line: clear one-line errors with exit 2 for bad input, nothing written; a good run prints
ROC-AUC_CL and BWT at both levels."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from bench.cli import main
from helpers import one_error_line

RUN = ["run", "--dataset", "synthetic", "--weights", "none", "--image-size", "64", "--device", "cpu",
       "--batch-size", "8", "--workers", "0", "--no-progress"]


@pytest.fixture
def own_copy(tiny_root, tmp_path):
    """A private copy of the tiny benchmark that a test may damage."""
    root = tmp_path / "synthetic"
    shutil.copytree(tiny_root, root)
    return root


def test_run_prints_both_levels(tiny_root, tmp_path, capsys):
    out = tmp_path / "r.h5"
    assert main([*RUN, "--root", str(tiny_root), "--tasks", "disc,stripes", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "image: ROC-AUC_CL" in text and "pixel: ROC-AUC_CL" in text and "BWT" in text and out.is_file()


def test_a_detector_without_a_backbone_records_none_and_a_backbone_detector_needs_one(tiny_root, tmp_path, capsys):
    from bench.cli import build_parser, config_from_args
    from bench.continual.runner import prepare

    keys = set()
    for backbone in ("resnet18", "wide_resnet50_2", "none"):
        args = build_parser().parse_args([*RUN, "--root", str(tiny_root), "--tasks", "disc", "--model", "ganomaly",
                                          "--image-size", "32", "--backbone", backbone])
        run = prepare(config_from_args(args), out_dir=tmp_path)
        assert run.config.image.backbone == "none" and "_ganomaly_none_" in run.out.name
        keys.add(run.run_key)
    assert len(keys) == 1  # one identity: a named backbone plays no part in a raw-image detector's result
    code = main([*RUN, "--root", str(tiny_root), "--tasks", "disc", "--backbone", "none",
                 "--out", str(tmp_path / "p.h5")])
    assert code == 2 and "patchcore runs on a pretrained backbone" in one_error_line(capsys)
    assert not (tmp_path / "p.h5").exists()


def test_unknown_choice_lists_the_valid_ones(capsys):
    with pytest.raises(SystemExit) as e:
        main(["run", "--dataset", "imagenet", "--ordering", "random"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice" in err and "mvtec" in err and "visa" in err


def test_make_demo_all_reaches_the_demo_with_every_option(monkeypatch):
    """`make demo-all` is `python -m bench demo --all`: the subcommand passes every option on (the demo itself is
    covered by its configs' tests; running it here would take minutes)."""
    import bench.tools.demo as demo

    calls = []
    monkeypatch.setattr(demo, "demo", lambda outputs, **kw: calls.append((outputs, kw)) or 0)
    assert main(["demo", "--all", "--outputs", "o", "--preset", "tiny", "--model-preset", "original",
                 "--no-progress"]) == 0
    assert calls == [(Path("o"), {"preset": "tiny", "progress": False, "everything": True,
                                  "model_preset": "original"})]


def test_run_options_take_their_defaults_choices_and_help_from_the_config_fields(capsys):
    """What `bench run` does without an option is what RunConfig/ImageInputs do without the setting, and --help
    states that default; choices are the config's tuples (the image size alone defaults to the model's)."""
    from dataclasses import fields

    from bench.cli import build_parser
    from bench.config import DEVICES, ImageInputs, RunConfig

    args = vars(build_parser().parse_args(["run", "--dataset", "synthetic", "--ordering", "random"]))
    settings = [f for cls in (ImageInputs, RunConfig) for f in fields(cls) if f.name in args and f.metadata]
    assert {f.name for f in settings} >= {"backbone", "batch_size", "workers", "pixel_eval", "feature_dtype",
                                          "mask_threshold", "cache_budget", "seed", "device", "preset"}
    assert {f.name: args[f.name] for f in settings if f.name != "image_size"} == \
        {f.name: f.default for f in settings if f.name != "image_size"}
    assert args["image_size"] is None
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert f"threads decoding images (does not change results) (default: {ImageInputs().workers})" in text
    assert f"(default: {ImageInputs().batch_size})" in text and "--device {" + ",".join(DEVICES) + "}" in text


def test_unknown_ordering_lists_the_valid_ones(tiny_root, capsys):
    assert main([*RUN, "--root", str(tiny_root), "--ordering", "sideways"]) == 2
    err = one_error_line(capsys)
    assert "easy_to_hard" in err and "alphabetical" in err


def test_unknown_task_is_named(tiny_root, capsys):
    assert main([*RUN, "--root", str(tiny_root), "--tasks", "disc,teapot"]) == 2
    assert "teapot" in one_error_line(capsys)


def test_unknown_model_is_rejected_with_the_choices(tiny_root, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([*RUN, "--root", str(tiny_root), "--tasks", "disc", "--model", "patchkore"])
    assert exit_.value.code == 2 and "ganomaly" in capsys.readouterr().err


def test_missing_root_names_the_path(tmp_path, capsys):
    missing = tmp_path / "nowhere"
    assert main([*RUN, "--root", str(missing), "--ordering", "random"]) == 2
    assert str(missing) in one_error_line(capsys)


def test_wrong_layout_names_the_expected_layout(tmp_path, capsys):
    (tmp_path / "flat").mkdir()
    Image.new("RGB", (8, 8)).save(tmp_path / "flat" / "a.png")
    assert main(["run", "--dataset", "mvtec", "--root", str(tmp_path / "flat"), "--ordering", "alphabetical"]) == 2
    assert "train/good" in one_error_line(capsys)


def test_missing_imagenet_weights_fail_fast(tiny_root, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("BENCH_WEIGHTS_DIR", str(tmp_path / "weights"))
    t0 = time.perf_counter()
    code = main([*RUN[:3], "--root", str(tiny_root), "--tasks", "disc", "--weights", "imagenet",
                 "--out", str(tmp_path / "r.h5")])
    assert code == 2 and time.perf_counter() - t0 < 10
    assert "make weights" in one_error_line(capsys)
    assert not (tmp_path / "r.h5").exists()


def test_weights_from_a_state_dict_file(tiny_root, tmp_path, capsys):
    """--weights PATH loads the file: features equal those of the model the file came from."""
    import timm

    from bench.features import create_backbone

    full = timm.create_model("resnet18", pretrained=False)
    torch.nn.init.normal_(full.conv1.weight)
    path = tmp_path / "my.pth"
    torch.save(full.state_dict(), path)
    model = create_backbone("resnet18", str(path), ("layer2",))
    torch.testing.assert_close(model.state_dict()["conv1.weight"], full.state_dict()["conv1.weight"])
    (tmp_path / "junk.pth").write_bytes(b"junk")
    assert main([*RUN, "--root", str(tiny_root), "--tasks", "disc", "--weights", str(tmp_path / "junk.pth")]) == 2
    assert "junk.pth" in one_error_line(capsys)


def test_corrupt_image_is_named_and_nothing_is_written(own_copy, tmp_path, capsys):
    victim = sorted((own_copy / "stripes" / "test" / "good").glob("*.png"))[0]
    victim.write_bytes(b"\x89PNG\r\n\x1a\n garbage")
    out = tmp_path / "r.h5"
    assert main([*RUN, "--root", str(own_copy), "--tasks", "disc,stripes", "--out", str(out)]) == 2
    assert victim.name in one_error_line(capsys)
    assert not out.exists() and not any(tmp_path.glob("r.h5*"))


def test_mask_size_mismatch_is_named(own_copy, tmp_path, capsys):
    mask = sorted((own_copy / "disc" / "ground_truth").rglob("*_mask.png"))[0]
    Image.new("L", (10, 10), 255).save(mask)
    out = tmp_path / "r.h5"
    assert main([*RUN, "--root", str(own_copy), "--tasks", "disc", "--out", str(out)]) == 2
    assert mask.name in one_error_line(capsys)
    assert not out.exists()


def test_one_class_test_set_gives_nan_and_says_so(own_copy, tmp_path, capsys):
    """Remove every anomaly of one task: its cells become NaN (with a warning), the summary counts them."""
    task = own_copy / "chip"
    for d in (task / "test").iterdir():
        if d.name != "good":
            shutil.rmtree(d)
    shutil.rmtree(task / "ground_truth")
    out = tmp_path / "r.h5"
    with pytest.warns(UserWarning, match="class"):
        assert main([*RUN, "--root", str(own_copy), "--tasks", "disc,chip", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "cells NaN" in text
    from bench import results

    r = results.read_run(out)["R/image"]
    assert np.isnan(r[1, 1]) and np.isfinite(r[1, 0])


def test_the_parser_and_track_of_import_no_pandas_or_torch():
    """`python -m bench` builds every subcommand's parser before it runs one, and `make` asks `bench track-of` for
    each routed DATASET=: a subcommand module that imported pandas at the top made each of them a third of a
    second slower."""
    import subprocess
    import sys

    code = ("import sys; from bench.cli import main; main(['track-of', 'tabular-synthetic']); "
            "print(sorted(m for m in ('pandas', 'torch', 'scipy', 'matplotlib') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines() == ["tabular synthetic", "[]"], done.stdout + done.stderr

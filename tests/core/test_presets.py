"""Image detector presets reach every entry point: `bench run --preset`, a grid's per-model `preset` key and the
demo; the chosen name is recorded in the result file's config and its values in the run key. `bench run` without
--image-size runs at the model's paper input size; another size prints one note. `--weights imagenet` resolves
through the preset to torchvision's V1 or V2 file (offline: naming and ids only)."""

from __future__ import annotations

import json

import pytest

from bench import results
from bench.cli import build_parser, config_from_args, main, paper_image_size
from bench.continual.runner import prepare
from bench.errors import ConfigError, WeightsError
from helpers import write_grid

RUN = ["run", "--dataset", "synthetic", "--weights", "none", "--device", "cpu", "--batch-size", "8", "--workers",
       "0", "--no-progress", "--tasks", "disc"]


def _config(root, *extra):
    return config_from_args(build_parser().parse_args([*RUN, "--root", str(root), *extra]))


def test_cli_preset_sets_values_and_is_recorded_in_the_result_file(tiny_root, tmp_path):
    out = tmp_path / "g.h5"
    quick = ["--model", "ganomaly", "--image-size", "32", "--set", "epochs=1", "--set", "n_features=8",
             "--set", "latent=8"]
    assert main([*RUN, "--root", str(tiny_root), *quick, "--preset", "original", "--out", str(out)]) == 0
    config = results.run_config(results.read_run(out))
    assert config.preset == "original" and config.hparams["losses"] == "akcay"
    default = prepare(_config(tiny_root, *quick), out_dir=tmp_path)
    assert default.config.preset == "inclad" and default.config.hparams["losses"] == "anomalib"
    assert default.run_key != results.file_run_key(out)  # the values differ, so the run does


def test_a_preset_alias_records_the_preset_its_values_are_whichever_command_made_the_file(tiny_root, tmp_path,
                                                                                          capsys):
    """Issue 31 §2: `--preset original` with overrides that give inclad's values is inclad's run (one key); the
    file recorded the first command's name, so the preset a result was made under depended on history. Both
    orders now record inclad (ModelSpec.recorded_preset), and a genuine `original` run still records original."""
    quick = ["--model", "ganomaly", "--image-size", "32", "--set", "epochs=1", "--set", "n_features=8",
             "--set", "latent=8"]
    # inclad's values beyond the hyperparameters: the released replay share, 8-bit resize and float32 cache
    alias = [*quick, "--preset", "original", "--set", "losses=anomalib", "--set", "replay_share=floor",
             "--set", "init=pytorch", "--set", "first_padding=4", "--set", "input_pad=pow2", "--resize", "8bit",
             "--feature-dtype", "float32"]
    for first, second, name in ((alias, quick, "a.h5"), (quick, alias, "b.h5")):
        out = tmp_path / name
        assert main([*RUN, "--root", str(tiny_root), *first, "--out", str(out)]) == 0
        assert main([*RUN, "--root", str(tiny_root), *second, "--out", str(out)]) == 0
        assert "already complete" in capsys.readouterr().out
        assert results.run_config(results.read_run(out)).preset == "inclad"
        assert json.loads(results.read_run(out)["attrs"]["presets"]) == ["inclad"]
    assert prepare(_config(tiny_root, *quick, "--preset", "original"), out_dir=tmp_path).config.preset == "original"
    # original's values loaded as inclad loads images are no preset's inputs: the asked name, not inclad's
    loaded_otherwise = _config(tiny_root, *alias[:-4])
    assert prepare(loaded_otherwise, out_dir=tmp_path).config.preset == "original"


def test_the_recorded_preset_keeps_the_weights_the_asked_one_resolves_to():
    """rd4ad's inclad preset means torchvision's DEFAULT ImageNet weights, original V1: with `--weights imagenet`
    original's run at inclad's values has other inputs (another key) and keeps its name; with weights none or a
    file the generation plays no part and the values decide alone."""
    from bench.registry import get

    spec = get("rd4ad")
    inclad_values = spec.resolve(preset="inclad")
    assert spec.recorded_preset("original", inclad_values, weights_by_preset=True) == ("original", ["original"])
    assert spec.recorded_preset("original", inclad_values, weights_by_preset=False) == ("inclad", ["inclad"])
    assert spec.recorded_preset("inclad", spec.resolve(preset="original"),
                                weights_by_preset=False) == ("original", ["original"])


@pytest.mark.parametrize("model, overrides, expected", [
    ("patchcore", {"hparams": {"coreset_ratio": 5}}, "hparams of model 'patchcore': patchcore hyperparameter "
                                                     "coreset_ratio=5 is not allowed"),
    ("patchcore", {"hparams": {"bogus": 1}}, "hparams of model 'patchcore': unknown patchcore hyperparameter"),
    ("efficientad", {"preset": "original"}, "preset of model 'efficientad': efficientad teacher=required")])
def test_grid_hyperparameter_and_preset_errors_name_the_grid_and_the_model_entry(model, overrides, expected,
                                                                                 tmp_path):
    """Issue 31 §2: a grid's bad hparams were reported at planning without the grid or the entry, and a preset that
    needs a file said "pass --set teacher=PATH", an option the grid user never typed; now one line at load."""
    from bench.hpc import grid as grids

    path = write_grid(tmp_path / "g.yaml", models={model: overrides})
    with pytest.raises(ConfigError) as info:
        grids.load_grid("synthetic", path)
    message = str(info.value)
    assert message.startswith(f"{path}: {expected}") and "pass --set" not in message and "\n" not in message


def test_an_unknown_preset_is_one_line(tiny_root, tmp_path, capsys):
    code = main([*RUN, "--root", str(tiny_root), "--model", "patchcore", "--image-size", "64", "--preset", "paper",
                 "--out", str(tmp_path / "x.h5")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "unknown patchcore preset 'paper' (valid: inclad, original)" in err and "\n" not in err


def test_grid_preset_reaches_the_run_config_and_is_checked_at_load(tiny_root, tmp_path):
    from bench.hpc import grid as grids

    path = write_grid(tmp_path / "g.yaml", models={"rd4ad": {"preset": "original", "hparams": {"epochs": 1}},
                                                    "patchcore": {}})
    grid = grids.load_grid("synthetic", path)
    planned = grids.expand(grid, grids.load_profile("cpu"), grids.Selection(), tiny_root, tmp_path)
    presets = {(p.run.config.model, p.run.config.preset, p.run.config.hparams.get("blur_sigma")) for p in planned}
    assert presets == {("rd4ad", "original", 4.0), ("patchcore", "inclad", 4.0)}
    for bad, message in ((1, "expected a preset name"), ("paper", "unknown rd4ad preset 'paper'")):
        path = write_grid(tmp_path / "bad.yaml", models={"rd4ad": {"preset": bad}})
        with pytest.raises(ConfigError, match=message) as info:
            grids.load_grid("synthetic", path)
        assert str(path) in str(info.value) and "preset of model 'rd4ad'" in str(info.value)


def test_grid_without_an_image_size_runs_each_model_at_its_paper_size(tiny_root, tmp_path):
    from bench.hpc import grid as grids

    data = json.loads(write_grid(tmp_path / "g.yaml").read_text())
    del data["image_size"]
    data["models"] = {"patchcore": {}, "stfpm": {}, "fastflow": {"image_size": 64}}
    path = tmp_path / "paper.yaml"
    path.write_text(json.dumps(data))
    grid = grids.load_grid("synthetic", path)
    planned = grids.expand(grid, grids.load_profile("cpu"), grids.Selection(), tiny_root, tmp_path)
    sizes = {p.run.config.model: p.run.config.image.image_size for p in planned}
    assert sizes == {"patchcore": 224, "stfpm": 256, "fastflow": 64}


def test_demo_runs_on_the_default_preset_or_a_named_one(demo_root, monkeypatch):
    import bench.tools.demo as demo

    assert {c.preset for c in demo.demo_configs(demo_root)} == {"inclad"}
    assert {c.preset for c in demo.demo_configs(demo_root, model_preset="inclad")} == {"inclad"}
    with pytest.raises(ConfigError, match="unknown patchcore preset 'paper'"):  # no silent fallback
        demo.demo_configs(demo_root, model_preset="paper")
    monkeypatch.setattr(demo, "demo_models", lambda everything=False: {"rd4ad": dict(get_quick("rd4ad"))})
    configs = demo.demo_configs(demo_root, model_preset="original")
    assert {c.preset for c in configs} == {"original"}
    run = prepare(configs[0])
    assert run.config.hparams["blur_sigma"] == 4.0 and run.config.hparams["epochs"] == get_quick("rd4ad")["epochs"]


def get_quick(model: str) -> dict:
    from bench.registry import get

    return get(model).quick


def test_paper_image_size_is_the_default_and_another_size_prints_one_note():
    notes = []
    assert paper_image_size("rd4ad", None, notes.append) == 224 and notes == []
    assert paper_image_size("stfpm", 256, notes.append) == 256 and notes == []
    assert paper_image_size("rd4ad", 128, notes.append) == 128
    assert notes == ["note: --image-size 128 differs from RD4AD's paper input size 224 (InCLAD Tables 6-7); the "
                     "run is not comparable with the paper's tables"]


def test_cli_without_image_size_takes_the_models_paper_size(tiny_root, capsys):
    assert _config(tiny_root, "--model", "fastflow").image.image_size == 256
    assert _config(tiny_root, "--model", "paste").image.image_size == 224
    assert "note:" not in capsys.readouterr().out
    assert _config(tiny_root, "--model", "paste", "--image-size", "64").image.image_size == 64
    assert "differs from PaSTe's paper input size 224" in capsys.readouterr().out


def test_imagenet_weights_resolve_through_the_preset(tmp_path, monkeypatch):
    """V1 (`tv_in1k`) for PatchCore's `original`; torchvision's DEFAULT for InCLAD's RD4AD and PatchCore: V2
    (`tv2_in1k`) on wide_resnet50_2, V1 on resnet18 (it has no V2); a missing V2 file names `make weights` at
    once."""
    import torch
    from safetensors.torch import save_file

    from bench import features
    from bench.features import kept_source_path, resolve_weights, staged_files, staged_weights_path
    from bench.io import file_sha256
    from bench.registry import get

    monkeypatch.setenv("BENCH_WEIGHTS_DIR", str(tmp_path))
    assert staged_files() == [("resnet18", "tv_in1k"), ("wide_resnet50_2", "tv2_in1k"),
                              ("wide_resnet50_2", "tv_in1k")]
    for i, (backbone, tag) in enumerate(staged_files()):
        tensors = {"w": torch.full((2,), float(i))}  # content only feeds the id's hash and the content check
        save_file(tensors, str(staged_weights_path(backbone, tag)))
        source = kept_source_path(backbone, tag)  # the .pth `make weights` keeps, its digest shipped as published
        torch.save(tensors, source)
        monkeypatch.setitem(features.PUBLISHED_SHA256, source.name, file_sha256(source))
    ids = {(m, p, b): resolve_weights(b, "imagenet", get(m).imagenet_generation(p))[1]
           for m, p in (("patchcore", None), ("patchcore", "original"), ("rd4ad", None), ("rd4ad", "original"))
           for b in ("resnet18", "wide_resnet50_2")}
    assert ids[("patchcore", "original", "wide_resnet50_2")].startswith("wide_resnet50_2.tv_in1k:")
    assert ids[("rd4ad", None, "wide_resnet50_2")].startswith("wide_resnet50_2.tv2_in1k:")
    assert ids[("patchcore", None, "wide_resnet50_2")] == ids[("rd4ad", None, "wide_resnet50_2")]
    assert ids[("rd4ad", "original", "wide_resnet50_2")] == ids[("patchcore", "original", "wide_resnet50_2")]
    assert len({ids[(m, p, "resnet18")] for m, p in (("patchcore", None), ("rd4ad", None))}) == 1
    staged_weights_path("wide_resnet50_2", "tv2_in1k").unlink()
    with pytest.raises(WeightsError, match=r"wide_resnet50_2\.tv2_in1k \(DEFAULT\) are not staged.*make weights"):
        resolve_weights("wide_resnet50_2", "imagenet", "DEFAULT")
